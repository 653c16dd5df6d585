// Mounting a view by kind, with its filter state kept in a "binding": the widget
// model's synced traits in a notebook, a plain object in a static report.
import type { Filters } from './aggregate';
import { h } from './dom';
import { CompareView } from './compare';
import { FineMetricsView } from './fineMetrics';
import { FlameGraphView } from './flameGraph';
import { liveProfileSource } from './profileSources';
import type { ProfilerPlotsData } from './profilerLayout';
import { ProfilerPlotsView } from './profilerPlots';
import { ProgressView } from './progress';
import { SpanTreeView } from './spanTree';
import { TaskStreamView } from './taskStream';
import type { Store } from './store';
import type { Binding } from './types';

export type { Binding };

export type Kind = 'fine-metrics' | 'span-tree' | 'progress' | 'dashboard' | 'task-stream' | 'flame-graph' | 'profiler-plots' | 'compare';

/** Traits that hold the fine metrics filters, by filter name. */
const TRAITS: Record<keyof Filters, string> = {
  unit: 'unit',
  spanFilter: 'span_filter',
  hiddenFunctions: 'hidden_functions',
  hiddenActivities: 'hidden_activities',
};

function readFilters(b: Binding): Partial<Filters> {
  const out: Record<string, unknown> = {};
  for (const [k, trait] of Object.entries(TRAITS)) {
    const v = b.get(trait);
    if (v !== undefined && v !== null) out[k] = v;
  }
  return out as Partial<Filters>;
}

function writeFilters(b: Binding, change: Partial<Filters>): void {
  const values: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(change)) values[TRAITS[k as keyof Filters]] = v;
  b.set(values);
}

export interface Mounted {
  fineMetrics?: FineMetricsView;
  spanTree?: SpanTreeView;
  progress?: ProgressView;
  taskStream?: TaskStreamView;
  flameGraph?: FlameGraphView;
  profilerPlots?: ProfilerPlotsView;
  /** The host changed size: the views that draw at a width draw again. */
  resize(): void;
  compare?: CompareView;
  destroy(): void;
}

export function mount(kind: Kind, el: HTMLElement, store: Store, b: Binding, width?: number): Mounted {
  const cleanups: (() => void)[] = [];
  const out: Mounted = {
    resize() {
      out.fineMetrics?.resize();
      out.taskStream?.resize();
      out.flameGraph?.resize();
    },
    destroy() {
      for (const c of cleanups.splice(0)) c();
    },
  };
  let host = el;
  if (kind === 'dashboard') {
    const side = h('div', { class: 'kc-side' });
    const main = h('div', { class: 'kc-main' });
    host = h('div', { class: 'kc-dashboard' }, side, main);
    el.append(host);
    cleanups.push(() => host.remove());
    out.progress = new ProgressView(side, store);
    out.spanTree = new SpanTreeView(side, store, { selected: String(b.get('selected') ?? '') });
    host = main;
  }
  if (kind === 'progress') out.progress = new ProgressView(el, store);
  if (kind === 'task-stream') {
    // the legend's filter: task prefixes and actions hidden, kept in the binding
    const hidden = () => (Array.isArray(b.get('hidden_prefixes')) ? (b.get('hidden_prefixes') as string[]) : []);
    const ts = new TaskStreamView(el, store, { width, hidden: hidden(), onFilter: (names) => b.set({ hidden_prefixes: names }) });
    out.taskStream = ts;
    cleanups.push(b.onChange(['hidden_prefixes'], () => ts.setHidden(hidden())));
  }
  if (kind === 'flame-graph') out.flameGraph = new FlameGraphView(el, liveProfileSource(store, b), { width });
  // the local profilers' records, whole, in the `data` trait: the store stays empty
  if (kind === 'profiler-plots') out.profilerPlots = new ProfilerPlotsView(el, b.get('data') as ProfilerPlotsData, { width });
  // two runs compared: the data and the filters live in the binding, the store stays empty
  if (kind === 'compare') out.compare = new CompareView(el, b, { width });
  if (kind === 'span-tree') {
    out.spanTree = new SpanTreeView(el, store, {
      selected: String(b.get('selected') ?? ''),
      onSelect: (id) => b.set({ selected: id }),
    });
  }
  if (kind === 'fine-metrics' || kind === 'dashboard') {
    const fm = new FineMetricsView(host, store, {
      filters: readFilters(b),
      onChange: (change) => writeFilters(b, change),
      width,
    });
    out.fineMetrics = fm;
    cleanups.push(b.onChange(Object.values(TRAITS), () => fm.setFilters(readFilters(b))));
    const tree = out.spanTree;
    if (tree) {
      // the tree and the metrics in one view: choosing a span filters at once, here
      tree.options.onSelect = (id) => {
        const spanFilter = id ? `id:${id}` : '';
        fm.setFilters({ spanFilter });
        b.set({ selected: id, span_filter: spanFilter });
      };
    }
  }
  if (out.spanTree) {
    const tree = out.spanTree;
    cleanups.push(b.onChange(['selected'], () => tree.select(String(b.get('selected') ?? ''))));
  }
  for (const view of [out.fineMetrics, out.spanTree, out.progress, out.taskStream, out.flameGraph, out.profilerPlots, out.compare]) {
    if (view) cleanups.push(() => view.destroy());
  }
  return out;
}
