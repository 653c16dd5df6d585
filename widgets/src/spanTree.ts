// Spans as a collapsible tree: each row shows the span's duration, its tasks by
// state and how far along it is. Choosing a row selects that span (and its
// children), which a linked fine metrics view uses as its filter.
import { h } from './dom';
import { formatBytes, formatSeconds } from './format';
import type { Store } from './store';
import type { SpanRecord } from './types';

export interface SpanTreeOptions {
  selected?: string;
  onSelect?: (spanId: string) => void;
}

export interface TaskSummary {
  done: number;
  running: number;
  waiting: number;
  erred: number;
  total: number;
}

export function summarize(states: Record<string, number>): TaskSummary {
  const n = (k: string) => states[k] ?? 0;
  const done = n('memory') + n('forgotten');
  const running = n('processing');
  const waiting = n('waiting') + n('queued') + n('no-worker') + n('released');
  const erred = n('erred');
  return { done, running, waiting, erred, total: done + running + waiting + erred };
}

/** Seconds from a span's first submission to its last task's end (or now, while it
 * runs): the time a user waited, unlike ``duration``, which sums every thread's. */
export function wallSeconds(span: SpanRecord): number {
  const from = span.enqueued || span.start;
  return from && span.stop ? Math.max(0, span.stop - from) : 0;
}

export function childrenOf(spans: Map<string, SpanRecord>): Map<string | null, string[]> {
  const out = new Map<string | null, string[]>();
  for (const [id, s] of spans) {
    const parent = s.parent !== null && spans.has(s.parent) ? s.parent : null;
    const list = out.get(parent) ?? [];
    list.push(id);
    out.set(parent, list);
  }
  for (const list of out.values()) {
    list.sort((a, b) => (spans.get(a) as SpanRecord).enqueued - (spans.get(b) as SpanRecord).enqueued);
  }
  return out;
}

export class SpanTreeView {
  readonly root: HTMLDivElement;
  selected: string;
  collapsed = new Set<string>();
  private body: HTMLDivElement;
  private unsubscribe: () => void;

  constructor(
    host: HTMLElement,
    private store: Store,
    public options: SpanTreeOptions = {},
  ) {
    this.selected = options.selected ?? '';
    this.body = h('div', { class: 'kc-tree', role: 'tree' });
    this.root = h('div', { class: 'kc-view kc-span-tree' }, h('div', { class: 'kc-title', text: 'Spans' }), this.body);
    host.append(this.root);
    this.unsubscribe = store.subscribe(() => this.render());
    this.render();
  }

  select(id: string): void {
    this.selected = id;
    this.render();
  }

  toggle(id: string): void {
    if (this.collapsed.has(id)) this.collapsed.delete(id);
    else this.collapsed.add(id);
    this.render();
  }

  render(): void {
    const spans = this.store.spans.records;
    const children = childrenOf(spans);
    const rows: HTMLElement[] = [];
    const walk = (id: string, depth: number) => {
      const span = spans.get(id) as SpanRecord;
      const kids = children.get(id) ?? [];
      rows.push(this.row(id, span, depth, kids.length > 0));
      if (!this.collapsed.has(id)) for (const k of kids) walk(k, depth + 1);
    };
    for (const id of children.get(null) ?? []) walk(id, 0);
    if (rows.length === 0) rows.push(h('div', { class: 'kc-empty', text: 'No spans yet' }));
    this.body.replaceChildren(...rows);
  }

  private row(id: string, span: SpanRecord, depth: number, hasChildren: boolean): HTMLElement {
    const t = summarize(span.states);
    const caret = h('button', {
      class: 'kc-caret',
      'aria-label': this.collapsed.has(id) ? 'expand' : 'collapse',
      text: hasChildren ? (this.collapsed.has(id) ? '▸' : '▾') : '',
    });
    if (hasChildren) {
      caret.addEventListener('click', (e) => {
        e.stopPropagation();
        this.toggle(id);
      });
    } else caret.disabled = true;
    const fraction = t.total ? (t.done + t.erred) / t.total : 0;
    const bar = h(
      'div',
      { class: 'kc-progress', title: `${t.done} done, ${t.running} running, ${t.waiting} waiting, ${t.erred} erred` },
      h('div', { class: 'kc-progress-done', style: `width:${(100 * t.done) / Math.max(t.total, 1)}%` }),
      h('div', { class: 'kc-progress-erred', style: `width:${(100 * t.erred) / Math.max(t.total, 1)}%` }),
    );
    const counts = [`${t.done}/${t.total} tasks`];
    if (t.running) counts.push(`${t.running} running`);
    if (t.erred) counts.push(`${t.erred} erred`);
    const full = span.name.join(' / ');
    const name = span.name[span.name.length - 1] ?? id;
    const wall = wallSeconds(span);
    const row = h(
      'div',
      {
        class: `kc-tree-row${this.selected === id ? ' kc-selected' : ''}${span.done ? ' kc-done' : ''}`,
        role: 'treeitem',
        'data-span': id,
        'data-name': full,
        'aria-selected': String(this.selected === id),
        'aria-level': String(depth + 1),
      },
      // only the name is indented: the numbers keep one column at every depth
      h('span', { class: 'kc-span-label', style: `padding-left:${depth * 14}px` }, caret, h('span', { class: 'kc-span-name', text: name, title: full })),
      h('span', {
        class: 'kc-span-wall',
        text: `wall ${formatSeconds(wall)}`,
        'data-seconds': String(wall),
        title: `Wall time: ${formatSeconds(wall)} from the first task's submission to the last task's end${span.done ? '' : ' (so far)'}`,
      }),
      h('span', {
        class: 'kc-span-task',
        text: `tasks ${formatSeconds(span.duration)}`,
        'data-seconds': String(span.duration),
        title: `Task time: ${formatSeconds(span.duration)} of thread time in this span's tasks (computing, transfers, disk), summed over every thread, so more than the wall time when tasks ran in parallel`,
      }),
      bar,
      h('span', {
        class: 'kc-span-counts',
        text: counts.join(' · '),
        title: `${full}: ${counts.join(', ')}; ${formatBytes(span.nbytes)} in memory at most; ${Math.round(fraction * 100)}% done`,
      }),
    );
    row.addEventListener('click', () => {
      const next = this.selected === id ? '' : id;
      this.select(next);
      this.options.onSelect?.(next);
    });
    return row;
  }

  destroy(): void {
    this.unsubscribe();
    this.root.remove();
  }
}
