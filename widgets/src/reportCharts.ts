// The report's memory and transfer sections (kernel_cluster/diagnostics/pages/report.py
// memory_section and transfers): memory over time, bandwidth over time, and the
// transfers by pair of workers.
import { h, Tooltip } from './dom';
import { byteTicks, formatBytes, formatSeconds } from './format';
import { lineChart } from './lineChart';
import { shortWorker } from './taskStreamLayout';

export interface MemorySection {
  time: number[];
  process: number[];
  managed: number[];
  spilled: number[];
}

export interface TransferSection {
  workers: string[];
  to: number[];
  from: number[];
  start: number[];
  stop: number[];
  bytes: number[];
  compressed: number[];
  /** The block's start and end. */
  window?: [number, number];
}

export interface MemoryViewOptions {
  /** A heading (the lab panel's; the report has its section's). */
  title?: string;
  /** Chart width and height in pixels (default: the host's width, 160 high). */
  width?: number;
  height?: number;
  /** The workers' memory limit in total, drawn as a line (0 or absent: none). */
  limit?: number;
}

export function memoryView(host: HTMLElement, m: MemorySection, opts: MemoryViewOptions = {}): HTMLElement {
  const root = h('div', { class: 'kc-view kc-memory' });
  host.append(root);
  const tooltip = new Tooltip(root);
  const t0 = m.time[0];
  const x = m.time.map((t) => t - t0);
  const series = [
    { name: 'process', color: '#3b7dd8', x, y: m.process },
    { name: 'managed', color: '#2e9e4f', x, y: m.managed },
  ];
  if (m.spilled.some((v) => v > 0)) series.push({ name: 'spilled', color: '#ff8c1a', x, y: m.spilled });
  const peak = Math.max(...m.process);
  if (opts.title) root.append(h('div', { class: 'kc-title', text: opts.title }));
  const limit = opts.limit && opts.limit > 0 ? opts.limit : 0;
  const facts = `${m.time.length} samples; peak process memory ${formatBytes(peak)}, peak managed ${formatBytes(Math.max(...m.managed))}`;
  root.append(h('div', { class: 'kc-note', text: limit ? `${facts}; limit ${formatBytes(limit)}` : facts }), legend(series));
  lineChart(root, series, {
    format: formatBytes,
    yTicks: (max) => byteTicks(max),
    tooltip,
    area: true,
    width: opts.width,
    height: opts.height,
    rules: limit ? [{ value: limit, label: `limit ${formatBytes(limit)}`, color: '#d1242f' }] : [],
  });
  return root;
}

/** Bytes per second in ``bins`` bins, each transfer's bytes spread over its duration. */
export function bandwidthOverTime(t: TransferSection, bins = 120): { x: number[]; y: number[]; origin: number } {
  const origin = Math.min(...t.start, t.window ? t.window[0] : Infinity);
  const end = Math.max(...t.stop, t.window ? t.window[1] : -Infinity, origin + 1e-3);
  const width = (end - origin) / bins;
  const y = new Array<number>(bins).fill(0);
  for (let i = 0; i < t.start.length; i++) {
    const a = (t.start[i] - origin) / width;
    const b = Math.max((t.stop[i] - origin) / width, a);
    const perBin = t.bytes[i] / Math.max(b - a, 1e-9);
    const first = Math.min(bins - 1, Math.max(0, Math.floor(a)));
    const last = Math.min(bins, Math.max(first + 1, Math.ceil(b)));
    for (let k = first; k < last; k++) {
      const overlap = Math.min(b, k + 1) - Math.max(a, k);
      y[k] += b > a ? perBin * Math.max(overlap, 0) : t.bytes[i];
    }
  }
  return { x: y.map((_, k) => (k + 0.5) * width), y: y.map((v) => v / width), origin };
}

export function transferView(host: HTMLElement, t: TransferSection): HTMLElement {
  const root = h('div', { class: 'kc-view kc-bandwidth' });
  host.append(root);
  const tooltip = new Tooltip(root);
  const total = t.bytes.reduce((a, b) => a + b, 0);
  const compressed = t.compressed.reduce((a, b) => a + b, 0);
  const over = bandwidthOverTime(t);
  root.append(
    h('div', {
      class: 'kc-note',
      text: `${t.bytes.length} transfers, ${formatBytes(total)} (${formatBytes(compressed)} on the wire)`,
    }),
  );
  lineChart(root, [{ name: 'bandwidth', color: '#d62728', x: over.x, y: over.y }], {
    format: (v) => `${formatBytes(v)}/s`,
    yTicks: (max) => {
      const t = byteTicks(max);
      return { ...t, labels: t.labels.map((l) => (l === '0' ? l : `${l}/s`)) };
    },
    tooltip,
    area: true,
    height: 140,
  });
  // by pair: who sent how much to whom, and how fast
  const pairs = new Map<string, { from: number; to: number; n: number; bytes: number; seconds: number }>();
  for (let i = 0; i < t.bytes.length; i++) {
    const key = `${t.from[i]}>${t.to[i]}`;
    const p = pairs.get(key) ?? { from: t.from[i], to: t.to[i], n: 0, bytes: 0, seconds: 0 };
    p.n += 1;
    p.bytes += t.bytes[i];
    p.seconds += Math.max(t.stop[i] - t.start[i], 0);
    pairs.set(key, p);
  }
  const rows = [...pairs.values()].sort((a, b) => b.bytes - a.bytes).slice(0, 50);
  const table = h('table', { class: 'kc-table kc-pairs' });
  table.append(h('tr', {}, ...['from', 'to', 'transfers', 'bytes', 'time', 'bandwidth'].map((c) => h('th', { text: c }))));
  for (const p of rows) {
    table.append(
      h(
        'tr',
        { 'data-pair': `${shortWorker(t.workers[p.from])}>${shortWorker(t.workers[p.to])}` },
        h('td', { text: shortWorker(t.workers[p.from]), title: t.workers[p.from] }),
        h('td', { text: shortWorker(t.workers[p.to]), title: t.workers[p.to] }),
        h('td', { text: String(p.n) }),
        h('td', { text: formatBytes(p.bytes) }),
        h('td', { text: formatSeconds(p.seconds) }),
        h('td', { text: p.seconds > 0 ? `${formatBytes(p.bytes / p.seconds)}/s` : '–' }),
      ),
    );
  }
  root.append(h('h4', { text: 'By pair of workers' }), table);
  return root;
}

function legend(series: { name: string; color: string }[]): HTMLElement {
  return h(
    'div',
    { class: 'kc-legend' },
    ...series.map((s) => h('span', { class: 'kc-legend-item kc-static' }, h('span', { class: 'kc-swatch', style: `background:${s.color}` }), s.name)),
  );
}
