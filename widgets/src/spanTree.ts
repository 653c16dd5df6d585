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
    const name = span.name[span.name.length - 1] ?? id;
    const row = h(
      'div',
      {
        class: `kc-tree-row${this.selected === id ? ' kc-selected' : ''}${span.done ? ' kc-done' : ''}`,
        role: 'treeitem',
        'data-span': id,
        'data-name': span.name.join(' / '),
        'aria-selected': String(this.selected === id),
        style: `padding-left:${depth * 16}px`,
        title: `${span.name.join(' / ')} — ${formatBytes(span.nbytes)} in memory at most; ${Math.round(fraction * 100)}% done`,
      },
      caret,
      h('span', { class: 'kc-span-name', text: name }),
      h('span', { class: 'kc-span-duration', text: formatSeconds(span.duration) }),
      bar,
      h('span', { class: 'kc-span-counts', text: counts.join(' · ') }),
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
