// One colour per activity, the same in every panel, every update and every view.
// Known activities get fixed colours chosen to read on light and dark backgrounds;
// any other (a user's digest_metric) gets one from a hash of its name.

const KNOWN: Record<string, string> = {
  'thread-cpu': '#3b7dd8',
  'thread-noncpu': '#f28e2b',
  idle: '#9aa0a6',
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

const EXTRA = [
  '#4e79a7', '#59a14f', '#edc948', '#b07aa1', '#ff9da7', '#76b7b2', '#e15759',
  '#9c755f', '#bab0ac', '#86bcb6', '#d4a6c8', '#f1ce63', '#499894', '#b6992d',
];

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
 * (kernel_cluster/diagnostics/stream_feed.py ACTIONS); 0, compute, takes the prefix's. */
export const ACTIONS = ['compute', 'transfer', 'disk-read', 'disk-write', 'deserialize'] as const;
export const ACTION_COLORS: Record<string, string> = {
  transfer: '#d62728',
  'disk-read': '#ff8c1a',
  'disk-write': '#f5a54a',
  deserialize: '#9a9a9a',
};

/** Colours for task prefixes, given out in the order prefixes appear: none red,
 * orange or gray, so that the actions stand out, and neighbours far apart. */
export const PREFIX_PALETTE = [
  '#1f77b4', '#2ca02c', '#9467bd', '#17becf', '#e377c2', '#bcbd22', '#8c564b', '#3c5488',
  '#66a61e', '#e7298a', '#4dbbd5', '#6a3d9a', '#1b9e77', '#f0e442', '#7e6148', '#a6cee3',
  '#b2df8a', '#cab2d6', '#00a087', '#393b79',
];

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

/** Warm colours for a flame graph's frames, one per source file. */
export const FLAME_PALETTE = [
  '#e45f3c', '#f08a4b', '#f4a259', '#f6c453', '#e9d66b', '#d9774b', '#eb6f5a', '#f29e6d',
  '#c9683f', '#f7b267', '#e8845c', '#dda15e', '#f4d35e', '#ee964b', '#d65f5f', '#f2b880',
];

export function fileColor(file: string): number {
  return hashString(file) % FLAME_PALETTE.length;
}
