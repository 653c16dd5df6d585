// What the user trial of the panels (issue 28's second trial) found in the renderers:
// finished tasks whose results were released counted as not done, and a span
// selection kept after the span is gone (a new Client), which empties every view.
import { describe, expect, it } from 'vitest';
import { mount } from '../src/mount';
import { ProgressView } from '../src/progress';
import { localBinding } from '../src/report';
import { SpanTreeView, summarize } from '../src/spanTree';
import { Store } from '../src/store';
import { MetricsEncoder, records, span, workload, type Key } from './helpers';

describe('finished tasks', () => {
  it('count as done once their results are released, as when in memory, forgotten or erred', () => {
    const t = summarize({ memory: 1, released: 58, forgotten: 1, erred: 1 });
    expect(t).toMatchObject({ done: 60, erred: 1, waiting: 0, running: 0, total: 61 });
  });

  it('the span tree says 61/61 for a finished span whose intermediate results were released', () => {
    const store = new Store();
    store.applyUpdate([records('spans', 1, { R: span(['sensor pipeline'], null, { states: { memory: 1, released: 60 } }) }, true)], []);
    const host = document.createElement('div');
    new SpanTreeView(host, store);
    const row = host.querySelector('.kc-tree-row[data-span="R"]') as HTMLElement;
    expect(row.textContent).toContain('61/61 tasks');
    expect(row.querySelector('.kc-progress-done')?.getAttribute('style')).toContain('width:100%');
  });

  it('progress bars are full for a prefix whose results were released', () => {
    const store = new Store();
    store.applyUpdate([records('progress', 1, { mean: { memory: 1, released: 7 } }, true)], []);
    const host = document.createElement('div');
    new ProgressView(host, store);
    expect(host.querySelector('.kc-progress-count')?.textContent).toBe('8 / 8');
  });
});

describe('a span selection that no longer exists', () => {
  function newCluster(store: Store): void {
    // a new Client: everything again, other spans, other ids
    const enc = new MetricsEncoder();
    const values: [Key, number][] = [[['execute', 'N', 'inc', 'thread-cpu', 'seconds'], 2]];
    const [part, buffers] = enc.encode(values, true);
    store.applyUpdate([part, records('spans', 1, { N: span(['other'], null) }, true)], buffers);
  }

  it('is dropped in a dashboard (the tree and the filter), and the view says so', () => {
    const store = new Store();
    const { metrics, spans } = workload();
    store.applyUpdate([metrics[0], spans], metrics[1]);
    const b = localBinding({ unit: 'seconds', span_filter: '', selected: '' });
    const host = document.createElement('div');
    const m = mount('dashboard', host, store, b);
    (host.querySelector('.kc-tree-row[data-span="L"]') as HTMLElement).click();
    expect(b.get('span_filter')).toBe('id:L');
    expect(host.querySelectorAll('[data-panel="by-function"] g.kc-row').length).toBe(1);

    newCluster(store);
    expect(b.get('span_filter')).toBe('');
    expect(b.get('selected')).toBe('');
    expect((host.querySelector('select.kc-span') as HTMLSelectElement).value).toBe('');
    expect(host.querySelectorAll('[data-panel="by-function"] g.kc-row').length).toBe(1); // inc, shown
    expect(host.querySelector('.kc-fine-metrics .kc-notice')?.textContent).toContain('pipeline / load');
    expect(host.querySelector('.kc-fine-metrics .kc-notice')?.textContent).toContain('no longer exists');
    m.destroy();
  });

  it('is dropped in a fine metrics view when a tag chosen there has no span left', () => {
    const store = new Store();
    const { metrics, spans } = workload();
    store.applyUpdate([metrics[0], spans], metrics[1]);
    const b = localBinding({ unit: 'seconds', span_filter: '' });
    const host = document.createElement('div');
    mount('fine-metrics', host, store, b);
    const select = host.querySelector('select.kc-span') as HTMLSelectElement;
    select.value = 'tag:load';
    select.dispatchEvent(new Event('change'));
    expect(b.get('span_filter')).toBe('tag:load');
    newCluster(store);
    expect(b.get('span_filter')).toBe('');
    expect(host.querySelector('.kc-notice')?.textContent).toContain('load');
  });

  it('is kept while the spans have not arrived yet (a page loading)', () => {
    const store = new Store();
    const b = localBinding({ unit: 'seconds', span_filter: 'id:L' });
    const host = document.createElement('div');
    mount('fine-metrics', host, store, b);
    expect(b.get('span_filter')).toBe('id:L');
    const { metrics, spans } = workload();
    store.applyUpdate([metrics[0], spans], metrics[1]);
    expect(b.get('span_filter')).toBe('id:L');
    expect((host.querySelector('.kc-notice') as HTMLElement).hidden).toBe(true);
  });
});
