// One colour per activity, the same in every panel, every update and every view.
// Known activities get fixed colours chosen to read on light and dark backgrounds
// (kernel_cluster/jupyter/memory_chart.py draws with some of the same); any other (a
// user's digest_metric) gets one from a hash of its name. The palettes are d3's
// (d3-scale-chromatic), picked from, not written out here.
import {
  interpolateYlOrRd,
  schemeCategory10,
  schemeDark2,
  schemeTableau10,
} from 'd3-scale-chromatic';

export const KNOWN: Record<string, string> = {
  'thread-cpu': '#3b7dd8',
  'thread-noncpu': '#f28e2b',
  idle: '#9aa0a6',
  // idle split by why (kernel_cluster/core/idle_reasons.py): greys and pale tones of
  // what each waits on (transfers red, the executor's purple, memory's yellow)
  'idle: no-ready-task': '#9aa0a6',
  'idle: waiting-for-data': '#eba3a0',
  'idle: scheduler-queued': '#bfb0de',
  'idle: paused': '#dccb72',
  'idle: other': '#cdd1d5',
  executor: '#8e6cc4',
  other: '#a0785a',
  offload: '#c78fb5',
  'disk-read': '#3fa34d',
  'disk-write': '#8fd18b',
  compress: '#2bb3c0',
  decompress: '#8ad6de',
  serialize: '#e15f99',
  deserialize: '#f4a6c6',
  network: '#d64541',
  'memory-read': '#c2b830',
  output: '#6f7d8c',
  tasks: '#5a9bd5',
};

/** For the other activities: Tableau's ten, but its orange, which thread-noncpu has. */
const EXTRA = schemeTableau10.filter((c) => c !== '#f28e2c');

export function hashString(s: string): number {
  let h = 0x811c9dc5; // FNV-1a, 32 bits
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

export function activityColor(activity: string | null): string {
  const name = activity ?? '(none)';
  return KNOWN[name] ?? EXTRA[hashString(name) % EXTRA.length];
}

// -- task stream and flame graph ------------------------------------------------------

/** Fixed colours of the task stream's non-compute actions, as the seeds list them:
 * transfer red, disk orange, (de)serialization gray. Indexed by action number
 * (kernel_cluster/diagnostics/task_stream_feed.py ACTIONS); 0, compute, takes the prefix's. */
export const ACTIONS = ['compute', 'transfer', 'disk-read', 'disk-write', 'deserialize'] as const;
export const ACTION_COLORS: Record<string, string> = {
  transfer: '#d62728',
  'disk-read': '#ff8c1a',
  'disk-write': '#f5a54a',
  deserialize: '#9a9a9a',
};

/** Scheme colours that read as red, orange, amber or gray: the actions' hues. */
const ACTION_LIKE = new Set([
  '#ff7f0e', '#d62728', '#7f7f7f', // Category10
  '#d95f02', '#e6ab02', '#a6761d', '#666666', // Dark2
  '#f28e2c', '#e15759', '#bab0ab', // Tableau10
]);

/** Colours for task prefixes, given out in the order prefixes appear: none red,
 * orange or gray, so that the actions stand out, and neighbours far apart
 * (Category10's, then Dark2's, then Tableau10's). */
export const PREFIX_PALETTE = [...schemeCategory10, ...schemeDark2, ...schemeTableau10].filter((c) => !ACTION_LIKE.has(c));

/** Hands out palette colours to names in the order they are first asked for. */
export class ColorAssigner {
  private given = new Map<string, string>();

  constructor(private palette: string[] = PREFIX_PALETTE) {}

  color(name: string): string {
    let c = this.given.get(name);
    if (c === undefined) {
      c = this.palette[this.given.size % this.palette.length];
      this.given.set(name, c);
    }
    return c;
  }
}

/** Warm colours for a flame graph's frames, one per source file: 16 shades of
 * YlOrRd, light enough for the frames' dark labels. */
export const FLAME_PALETTE = Array.from({ length: 16 }, (_, i) => interpolateYlOrRd(0.2 + (0.45 * i) / 15));

export function fileColor(file: string): number {
  return hashString(file) % FLAME_PALETTE.length;
}
