// Test helpers: messages encoded as kernel_cluster/diagnostics/feeds.py encodes them,
// and a mock of the anywidget model (no kernel, no comm).
import type { Handler, MetricsPart, RecordsPart, SpanRecord, WidgetModel } from '../src/types';

export type Key = [string, string | null, string | null, string, string];

/** The kernel's MetricsFeed, in miniature: full messages and deltas. */
export class MetricsEncoder {
  seq = 0;
  strings: string[] = [];
  rows = new Map<string, number>();
  keys: Key[] = [];

  private str(s: string | null): number {
    if (s === null) return 0;
    let i = this.strings.indexOf(s);
    if (i < 0) {
      this.strings.push(s);
      i = this.strings.length - 1;
    }
    return i + 1;
  }

  encode(values: [Key, number][], full = false): [MetricsPart, ArrayBuffer[]] {
    const nStrings = full ? 0 : this.strings.length;
    const firstRow = full ? 0 : this.keys.length;
    const rows: number[] = [];
    for (const [key] of values) {
      const id = JSON.stringify(key);
      if (!this.rows.has(id)) {
        key.forEach((k) => this.str(k));
        this.rows.set(id, this.keys.length);
        this.keys.push(key);
      }
      rows.push(this.rows.get(id) as number);
    }
    this.seq += 1;
    const keys = new Uint32Array(this.keys.slice(firstRow).flatMap((k) => k.map((s) => this.str(s))));
    return [
      { feed: 'metrics', seq: this.seq, full, strings: this.strings.slice(nStrings), first_row: firstRow, nbuffers: 3 },
      [keys.buffer, new Uint32Array(rows).buffer, new Float64Array(values.map(([, v]) => v)).buffer],
    ];
  }
}

export function records<T>(feed: 'spans' | 'progress', seq: number, recs: Record<string, T>, full = false): RecordsPart<T> {
  return { feed, seq, full, records: recs, removed: [], nbuffers: 0 };
}

export function span(name: string[], parent: string | null, extra: Partial<SpanRecord> = {}): SpanRecord {
  return {
    name, parent, enqueued: 1, start: 1, stop: 2, duration: 1.5, nbytes: 0,
    states: { memory: 4 }, done: true, code: [], ...extra,
  };
}

/** Two spans under a root: 'load' runs read_csv (I/O), 'compute' runs sum (CPU). */
export function workload(enc = new MetricsEncoder()) {
  const values: [Key, number][] = [
    [['execute', 'L', 'read_csv', 'thread-noncpu', 'seconds'], 4],
    [['execute', 'L', 'read_csv', 'thread-cpu', 'seconds'], 1],
    [['execute', 'C', 'sum', 'thread-cpu', 'seconds'], 3],
    [['execute', 'C', 'sum', 'thread-noncpu', 'seconds'], 1],
    [['execute', null, null, 'idle', 'seconds'], 2],
    [['execute', 'L', 'read_csv', 'output', 'bytes'], 2048],
    [['execute', 'C', 'sum', 'tasks', 'count'], 7],
    [['execute', 'C', 'sum', 'S3 reads', 'requests'], 12],
    [['get-data', null, null, 'network', 'seconds'], 0.5],
    [['gather-dep', null, null, 'network', 'bytes'], 4096],
  ];
  const metrics = enc.encode(values, true);
  const spans = records('spans', 1, {
    R: span(['pipeline'], null, { enqueued: 0 }),
    L: span(['pipeline', 'load'], 'R', { enqueued: 1 }),
    C: span(['pipeline', 'compute'], 'R', { enqueued: 2, states: { memory: 2, processing: 1, waiting: 1 }, done: false }),
  }, true);
  const progress = records('progress', 1, {
    read_csv: { memory: 4 },
    sum: { memory: 2, processing: 1, waiting: 1, erred: 1 },
  }, true);
  return { enc, metrics, spans, progress };
}

export class MockModel implements WidgetModel {
  state: Record<string, unknown>;
  handlers = new Map<string, Set<Handler>>();
  sent: unknown[] = [];
  saves = 0;

  constructor(state: Record<string, unknown>) {
    this.state = { ...state };
  }

  get(name: string): any {
    return this.state[name];
  }

  set(name: string, value: unknown): void {
    this.state[name] = value;
    this.emit(`change:${name}`);
  }

  save_changes(): void {
    this.saves += 1;
  }

  on(event: string, handler: Handler): void {
    if (!this.handlers.has(event)) this.handlers.set(event, new Set());
    (this.handlers.get(event) as Set<Handler>).add(handler);
  }

  off(event: string, handler?: Handler): void {
    if (!handler) this.handlers.delete(event);
    else this.handlers.get(event)?.delete(handler);
  }

  send(content: unknown): void {
    this.sent.push(content);
  }

  emit(event: string, ...args: unknown[]): void {
    for (const h of [...(this.handlers.get(event) ?? [])]) h(...args);
  }

  /** The kernel sends a custom message; buffers arrive as DataViews, as in Jupyter. */
  receive(parts: unknown[], buffers: ArrayBuffer[]): void {
    this.emit('msg:custom', { type: 'update', parts }, buffers.map((b) => new DataView(b)));
  }

  listeners(): number {
    let n = 0;
    for (const s of this.handlers.values()) n += s.size;
    return n;
  }
}

export function bars(root: ParentNode, panel: string): { label: string; activity: string; value: number }[] {
  return [...root.querySelectorAll(`[data-panel="${panel}"] rect.kc-bar`)].map((r) => ({
    label: (r.closest('g.kc-row') as Element).getAttribute('data-label') as string,
    activity: r.getAttribute('data-activity') as string,
    value: Number(r.getAttribute('data-value')),
  }));
}
