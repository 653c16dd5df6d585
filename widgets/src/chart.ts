// Horizontal bars, one row per label, stacked by activity: every panel of the
// fine metrics view is one of these, drawn with d3 into an SVG.
import { scaleBand, scaleLinear } from 'd3-scale';
import { select } from 'd3-selection';
import type { BarRow } from './aggregate';
import { activityColor } from './colors';
import type { Tooltip } from './dom';
import { formatPercent, formatValue } from './format';

export interface ChartOptions {
  unit: string;
  tooltip: Tooltip;
  width?: number;
  labelWidth?: number;
  rowHeight?: number;
  maxLabel?: number;
}

const SVG = 'http://www.w3.org/2000/svg';

/** The narrowest the bars draw (a narrower host scrolls). */
export const MIN_WIDTH = 200;

export function truncate(label: string, n: number): string {
  return label.length <= n ? label : `${label.slice(0, n - 1)}…`;
}

export function drawBars(host: HTMLElement, rows: BarRow[], opts: ChartOptions): void {
  const width = opts.width ?? Math.max(host.clientWidth || 0, MIN_WIDTH);
  // a narrow panel gives the labels less room, not the bars
  const labelWidth = Math.min(opts.labelWidth ?? 130, Math.round(width * 0.32));
  const valueWidth = 64;
  const rowHeight = opts.rowHeight ?? 20;
  host.replaceChildren();
  if (rows.length === 0) {
    host.append(Object.assign(document.createElement('div'), { className: 'kc-empty', textContent: 'No data' }));
    return;
  }
  const height = rows.length * rowHeight + 4;
  const svg = select(host)
    .append(() => document.createElementNS(SVG, 'svg'))
    .attr('class', 'kc-chart')
    .attr('width', width)
    .attr('height', height)
    .attr('viewBox', `0 0 ${width} ${height}`);
  const y = scaleBand<string>()
    .domain(rows.map((r) => r.label))
    .range([2, height - 2])
    .paddingInner(0.2);
  const max = Math.max(...rows.map((r) => r.total), 0);
  const x = scaleLinear()
    .domain([0, max > 0 ? max : 1])
    .range([0, Math.max(width - labelWidth - valueWidth, 40)]);

  const row = svg
    .selectAll('g.kc-row')
    .data(rows, (d) => (d as BarRow).label)
    .join('g')
    .attr('class', 'kc-row')
    .attr('data-label', (d) => d.label)
    .attr('transform', (d) => `translate(0,${y(d.label) ?? 0})`);

  row
    .append('text')
    .attr('class', 'kc-label')
    .attr('x', labelWidth - 6)
    .attr('y', y.bandwidth() / 2)
    .attr('dy', '0.35em')
    .attr('text-anchor', 'end')
    .text((d) => truncate(d.label, opts.maxLabel ?? 20))
    .append('title')
    .text((d) => d.label);

  row
    .selectAll('rect.kc-bar')
    .data((d) => {
      let offset = 0;
      return d.segments.map((s) => {
        const out = { row: d, ...s, offset };
        offset += s.value;
        return out;
      });
    })
    .join('rect')
    .attr('class', 'kc-bar')
    .attr('data-activity', (d) => d.activity)
    .attr('data-value', (d) => String(d.value))
    .attr('x', (d) => labelWidth + x(d.offset))
    .attr('y', 0)
    .attr('width', (d) => Math.max(x(d.offset + d.value) - x(d.offset), 0.5))
    .attr('height', y.bandwidth())
    .attr('fill', (d) => activityColor(d.activity))
    .on('mousemove', (event: MouseEvent, d) => {
      const share = d.row.total > 0 ? d.value / d.row.total : 0;
      const what = d.row.label === d.activity ? d.activity : `${d.row.label} · ${d.activity}`;
      opts.tooltip.show(
        `${what}: ${formatValue(d.value, opts.unit)} (${formatPercent(share)} of ${formatValue(d.row.total, opts.unit)})`,
        event,
      );
    })
    .on('mouseleave', () => opts.tooltip.hide());

  row
    .append('text')
    .attr('class', 'kc-value')
    .attr('x', (d) => labelWidth + x(d.total) + 4)
    .attr('y', y.bandwidth() / 2)
    .attr('dy', '0.35em')
    .text((d) => formatValue(d.total, opts.unit));
}
