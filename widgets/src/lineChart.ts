// A small SVG line chart (a few series of up to some thousand points): memory
// over time and bandwidth over time in the report, the profiler plots' resource
// and cache lines. Hovering shows every series' value at the nearest time, or only
// the line nearest the pointer (``nearest``), which names it.
import { scaleLinear } from 'd3-scale';
import { formatOffset, timeTicks } from './canvas';
import type { Tooltip } from './dom';

export interface Series {
  name: string;
  color: string;
  /** Seconds from the chart's origin, ascending. */
  x: number[];
  y: number[];
}

export interface LineChartOptions {
  width?: number;
  height?: number;
  format: (v: number) => string;
  tooltip: Tooltip;
  /** Fill under the first series. */
  area?: boolean;
  /** The time range shown (default: 0, or the first point, to the last point). */
  domain?: [number, number];
  /** Margins left and right of the plot, in pixels (default 64 and 8). */
  left?: number;
  right?: number;
  /** Steps: each value holds until the next point. */
  step?: boolean;
  /** Hover names only the series nearest the pointer (for many lines). */
  nearest?: boolean;
  /** The y axis's ticks for data up to ``max`` (default: d3's, through ``format``):
   * their values, labels, and the top of the axis. */
  yTicks?: (max: number) => { values: number[]; labels: string[]; top: number };
  /** Horizontal lines across the plot (a memory limit), labelled. The axis reaches
   * those up to ``RULE_REACH`` times the data's top; one far above the data (a 23 GiB
   * limit over 60 MiB used) would flatten it, so it is only named, with an arrow. */
  rules?: { value: number; label: string; color: string }[];
}

let clips = 0;

/** How far above the data a rule may be and still set the axis's top. */
export const RULE_REACH = 3;

/** The value of a step line at time ``t``: its last point's at or before ``t`` (0
 * before its first). */
export function stepValue(s: { x: number[]; y: number[] }, t: number): number {
  let lo = 0;
  let hi = s.x.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (s.x[mid] <= t) lo = mid + 1;
    else hi = mid;
  }
  return lo === 0 ? 0 : s.y[lo - 1];
}

/** The value of ``s`` shown at time ``t``: the nearest point's, or a step's. */
function valueAt(s: Series, t: number, step: boolean): number {
  if (step) return stepValue(s, t);
  let best = 0;
  for (let i = 1; i < s.x.length; i++) if (Math.abs(s.x[i] - t) < Math.abs(s.x[best] - t)) best = i;
  return s.y[best];
}

const SVG = 'http://www.w3.org/2000/svg';

function el<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number>): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

export function lineChart(host: HTMLElement, series: Series[], opts: LineChartOptions): SVGSVGElement {
  const width = opts.width ?? Math.max(host.clientWidth || 0, 360);
  const height = opts.height ?? 160;
  const left = opts.left ?? 64;
  const right = opts.right ?? 8;
  const bottom = 18;
  const svg = el('svg', { class: 'kc-chart kc-line-chart', width, height, viewBox: `0 0 ${width} ${height}` });
  const xs = series.flatMap((s) => s.x);
  const ys = series.flatMap((s) => s.y);
  const x0 = opts.domain ? opts.domain[0] : Math.min(0, ...xs);
  const x1 = opts.domain ? Math.max(opts.domain[1], x0 + 1e-6) : Math.max(x0 + 1e-3, ...xs);
  const rules = opts.rules ?? [];
  const ymax = Math.max(0, ...ys);
  svg.dataset.max = String(ymax);
  const near = rules.filter((r) => r.value <= RULE_REACH * Math.max(ymax, 1));
  const far = rules.filter((r) => !near.includes(r));
  const reach = Math.max(1, ymax, ...near.map((r) => r.value));
  let yValues: number[];
  let yLabels: string[];
  let top: number;
  if (opts.yTicks) {
    ({ values: yValues, labels: yLabels, top } = opts.yTicks(reach));
  } else {
    const nice = scaleLinear().domain([0, reach]).nice(4);
    top = nice.domain()[1];
    yValues = nice.ticks(4);
    yLabels = yValues.map(opts.format);
  }
  const x = scaleLinear().domain([x0, x1]).range([left, width - right]);
  const y = scaleLinear().domain([0, top]).range([height - bottom, 8]);
  yValues.forEach((t, i) => {
    svg.append(el('line', { x1: left, x2: width - right, y1: y(t), y2: y(t), class: 'kc-grid' }));
    const label = el('text', { x: left - 4, y: y(t), dy: '0.35em', 'text-anchor': 'end', class: 'kc-axis kc-y', 'data-value': t });
    label.textContent = yLabels[i];
    svg.append(label);
  });
  far.forEach((r, i) => {
    const label = el('text', { x: width - right - 4, y: 10 + 12 * i, 'text-anchor': 'end', class: 'kc-rule-label kc-above', style: `fill:${r.color}` });
    label.textContent = `↑ ${r.label}`;
    svg.append(label);
  });
  for (const r of near) {
    svg.append(el('line', { x1: left, x2: width - right, y1: y(r.value), y2: y(r.value), class: 'kc-rule', stroke: r.color, 'data-rule': r.label }));
    const label = el('text', { x: width - right - 4, y: y(r.value) - 4, 'text-anchor': 'end', class: 'kc-rule-label', style: `fill:${r.color}` });
    label.textContent = r.label;
    svg.append(label);
  }
  const count = Math.max(2, Math.floor((width - left) / 90));
  const { values: marks, step } = timeTicks(x0, x1, count);
  for (const t of marks) {
    const label = el('text', { x: x(t), y: height - 4, 'text-anchor': 'middle', class: 'kc-axis kc-x' });
    label.textContent = formatOffset(t, step);
    svg.append(label);
  }
  // lines outside the time range (zoomed in) stay off the axis labels
  const clip = `kc-clip-${++clips}`;
  const clipPath = el('clipPath', { id: clip });
  clipPath.append(el('rect', { x: left, y: 0, width: Math.max(width - left - right, 1), height }));
  svg.append(clipPath);
  const lines = el('g', { 'clip-path': `url(#${clip})` });
  svg.append(lines);
  series.forEach((s, k) => {
    if (!s.x.length) return;
    const points = s.x.map((t, i) =>
      opts.step && i > 0
        ? `${x(t).toFixed(1)},${y(s.y[i - 1]).toFixed(1)}L${x(t).toFixed(1)},${y(s.y[i]).toFixed(1)}`
        : `${x(t).toFixed(1)},${y(s.y[i]).toFixed(1)}`,
    );
    if (opts.area && k === 0) {
      const base = y(0).toFixed(1);
      lines.append(el('path', { d: `M${x(s.x[0]).toFixed(1)},${base}L${points.join('L')}L${x(s.x[s.x.length - 1]).toFixed(1)},${base}Z`, fill: s.color, 'fill-opacity': 0.2, stroke: 'none' }));
    }
    lines.append(el('path', { d: `M${points.join('L')}`, fill: 'none', stroke: s.color, 'stroke-width': 1.5, 'data-series': s.name }));
  });
  const cursor = el('line', { y1: 6, y2: height - bottom, class: 'kc-cursor', visibility: 'hidden' });
  svg.append(cursor);
  svg.addEventListener('mousemove', (e: MouseEvent) => {
    const box = svg.getBoundingClientRect();
    const t = x.invert(e.clientX - box.left);
    const text = [formatOffset(t, step / 10)];
    const shown = series.filter((s) => s.x.length).map((s) => ({ s, v: valueAt(s, t, !!opts.step) }));
    if (opts.nearest && shown.length) {
      const py = e.clientY - box.top;
      const best = shown.reduce((a, b) => (Math.abs(y(b.v) - py) < Math.abs(y(a.v) - py) ? b : a));
      text.push(`${best.s.name}: ${opts.format(best.v)}`);
    } else for (const { s, v } of shown) text.push(`${s.name}: ${opts.format(v)}`);
    cursor.setAttribute('x1', String(x(t)));
    cursor.setAttribute('x2', String(x(t)));
    cursor.setAttribute('visibility', 'visible');
    opts.tooltip.show(text.join('\n'), e);
  });
  svg.addEventListener('mouseleave', () => {
    cursor.setAttribute('visibility', 'hidden');
    opts.tooltip.hide();
  });
  host.append(svg);
  return svg;
}
