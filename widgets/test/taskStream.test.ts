import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ACTION_COLORS, PREFIX_PALETTE } from '../src/colors';
import { Store } from '../src/store';
import { packColor, TaskStreamView } from '../src/taskStream';
import widget from '../src/widget';
import { canvasHost, manyTasks, MockModel, recordingContext, TasksEncoder, type Rec } from './helpers';

let host: HTMLDivElement;
let rec: ReturnType<typeof recordingContext>;
beforeEach(() => {
  ({ host, rec } = canvasHost());
});
afterEach(async () => {
  await new Promise((r) => setTimeout(r, 40)); // let scheduled frames draw before the canvas mock goes
  vi.restoreAllMocks();
});

function loaded(recs: Rec[]): { store: Store; enc: TasksEncoder } {
  const enc = new TasksEncoder();
  const store = new Store();
  const [part, buffers] = enc.encode(recs);
  part.full = true;
  store.applyUpdate([part], buffers);
  return { store, enc };
}

const two: Rec[] = [
  { key: 'load-1', worker: 'tcp://a', thread: 7, ss: [[0, 10, 11]] },
  { key: 'sum-2', worker: 'tcp://b', thread: 9, ss: [[1, 11, 11.5], [0, 11.5, 12]] },
];

describe('TaskTable', () => {
  it('holds the columns and per-row start order, and applies deltas', () => {
    const { store, enc } = loaded(two);
    const t = store.tasks;
    expect(t.ntasks).toBe(2);
    expect(t.nrects).toBe(3);
    expect(t.rows).toEqual([{ worker: 'tcp://a', thread: 0 }, { worker: 'tcp://b', thread: 0 }]);
    expect([t.minStart, t.maxStop]).toEqual([10, 12]);
    // a delta with a task that started earlier on row 0: kept in start order
    const [part, buffers] = enc.encode([{ key: 'load-3', worker: 'tcp://a', thread: 7, ss: [[0, 5, 6]] }]);
    store.applyUpdate([part], buffers);
    expect(store.stale).toBe(false);
    const row0 = [...t.byRow[0].data.subarray(0, t.byRow[0].length)].map((r) => t.rect(r).start);
    expect(row0).toEqual([5, 10]);
    expect(t.task(2)).toEqual({ key: 'load-3', prefix: 'load', status: 'OK', nbytes: 8 });
  });

  it('asks for everything when a delta is missing, and forgets dropped tasks', () => {
    const { store, enc } = loaded(two);
    enc.encode([{ key: 'x-3', worker: 'tcp://a', thread: 7, ss: [[0, 1, 2]] }]); // lost
    const [part, buffers] = enc.encode([{ key: 'x-4', worker: 'tcp://a', thread: 7, ss: [[0, 1, 2]] }]);
    store.applyUpdate([part], buffers);
    expect(store.stale).toBe(true);

    const fresh = loaded(two);
    const [p2, b2] = fresh.enc.encode([{ key: 'x-3', worker: 'tcp://b', thread: 9, ss: [[0, 20, 21]] }], 1);
    fresh.store.applyUpdate([p2], b2);
    const t = fresh.store.tasks;
    expect(t.firstTask).toBe(1);
    expect(t.keys).toEqual(['sum-2', 'x-3']);
    expect(t.nrects).toBe(3);
    expect(t.byRow[0].length).toBe(0);
    expect(t.minStart).toBe(11);
  });
});

describe('TaskStreamView', () => {
  it('draws a rectangle per interval in its colour, one row per thread', () => {
    const { store } = loaded(two);
    const view = new TaskStreamView(host, store, { width: 884, height: 220 });
    view.draw();
    const colors = rec.fills.filter((f) => f.h > 50).map((f) => f.style); // rows are 100 px high
    expect(colors.sort()).toEqual([ACTION_COLORS.transfer, PREFIX_PALETTE[0], PREFIX_PALETTE[1]].sort());
    const [load] = rec.fills.filter((f) => f.style === PREFIX_PALETTE[0] && f.h > 50);
    expect(load.y).toBe(0);
    const sum = rec.fills.find((f) => f.style === PREFIX_PALETTE[1] && f.h > 50);
    expect(sum?.y).toBe(100);
    expect(host.querySelectorAll('.kc-legend-item').length).toBe(2 + Object.keys(ACTION_COLORS).length);
    expect(host.querySelector('.kc-title')?.textContent).toContain('2 tasks');
    view.destroy();
    expect(host.children.length).toBe(0);
  });

  it('visits only what is in view, and rasterises what is narrower than two pixels', () => {
    const { store } = loaded(manyTasks(100_000));
    const view = new TaskStreamView(host, store, { width: 1084, height: 300 });
    let b = view.collect(1);
    expect(b.visited).toBe(120_000); // all in view
    expect(b.counts.reduce((x, y) => x + y, 0)).toBe(0); // 12,500 a row in 1,000 pixels
    expect(b.drawn).toBeLessThanOrEqual(8 * 1000); // at most a cell per row and pixel
    expect(b.drawn).toBeGreaterThan(8 * 900); // the rows are busy: every pixel coloured
    view.draw();
    expect(rec.calls.get('putImageData')).toBe(1);
    b = view.collect(2); // a high-density screen: twice the columns
    expect(b.width).toBe(2000);
    view.setDomain(100, 110); // ten seconds of one row's 12,500
    b = view.collect();
    expect(view.follow).toBe(false);
    expect(b.visited).toBeLessThan(8 * 12 * 2 + 20);
    expect(b.drawn).toBe(b.visited);
    view.destroy();
  });

  it('zooms around the pointer, pans by dragging, fits on double-click', () => {
    const { store } = loaded(manyTasks(800));
    const view = new TaskStreamView(host, store, { width: 1084, height: 300 });
    const [a, b] = view.domain as [number, number];
    const canvas = host.querySelector('canvas') as HTMLCanvasElement;
    canvas.getBoundingClientRect = () => ({ left: 0, top: 0, width: 1084, height: 300 }) as DOMRect;
    const mid = 84 + 500;
    const at = view.timeAt(mid);
    canvas.dispatchEvent(new WheelEvent('wheel', { deltaY: -500, clientX: mid, clientY: 10, cancelable: true }));
    const [a1, b1] = view.domain as [number, number];
    expect(b1 - a1).toBeLessThan((b - a) / 2);
    expect(view.timeAt(mid)).toBeCloseTo(at, 6); // the time under the pointer stays put
    canvas.dispatchEvent(new MouseEvent('pointerdown', { clientX: 600, button: 0 }));
    canvas.dispatchEvent(new MouseEvent('pointermove', { clientX: 500 }));
    canvas.dispatchEvent(new MouseEvent('pointerup', {}));
    const [a2] = view.domain as [number, number];
    expect(a2 - a1).toBeCloseTo((100 / 1000) * (b1 - a1), 6);
    canvas.dispatchEvent(new MouseEvent('dblclick'));
    expect(view.follow).toBe(true);
    expect(view.domain).toEqual(view.extent());
    view.destroy();
  });

  it('names the task under the pointer', () => {
    const { store } = loaded(two);
    const view = new TaskStreamView(host, store, { width: 884, height: 220 });
    view.setDomain(10, 12);
    const canvas = host.querySelector('canvas') as HTMLCanvasElement;
    canvas.getBoundingClientRect = () => ({ left: 0, top: 0, width: 884, height: 220 }) as DOMRect;
    // row 1 (tcp://b) at t = 11.25: the transfer of sum-2
    canvas.dispatchEvent(new MouseEvent('pointermove', { clientX: 84 + 0.625 * 800, clientY: 150 }));
    const tip = host.querySelector('.kc-tooltip') as HTMLElement;
    expect(tip.style.display).toBe('block');
    expect(tip.textContent).toContain('sum-2');
    expect(tip.textContent).toContain('transfer: 500.0 ms');
    expect(view.hit(84 + 0.25 * 800, 50)).not.toBeNull(); // load-1 at t = 10.5
    expect(view.hit(84 + 0.75 * 800, 50)).toBeNull(); // row 0 is idle at 11.5
    view.destroy();
  });
});

describe('packColor', () => {
  it('packs a colour as an opaque ImageData pixel', () => {
    const pixel = new Uint8ClampedArray(new Uint32Array([packColor('#102030')]).buffer);
    expect([...pixel]).toEqual([0x10, 0x20, 0x30, 255]);
  });
});

describe('task stream widget', () => {
  it('follows the kernel: deltas, then a refresh when one is lost', () => {
    const model = new MockModel({ _uid: 'ts1', kind: 'task-stream' });
    widget.initialize({ model });
    const enc = new TasksEncoder();
    const [full, fb] = enc.encode(two);
    full.full = true;
    model.receive([full], fb);
    const el = document.createElement('div');
    document.body.append(el);
    const cleanup = widget.render({ model, el });
    expect(el.querySelector('.kc-task-stream')).not.toBeNull();
    const [delta, db] = enc.encode(manyTasks(10));
    model.receive([delta], db);
    expect(el.querySelector('.kc-title')?.textContent).toContain('12 tasks');
    enc.encode(manyTasks(1)); // lost
    const [next, nb] = enc.encode(manyTasks(1));
    model.receive([next], nb);
    expect(model.sent).toEqual([{ type: 'refresh' }, { type: 'refresh' }]);
    cleanup();
  });
});
