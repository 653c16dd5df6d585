import { describe, expect, it } from 'vitest';
import { computePanels, orderUnits, spanSelection, type Filters } from '../src/aggregate';
import { Store } from '../src/store';
import { workload } from './helpers';

function loaded(): Store {
  const w = workload();
  const store = new Store();
  store.applyUpdate([w.metrics[0], w.spans, w.progress], w.metrics[1]);
  return store;
}

const all: Filters = { unit: 'seconds', spanFilter: '', hiddenFunctions: [], hiddenActivities: [] };

describe('computePanels', () => {
  it('splits execution by function and by activity, and transfers by activity', () => {
    const store = loaded();
    const p = computePanels(store.metrics, store.spans.records, all);
    expect(p.units).toEqual(['seconds', 'bytes', 'count', 'requests']);
    expect(p.byFunction.map((r) => [r.label, r.total])).toEqual([['read_csv', 5], ['sum', 4]]);
    expect(p.byFunction[0].segments.map((s) => s.activity)).toEqual(['thread-noncpu', 'thread-cpu']);
    expect(p.byActivity.map((r) => [r.label, r.total])).toEqual([
      ['thread-noncpu', 5], ['thread-cpu', 4], ['idle', 2],
    ]);
    expect(p.send.map((r) => r.label)).toEqual(['network']);
    expect(p.receive).toEqual([]); // gather-dep has bytes only
  });

  it('filters by unit, function, activity and span', () => {
    const store = loaded();
    const spans = store.spans.records;
    const bytes = computePanels(store.metrics, spans, { ...all, unit: 'bytes' });
    expect(bytes.byFunction.map((r) => r.label)).toEqual(['read_csv']);
    expect(bytes.receive.map((r) => r.total)).toEqual([4096]);
    const custom = computePanels(store.metrics, spans, { ...all, unit: 'requests' });
    expect(custom.byActivity.map((r) => r.label)).toEqual(['S3 reads']);
    const noSum = computePanels(store.metrics, spans, { ...all, hiddenFunctions: ['sum'] });
    expect(noSum.byFunction.map((r) => r.label)).toEqual(['read_csv']);
    expect(noSum.byActivity.map((r) => r.label)).not.toContain('idle');
    const cpu = computePanels(store.metrics, spans, { ...all, hiddenActivities: ['thread-noncpu', 'idle'] });
    expect(cpu.byActivity.map((r) => r.label)).toEqual(['thread-cpu']);
    const load = computePanels(store.metrics, spans, { ...all, spanFilter: 'tag:load' });
    expect(load.byFunction.map((r) => r.label)).toEqual(['read_csv']);
    expect(load.byActivity.map((r) => r.label)).not.toContain('idle');
    const root = computePanels(store.metrics, spans, { ...all, spanFilter: 'id:R' });
    expect(root.byFunction.map((r) => r.label)).toEqual(['read_csv', 'sum']);
    expect(root.tags).toEqual(['compute', 'load', 'pipeline']);
  });

  it('selects spans by tag or by a span and its children', () => {
    const spans = loaded().spans.records;
    expect(spanSelection('', spans)).toBeNull();
    expect([...(spanSelection('tag:pipeline', spans) as Set<string>)].sort()).toEqual(['C', 'L', 'R']);
    expect([...(spanSelection('id:C', spans) as Set<string>)]).toEqual(['C']);
    expect([...(spanSelection('id:R', spans) as Set<string>)].sort()).toEqual(['C', 'L', 'R']);
  });

  it('orders units: seconds, bytes, count, then the rest', () => {
    expect(orderUnits(['widgets', 'count', 'bytes', 'seconds', 'apples'])).toEqual([
      'seconds', 'bytes', 'count', 'apples', 'widgets',
    ]);
  });
});
