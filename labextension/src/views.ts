// The views a panel can hold: their names, titles, and what the kernel must send
// for them (metrics, spans and progress always flow; these are the extra feeds).
import type { Kind } from '@kernel-cluster/widgets';

export const VIEWS = ['fine-metrics', 'span-tree', 'profile', 'task-stream', 'memory', 'progress', 'workers', 'compare'] as const;
export type View = (typeof VIEWS)[number];

export const MODES = ['split-right', 'split-left', 'split-top', 'split-bottom', 'tab-after', 'tab-before'] as const;
export type Mode = (typeof MODES)[number];

export const LABELS: Record<View, string> = {
  'fine-metrics': 'Fine Metrics',
  'span-tree': 'Span Tree',
  profile: 'Profile',
  'task-stream': 'Task Stream',
  memory: 'Memory',
  progress: 'Progress',
  workers: 'Workers',
  compare: 'Compare',
};

/** What each view shows, for the palette and the menus. */
export const CAPTIONS: Record<View, string> = {
  'fine-metrics': 'where task time went: by function, by activity, sent and received data',
  'span-tree': 'the spans as a tree: wall time, task time, tasks by state',
  profile: "the workers' statistical profile as a flame graph",
  'task-stream': 'every task on every worker thread over time',
  memory: "the cluster's memory over time, with its limit",
  progress: 'a progress bar per task prefix',
  workers: "each worker's CPU, memory against its limit, tasks, spilled bytes and pause",
  compare: 'two runs side by side: where the time and the bytes went differently',
};

/** Optional feeds (kernel_cluster/jupyter/lab.py OPTIONAL_FEEDS) a view needs. */
export const FEEDS: Record<View, ('tasks' | 'profile' | 'workers' | 'compare')[]> = {
  'fine-metrics': [],
  'span-tree': [],
  profile: ['profile'],
  'task-stream': ['tasks'],
  memory: [],
  progress: [],
  workers: ['workers'],
  // its comparison is asked for on its own (ClusterConnection.compareBinding); the
  // feed brings the runs to choose from again when a run is recorded
  compare: ['compare'],
};

/** The renderer (widgets/src/mount.ts) that draws a view from the store; memory and
 * workers draw from the connection's status instead. */
export const RENDERER: Record<Exclude<View, 'memory' | 'workers'>, Kind> = {
  'fine-metrics': 'fine-metrics',
  'span-tree': 'span-tree',
  profile: 'flame-graph',
  'task-stream': 'task-stream',
  progress: 'progress',
  compare: 'compare',
};

export function isView(v: unknown): v is View {
  return typeof v === 'string' && (VIEWS as readonly string[]).includes(v);
}

export function isMode(v: unknown): v is Mode {
  return typeof v === 'string' && (MODES as readonly string[]).includes(v);
}
