import { beforeEach, describe, expect, it, vi } from 'vitest';
import { activityColor } from '../src/colors';
import { FineMetricsView } from '../src/fineMetrics';
import { formatBytes, formatSeconds, formatValue } from '../src/format';
import { ProgressView } from '../src/progress';
import { SpanTreeView, summarize } from '../src/spanTree';
import { Store } from '../src/store';
import { bars, workload } from './helpers';

function loaded(): { store: Store; enc: ReturnType<typeof workload>['enc'] } {
  const w = workload();
  const store = new Store();
  store.applyUpdate([w.metrics[0], w.spans, w.progress], w.metrics[1]);
  return { store, enc: w.enc };
}

let host: HTMLDivElement;
beforeEach(() => {
  document.body.replaceChildren();
  host = document.createElement('div');
  document.body.append(host);
});

describe('FineMetricsView', () => {
  it('draws one row per function, stacked by activity, in four panels', () => {
    const { store } = loaded();
    const view = new FineMetricsView(host, store);
    const byFn = bars(host, 'by-function');
    expect(new Set(byFn.map((b) => b.label))).toEqual(new Set(['read_csv', 'sum']));
    expect(byFn.filter((b) => b.label === 'read_csv').map((b) => b.activity)).toEqual(['thread-noncpu', 'thread-cpu']);
    expect(bars(host, 'by-activity').map((b) => b.activity)).toEqual(['thread-noncpu', 'thread-cpu', 'idle']);
    expect(bars(host, 'send').map((b) => b.activity)).toEqual(['network']);
    expect(host.querySelector('[data-panel="receive"] .kc-empty')?.textContent).toBe('No data');
    view.destroy();
    expect(host.children.length).toBe(0);
  });

  it('keeps an activity one colour across panels', () => {
    const { store } = loaded();
    new FineMetricsView(host, store);
    const fills = [...host.querySelectorAll('rect.kc-bar[data-activity="thread-cpu"]')].map((r) => r.getAttribute('fill'));
    expect(fills.length).toBe(3);
    expect(new Set(fills)).toEqual(new Set([activityColor('thread-cpu')]));
    expect(activityColor('my metric')).toBe(activityColor('my metric'));
  });

  it('switches unit from its selector and reports the change', () => {
    const { store } = loaded();
    const onChange = vi.fn();
    new FineMetricsView(host, store, { onChange });
    const select = host.querySelector('select.kc-unit') as HTMLSelectElement;
    expect([...select.options].map((o) => o.value)).toEqual(['seconds', 'bytes', 'count', 'requests']);
    select.value = 'bytes';
    select.dispatchEvent(new Event('change'));
    expect(onChange).toHaveBeenCalledWith({ unit: 'bytes' });
    expect(bars(host, 'by-function').map((b) => [b.label, b.activity])).toEqual([['read_csv', 'output']]);
  });

  it('filters by span tag, by function and by activity', () => {
    const { store } = loaded();
    const onChange = vi.fn();
    const view = new FineMetricsView(host, store, { onChange });
    const spanSelect = host.querySelector('select.kc-span') as HTMLSelectElement;
    expect([...spanSelect.options].map((o) => o.value)).toEqual(['', 'tag:compute', 'tag:load', 'tag:pipeline']);
    spanSelect.value = 'tag:compute';
    spanSelect.dispatchEvent(new Event('change'));
    expect(new Set(bars(host, 'by-function').map((b) => b.label))).toEqual(new Set(['sum']));
    expect(host.querySelector('[data-panel="send"] .kc-note')?.textContent).toBe(' (all spans)');
    view.setFilters({ spanFilter: '' });
    const box = host.querySelector('.kc-functions input[value="sum"]') as HTMLInputElement;
    box.checked = false;
    box.dispatchEvent(new Event('change'));
    expect(onChange).toHaveBeenLastCalledWith({ hiddenFunctions: ['sum'] });
    expect(new Set(bars(host, 'by-function').map((b) => b.label))).toEqual(new Set(['read_csv']));
    (host.querySelector('.kc-legend-item[data-activity="thread-noncpu"]') as HTMLButtonElement).click();
    expect(onChange).toHaveBeenLastCalledWith({ hiddenActivities: ['thread-noncpu'] });
    expect(bars(host, 'by-function').map((b) => b.activity)).toEqual(['thread-cpu']);
  });

  it('shows value and share of the row in the tooltip', () => {
    const { store } = loaded();
    const view = new FineMetricsView(host, store);
    const rect = host.querySelector('[data-panel="by-function"] g[data-label="read_csv"] rect[data-activity="thread-cpu"]') as SVGRectElement;
    rect.dispatchEvent(new MouseEvent('mousemove', { clientX: 10, clientY: 10 }));
    const tip = view.root.querySelector('.kc-tooltip') as HTMLElement;
    expect(tip.style.display).toBe('block');
    expect(tip.textContent).toBe('read_csv · thread-cpu: 1.00 s (20% of 5.00 s)');
    rect.dispatchEvent(new MouseEvent('mouseleave'));
    expect(tip.style.display).toBe('none');
  });

  it('redraws when the store changes, keeping its filters', () => {
    const { store, enc } = loaded();
    new FineMetricsView(host, store, { filters: { unit: 'seconds', hiddenActivities: ['idle'] } });
    const [part, buffers] = enc.encode([[['execute', 'C', 'mean', 'thread-cpu', 'seconds'], 9]]);
    store.applyUpdate([part], buffers);
    expect(bars(host, 'by-function')[0]).toMatchObject({ label: 'mean', value: 9 });
    expect(bars(host, 'by-activity').map((b) => b.activity)).not.toContain('idle');
  });
});

describe('SpanTreeView', () => {
  it('nests spans, collapses, and selects', () => {
    const { store } = loaded();
    const onSelect = vi.fn();
    const view = new SpanTreeView(host, store, { onSelect });
    const names = () => [...host.querySelectorAll('.kc-tree-row')].map((r) => r.getAttribute('data-name'));
    expect(names()).toEqual(['pipeline', 'pipeline / load', 'pipeline / compute']);
    const compute = host.querySelector('[data-span="C"]') as HTMLElement;
    expect(compute.querySelector('.kc-span-counts')?.textContent).toBe('2/4 tasks · 1 running');
    compute.click();
    expect(onSelect).toHaveBeenCalledWith('C');
    expect(host.querySelector('[data-span="C"]')?.classList.contains('kc-selected')).toBe(true);
    (host.querySelector('[data-span="R"] .kc-caret') as HTMLButtonElement).click();
    expect(names()).toEqual(['pipeline']);
    expect(onSelect).toHaveBeenCalledTimes(1);
    view.toggle('R');
    expect(names().length).toBe(3);
  });

  it('summarizes task states', () => {
    expect(summarize({ memory: 2, forgotten: 1, processing: 1, queued: 2, erred: 1 })).toEqual({
      done: 3, running: 1, waiting: 2, erred: 1, total: 7,
    });
    // tasks whose allowed workers are not there wait too (the engine's no-worker)
    expect(summarize({ 'no-worker': 2, waiting: 1 })).toEqual({
      done: 0, running: 0, waiting: 3, erred: 0, total: 3,
    });
  });
});

describe('ProgressView', () => {
  it('draws a bar per prefix', () => {
    const { store } = loaded();
    new ProgressView(host, store);
    const rows = [...host.querySelectorAll('.kc-progress-row')];
    expect(rows.map((r) => r.getAttribute('data-prefix'))).toEqual(['read_csv', 'sum']);
    expect(rows[1].querySelector('.kc-progress-count')?.textContent).toBe('3 / 5');
    expect((rows[1].querySelector('.kc-progress-done') as HTMLElement).style.width).toBe('40%');
  });
});

describe('format', () => {
  it('formats seconds, bytes and other units', () => {
    expect(formatSeconds(0.0123)).toBe('12.3 ms');
    expect(formatSeconds(75)).toBe('1.3 min');
    expect(formatBytes(3 * 1024 * 1024)).toBe('3.0 MiB');
    expect(formatValue(12, 'count')).toBe('12');
    expect(formatValue(1500, 'requests')).toBe('1.5k requests');
  });
});
