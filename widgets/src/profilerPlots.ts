// The local profilers' plots (kernel_cluster.local_diagnostics.plots.visualize): a
// vertical stack sharing one time axis, in seconds from the first record. Tasks
// are the task stream view (a row per worker, coloured by function; wheel zooms,
// drag pans, double-click fits, and every plot below follows); resources and the
// cache are line charts aligned with it (the same left gutter and width), which
// zoom and pan the same way. A function has one colour in the task and the cache
// plots. Data shaping is in profilerLayout.ts.
import { capture } from './canvas';
import { ColorAssigner } from './colors';
import { h, Tooltip } from './dom';
import { formatBytes, formatSeconds } from './format';
import { lineChart, type LineChartOptions, type Series } from './lineChart';
import { cacheSteps, plotsExtent, tasksMessage, type CachePlot, type ProfilerPlotsData, type ResourcePlot, type TasksPlot } from './profilerLayout';
import { Store } from './store';
import { TaskStreamView } from './taskStream';
import { AXIS, GUTTER, zoomed } from './taskStreamLayout';

export interface ProfilerPlotsOptions {
  /** Width in CSS pixels; by default the element's. */
  width?: number;
}

interface Chart {
  host: HTMLElement;
  series: Series[];
  options: Omit<LineChartOptions, 'domain' | 'width' | 'left' | 'right'>;
  svg: SVGSVGElement | null;
}

const CPU_COLOR = '#3b7dd8';
const MEM_COLOR = '#2e9e4f';

function formatNumber(v: number): string {
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 1e6) return `${(v / 1e6).toFixed(1)}M`;
  if (a >= 1e4) return `${(v / 1e3).toFixed(0)}k`;
  return Number.isInteger(v) ? String(v) : v.toFixed(a >= 10 ? 1 : 2);
}

function legend(items: { name: string; color: string }[], limit = 40): HTMLElement {
  const out = items
    .slice(0, limit)
    .map((s) => h('span', { class: 'kc-legend-item kc-static', 'data-label': s.name }, h('span', { class: 'kc-swatch', style: `background:${s.color}` }), s.name));
  if (items.length > limit) out.push(h('span', { class: 'kc-note', text: `+${items.length - limit} more` }));
  return h('div', { class: 'kc-legend' }, ...out);
}

export class ProfilerPlotsView {
  readonly root: HTMLDivElement;
  /** The time window every plot shows, seconds from the first record. */
  domain: [number, number];
  readonly streams: TaskStreamView[] = [];
  readonly charts: Chart[] = [];
  /** One colour per function, for every plot. */
  readonly colors = new ColorAssigner();
  private width: number;
  private resize: ResizeObserver | null = null;

  constructor(
    host: HTMLElement,
    readonly data: ProfilerPlotsData,
    private options: ProfilerPlotsOptions = {},
  ) {
    this.root = h('div', { class: 'kc-view kc-profiler-plots' });
    host.append(this.root);
    this.domain = plotsExtent(data);
    this.width = options.width ?? Math.max(this.root.clientWidth || 0, 600);
    for (const g of data.groups) this.colors.color(g); // in order of first appearance
    if (!data.plots.length) this.root.append(h('p', { class: 'kc-empty', text: 'No profiler given: nothing to plot.' }));
    for (const plot of data.plots) {
      const section = h('div', { class: 'kc-profiler-plot', 'data-plot': plot.kind });
      this.root.append(section);
      if (plot.kind === 'tasks') this.addTasks(section, plot);
      else if (plot.kind === 'resource') this.addResource(section, plot);
      else if (plot.kind === 'cache') this.addCache(section, plot);
    }
    if (!this.streams.length && options.width === undefined && typeof ResizeObserver === 'function') {
      this.resize = new ResizeObserver(() => this.follow(this.domain, Math.max(this.root.clientWidth || 0, 600)));
      this.resize.observe(this.root);
    }
    this.drawCharts();
  }

  private addTasks(section: HTMLElement, p: TasksPlot): void {
    const store = new Store();
    // colours from the shared assigner: the message is applied as a first delta (a
    // full one would reset the table, and its colours, first)
    store.tasks.prefixColors = this.colors;
    const { part, buffers } = tasksMessage(p, this.data.groups);
    part.full = false;
    store.applyUpdate([part], buffers);
    const stream = new TaskStreamView(section, store, {
      title: 'Tasks',
      width: this.options.width,
      height: Math.min(Math.max(p.workers.length * 24, 96), 400) + AXIS,
      origin: 0,
      extent: () => plotsExtent(this.data),
      rowOrder: (t) => t.rows.map((_, i) => i),
      describe: (rect, t) => {
        const i = t.rect(rect).task;
        const duration = formatSeconds(p.end[i] - p.start[i]);
        const label = p.workers[p.worker[i]];
        const id = p.worker_ids?.[p.worker[i]];
        const who = `${/^\d+$/.test(label) ? `worker ${label}` : label}${id && id !== label ? ` (id ${id})` : ''}`;
        return `${p.keys[i]}\n${p.tasks[i]}\n${duration} on ${who}`;
      },
      actions: false,
      onDraw: (domain, width) => this.follow(domain, width, stream),
    });
    this.streams.push(stream);
    if (!p.keys.length) section.append(h('p', { class: 'kc-empty', text: 'No tasks recorded.' }));
  }

  private addResource(section: HTMLElement, p: ResourcePlot): void {
    const n = p.time.length;
    const note = n
      ? `${n} samples; peak CPU ${formatNumber(Math.max(...p.cpu))} %, peak memory ${formatNumber(Math.max(...p.mem))} MB`
      : 'No resource samples recorded.';
    section.append(h('div', { class: 'kc-title' }, 'Resources ', h('span', { class: 'kc-note', text: note })));
    const cpu = h('div', { class: 'kc-profiler-chart', 'data-chart': 'cpu' }, h('div', { class: 'kc-note', text: 'CPU (%, 100 per core)' }));
    const mem = h('div', { class: 'kc-profiler-chart', 'data-chart': 'memory' }, h('div', { class: 'kc-note', text: 'Memory (MB)' }));
    section.append(cpu, mem);
    this.addChart(cpu, [{ name: 'CPU', color: CPU_COLOR, x: p.time, y: p.cpu }], { format: (v) => `${formatNumber(v)} %`, height: 110, area: true });
    this.addChart(mem, [{ name: 'memory', color: MEM_COLOR, x: p.time, y: p.mem }], { format: (v) => `${formatNumber(v)} MB`, height: 110, area: true });
  }

  private addCache(section: HTMLElement, p: CachePlot): void {
    const steps = cacheSteps(p, this.data.groups, this.data.duration);
    const series = steps.map((s) => ({ ...s, color: this.colors.color(s.name) }));
    const note = p.group.length ? `${p.group.length} results` : 'No results were cached.';
    section.append(
      h('div', { class: 'kc-title' }, `Cache: sum of ${p.metric} per function `, h('span', { class: 'kc-note', text: note })),
      legend(series),
    );
    const host = h('div', { class: 'kc-profiler-chart', 'data-chart': 'cache' });
    section.append(host);
    const format = p.metric === 'nbytes' ? formatBytes : formatNumber; // a size metric in bytes
    this.addChart(host, series, { format, height: 160, step: true, nearest: true });
  }

  private addChart(host: HTMLElement, series: Series[], options: Omit<Chart['options'], 'tooltip'>): void {
    const chart: Chart = { host, series, options: { ...options, tooltip: new Tooltip(host) }, svg: null };
    host.style.position = 'relative';
    this.charts.push(chart);
    const timeAt = (e: MouseEvent): number => {
      const box = host.getBoundingClientRect();
      const [a, b] = this.domain;
      return a + ((e.clientX - box.left - GUTTER) / Math.max(this.width - GUTTER, 1)) * (b - a);
    };
    host.addEventListener(
      'wheel',
      (e: WheelEvent) => {
        e.preventDefault();
        const dy = e.deltaMode === 1 ? e.deltaY * 16 : e.deltaY;
        this.setDomain(zoomed(this.domain, Math.exp(dy * 0.0015), timeAt(e)));
      },
      { passive: false },
    );
    host.addEventListener('dblclick', () => this.fit());
    // drag pans, as on the tasks (the listeners are on the chart's box: the svg is redrawn)
    let drag: { x: number; domain: [number, number] } | null = null;
    host.addEventListener('pointerdown', (e: PointerEvent) => {
      if (e.button !== 0) return;
      drag = { x: e.clientX, domain: [...this.domain] as [number, number] };
      capture(host, e.pointerId, true);
    });
    host.addEventListener('pointermove', (e: PointerEvent) => {
      if (!drag) return;
      const [a, b] = drag.domain;
      const dt = ((e.clientX - drag.x) / Math.max(this.width - GUTTER, 1)) * (b - a);
      this.setDomain([a - dt, b - dt]);
    });
    const end = (e: PointerEvent) => {
      drag = null;
      capture(host, e.pointerId, false);
    };
    host.addEventListener('pointerup', end);
    host.addEventListener('pointercancel', end);
  }

  /** Show ``domain`` in every plot. */
  setDomain(domain: [number, number]): void {
    if (!(domain[1] > domain[0])) return;
    const stream = this.streams[0];
    if (stream) stream.setDomain(domain[0], domain[1]); // draws, and calls follow()
    else this.follow(domain, this.width);
  }

  fit(): void {
    if (this.streams.length) this.streams[0].fit();
    else this.follow(plotsExtent(this.data), this.width);
  }

  /** A plot drew ``domain`` at ``width``: the others follow. */
  follow(domain: [number, number] | null, width: number, from?: TaskStreamView): void {
    if (!domain) return;
    const same = domain[0] === this.domain[0] && domain[1] === this.domain[1] && width === this.width;
    this.domain = [domain[0], domain[1]];
    this.width = width;
    for (const s of this.streams) {
      if (s === from || (s.domain && s.domain[0] === domain[0] && s.domain[1] === domain[1])) continue;
      s.setDomain(domain[0], domain[1]);
    }
    if (!same || this.charts.some((c) => !c.svg)) this.drawCharts();
  }

  private drawCharts(): void {
    for (const c of this.charts) {
      c.svg?.remove();
      c.svg = lineChart(c.host, c.series, { ...c.options, domain: this.domain, width: this.width, left: GUTTER, right: 0 });
    }
  }

  destroy(): void {
    this.resize?.disconnect();
    for (const s of this.streams) s.destroy();
    this.root.remove();
  }
}

/** The page of ``visualize(..., filename=...)``: the plots under a heading. */
export function renderProfilerPage(root: HTMLElement, data: ProfilerPlotsData): ProfilerPlotsView {
  // times since the epoch give a date; a monotonic clock's (dask's records) do not
  const started = data.origin > 1e9 ? `Started ${new Date(data.origin * 1000).toISOString().replace('T', ' ').slice(0, 19)} UTC · ` : '';
  const note = `${started}${formatSeconds(data.duration)} · wheel: zoom · drag: pan · double-click: fit`;
  root.append(h('header', { class: 'kc-report-header' }, h('h1', { text: data.title })), h('p', { class: 'kc-note', text: note }));
  return new ProfilerPlotsView(root, data);
}
