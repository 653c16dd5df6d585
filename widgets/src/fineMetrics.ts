// The fine metrics view: task execution by function and by activity, send and
// receive data by activity; unit, span, function and activity filters. All the
// filtering happens here, on the rows the store holds.
import { computePanels, type Filters, type Panels } from './aggregate';
import { drawBars } from './chart';
import { activityColor } from './colors';
import { FrameScheduler } from './canvas';
import { h, Tooltip } from './dom';
import type { Store } from './store';

export interface FineMetricsOptions {
  filters?: Partial<Filters>;
  /** Called with what the user changed, to persist it (e.g. in the widget model). */
  onChange?: (change: Partial<Filters>) => void;
  /** Bar area width in pixels; by default the element's width. */
  width?: number;
}

export const PANELS: [keyof Panels, string, string][] = [
  ['byFunction', 'by-function', 'Task execution, by function'],
  ['byActivity', 'by-activity', 'Task execution, by activity'],
  ['send', 'send', 'Send data, by activity'],
  ['receive', 'receive', 'Receive data, by activity'],
];

export class FineMetricsView {
  readonly root: HTMLDivElement;
  filters: Filters;
  panels: Panels | null = null;
  private unitSelect: HTMLSelectElement;
  private spanSelect: HTMLSelectElement;
  private functionList: CheckList;
  private activityList: CheckList;
  private legend: HTMLDivElement;
  /** Says when a span selection was dropped because that span is gone. */
  private notice: HTMLDivElement;
  /** Tags seen in the spans: a tag filter is dropped only once its spans are gone. */
  private seenTags = new Set<string>();
  private plots = new Map<string, HTMLDivElement>();
  private notes = new Map<string, HTMLSpanElement>();
  private tooltip: Tooltip;
  private unsubscribe: () => void;
  private frame: FrameScheduler;
  private observer: ResizeObserver | null = null;
  private drawnWidth = -1;

  constructor(
    host: HTMLElement,
    private store: Store,
    private options: FineMetricsOptions = {},
  ) {
    this.filters = {
      unit: 'seconds',
      spanFilter: '',
      hiddenFunctions: [],
      hiddenActivities: [],
      ...options.filters,
    };
    this.root = h('div', { class: 'kc-view kc-fine-metrics' });
    this.unitSelect = h('select', { class: 'kc-unit', 'aria-label': 'Unit' });
    this.unitSelect.addEventListener('change', () => this.change({ unit: this.unitSelect.value }));
    this.spanSelect = h('select', { class: 'kc-span', 'aria-label': 'Span' });
    this.spanSelect.addEventListener('change', () =>
      this.change({ spanFilter: this.spanSelect.value }),
    );
    this.functionList = new CheckList('Functions', 'kc-functions', (hidden) =>
      this.change({ hiddenFunctions: hidden }),
    );
    this.activityList = new CheckList('Activities', 'kc-activities', (hidden) =>
      this.change({ hiddenActivities: hidden }),
    );
    const controls = h(
      'div',
      { class: 'kc-controls' },
      h('label', {}, 'Unit ', this.unitSelect),
      h('label', {}, 'Span ', this.spanSelect),
      this.functionList.root,
      this.activityList.root,
    );
    this.legend = h('div', { class: 'kc-legend' });
    this.notice = h('div', { class: 'kc-notice', role: 'status' });
    this.notice.hidden = true;
    const grid = h('div', { class: 'kc-panels' });
    for (const [, id, title] of PANELS) {
      const plot = h('div', { class: 'kc-plot' });
      const note = h('span', { class: 'kc-note' });
      this.plots.set(id, plot);
      this.notes.set(id, note);
      grid.append(
        h('section', { class: 'kc-panel', 'data-panel': id }, h('h4', { text: title }, note), plot),
      );
    }
    this.root.append(h('div', { class: 'kc-title', text: 'Fine performance metrics' }), controls, this.notice, this.legend, grid);
    host.append(this.root);
    this.tooltip = new Tooltip(this.root);
    this.unsubscribe = store.subscribe(() => this.render());
    // the bars take their width when drawn: draw again when it changes (a split, a
    // resized panel or window), once per frame however many changes come
    this.frame = new FrameScheduler(() => this.render());
    if (typeof ResizeObserver === 'function' && options.width === undefined) {
      this.observer = new ResizeObserver(() => this.resize());
      this.observer.observe(this.root);
    }
    this.render();
  }

  /** The host changed size: draw again if the width differs from the last drawing's. */
  resize(): void {
    if (this.root.clientWidth !== this.drawnWidth) this.frame.request();
  }

  /** Filters set from outside (the model, a linked span tree): no onChange echo. */
  setFilters(change: Partial<Filters>): void {
    this.filters = { ...this.filters, ...change };
    this.render();
  }

  private change(change: Partial<Filters>): void {
    this.filters = { ...this.filters, ...change };
    this.options.onChange?.(change);
    this.render();
  }

  /** A span selection naming a span that is no longer there (a new Client, a new
   * cluster: other spans, other ids) would leave every panel empty: drop it and say
   * so. Kept while no spans arrived yet (a page loading its first data), and a tag
   * never seen (set from Python ahead of its spans). */
  private dropGoneSelection(tags: string[]): void {
    for (const t of tags) this.seenTags.add(t);
    const f = this.filters.spanFilter;
    if (!f || !this.store.spans.loaded) return;
    let gone: string | null = null;
    if (f.startsWith('id:') && !this.store.spans.records.has(f.slice(3))) {
      const name = this.namesById.get(f.slice(3));
      gone = name ? `span “${name}”` : `span ${f.slice(3, 11)}`;
    } else if (f.startsWith('tag:') && !tags.includes(f.slice(4)) && this.seenTags.has(f.slice(4))) {
      gone = `tag “${f.slice(4)}”`;
    }
    if (gone === null) return;
    this.notice.textContent = `The ${gone} selected here no longer exists (a new client or cluster): showing all spans.`;
    this.notice.hidden = false;
    this.change({ spanFilter: '' });
  }

  /** Names of the spans seen, to name a selection once its span is gone. */
  private namesById = new Map<string, string>();

  render(): void {
    this.drawnWidth = this.root.clientWidth;
    for (const [id, s] of this.store.spans.records) this.namesById.set(id, s.name.join(' / '));
    if (this.filters.spanFilter) this.notice.hidden = true;
    const panels = computePanels(this.store.metrics, this.store.spans.records, this.filters);
    if (this.filters.spanFilter) {
      this.dropGoneSelection(panels.tags);
      if (!this.filters.spanFilter) return; // change() drew again, without it
    } else for (const t of panels.tags) this.seenTags.add(t);
    const f = this.filters;
    this.panels = panels;
    const units = panels.units.includes(f.unit) ? panels.units : [f.unit, ...panels.units];
    setOptions(this.unitSelect, units.map((u) => [u, u]), f.unit);
    const spanOptions: [string, string][] = [['', 'all spans']];
    for (const t of panels.tags) spanOptions.push([`tag:${t}`, `tag: ${t}`]);
    if (f.spanFilter.startsWith('id:')) {
      const s = this.store.spans.records.get(f.spanFilter.slice(3));
      spanOptions.push([f.spanFilter, `span: ${s ? s.name.join(' / ') : f.spanFilter.slice(3, 11)}`]);
    } else if (f.spanFilter && !panels.tags.includes(f.spanFilter.slice(4))) {
      spanOptions.push([f.spanFilter, f.spanFilter.replace(':', ': ')]);
    }
    setOptions(this.spanSelect, spanOptions, f.spanFilter);
    this.functionList.update(panels.functions, f.hiddenFunctions);
    this.activityList.update(panels.activities, f.hiddenActivities, activityColor);
    this.drawLegend(panels);
    for (const [key, id] of PANELS) {
      const plot = this.plots.get(id) as HTMLDivElement;
      const rows = panels[key] as Panels['byFunction'];
      drawBars(plot, rows, {
        unit: f.unit,
        tooltip: this.tooltip,
        width: this.options.width,
        labelWidth: key === 'byFunction' ? 140 : 110,
      });
      const note = this.notes.get(id) as HTMLSpanElement;
      note.textContent = (key === 'send' || key === 'receive') && f.spanFilter ? ' (all spans)' : '';
    }
  }

  private drawLegend(panels: Panels): void {
    const hidden = new Set(this.filters.hiddenActivities);
    this.legend.replaceChildren(
      ...panels.activities.map((a) => {
        const item = h(
          'button',
          {
            class: `kc-legend-item${hidden.has(a) ? ' kc-off' : ''}`,
            'data-activity': a,
            title: hidden.has(a) ? `show ${a}` : `hide ${a}`,
          },
          h('span', { class: 'kc-swatch', style: `background:${activityColor(a)}` }),
          a,
        );
        item.addEventListener('click', () => {
          const next = new Set(this.filters.hiddenActivities);
          if (next.has(a)) next.delete(a);
          else next.add(a);
          this.change({ hiddenActivities: [...next].sort() });
        });
        return item;
      }),
    );
  }

  destroy(): void {
    this.frame.cancel();
    this.observer?.disconnect();
    this.unsubscribe();
    this.root.remove();
  }
}

export function setOptions(select: HTMLSelectElement, options: [string, string][], value: string): void {
  const same =
    select.options.length === options.length &&
    options.every(([v, t], i) => select.options[i].value === v && select.options[i].text === t);
  if (!same) {
    select.replaceChildren(...options.map(([v, t]) => h('option', { value: v, text: t })));
  }
  select.value = value;
}

/** A collapsible list of checkboxes: what is unchecked is hidden. */
export class CheckList {
  readonly root: HTMLDetailsElement;
  private summary: HTMLElement;
  private list: HTMLDivElement;
  private search: HTMLInputElement;
  private items: string[] = [];
  private hidden = new Set<string>();

  constructor(
    private title: string,
    cls: string,
    private onChange: (hidden: string[]) => void,
  ) {
    this.summary = h('summary', { text: title });
    this.search = h('input', { type: 'search', placeholder: 'filter', 'aria-label': `Filter ${title.toLowerCase()}` });
    this.search.addEventListener('input', () => this.draw());
    const all = h('button', { class: 'kc-all', text: 'all' });
    all.addEventListener('click', () => this.setVisible(true));
    const none = h('button', { class: 'kc-none', text: 'none' });
    none.addEventListener('click', () => this.setVisible(false));
    this.list = h('div', { class: 'kc-checklist' });
    this.root = h('details', { class: `kc-filter ${cls}` }, this.summary, h('div', { class: 'kc-filter-tools' }, this.search, all, none), this.list);
  }

  private matching(): string[] {
    const q = this.search.value.trim().toLowerCase();
    return q ? this.items.filter((i) => i.toLowerCase().includes(q)) : this.items;
  }

  /** Check (or uncheck) every item the search matches. */
  private setVisible(show: boolean): void {
    for (const item of this.matching()) {
      if (show) this.hidden.delete(item);
      else this.hidden.add(item);
    }
    this.onChange([...this.hidden].sort());
  }

  update(items: string[], hidden: string[], color?: (s: string) => string): void {
    this.items = [...new Set([...items, ...hidden])].sort();
    this.hidden = new Set(hidden);
    this.color = color;
    this.draw();
  }

  private color?: (s: string) => string;

  private draw(): void {
    const shown = this.items.length - this.hidden.size;
    this.summary.textContent = `${this.title} (${shown}/${this.items.length})`;
    this.list.replaceChildren(
      ...this.matching().map((item) => {
        const box = h('input', { type: 'checkbox', value: item });
        box.checked = !this.hidden.has(item);
        box.addEventListener('change', () => {
          if (box.checked) this.hidden.delete(item);
          else this.hidden.add(item);
          this.onChange([...this.hidden].sort());
        });
        const label = h('label', { class: 'kc-check' }, box);
        if (this.color) label.append(h('span', { class: 'kc-swatch', style: `background:${this.color(item)}` }));
        label.append(item);
        return label;
      }),
    );
  }
}
