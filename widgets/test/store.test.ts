import { describe, expect, it } from 'vitest';
import { Store } from '../src/store';
import { MetricsEncoder, records, workload } from './helpers';

describe('Store', () => {
  it('rebuilds metrics from a full message and deltas', () => {
    const { enc, metrics } = workload();
    const store = new Store();
    store.applyUpdate([metrics[0]], metrics[1].map((b) => new DataView(b)));
    expect(store.metrics.length).toBe(10);
    expect(store.metrics.row(4)).toEqual({
      context: 'execute', span: null, fn: null, activity: 'idle', unit: 'seconds', value: 2,
    });
    const [part, buffers] = enc.encode([
      [['execute', 'C', 'sum', 'thread-cpu', 'seconds'], 5],
      [['execute', 'C', 'mean', 'thread-cpu', 'seconds'], 1],
    ]);
    expect(part.strings).toEqual(['mean']);
    store.applyUpdate([part], buffers);
    expect(store.metrics.length).toBe(11);
    expect(store.metrics.row(2).value).toBe(5);
    expect(store.metrics.row(10)).toMatchObject({ fn: 'mean', value: 1 });
    expect(store.stale).toBe(false);
  });

  it('notices a lost message and recovers on the next full one', () => {
    const enc = new MetricsEncoder();
    const store = new Store();
    enc.encode([[['execute', 'a', 'f', 'x', 'seconds'], 1]], true); // never delivered
    const [delta, buffers] = enc.encode([[['execute', 'a', 'f', 'x', 'seconds'], 2]]);
    store.applyUpdate([delta], buffers);
    expect(store.stale).toBe(true);
    expect(store.metrics.length).toBe(0);
    const [full, fb] = enc.encode([[['execute', 'a', 'f', 'x', 'seconds'], 2]], true);
    store.applyUpdate([full], fb);
    expect(store.stale).toBe(false);
    expect(store.metrics.row(0).value).toBe(2);
  });

  it('keeps records by id, with removals, and tells subscribers', () => {
    const store = new Store();
    let calls = 0;
    const stop = store.subscribe(() => calls++);
    store.applyUpdate([records('progress', 1, { inc: { memory: 1 }, add: { waiting: 1 } }, true)], []);
    store.applyUpdate([{ ...records('progress', 2, { inc: { memory: 2 } }), removed: ['add'] }], []);
    expect([...store.progress.records]).toEqual([['inc', { memory: 2 }]]);
    stop();
    store.applyUpdate([records('progress', 3, {})], []);
    expect(calls).toBe(2);
  });
});
