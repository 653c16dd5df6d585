// The profiler plots' data and its shaping, apart from any DOM so that it is tested
// on its own. kernel_cluster/diagnostics/local_plots.py sends the records of the
// local profilers (Profiler, ResourceProfiler, CacheProfiler) as columns, times in
// seconds from the first record; here the tasks become a task stream message (the
// task stream view draws them, as it draws a cluster's), the cache entries become
// one step line per function, and the resource samples two plain lines.
import type { TasksPart } from './types';

/** Profiler: one rectangle per task run. ``group`` indexes ``ProfilerPlotsData.groups``,
 * ``worker`` indexes ``workers`` (labels, in display order). */
export interface TasksPlot {
  kind: 'tasks';
  keys: string[];
  tasks: string[];
  group: number[];
  worker: number[];
  workers: string[];
  /** The workers' ids in full, where the labels are short names for them. */
  worker_ids?: string[];
  start: number[];
  end: number[];
}

/** ResourceProfiler: samples of memory (MB) and CPU (%, 100 per busy core). */
export interface ResourcePlot {
  kind: 'resource';
  time: number[];
  mem: number[];
  cpu: number[];
}

/** CacheProfiler: each result's stay in the cache and its size ``metric``; ``end``
 * is null for a result never freed. */
export interface CachePlot {
  kind: 'cache';
  metric: string;
  group: number[];
  start: number[];
  end: (number | null)[];
  value: number[];
}

export type Plot = TasksPlot | ResourcePlot | CachePlot;

export interface ProfilerPlotsData {
  page?: 'profiler-plots';
  title: string;
  /** The first record's time, seconds since the epoch: time 0 of the plots. */
  origin: number;
  /** Seconds from the first record to the last. */
  duration: number;
  /** Function names: the colour groups, shared by the task and cache plots. */
  groups: string[];
  /** Top to bottom, in the order the profilers were given. */
  plots: Plot[];
}

/** The tasks as one full task stream message (see TaskTable.apply): a row per worker
 * (its label as the worker, thread 0), the function name as the prefix, one compute
 * rectangle per task. Tasks are numbered in the order given. */
export function tasksMessage(p: TasksPlot, groups: string[]): { part: TasksPart; buffers: ArrayBuffer[] } {
  const n = p.keys.length;
  const strings = [...groups, ...p.workers];
  const rows: [number, number][] = p.workers.map((_, i) => [groups.length + i, 0]);
  const prefix = Uint32Array.from(p.group);
  const status = new Uint8Array(n);
  const nbytes = new Float64Array(n);
  const task = Uint32Array.from({ length: n }, (_, i) => i);
  const row = Uint32Array.from(p.worker);
  const action = new Uint8Array(n); // 0: compute, coloured by prefix
  const start = Float64Array.from(p.start);
  const stop = Float64Array.from(p.end, (e, i) => Math.max(e, p.start[i]));
  const buffers = [prefix, status, nbytes, task, row, action, start, stop].map((a) => a.buffer as ArrayBuffer);
  const part: TasksPart = {
    feed: 'tasks',
    seq: 1,
    full: true,
    strings,
    rows,
    first_task: 0,
    drop_before: 0,
    keys: [...p.keys],
    nbuffers: buffers.length,
  };
  return { part, buffers };
}

/** A step line: the value is ``y[i]`` from ``x[i]`` until ``x[i + 1]``. */
export interface Steps {
  name: string;
  x: number[];
  y: number[];
}

/** Per function, the sum of the metric of its results in the cache over time: +value
 * when a result is stored, -value when it is freed (never before it was stored).
 * Each line starts at 0 at time 0 and ends at ``end`` (a result never freed stays
 * until then). Functions in ``groups`` order; those with no entry are left out. */
export function cacheSteps(p: CachePlot, groups: string[], end: number): Steps[] {
  const events = new Map<number, [number, number][]>();
  for (let i = 0; i < p.group.length; i++) {
    const g = p.group[i];
    let list = events.get(g);
    if (!list) events.set(g, (list = []));
    const t0 = p.start[i];
    const t1 = p.end[i];
    list.push([t0, p.value[i]]);
    if (t1 !== null && Number.isFinite(t1)) list.push([Math.max(t1, t0), -p.value[i]]);
  }
  const out: Steps[] = [];
  groups.forEach((name, g) => {
    const list = events.get(g);
    if (!list) return;
    list.sort((a, b) => a[0] - b[0]);
    const x = [0];
    const y = [0];
    let level = 0;
    let scale = 0;
    for (let k = 0; k < list.length; ) {
      const t = list[k][0];
      for (; k < list.length && list[k][0] === t; k++) {
        level += list[k][1];
        scale = Math.max(scale, Math.abs(list[k][1]));
      }
      if (Math.abs(level) <= scale * 1e-12) level = 0; // what adding and taking away floats leaves
      if (t <= x[x.length - 1]) y[y.length - 1] = level;
      else if (level !== y[y.length - 1]) {
        x.push(t);
        y.push(level);
      }
    }
    if (end > x[x.length - 1]) {
      x.push(end);
      y.push(level);
    }
    out.push({ name, x, y });
  });
  return out;
}

/** Every plot's time range, with a margin: what "fit" shows. */
export function plotsExtent(data: ProfilerPlotsData): [number, number] {
  const d = Math.max(data.duration, 0);
  const pad = Math.max(d * 0.01, 1e-4);
  return [-pad, d + pad];
}

/** Worker rows in display order: ``TaskTable`` rows are in ``workers`` order already. */
export function workerOrder(p: TasksPlot): number[] {
  return p.workers.map((_, i) => i);
}
