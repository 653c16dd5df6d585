// The part of anywidget's model a front-end uses, and the data shapes the kernel
// sends. The model's type is anywidget's own (@anywidget/types, types only: nothing
// of it is bundled), narrowed to the methods used, so that a test's stand-in
// implements only those.
import type { AnyModel } from '@anywidget/types';

export type Handler = (...args: any[]) => void;

export type WidgetModel = Pick<AnyModel, 'get' | 'set' | 'save_changes' | 'on' | 'off' | 'send'>;

/** Where a view keeps the state it shares with its host: the widget model's synced
 * traits in a notebook, a plain object in a static report. Here, apart from the
 * views and their mounting, so that every module can take one without importing
 * mount.ts (which imports them all). */
export interface Binding {
  get(name: string): unknown;
  set(values: Record<string, unknown>): void;
  onChange(names: string[], listener: () => void): () => void;
}

/** Binary payloads as the transports hand them over. */
export type Buffer = ArrayBuffer | ArrayBufferView;

/** One feed's part of an update message (see kernel_cluster/diagnostics/table_feeds.py). */
export interface MetricsPart {
  feed: 'metrics';
  seq: number;
  full: boolean;
  strings: string[];
  first_row: number;
  nbuffers: number;
}

export interface RecordsPart<T = unknown> {
  feed: 'spans' | 'progress';
  seq: number;
  full: boolean;
  records: Record<string, T>;
  removed: string[];
  nbuffers: number;
}

/** New task stream records as columns (kernel_cluster/diagnostics/task_stream_feed.py). */
export interface TasksPart {
  feed: 'tasks';
  seq: number;
  full: boolean;
  strings: string[];
  rows: [number, number][];
  first_task: number;
  drop_before: number;
  keys: string[];
  nbuffers: number;
}

/** A profile tree laid out in pre-order (kernel_cluster/diagnostics/profile_feed.py). */
export interface FlatProfileHeader {
  strings: string[];
  total: number;
  nframes: number;
}

export interface Timeline {
  counts: [number, number][];
  keys: Record<string, [number, number][]>;
}

export interface ProfileSelection {
  prefix: string | null;
  start: number | null;
  stop: number | null;
}

export interface ProfilePart {
  feed: 'profile';
  seq: number;
  full: boolean;
  interval: number;
  selection: ProfileSelection;
  timeline: Timeline | null;
  tree: FlatProfileHeader | null;
  nbuffers: number;
}

export type Part = MetricsPart | RecordsPart | TasksPart | ProfilePart;

export interface UpdateMessage {
  type: 'update';
  parts: Part[];
}

export interface SpanRecord {
  name: string[];
  parent: string | null;
  enqueued: number;
  start: number;
  stop: number;
  duration: number;
  nbytes: number;
  states: Record<string, number>;
  done: boolean;
  code: string[][][];
}

export type StateCounts = Record<string, number>;
