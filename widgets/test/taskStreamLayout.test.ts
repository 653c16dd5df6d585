// The task stream's layout on its own: no DOM, no canvas, only a TaskTable and a viewport.
import { describe, expect, it } from 'vitest';
import { Store } from '../src/store';
import type { TaskTable } from '../src/taskTable';
import { collect, extent, hit, newScratch, rowOrder, timeAt, zoomed, type Viewport } from '../src/taskStreamLayout';
import { manyTasks, TasksEncoder, type Rec } from './helpers';

function table(recs: Rec[]): TaskTable {
  const [part, buffers] = new TasksEncoder().encode(recs);
  part.full = true;
  const store = new Store();
  store.applyUpdate([part], buffers);
  return store.tasks;
}

// rectangles 0: load-1 computes on row 0; 1: sum-2's transfer and 2: its compute, on row 1
const two: Rec[] = [
  { key: 'load-1', worker: 'tcp://a', thread: 7, ss: [[0, 10, 11]] },
  { key: 'sum-2', worker: 'tcp://b', thread: 9, ss: [[1, 11, 11.5], [0, 11.5, 12]] },
];

function viewport(t: TaskTable, domain: [number, number] | null, width = 800, height = 200): Viewport {
  return { domain, width, height, order: rowOrder(t) };
}

/** The wide rectangles of one colour slot as [x, width, y] triples. */
function wide(b: ReturnType<typeof collect>, slot: number): number[][] {
  return Array.from({ length: b.counts[slot] }, (_, i) => [...b.rects[slot].subarray(3 * i, 3 * i + 3)]);
}

describe('task stream layout', () => {
  it('orders rows by worker, then thread', () => {
    const t = table([
      { key: 'a-1', worker: 'tcp://b', thread: 1, ss: [[0, 0, 1]] },
      { key: 'a-2', worker: 'tcp://a', thread: 2, ss: [[0, 0, 1]] },
      { key: 'a-3', worker: 'tcp://b', thread: 0, ss: [[0, 0, 1]] },
      { key: 'a-4', worker: 'tcp://a', thread: 1, ss: [[0, 0, 1]] },
    ]);
    expect(rowOrder(t).map((r) => `${t.rows[r].worker}/${t.rows[r].thread}`)).toEqual([
      'tcp://a/0', 'tcp://a/1', 'tcp://b/0', 'tcp://b/1',
    ]);
  });

  it('spans every task with a margin, and nothing before there is one', () => {
    expect(extent(table([]))).toBeNull();
    const [a, b] = extent(table(two)) as [number, number];
    expect(a).toBeCloseTo(10 - 0.02, 12);
    expect(b).toBeCloseTo(12 + 0.02, 12);
    const [c, d] = extent(table([{ key: 'x-1', worker: 'tcp://a', thread: 0, ss: [[0, 5, 5]] }])) as [number, number];
    expect([c, d]).toEqual([5 - 1e-4, 5 + 1e-4]); // a single instant still has a width
  });

  it('zooms around a time that stays where it was, and maps pixels to times', () => {
    const [a, b] = zoomed([0, 100], 0.5, 20);
    expect([a, b]).toEqual([10, 60]);
    expect(timeAt([0, 100], 1000, 200)).toBe(20);
    expect(timeAt([a, b], 1000, 200)).toBe(20);
    const [c, d] = zoomed([0, 1], 1e-9, 0.5);
    expect(d - c).toBeCloseTo(1e-6, 12); // no narrower than a microsecond
    expect(timeAt(null, 1000, 500)).toBe(0.5);
  });

  it('places the wide rectangles by colour slot, and skips what is out of view', () => {
    const t = table(two);
    const scratch = newScratch();
    let b = collect(t, viewport(t, [10, 12]), 1, scratch);
    expect(b.visited).toBe(3);
    expect(b.drawn).toBe(3);
    expect(b.rowHeight).toBe(100);
    expect(wide(b, 0)).toEqual([[0, 400, 0]]); // load-1, row 0
    expect(wide(b, 1)).toEqual([[400, 200, 100]]); // the transfer, row 1
    expect(wide(b, 2)).toEqual([[600, 200, 100]]); // sum-2's compute
    expect(b.columns.every((c) => c === -1)).toBe(true);
    const buffers = b.rects;
    b = collect(t, viewport(t, [11.6, 13]), 1, scratch);
    expect(b.visited).toBe(1); // only sum-2's compute reaches past 11.6
    expect(wide(b, 2)).toEqual([[-1, 0.4 * (800 / 1.4) + 1, 100]].map(([x, w, y]) => [x, Math.fround(w), y]));
    expect(b.rects).toBe(buffers); // the buffers are kept from frame to frame
    expect(collect(t, viewport(t, null), 1, scratch).visited).toBe(0);
  });

  it('rasterises rectangles narrower than two device pixels: one cell per row and pixel', () => {
    const t = table(manyTasks(800)); // 8 rows, 100 one-second tasks each, a fifth with a 0.2 s transfer first
    const v = viewport(t, [0, 100], 200, 80); // a second is two CSS pixels
    const b = collect(t, v, 1, newScratch());
    expect(b.width).toBe(200);
    expect(b.visited).toBe(800 + 160);
    expect(b.counts.reduce((x, y) => x + y, 0)).toBe(0); // computes 1.6 px wide: all narrow
    expect(b.drawn).toBe([...b.columns].filter((c) => c >= 0).length);
    expect(b.drawn).toBeLessThanOrEqual(8 * 200);
    const hd = collect(t, v, 2, newScratch());
    expect(hd.width).toBe(400); // twice the columns on a high-density screen
    expect(hd.counts.reduce((x, y) => x + y, 0)).toBe(800); // where the computes are 3.2 pixels wide
    expect(hd.drawn - 800).toBe([...hd.columns].filter((c) => c >= 0).length); // the transfers, rasterised
    expect(hd.drawn - 800).toBe(160);
  });

  it('finds the rectangle under a point of the plot', () => {
    const t = table(two);
    const v = viewport(t, [10, 12]);
    expect(hit(t, v, 200, 50)).toBe(0); // load-1 at t = 10.5
    expect(hit(t, v, 500, 150)).toBe(1); // the transfer at 11.25
    expect(hit(t, v, 700, 150)).toBe(2); // the compute at 11.75
    expect(hit(t, v, 400, 150)).toBe(1); // at 11.0, just the transfer (within a pixel)
    expect(hit(t, v, 600, 150)).toBe(2); // where both meet, the later one
    expect(hit(t, v, 600, 50)).toBeNull(); // row 0 is idle at 11.5
    expect(hit(t, v, -1, 50)).toBeNull(); // left of the plot
    expect(hit(t, v, 200, 250)).toBeNull(); // below the rows
    expect(hit(t, viewport(t, null), 200, 50)).toBeNull();
  });
});
