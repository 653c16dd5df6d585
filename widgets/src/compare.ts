// The Compare view: two runs (a baseline `a` and `b`) side by side, by function and by
// activity, as paired bars or as bars diverging from zero, with the fine metrics'
// unit, function and activity filters and the kernel's one-line verdict. The data
// is the kernel's (kernel_cluster/diagnostics/history/compare.py, Comparison.to_data);
// filtering and normalising happen here. Everything the view shares with its host
// lives in a Binding: a widget's traits, a lab panel's connection, a report's object.
import { scaleLinear } from 'd3-scale';
import { select } from 'd3-selection';
import { orderUnits } from './aggregate';
import { truncate } from './chart';
import { activityColor } from './colors';
import { h, Tooltip } from './dom';
import { CheckList, setOptions } from './fineMetrics';
import { formatValue } from './format';
import type { Binding } from './types';

/** `[function (null: idle), activity, unit, a, b, a's tasks of it, b's tasks of it]`. */
export type CompareRow = [string | null, string, string, number, number, number | null, number | null];

export interface CompareSide {
  ref: string;
  id: string;
  name: string;
  label: string;
  where: 'live' | 'history';
  start: number;
  stop: number;
  wall: number;
  tasks: number;
  nbytes: number;
  thread_seconds: number;
  done: boolean;
  source?: string | null;
}

export interface CompareData {
  a: CompareSide;
  b: CompareSide;
  verdict: string;
  perTask: boolean;
  rows: CompareRow[];
}

export type CompareMode = 'side-by-side' | 'diverging';
export type Normalise = 'total' | 'per-task' | 'per-wall';

export interface CompareFilters {
  unit: string;
  mode: CompareMode;
  normalise: Normalise;
  hiddenFunctions: string[];
  hiddenActivities: string[];
}

export interface PairRow {
  label: string;
  a: number;
  b: number;
  delta: number;
}

export interface ComparePanels {
  units: string[];
  functions: string[];
  activities: string[];
  byFunction: PairRow[];
  byActivity: PairRow[];
}

/** A run the user may pick (the lab panel's and the widget's choices). */
export interface RunChoice {
  ref: string;
  label: string;
}

export const MAX_ROWS = 25;
const MODES: [CompareMode, string][] = [
  ['side-by-side', 'side by side'],
  ['diverging', 'change (b − a)'],
];
const NORMALISE: [Normalise, string][] = [
  ['total', 'total'],
  ['per-task', 'per task'],
  ['per-wall', 'per wall-clock second'],
];

/** Bar rows from the kernel's rows, filtered and normalised; sorted by the size of
 * the change (ties by name). */
export function comparePanels(data: CompareData, f: CompareFilters): ComparePanels {
  const units = new Set<string>();
  const functions = new Set<string>();
  const activities = new Set<string>();
  const hiddenF = new Set(f.hiddenFunctions);
  const hiddenA = new Set(f.hiddenActivities);
  const byFunction = new Map<string, [number, number]>();
  const byActivity = new Map<string, [number, number]>();
  const add = (m: Map<string, [number, number]>, k: string, a: number, b: number) => {
    const v = m.get(k) ?? [0, 0];
    m.set(k, [v[0] + a, v[1] + b]);
  };
  const wall = (x: number, side: CompareSide) => (side.wall > 0 ? x / side.wall : 0);
  for (const [fn, activity, unit, a, b, ta, tb] of data.rows) {
    units.add(unit);
    if (unit !== f.unit) continue;
    activities.add(activity);
    if (fn !== null) functions.add(fn);
    if ((fn !== null && hiddenF.has(fn)) || hiddenA.has(activity)) continue;
    if (fn === null && hiddenF.size) continue; // idle is no function's: shown with all of them
    let [va, vb] = [a, b];
    if (f.normalise === 'per-wall') [va, vb] = [wall(a, data.a), wall(b, data.b)];
    if (fn !== null) {
      const [fa, fb] = f.normalise === 'per-task' ? [ta ? a / ta : 0, tb ? b / tb : 0] : [va, vb];
      add(byFunction, fn, fa, fb);
    }
    if (f.normalise === 'per-task') [va, vb] = [data.a.tasks ? a / data.a.tasks : 0, data.b.tasks ? b / data.b.tasks : 0];
    add(byActivity, activity, va, vb);
  }
  const rows = (m: Map<string, [number, number]>): PairRow[] =>
    [...m]
      .map(([label, [a, b]]) => ({ label, a, b, delta: b - a }))
      .sort((x, y) => Math.abs(y.delta) - Math.abs(x.delta) || x.label.localeCompare(y.label));
  return {
    units: orderUnits(units),
    functions: [...functions].sort(),
    activities: [...activities].sort(),
    byFunction: rows(byFunction),
    byActivity: rows(byActivity),
  };
}

/** Traits holding the view's state, by filter name. */
const TRAITS: Record<keyof CompareFilters, string> = {
  unit: 'unit',
  mode: 'mode',
  normalise: 'normalise',
  hiddenFunctions: 'hidden_functions',
  hiddenActivities: 'hidden_activities',
};

function readFilters(b: Binding): CompareFilters {
  const get = <T>(name: keyof CompareFilters, fallback: T): T => (b.get(TRAITS[name]) as T | undefined) ?? fallback;
  return {
    unit: get('unit', 'seconds'),
    mode: get<CompareMode>('mode', 'side-by-side'),
    normalise: get<Normalise>('normalise', 'total'),
    hiddenFunctions: get<string[]>('hiddenFunctions', []),
    hiddenActivities: get<string[]>('hiddenActivities', []),
  };
}

function sideText(tag: string, s: CompareSide): string {
  const state = s.done ? '' : ', running';
  return `${tag}: ${s.label} · wall ${formatValue(s.wall, 'seconds')} · ${s.tasks} tasks${state}`;
}

export class CompareView {
  readonly root: HTMLDivElement;
  panels: ComparePanels | null = null;
  private verdict: HTMLDivElement;
  private sides: HTMLDivElement;
  private choose: HTMLDivElement;
  private pickA: HTMLSelectElement;
  private pickB: HTMLSelectElement;
  private unitSelect: HTMLSelectElement;
  private modeSelect: HTMLSelectElement;
  private normSelect: HTMLSelectElement;
  private functionList: CheckList;
  private activityList: CheckList;
  private plots = new Map<string, HTMLDivElement>();
  private notes = new Map<string, HTMLSpanElement>();
  private tooltip: Tooltip;
  private unwatch: () => void;

  constructor(
    host: HTMLElement,
    private binding: Binding,
    private options: { width?: number } = {},
  ) {
    this.root = h('div', { class: 'kc-view kc-compare' });
    this.verdict = h('div', { class: 'kc-verdict', role: 'status' });
    this.sides = h('div', { class: 'kc-compare-sides' });
    this.pickA = h('select', { class: 'kc-pick-a', 'aria-label': 'Baseline (a)' });
    this.pickB = h('select', { class: 'kc-pick-b', 'aria-label': 'Run (b)' });
    const pick = () => this.binding.set({ a: this.pickA.value, b: this.pickB.value });
    this.pickA.addEventListener('change', pick);
    this.pickB.addEventListener('change', pick);
    this.choose = h('div', { class: 'kc-controls kc-compare-choose' }, h('label', {}, 'a ', this.pickA), h('label', {}, 'b ', this.pickB));
    this.unitSelect = h('select', { class: 'kc-unit', 'aria-label': 'Unit' });
    this.modeSelect = h('select', { class: 'kc-mode', 'aria-label': 'Bars' });
    this.normSelect = h('select', { class: 'kc-normalise', 'aria-label': 'Normalise' });
    this.unitSelect.addEventListener('change', () => this.change({ unit: this.unitSelect.value }));
    this.modeSelect.addEventListener('change', () => this.change({ mode: this.modeSelect.value as CompareMode }));
    this.normSelect.addEventListener('change', () => this.change({ normalise: this.normSelect.value as Normalise }));
    this.functionList = new CheckList('Functions', 'kc-functions', (hidden) => this.change({ hiddenFunctions: hidden }));
    this.activityList = new CheckList('Activities', 'kc-activities', (hidden) => this.change({ hiddenActivities: hidden }));
    const controls = h(
      'div',
      { class: 'kc-controls' },
      h('label', {}, 'Unit ', this.unitSelect),
      h('label', {}, 'Bars ', this.modeSelect),
      h('label', {}, 'Values ', this.normSelect),
      this.functionList.root,
      this.activityList.root,
    );
    const grid = h('div', { class: 'kc-panels' });
    for (const [id, title] of [
      ['by-function', 'By function'],
      ['by-activity', 'By activity'],
    ]) {
      const plot = h('div', { class: 'kc-plot' });
      const note = h('span', { class: 'kc-note' });
      this.plots.set(id, plot);
      this.notes.set(id, note);
      grid.append(h('section', { class: 'kc-panel', 'data-panel': id }, h('h4', { text: title }, note), plot));
    }
    this.root.append(h('div', { class: 'kc-title', text: 'Compare runs' }), this.choose, this.verdict, this.sides, controls, grid);
    host.append(this.root);
    this.tooltip = new Tooltip(this.root);
    this.unwatch = binding.onChange(['data', 'runs', 'a', 'b', 'error', ...Object.values(TRAITS)], () => this.render());
    this.render();
  }

  get filters(): CompareFilters {
    return readFilters(this.binding);
  }

  private change(change: Partial<CompareFilters>): void {
    const values: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(change)) values[TRAITS[k as keyof CompareFilters]] = v;
    this.binding.set(values); // the binding tells us back: render() follows
  }

  render(): void {
    this.drawChoices();
    const data = this.binding.get('data') as CompareData | null | undefined;
    const error = this.binding.get('error') as string | null | undefined;
    if (!data) {
      this.panels = null;
      this.verdict.textContent = error || 'Nothing to compare yet: choose two runs.';
      this.verdict.classList.toggle('kc-error-text', Boolean(error));
      this.sides.replaceChildren();
      for (const plot of this.plots.values()) plot.replaceChildren(h('div', { class: 'kc-empty', text: 'No data' }));
      return;
    }
    const f = this.filters;
    const panels = comparePanels(data, f);
    this.panels = panels;
    this.verdict.textContent = error || data.verdict;
    this.verdict.classList.toggle('kc-error-text', Boolean(error));
    this.sides.replaceChildren(
      h('div', { class: 'kc-side-a', text: sideText('a', data.a) }),
      h('div', { class: 'kc-side-b', text: sideText('b', data.b) }),
    );
    const units = panels.units.includes(f.unit) ? panels.units : [f.unit, ...panels.units];
    setOptions(this.unitSelect, units.map((u) => [u, u]), f.unit);
    setOptions(this.modeSelect, MODES, f.mode);
    setOptions(this.normSelect, NORMALISE, f.normalise);
    this.functionList.update(panels.functions, f.hiddenFunctions);
    this.activityList.update(panels.activities, f.hiddenActivities, activityColor);
    const suffix = f.normalise === 'per-task' ? ' per task' : f.normalise === 'per-wall' ? ' per wall-clock second' : '';
    for (const [id, rows] of [
      ['by-function', panels.byFunction],
      ['by-activity', panels.byActivity],
    ] as [string, PairRow[]][]) {
      const shown = rows.slice(0, MAX_ROWS);
      (this.notes.get(id) as HTMLSpanElement).textContent =
        `${suffix ? ` (${f.unit}${suffix})` : ''}${rows.length > MAX_ROWS ? ` — the ${MAX_ROWS} largest changes of ${rows.length}` : ''}`;
      drawPairs(this.plots.get(id) as HTMLDivElement, shown, {
        unit: f.unit,
        mode: f.mode,
        tooltip: this.tooltip,
        width: this.options.width,
        suffix,
        activityRows: id === 'by-activity',
      });
    }
  }

  private drawChoices(): void {
    const runs = (this.binding.get('runs') as RunChoice[] | undefined) ?? [];
    this.choose.hidden = runs.length === 0;
    if (!runs.length) return;
    const options: [string, string][] = runs.map((r) => [r.ref, r.label]);
    const a = String(this.binding.get('a') ?? '');
    const b = String(this.binding.get('b') ?? '');
    const withCurrent = (v: string) => (v && !runs.some((r) => r.ref === v) ? [[v, v] as [string, string], ...options] : options);
    setOptions(this.pickA, withCurrent(a), a);
    setOptions(this.pickB, withCurrent(b), b);
  }

  destroy(): void {
    this.unwatch();
    this.root.remove();
  }
}

interface PairOptions {
  unit: string;
  mode: CompareMode;
  tooltip: Tooltip;
  width?: number;
  suffix: string;
  activityRows: boolean;
}

const SVG = 'http://www.w3.org/2000/svg';

/** One row per label: two bars (a above b) or one bar of the change from zero. */
export function drawPairs(host: HTMLElement, rows: PairRow[], opts: PairOptions): void {
  host.replaceChildren();
  if (!rows.length) {
    host.append(h('div', { class: 'kc-empty', text: 'No data' }));
    return;
  }
  const width = opts.width ?? Math.max(host.clientWidth || 0, 320);
  const labelWidth = 130;
  const valueWidth = opts.mode === 'side-by-side' ? 150 : 80; // "7.4 ms → 607.5 ms", "+14.10 s"
  const rowHeight = opts.mode === 'side-by-side' ? 26 : 20;
  const height = rows.length * rowHeight + 4;
  const svg = select(host)
    .append(() => document.createElementNS(SVG, 'svg'))
    .attr('class', `kc-chart kc-compare-chart kc-${opts.mode}`)
    .attr('width', width)
    .attr('height', height)
    .attr('viewBox', `0 0 ${width} ${height}`);
  const span = Math.max(width - labelWidth - valueWidth, 40);
  const fmt = (v: number) => formatValue(v, opts.unit);
  const signed = (v: number) => (v > 0 ? `+${fmt(v)}` : v < 0 ? `−${fmt(-v)}` : fmt(0));
  const row = svg
    .selectAll('g.kc-row')
    .data(rows, (d) => (d as PairRow).label)
    .join('g')
    .attr('class', 'kc-row')
    .attr('data-label', (d) => d.label)
    .attr('transform', (_, i) => `translate(0,${2 + i * rowHeight})`);
  row
    .append('text')
    .attr('class', 'kc-label')
    .attr('x', labelWidth - 6)
    .attr('y', (rowHeight - 4) / 2)
    .attr('dy', '0.35em')
    .attr('text-anchor', 'end')
    .text((d) => truncate(d.label, 20))
    .append('title')
    .text((d) => d.label);
  const tip = (d: PairRow) =>
    `${d.label}${opts.suffix}\na: ${fmt(d.a)}\nb: ${fmt(d.b)}\nchange: ${signed(d.delta)}${d.a ? ` (${d.b >= d.a ? '+' : '−'}${Math.abs((d.delta / d.a) * 100).toFixed(0)}%)` : ''}`;
  const hover = (sel: any) =>
    sel.on('mousemove', (event: MouseEvent, d: PairRow) => opts.tooltip.show(tip(d), event)).on('mouseleave', () => opts.tooltip.hide());
  if (opts.mode === 'side-by-side') {
    const max = Math.max(...rows.map((r) => Math.max(r.a, r.b)), 0);
    const x = scaleLinear().domain([0, max > 0 ? max : 1]).range([0, span]);
    const barHeight = (rowHeight - 6) / 2;
    for (const side of ['a', 'b'] as const) {
      row
        .append('rect')
        .attr('class', `kc-cmp-bar kc-cmp-${side}`)
        .attr('data-side', side)
        .attr('data-value', (d) => String(d[side]))
        .attr('x', labelWidth)
        .attr('y', side === 'a' ? 0 : barHeight + 1)
        .attr('width', (d) => Math.max(x(Math.max(d[side], 0)), 0.5))
        .attr('height', barHeight)
        .attr('fill', (d) => (side === 'a' ? 'var(--kc-fg-muted)' : opts.activityRows ? activityColor(d.label) : 'var(--kc-accent)'))
        .attr('opacity', side === 'a' ? 0.55 : 1)
        .call(hover);
    }
    row
      .append('text')
      .attr('class', 'kc-value')
      .attr('x', (d) => labelWidth + x(Math.max(d.a, d.b, 0)) + 4)
      .attr('y', (rowHeight - 4) / 2)
      .attr('dy', '0.35em')
      .text((d) => `${fmt(d.a)} → ${fmt(d.b)}`);
    return;
  }
  const extent = Math.max(...rows.map((r) => Math.abs(r.delta)), 0);
  const half = span / 2;
  const x = scaleLinear().domain([0, extent > 0 ? extent : 1]).range([0, half]);
  const zero = labelWidth + half;
  svg
    .append('line')
    .attr('class', 'kc-zero')
    .attr('x1', zero)
    .attr('x2', zero)
    .attr('y1', 0)
    .attr('y2', height);
  row
    .append('rect')
    .attr('class', (d) => `kc-cmp-bar kc-cmp-delta ${d.delta > 0 ? 'kc-cmp-up' : 'kc-cmp-down'}`)
    .attr('data-side', 'delta')
    .attr('data-value', (d) => String(d.delta))
    .attr('x', (d) => (d.delta >= 0 ? zero : zero - x(-d.delta)))
    .attr('y', 0)
    .attr('width', (d) => Math.max(x(Math.abs(d.delta)), 0.5))
    .attr('height', rowHeight - 4)
    .call(hover);
  row
    .append('text')
    .attr('class', 'kc-value')
    .attr('x', (d) => (d.delta >= 0 ? zero + x(d.delta) + 4 : zero - x(-d.delta) - 4))
    .attr('text-anchor', (d) => (d.delta >= 0 ? 'start' : 'end'))
    .attr('y', (rowHeight - 4) / 2)
    .attr('dy', '0.35em')
    .text((d) => signed(d.delta));
}
