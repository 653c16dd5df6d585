// What the browser holds: every metric row, span and task prefix the kernel sent,
// rebuilt from full messages and deltas. One store per widget model, shared by
// all its views, so a second view shows everything at once.
import { toArrayBuffer } from './buffers';
import { ProfileData } from './profileData';
import { TaskTable } from './taskTable';
import type { Buffer, MetricsPart, Part, ProfilePart, RecordsPart, SpanRecord, StateCounts, TasksPart } from './types';

export { toArrayBuffer };

export interface MetricRow {
  context: string | null;
  span: string | null;
  fn: string | null;
  activity: string | null;
  unit: string | null;
  value: number;
}

export class MetricsTable {
  strings: (string | null)[] = [null];
  keys: number[] = []; // five string indices per row
  values: number[] = [];
  seq = 0;

  /** Apply one message; false if it does not follow the last one (a refresh is needed). */
  apply(part: MetricsPart, buffers: Buffer[]): boolean {
    if (part.full) {
      this.strings = [null];
      this.keys = [];
      this.values = [];
    } else if (part.seq !== this.seq + 1 || part.first_row !== this.values.length) {
      return false;
    }
    this.seq = part.seq;
    for (const s of part.strings) this.strings.push(s);
    const keys = new Uint32Array(toArrayBuffer(buffers[0]));
    const rows = new Uint32Array(toArrayBuffer(buffers[1]));
    const values = new Float64Array(toArrayBuffer(buffers[2]));
    for (let i = 0; i < keys.length; i++) this.keys.push(keys[i]);
    while (this.values.length * 5 < this.keys.length) this.values.push(0);
    for (let i = 0; i < rows.length; i++) this.values[rows[i]] = values[i];
    return true;
  }

  get length(): number {
    return this.values.length;
  }

  row(i: number): MetricRow {
    const k = this.keys;
    const s = this.strings;
    return {
      context: s[k[5 * i]],
      span: s[k[5 * i + 1]],
      fn: s[k[5 * i + 2]],
      activity: s[k[5 * i + 3]],
      unit: s[k[5 * i + 4]],
      value: this.values[i],
    };
  }

  *rows(): Iterable<MetricRow> {
    for (let i = 0; i < this.values.length; i++) yield this.row(i);
  }
}

export class RecordsTable<T> {
  records = new Map<string, T>();
  seq = 0;

  apply(part: RecordsPart<T>): boolean {
    if (part.full) this.records = new Map();
    else if (part.seq !== this.seq + 1) return false;
    this.seq = part.seq;
    for (const id of part.removed) this.records.delete(id);
    for (const [id, record] of Object.entries(part.records)) this.records.set(id, record);
    return true;
  }
}

export class Store {
  metrics = new MetricsTable();
  spans = new RecordsTable<SpanRecord>();
  progress = new RecordsTable<StateCounts>();
  tasks = new TaskTable();
  profile = new ProfileData();
  /** A delta arrived that does not follow what we hold: ask for everything. */
  stale = false;
  private listeners = new Set<() => void>();

  applyUpdate(parts: Part[], buffers: Buffer[]): void {
    let at = 0;
    for (const part of parts) {
      const own = buffers.slice(at, at + part.nbuffers);
      at += part.nbuffers;
      let ok: boolean;
      if (part.feed === 'metrics') ok = this.metrics.apply(part, own);
      else if (part.feed === 'tasks') ok = this.tasks.apply(part as TasksPart, own);
      else if (part.feed === 'profile') ok = this.profile.apply(part as ProfilePart, own);
      else if (part.feed === 'spans') ok = this.spans.apply(part as RecordsPart<SpanRecord>);
      else ok = this.progress.apply(part as RecordsPart<StateCounts>);
      if (part.full) this.stale = false;
      else if (!ok) this.stale = true;
    }
    for (const listener of [...this.listeners]) listener();
  }

  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
    };
  }
}
