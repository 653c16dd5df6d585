// Pure functions from the store's rows to what the fine metrics panels draw.
import type { MetricsTable } from './store';
import type { SpanRecord } from './types';

export interface Filters {
  unit: string;
  /** '' for every span, 'tag:TAG' or 'id:SPAN_ID' (that span and its children). */
  spanFilter: string;
  hiddenFunctions: string[];
  hiddenActivities: string[];
}

export interface Segment {
  activity: string;
  value: number;
}

export interface BarRow {
  label: string;
  segments: Segment[];
  total: number;
}

export interface Panels {
  units: string[];
  functions: string[];
  activities: string[];
  tags: string[];
  byFunction: BarRow[];
  byActivity: BarRow[];
  send: BarRow[];
  receive: BarRow[];
}

const UNIT_ORDER = ['seconds', 'bytes', 'count'];

export function orderUnits(units: Iterable<string>): string[] {
  const seen = new Set(units);
  const known = UNIT_ORDER.filter((u) => seen.has(u));
  const other = [...seen].filter((u) => !UNIT_ORDER.includes(u)).sort();
  return [...known, ...other];
}

/** Span ids a filter selects; null when it selects everything. */
export function spanSelection(filter: string, spans: Map<string, SpanRecord>): Set<string> | null {
  if (!filter) return null;
  const out = new Set<string>();
  if (filter.startsWith('tag:')) {
    const tag = filter.slice(4);
    for (const [id, s] of spans) if (s.name.includes(tag)) out.add(id);
    return out;
  }
  if (filter.startsWith('id:')) {
    const root = filter.slice(3);
    const children = new Map<string, string[]>();
    for (const [id, s] of spans) {
      if (s.parent !== null) {
        const list = children.get(s.parent) ?? [];
        list.push(id);
        children.set(s.parent, list);
      }
    }
    const stack = [root];
    while (stack.length) {
      const id = stack.pop() as string;
      if (out.has(id)) continue;
      out.add(id);
      stack.push(...(children.get(id) ?? []));
    }
    return out;
  }
  return null;
}

export function spanTags(spans: Map<string, SpanRecord>): string[] {
  const tags = new Set<string>();
  for (const s of spans.values()) for (const t of s.name) tags.add(t);
  return [...tags].sort();
}

function addTo(map: Map<string, Map<string, number>>, row: string, activity: string, v: number) {
  let inner = map.get(row);
  if (!inner) {
    inner = new Map();
    map.set(row, inner);
  }
  inner.set(activity, (inner.get(activity) ?? 0) + v);
}

function toRows(map: Map<string, Map<string, number>>): BarRow[] {
  const rows: BarRow[] = [];
  for (const [label, acts] of map) {
    const segments = [...acts].map(([activity, value]) => ({ activity, value }));
    segments.sort((a, b) => b.value - a.value || a.activity.localeCompare(b.activity));
    const total = segments.reduce((t, s) => t + s.value, 0);
    rows.push({ label, segments, total });
  }
  rows.sort((a, b) => b.total - a.total || a.label.localeCompare(b.label));
  return rows;
}

export function computePanels(
  table: MetricsTable,
  spans: Map<string, SpanRecord>,
  filters: Filters,
): Panels {
  const units = new Set<string>();
  const functions = new Set<string>();
  const activities = new Set<string>();
  const selected = spanSelection(filters.spanFilter, spans);
  const hiddenF = new Set(filters.hiddenFunctions);
  const hiddenA = new Set(filters.hiddenActivities);
  const byFunction = new Map<string, Map<string, number>>();
  const byActivity = new Map<string, Map<string, number>>();
  const send = new Map<string, Map<string, number>>();
  const receive = new Map<string, Map<string, number>>();
  for (const r of table.rows()) {
    if (r.unit !== null) units.add(r.unit);
    if (r.unit !== filters.unit || r.value === 0) continue;
    const activity = r.activity ?? '(none)';
    activities.add(activity);
    if (r.context === 'execute') {
      if (r.fn !== null) functions.add(r.fn);
      if (selected !== null && (r.span === null || !selected.has(r.span))) continue;
      if (r.fn !== null && hiddenF.has(r.fn)) continue;
      if (hiddenA.has(activity)) continue;
      if (r.fn !== null) addTo(byFunction, r.fn, activity, r.value);
      // idle belongs to no function: it shows only while no function is hidden
      if (r.fn !== null || hiddenF.size === 0) addTo(byActivity, activity, activity, r.value);
    } else if (!hiddenA.has(activity)) {
      if (r.context === 'get-data') addTo(send, activity, activity, r.value);
      else if (r.context === 'gather-dep') addTo(receive, activity, activity, r.value);
    }
  }
  return {
    units: orderUnits(units),
    functions: [...functions].sort(),
    activities: [...activities].sort(),
    tags: spanTags(spans),
    byFunction: toRows(byFunction),
    byActivity: toRows(byActivity),
    send: toRows(send),
    receive: toRows(receive),
  };
}
