// A span explained: its critical path against its wall time (split into compute,
// transfer, queued and scheduler time), its idle by reason, and the findings, most
// costly first (kernel_cluster/jupyter/explain.py answers; diagnostics/queries/
// findings.py writes them). Shown under the span tree (a lab panel, the dashboard)
// for the span chosen there; the report shows its block's findings the same way.
import { activityColor, IDLE_ACTIVITIES } from './colors';
import { h } from './dom';
import type { Explanation, FindingsData } from './explanations';
import { formatSeconds } from './format';
import type { Store } from './store';

/** The path's parts, in the order they happen to a task, and their colours. */
export const PATH_PARTS: [string, string, string][] = [
  ['scheduler', '#8e6cc4', 'on the scheduler'],
  ['queued', '#c9ccd1', "in the worker's queue"],
  ['transfer', '#d62728', 'fetching inputs'],
  ['compute', '#3b7dd8', 'computing'],
];

/** Findings as a list: title, evidence, what to try (most costly first, as sent). */
export function findingsView(root: HTMLElement, section: FindingsData | null | undefined): void {
  if (!section) {
    root.append(h('p', { class: 'kc-empty', text: 'Not evaluated.' }));
    return;
  }
  if (!section.found.length) root.append(h('p', { class: 'kc-empty', text: 'Nothing to report.' }));
  else {
    const list = h('ol', { class: 'kc-findings' });
    for (const f of section.found) {
      list.append(
        h('li', { 'data-rule': f.rule },
          h('strong', { text: f.title }),
          h('div', { class: 'kc-note', text: `evidence: ${f.evidence}` }),
          h('div', { text: `try: ${f.advice}` })),
      );
    }
    root.append(list);
  }
  const unchecked = Object.entries(section.unchecked);
  if (unchecked.length) {
    root.append(h('p', { class: 'kc-note', text: `Not checked: ${unchecked.map(([r, why]) => `${r} (${why})`).join('; ')}` }));
  }
}

/** One stacked bar of named seconds, with a legend entry per part. */
export function stackedBar(parts: [string, number, string, string?][], total: number, cls: string): HTMLElement {
  const bar = h('div', { class: 'kc-stack' });
  const legend = h('div', { class: 'kc-legend' });
  for (const [name, seconds, color, label] of parts) {
    if (!(seconds > 0)) continue;
    const pct = total > 0 ? (100 * seconds) / total : 0;
    bar.append(h('span', { class: 'kc-stack-part', 'data-part': name, style: `width:${pct}%;background:${color}`, title: `${label ?? name}: ${formatSeconds(seconds)} (${Math.round(pct)}%)` }));
    legend.append(
      h('span', { class: 'kc-legend-item kc-static', 'data-label': name },
        h('span', { class: 'kc-swatch', style: `background:${color}` }), `${name} ${formatSeconds(seconds)}`),
    );
  }
  return h('div', { class: cls }, bar, legend);
}

/** "path 3.2 s of 4.0 s" */
export function pathText(length: number, wall: number): string {
  return `path ${formatSeconds(length)} of ${formatSeconds(wall)}`;
}

export class ExplainView {
  readonly root: HTMLDivElement;
  private body: HTMLDivElement;
  private unsubscribe: () => void;
  private drawn: unknown = undefined;
  private drawnFocus = '';

  constructor(
    host: HTMLElement,
    private store: Store,
  ) {
    this.body = h('div', { class: 'kc-explain-body' });
    this.root = h('div', { class: 'kc-view kc-explain' }, h('div', { class: 'kc-title', text: 'Why this span took its time' }), this.body);
    host.append(this.root);
    const a = store.explain.subscribe(() => this.render());
    const b = store.subscribe(() => this.render());
    this.unsubscribe = () => {
      a();
      b();
    };
    this.render();
  }

  render(): void {
    const ex = this.store.explain;
    const span = ex.focus;
    const record = span ? this.store.spans.records.get(span) : undefined;
    ex.want(span, record);
    const answer = span ? ex.answers.get(span) : undefined;
    if (answer === this.drawn && span === this.drawnFocus && this.body.childElementCount) return;
    this.drawn = answer;
    this.drawnFocus = span;
    this.root.dataset.span = span;
    this.root.dataset.state = !span ? 'none' : answer ? (answer.error ? 'error' : 'ready') : 'asking';
    if (!span) {
      this.body.replaceChildren(h('p', { class: 'kc-empty', text: 'Choose a span in the tree to see its critical path and what to try.' }));
      return;
    }
    if (!answer) {
      this.body.replaceChildren(h('p', { class: 'kc-empty', text: ex.send ? 'Explaining…' : 'Not available on this page.' }));
      return;
    }
    this.body.replaceChildren(...explanation(answer));
  }

  destroy(): void {
    this.unsubscribe();
    this.root.remove();
  }
}

/** The parts of one answer, as elements. */
export function explanation(answer: Explanation): HTMLElement[] {
  if (answer.error) return [h('p', { class: 'kc-error', text: answer.error })];
  const out: HTMLElement[] = [];
  const name = (answer.name ?? []).join(' / ');
  const path = answer.path;
  const section = (title: string) => h('h4', { text: title });
  out.push(section(`Critical path${name ? ` of ${name}` : ''}${answer.done ? '' : ' (so far)'}`));
  if (path) {
    const parts = PATH_PARTS.map(([p, color, label]) => [p, path.totals[p] ?? 0, color, label] as [string, number, string, string]);
    out.push(
      h('p', {
        class: 'kc-path-summary',
        text: `${pathText(path.length, path.wall)} wall (${Math.round(path.covered * 100)}%), ${path.ntasks} tasks` +
          (path.steps.length ? `: from ${path.steps[0].key} to ${path.steps[path.steps.length - 1].key}` : ''),
      }),
      stackedBar(parts, Math.max(path.length, path.wall), 'kc-path-parts'),
    );
  } else out.push(h('p', { class: 'kc-empty', text: answer.path_error ?? 'No critical path.' }));
  const idle = answer.idle ?? {};
  const idleTotal = Object.values(idle).reduce((a, b) => a + b, 0);
  out.push(section('Idle, by why'));
  if (idleTotal > 0) {
    const known = IDLE_ACTIVITIES as readonly string[];
    const names = [...known.filter((n) => n in idle), ...Object.keys(idle).filter((n) => !known.includes(n)).sort()];
    out.push(stackedBar(names.map((n) => [n, idle[n], activityColor(n)] as [string, number, string]), idleTotal, 'kc-idle-parts'));
  } else out.push(h('p', { class: 'kc-empty', text: 'No idle time filed under this span.' }));
  out.push(section('Findings'));
  const findings = h('div', { class: 'kc-findings-box' });
  if (answer.findings_error) findings.append(h('p', { class: 'kc-error', text: answer.findings_error }));
  else findingsView(findings, answer.findings);
  out.push(findings);
  return out;
}
