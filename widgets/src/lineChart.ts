// A small SVG line chart (a few series of up to some thousand points): memory
// over time and bandwidth over time in the report. Hovering shows every series'
// value at the nearest time.
import { tickStep } from 'd3-array';
import { scaleLinear } from 'd3-scale';
import { formatOffset } from './canvas';
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
  const left = 64;
  const bottom = 18;
  const svg = el('svg', { class: 'kc-chart kc-line-chart', width, height, viewBox: `0 0 ${width} ${height}` });
  const xs = series.flatMap((s) => s.x);
  const ys = series.flatMap((s) => s.y);
  const x0 = Math.min(0, ...xs);
  const x1 = Math.max(x0 + 1e-3, ...xs);
  const y1 = Math.max(1, ...ys);
  const x = scaleLinear().domain([x0, x1]).range([left, width - 8]);
  const y = scaleLinear().domain([0, y1 * 1.05]).range([height - bottom, 6]);
  for (const t of y.ticks(4)) {
    svg.append(el('line', { x1: left, x2: width - 8, y1: y(t), y2: y(t), class: 'kc-grid' }));
    const label = el('text', { x: left - 4, y: y(t), dy: '0.35em', 'text-anchor': 'end', class: 'kc-axis' });
    label.textContent = opts.format(t);
    svg.append(label);
  }
  const count = Math.max(2, Math.floor((width - left) / 90));
  const marks = x.ticks(count);
  const step = tickStep(x0, x1, count);
  for (const t of marks) {
    const label = el('text', { x: x(t), y: height - 4, 'text-anchor': 'middle', class: 'kc-axis' });
    label.textContent = formatOffset(t, step);
    svg.append(label);
  }
  series.forEach((s, k) => {
    if (!s.x.length) return;
    const points = s.x.map((t, i) => `${x(t).toFixed(1)},${y(s.y[i]).toFixed(1)}`);
    if (opts.area && k === 0) {
      const base = y(0).toFixed(1);
      svg.append(el('path', { d: `M${x(s.x[0]).toFixed(1)},${base}L${points.join('L')}L${x(s.x[s.x.length - 1]).toFixed(1)},${base}Z`, fill: s.color, 'fill-opacity': 0.2, stroke: 'none' }));
    }
    svg.append(el('path', { d: `M${points.join('L')}`, fill: 'none', stroke: s.color, 'stroke-width': 1.5, 'data-series': s.name }));
  });
  const cursor = el('line', { y1: 6, y2: height - bottom, class: 'kc-cursor', visibility: 'hidden' });
  svg.append(cursor);
  svg.addEventListener('mousemove', (e: MouseEvent) => {
    const box = svg.getBoundingClientRect();
    const t = x.invert(e.clientX - box.left);
    const lines = [formatOffset(t, step / 10)];
    for (const s of series) {
      if (!s.x.length) continue;
      let best = 0;
      for (let i = 1; i < s.x.length; i++) if (Math.abs(s.x[i] - t) < Math.abs(s.x[best] - t)) best = i;
      lines.push(`${s.name}: ${opts.format(s.y[best])}`);
    }
    cursor.setAttribute('x1', String(x(t)));
    cursor.setAttribute('x2', String(x(t)));
    cursor.setAttribute('visibility', 'visible');
    opts.tooltip.show(lines.join('\n'), e);
  });
  svg.addEventListener('mouseleave', () => {
    cursor.setAttribute('visibility', 'hidden');
    opts.tooltip.hide();
  });
  host.append(svg);
  return svg;
}
