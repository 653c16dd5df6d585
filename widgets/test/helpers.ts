// Test helpers: messages encoded as kernel_cluster/diagnostics/table_feeds.py encodes them,
// and a mock of the anywidget model (no kernel, no comm).
import { vi } from 'vitest';
import type { FlatProfile, NestedFrame } from '../src/profileData';
import type { Handler, MetricsPart, ProfilePart, RecordsPart, SpanRecord, TasksPart, WidgetModel } from '../src/types';

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

// -- task stream and profiles --------------------------------------------------------

export interface Rec {
  key: string;
  worker: string;
  thread: number;
  /** [action number (0 compute, 1 transfer, ...), start, stop] */
  ss: [number, number, number][];
  status?: number;
}

/** The kernel's TaskStreamFeed, in miniature (no trimming). */
export class TasksEncoder {
  seq = 0;
  strings: string[] = [];
  rows = new Map<string, number>();
  threads = new Map<string, number>();
  ntasks = 0;

  private str(s: string, fresh: string[]): number {
    let i = this.strings.indexOf(s);
    if (i < 0) {
      i = this.strings.push(s) - 1;
      fresh.push(s);
    }
    return i;
  }

  encode(recs: Rec[], dropBefore = 0): [TasksPart, ArrayBuffer[]] {
    const fresh: string[] = [];
    const newRows: [number, number][] = [];
    const cols: number[][] = [[], [], [], [], [], [], [], []];
    const first = this.ntasks;
    for (const r of recs) {
      const task = this.ntasks++;
      cols[0].push(this.str(r.key.split('-')[0], fresh));
      cols[1].push(r.status ?? 0);
      cols[2].push(8);
      const rowKey = `${r.worker}|${r.thread}`;
      let row = this.rows.get(rowKey);
      if (row === undefined) {
        const n = this.threads.get(r.worker) ?? 0;
        this.threads.set(r.worker, n + 1);
        row = this.rows.size;
        this.rows.set(rowKey, row);
        newRows.push([this.str(r.worker, fresh), n]);
      }
      for (const [a, s0, s1] of r.ss) {
        cols[3].push(task);
        cols[4].push(row);
        cols[5].push(a);
        cols[6].push(s0);
        cols[7].push(s1);
      }
    }
    this.seq += 1;
    const part: TasksPart = {
      feed: 'tasks', seq: this.seq, full: false, strings: fresh, rows: newRows,
      first_task: first, drop_before: dropBefore, keys: recs.map((r) => r.key), nbuffers: 8,
    };
    const kinds = [Uint32Array, Uint8Array, Float64Array, Uint32Array, Uint32Array, Uint8Array, Float64Array, Float64Array];
    return [part, cols.map((c, i) => (kinds[i] as any).from(c).buffer as ArrayBuffer)];
  }
}

/** ``n`` tasks over ``workers`` x ``threads`` rows, each 1 s long, back to back per row. */
export function manyTasks(n: number, workers = 4, threads = 2, prefixes = ['load', 'crunch', 'sum']): Rec[] {
  const out: Rec[] = [];
  const rows = workers * threads;
  for (let i = 0; i < n; i++) {
    const row = i % rows;
    const t = Math.floor(i / rows);
    const ss: [number, number, number][] = [];
    if (i % 5 === 0) ss.push([1, t, t + 0.2]);
    ss.push([0, t + 0.2, t + 1]);
    out.push({ key: `${prefixes[i % prefixes.length]}-${i}`, worker: `tcp://w${row % workers}`, thread: row, ss });
  }
  return out;
}

/** A CanvasRenderingContext2D that records what is drawn. */
export function recordingContext(): { ctx: any; calls: Map<string, number>; fills: { style: string; x: number; y: number; w: number; h: number }[] } {
  const calls = new Map<string, number>();
  const fills: { style: string; x: number; y: number; w: number; h: number }[] = [];
  let tx = 0;
  const ctx: any = new Proxy(
    { fillStyle: '#000', font: '', textAlign: 'start', textBaseline: 'top' },
    {
      get(target: any, prop: string) {
        if (prop in target) return target[prop];
        return (...args: any[]) => {
          calls.set(prop, (calls.get(prop) ?? 0) + 1);
          if (prop === 'translate') tx += args[0];
          if (prop === 'restore') tx = 0;
          if (prop === 'fillRect') fills.push({ style: target.fillStyle, x: args[0] + tx, y: args[1], w: args[2], h: args[3] });
          if (prop === 'measureText') return { width: String(args[0]).length * 6 };
          if (prop === 'createImageData') return { width: args[0], height: args[1], data: new Uint8ClampedArray(args[0] * args[1] * 4) };
          return undefined;
        };
      },
      set(target: any, prop: string, value: unknown) {
        target[prop] = value;
        return true;
      },
    },
  );
  return { ctx, calls, fills };
}

/** A profile message as kernel_cluster/diagnostics/profile_feed.py sends it. */
export function profileMessage(
  tree: FlatProfile | null,
  seq: number,
  extra: Partial<ProfilePart> = {},
): [ProfilePart, ArrayBuffer[]] {
  const part: ProfilePart = {
    feed: 'profile', seq, full: seq === 1, interval: 0.01,
    selection: { prefix: null, start: null, stop: null },
    timeline: { counts: [[101, 3], [102, 4]], keys: { crunch: [[101, 2], [102, 3]], read: [[101, 1], [102, 1]] } },
    tree: tree ? { strings: tree.strings, total: tree.total, nframes: tree.n } : null,
    nbuffers: tree ? 7 : 0,
    ...extra,
  };
  const buffers = tree
    ? [tree.parent, tree.count, tree.own, tree.name, tree.file, tree.line, tree.text].map((a) => a.slice().buffer as ArrayBuffer)
    : [];
  return [part, buffers];
}

/** main -> crunch (6 samples: square 4, add 2), main -> read (3), main itself (1). */
export function smallProfile(): NestedFrame {
  return {
    name: 'root', file: '', line: 0, count: 10, children: [
      { name: 'main', file: 'app.py', line: 3, text: 'run()', count: 10, children: [
        { name: 'crunch', file: 'work.py', line: 10, text: 'square(x)', count: 6, children: [
          { name: 'square', file: 'work.py', line: 20, text: 'x * x', count: 4 },
          { name: 'add', file: 'math.py', line: 5, text: 'a + b', count: 2 },
        ] },
        { name: 'read', file: 'io.py', line: 7, text: 'f.read()', count: 3 },
      ] },
    ],
  };
}

/** ``n`` frames, built breadth first with uneven shares (a fixed pseudo-random
 * sequence), four to eight children each, as a busy program's profile looks. */
export function bigProfile(n: number): NestedFrame {
  let seed = 12345;
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  const root: NestedFrame = { name: 'root', file: '', line: 0, count: n * 100, children: [] };
  const queue: NestedFrame[] = [root];
  let made = 1;
  while (made < n && queue.length) {
    const parent = queue.shift() as NestedFrame;
    const kids = Math.min(4 + Math.floor(rand() * 5), n - made);
    const weights = Array.from({ length: kids }, () => Math.pow(rand(), 2) + 0.02);
    const sum = weights.reduce((a, b) => a + b, 0);
    const share = parent.count * 0.9; // the rest is the frame's own
    for (let k = 0; k < kids; k++) {
      const count = Math.max(1, Math.floor((share * weights[k]) / sum));
      const id = made++;
      const child: NestedFrame = { name: `func_${id}`, file: `module_${id % 23}.py`, line: 10 + (id % 97), text: `call_${id}()`, count, children: [] };
      parent.children?.push(child);
      if (count >= 2) queue.push(child);
    }
  }
  return root;
}

/** A fresh page with one host element, and every canvas drawing into a recording context. */
export function canvasHost(): { host: HTMLDivElement; rec: ReturnType<typeof recordingContext> } {
  document.body.replaceChildren();
  const host = document.createElement('div');
  document.body.append(host);
  const rec = recordingContext();
  vi.spyOn(HTMLCanvasElement.prototype, 'getContext').mockImplementation(() => rec.ctx);
  return { host, rec };
}
