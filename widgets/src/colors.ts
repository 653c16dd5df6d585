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
