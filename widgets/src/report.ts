// The self-contained performance report: kernel_cluster.diagnostics.report writes
// the recorded data into the page as JSON (binary buffers in base64) next to this
// script, which draws the same views as the notebook widgets, offline.
import { h } from './dom';
import { formatBytes, formatSeconds } from './format';
import { mount, type Binding } from './mount';
import { Store } from './store';
import type { Part } from './types';

export interface ReportData {
  title: string;
  summary: {
    start: number;
    duration: number;
    tasks: number;
    threads: number;
    workers: number;
    nbytes?: number;
    versions: Record<string, string>;
    code: string;
    filename?: string;
  };
  updates: { parts: Part[]; buffers: string[] }[];
  sections: Record<string, unknown>;
}

export function decodeBase64(text: string): ArrayBuffer {
  const raw = atob(text);
  const out = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
  return out.buffer;
}

export function localBinding(initial: Record<string, unknown> = {}): Binding {
  const values: Record<string, unknown> = { ...initial };
  const listeners = new Map<string, Set<() => void>>();
  return {
    get: (name) => values[name],
    set(change) {
      Object.assign(values, change);
      for (const k of Object.keys(change)) for (const l of listeners.get(k) ?? []) l();
    },
    onChange(names, listener) {
      for (const n of names) {
        if (!listeners.has(n)) listeners.set(n, new Set());
        (listeners.get(n) as Set<() => void>).add(listener);
      }
      return () => names.forEach((n) => listeners.get(n)?.delete(listener));
    },
  };
}

/** Hooks for views whose data APIs are still being built: a section each. */
export const HOOKS: [string, string][] = [
  ['task_stream', 'Task stream'],
  ['profile', 'Flame graph (statistical profile)'],
  ['memory', 'Memory over time'],
  ['bandwidth', 'Transfer bandwidth'],
];

export function renderReport(root: HTMLElement, data: ReportData): void {
  const store = new Store();
  for (const u of data.updates) store.applyUpdate(u.parts, u.buffers.map(decodeBase64));
  const s = data.summary;
  const theme = h('button', { class: 'kc-theme-toggle', text: 'dark / light' });
  theme.addEventListener('click', () => {
    const html = document.documentElement;
    html.dataset.theme = html.dataset.theme === 'dark' ? 'light' : 'dark';
  });
  const facts: [string, string][] = [
    ['Started', new Date(s.start * 1000).toISOString().replace('T', ' ').slice(0, 19) + ' UTC'],
    ['Duration', formatSeconds(s.duration)],
    ['Tasks', String(s.tasks)],
    ['Workers', String(s.workers)],
    ['Threads', String(s.threads)],
  ];
  if (s.nbytes !== undefined) facts.push(['Bytes transferred', formatBytes(s.nbytes)]);
  for (const [k, v] of Object.entries(s.versions)) facts.push([k, v]);
  const table = h('table', { class: 'kc-summary' });
  for (const [k, v] of facts) table.append(h('tr', {}, h('th', { text: k }), h('td', { text: v })));
  const views = h('section', { class: 'kc-report-section', id: 'fine-metrics' });
  const hooks = h('section', { class: 'kc-report-section', id: 'more' });
  for (const [key, title] of HOOKS) {
    const present = data.sections[key];
    hooks.append(
      h(
        'div',
        { class: 'kc-hook', 'data-hook': key },
        h('h3', { text: title }),
        h('p', {
          class: 'kc-empty',
          text: present
            ? `Recorded${Array.isArray(present) ? ` (${present.length} records)` : ''}; drawing it is not built yet.`
            : 'Not recorded in this report.',
        }),
      ),
    );
  }
  root.append(
    h('header', { class: 'kc-report-header' }, h('h1', { text: data.title }), theme),
    h('section', { class: 'kc-report-section', id: 'summary' }, h('h2', { text: 'Summary' }), table),
    h('h2', { text: 'Fine performance metrics and spans' }),
    views,
    h('section', { class: 'kc-report-section', id: 'code' }, h('h2', { text: 'Code' }),
      h('div', { class: 'kc-code-file', text: s.filename ?? '' }), h('pre', { class: 'kc-code', text: s.code })),
    h('h2', { text: 'More views' }),
    hooks,
  );
  mount('dashboard', views, store, localBinding({ unit: 'seconds', span_filter: '', selected: '' }));
}

function main(): void {
  const node = document.getElementById('kc-report-data');
  const root = document.getElementById('kc-report');
  if (!node || !root) return;
  renderReport(root, JSON.parse(node.textContent ?? '{}') as ReportData);
  root.dataset.ready = 'true';
}

if (typeof document !== 'undefined') {
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', main);
  else main();
}
