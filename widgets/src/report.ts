// The self-contained performance report: kernel_cluster.diagnostics.pages.report writes
// the recorded data into the page as JSON (binary buffers in base64) next to this
// script, which draws the same views as the notebook widgets, offline.
import { CompareView, type CompareData } from './compare';
import { h } from './dom';
import { formatBytes, formatSeconds } from './format';
import { mount, type Binding } from './mount';
import { FlameGraphView } from './flameGraph';
import { FlatProfile } from './profileData';
import { staticProfileSource, type StaticProfiles } from './profileSources';
import type { ProfilerPlotsData } from './profilerLayout';
import { ProfilerPlotsView, renderProfilerPage } from './profilerPlots';
import { memoryView, transferView, type MemorySection, type TransferSection } from './reportCharts';
import { Store } from './store';
import { TaskStreamView } from './taskStream';
import type { FlatProfileHeader, Part, Timeline } from './types';

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
  const compared = data.sections.compare as CompareData | undefined;
  if (compared) facts.push(['Compared with', `${compared.a.label}: ${compared.verdict}`]);
  const table = h('table', { class: 'kc-summary' });
  for (const [k, v] of facts) table.append(h('tr', {}, h('th', { text: k }), h('td', { text: v })));
  const views = h('section', { class: 'kc-report-section', id: 'fine-metrics' });
  const compare = h('section', { class: 'kc-report-section', id: 'compare' }, h('h2', { text: 'Compared with an earlier run' }));
  const stream = h('section', { class: 'kc-report-section', id: 'task-stream' }, h('h2', { text: 'Task stream' }));
  const profile = h('section', { class: 'kc-report-section', id: 'profile' }, h('h2', { text: 'Flame graph (statistical profile)' }));
  const memory = h('section', { class: 'kc-report-section', id: 'memory' }, h('h2', { text: 'Memory over time' }));
  const bandwidth = h('section', { class: 'kc-report-section', id: 'bandwidth' }, h('h2', { text: 'Transfers between workers' }));
  const findings = h('section', { class: 'kc-report-section', id: 'findings' }, h('h2', { text: 'Findings' }));
  findingsView(findings, data.sections.findings as FindingsSection | undefined);
  root.append(
    h('header', { class: 'kc-report-header' }, h('h1', { text: data.title }), theme),
    h('section', { class: 'kc-report-section', id: 'summary' }, h('h2', { text: 'Summary' }), table),
    findings,
    ...(compared ? [compare] : []),
    h('h2', { text: 'Fine performance metrics and spans' }),
    views,
    stream,
    profile,
    h('section', { class: 'kc-report-section', id: 'code' }, h('h2', { text: 'Code' }),
      h('div', { class: 'kc-code-file', text: s.filename ?? '' }), h('pre', { class: 'kc-code', text: s.code })),
    memory,
    bandwidth,
  );
  mount('dashboard', views, store, localBinding({ unit: 'seconds', span_filter: '', selected: '' }));
  if (compared) new CompareView(compare, localBinding({ data: compared }));
  if (store.tasks.ntasks) new TaskStreamView(stream, store);
  else stream.append(h('p', { class: 'kc-empty', text: 'No task ran in this block.' }));
  const profiles = data.sections.profile as EmbeddedProfiles | undefined;
  if (profiles) new FlameGraphView(profile, staticProfileSource(decodeProfiles(profiles)));
  else profile.append(h('p', { class: 'kc-empty', text: 'No samples: the block was too short, or the profiler is off.' }));
  const mem = data.sections.memory as MemorySection | undefined;
  if (mem && mem.time.length) memoryView(memory, mem);
  else memory.append(h('p', { class: 'kc-empty', text: 'Not sampled.' }));
  const moved = data.sections.bandwidth as TransferSection | undefined;
  if (moved && moved.bytes.length) transferView(bandwidth, moved);
  else bandwidth.append(h('p', { class: 'kc-empty', text: 'No data moved between workers in this block.' }));
}

/** What the block's numbers say to try (kernel_cluster/diagnostics/queries/findings.py as_data). */
export interface FindingsSection {
  found: { rule: string; title: string; cost: number; evidence: string; advice: string }[];
  unchecked: Record<string, string>;
}

export function findingsView(root: HTMLElement, section: FindingsSection | undefined): void {
  if (!section) {
    root.append(h('p', { class: 'kc-empty', text: 'Not evaluated.' }));
    return;
  }
  if (!section.found.length) root.append(h('p', { class: 'kc-empty', text: 'Nothing to report.' }));
  else {
    const list = h('ol', { class: 'kc-findings' });
    for (const f of section.found) {
      list.append(h('li', { 'data-rule': f.rule },
        h('strong', { text: f.title }),
        h('div', { class: 'kc-note', text: `evidence: ${f.evidence}` }),
        h('div', { text: `try: ${f.advice}` })));
    }
    root.append(list);
  }
  const unchecked = Object.entries(section.unchecked);
  if (unchecked.length) {
    root.append(h('p', { class: 'kc-note', text: `Not checked: ${unchecked.map(([r, why]) => `${r} (${why})`).join('; ')}` }));
  }
}

/** Profiles as a page carries them (kernel_cluster/diagnostics/profile_feed.py static_profiles). */
export interface EmbeddedProfiles {
  trees: Record<string, { header: FlatProfileHeader; buffers: string[] }>;
  timeline: Timeline;
  interval: number;
}

export function decodeProfiles(data: EmbeddedProfiles): StaticProfiles {
  const trees: Record<string, FlatProfile> = {};
  for (const [prefix, t] of Object.entries(data.trees)) trees[prefix] = FlatProfile.fromMessage(t.header, t.buffers.map(decodeBase64));
  return { trees, timeline: data.timeline, interval: data.interval };
}

export interface FlamePageData {
  page: 'flamegraph';
  title: string;
  summary: string;
  profiles: EmbeddedProfiles;
}

/** The page of ``client.profile(filename=...)``: one flame graph. */
export function renderFlamePage(root: HTMLElement, data: FlamePageData): FlameGraphView {
  root.append(h('header', { class: 'kc-report-header' }, h('h1', { text: data.title })), h('p', { class: 'kc-note', text: data.summary }));
  return new FlameGraphView(root, staticProfileSource(decodeProfiles(data.profiles)));
}

function main(): void {
  const node = document.getElementById('kc-report-data');
  const root = document.getElementById('kc-report');
  if (!node || !root) return;
  const data = JSON.parse(node.textContent ?? '{}');
  if (data.page === 'flamegraph') renderFlamePage(root, data as FlamePageData);
  else if (data.page === 'profiler-plots') renderProfilerPage(root, data as ProfilerPlotsData);
  else renderReport(root, data as ReportData);
  root.dataset.ready = 'true';
}

/** The library for scripts on a report's page (and the browser tests' benchmarks). */
export const api = { Store, TaskStreamView, FlameGraphView, FlatProfile, staticProfileSource, renderReport, renderFlamePage, ProfilerPlotsView, renderProfilerPage };

if (typeof window !== 'undefined') (window as unknown as { kernelCluster: typeof api }).kernelCluster = api;

if (typeof document !== 'undefined') {
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', main);
  else main();
}
