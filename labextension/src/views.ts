// The views a panel can hold: their names, titles, and what the kernel must send
// for them (metrics, spans and progress always flow; these are the extra feeds).
import type { Kind } from '@kernel-cluster/widgets';

export const VIEWS = ['fine-metrics', 'span-tree', 'profile', 'task-stream', 'memory', 'progress', 'compare'] as const;
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
  compare: 'Compare',
};

/** Optional feeds (kernel_cluster/jupyter/lab.py OPTIONAL_FEEDS) a view needs. */
export const FEEDS: Record<View, ('tasks' | 'profile')[]> = {
  'fine-metrics': [],
  'span-tree': [],
  profile: ['profile'],
  'task-stream': ['tasks'],
  memory: [],
  progress: [],
  compare: [], // asked for, and answered, on its own (ClusterConnection.compareBinding)
};

/** The renderer (widgets/src/mount.ts) that draws a view; memory has its own. */
export const RENDERER: Record<Exclude<View, 'memory'>, Kind> = {
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
