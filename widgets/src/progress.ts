// A progress bar per task prefix: done, erred, running and waiting tasks.
import { h } from './dom';
import type { Store } from './store';
import { summarize } from './spanTree';

export class ProgressView {
  readonly root: HTMLDivElement;
  private body: HTMLDivElement;
  private unsubscribe: () => void;

  constructor(
    host: HTMLElement,
    private store: Store,
  ) {
    this.body = h('div', { class: 'kc-progress-list' });
    this.root = h('div', { class: 'kc-view kc-progress-view' }, h('div', { class: 'kc-title', text: 'Progress' }), this.body);
    host.append(this.root);
    this.unsubscribe = store.subscribe(() => this.render());
    this.render();
  }

  render(): void {
    const rows: HTMLElement[] = [];
    for (const [prefix, states] of this.store.progress.records) {
      const t = summarize(states);
      if (t.total === 0) continue;
      const pct = (n: number) => `${(100 * n) / t.total}%`;
      rows.push(
        h(
          'div',
          { class: 'kc-progress-row', 'data-prefix': prefix },
          h('span', { class: 'kc-prefix', text: prefix, title: prefix }),
          h(
            'div',
            { class: 'kc-progress', title: `${t.done} done, ${t.running} running, ${t.waiting} waiting, ${t.erred} erred` },
            h('div', { class: 'kc-progress-done', style: `width:${pct(t.done)}` }),
            h('div', { class: 'kc-progress-erred', style: `width:${pct(t.erred)}` }),
            h('div', { class: 'kc-progress-running', style: `width:${pct(t.running)}` }),
          ),
          h('span', { class: 'kc-progress-count', text: `${t.done + t.erred} / ${t.total}` }),
        ),
      );
    }
    if (rows.length === 0) rows.push(h('div', { class: 'kc-empty', text: 'No tasks yet' }));
    this.body.replaceChildren(...rows);
  }

  destroy(): void {
    this.unsubscribe();
    this.root.remove();
  }
}
