import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { FLAME_PALETTE, fileColor } from '../src/colors';
import { FlameGraphView, ROW } from '../src/flameGraph';
import { flattenNested, type FlatProfile } from '../src/profileData';
import { staticProfileSource } from '../src/profileSources';
import { clockTime } from '../src/profileTimeline';
import widget from '../src/widget';
import { bigProfile, canvasHost, MockModel, profileMessage, recordingContext, smallProfile } from './helpers';

let host: HTMLDivElement;
let rec: ReturnType<typeof recordingContext>;
const views: FlameGraphView[] = [];
beforeEach(() => {
  ({ host, rec } = canvasHost());
});
afterEach(() => {
  for (const v of views.splice(0)) v.destroy();
  vi.restoreAllMocks();
});

function staticView(trees: Record<string, FlatProfile> = { '': flattenNested(smallProfile()) }, width = 1000): FlameGraphView {
  const source = staticProfileSource({ trees, timeline: { counts: [[101, 10]], keys: { crunch: [[101, 6]] } }, interval: 0.01 });
  const view = new FlameGraphView(host, source, { width, animate: 0 });
  views.push(view);
  return view;
}

function canvasOf(view: FlameGraphView): HTMLCanvasElement {
  const c = view.canvas;
  c.getBoundingClientRect = () => ({ left: 0, top: 0, width: view.width, height: view.height }) as DOMRect;
  return c;
}

describe('FlatProfile', () => {
  it('lays frames out left to right inside their parents, row by row', () => {
    const t = flattenNested(smallProfile());
    expect(t.n).toBe(6);
    expect(t.maxDepth).toBe(3);
    const at = (name: string) => t.strings.indexOf(name);
    const i = (name: string) => [...t.name].indexOf(at(name));
    expect([t.x[i('crunch')], t.x[i('read')], t.x[i('square')], t.x[i('add')]]).toEqual([0, 6, 0, 4]);
    expect([...t.byDepth[2]].map((j) => t.strings[t.name[j]])).toEqual(['crunch', 'read']);
    expect(t.ancestors(i('add')).map((j) => t.strings[t.name[j]])).toEqual(['root', 'main', 'crunch', 'add']);
  });
});

describe('FlameGraphView', () => {
  it('draws every frame, coloured by file, with labels where they fit', () => {
    const view = staticView();
    view.draw();
    expect(view.drawn).toBe(6);
    const frames = rec.fills.filter((f) => f.h === ROW - 1);
    const square = frames.find((f) => f.y === 3 * ROW && f.x === 0);
    expect(square?.style).toBe(FLAME_PALETTE[fileColor('work.py')]);
    expect(square?.w).toBeCloseTo(400 - 1, 6); // 4 of 10 samples of 1000 px
    expect(rec.calls.get('fillText')).toBe(6);
  });

  it('zooms into a clicked frame and back out', () => {
    const view = staticView();
    const c = canvasOf(view);
    c.dispatchEvent(new MouseEvent('click', { clientX: 100, clientY: 2 * ROW + 5 })); // crunch
    const t = view.tree!;
    expect(t.strings[t.name[view.focus]]).toBe('crunch');
    expect(view.domain).toEqual([0, 6]);
    view.draw();
    expect(view.drawn).toBe(5); // root, main, crunch, square, add: read is out of view
    c.dispatchEvent(new MouseEvent('click', { clientX: 100, clientY: 2 * ROW + 5 })); // crunch again: out
    expect(t.strings[t.name[view.focus]]).toBe('main');
    (host.querySelector('button.kc-zoom-out') as HTMLButtonElement).click();
    expect(view.focus).toBe(0);
    expect(view.domain).toEqual([0, 10]);
  });

  it('shows file:line, time and share on hover', () => {
    const view = staticView();
    const c = canvasOf(view);
    c.dispatchEvent(new MouseEvent('mousemove', { clientX: 450, clientY: 3 * ROW + 5 })); // add
    const tip = host.querySelector('.kc-tooltip') as HTMLElement;
    expect(tip.style.display).toBe('block');
    expect(tip.textContent).toContain('math.py:5');
    expect(tip.textContent).toContain('20.0 ms (2 samples), 20% of all');
    expect(view.hit(950, 2 * ROW + 5)).toBeNull(); // main's own sample: no child there
  });

  it('switches prefix from its selector (static trees)', () => {
    const crunch = flattenNested({ name: 'root', file: '', line: 0, count: 6, children: [smallProfile().children![0].children![0]] });
    const view = staticView({ '': flattenNested(smallProfile()), crunch });
    const select = host.querySelector('select.kc-prefix-select') as HTMLSelectElement;
    expect([...select.options].map((o) => o.value)).toEqual(['', 'crunch']);
    select.value = 'crunch';
    select.dispatchEvent(new Event('change'));
    expect(view.tree).toBe(crunch);
    expect(host.querySelector('.kc-title')?.textContent).toContain('crunch · 6 samples');
  });

  it('draws ten thousand frames, only those in view', () => {
    const tree = flattenNested(bigProfile(10_000));
    expect(tree.n).toBeGreaterThan(9_000);
    const view = staticView({ '': tree }, 1200);
    view.draw();
    const all = view.drawn;
    expect(all).toBeGreaterThan(100);
    expect(all).toBeLessThanOrEqual(tree.n);
    const deep = tree.byDepth[3][1];
    view.zoomTo(deep);
    view.draw();
    expect(view.drawn).toBeLessThan(all);
    expect(view.lastDrawMs).toBeLessThan(50);
  });
});

describe('flame graph widget', () => {
  it('shows the kernel profile, sends selections as traits, chooses windows on the timeline', () => {
    const model = new MockModel({ _uid: 'fg1', kind: 'flame-graph', prefix: '', start: null, stop: null });
    widget.initialize({ model });
    const el = document.createElement('div');
    document.body.append(el);
    const cleanup = widget.render({ model, el });
    expect(el.querySelector('.kc-title')?.textContent).toContain('loading');
    const [part, buffers] = profileMessage(flattenNested(smallProfile()), 1);
    model.receive([part], buffers);
    expect(el.querySelector('.kc-title')?.textContent).toContain('10 samples, 100.0 ms');
    const select = el.querySelector('select.kc-prefix-select') as HTMLSelectElement;
    expect([...select.options].map((o) => o.value)).toEqual(['', 'crunch', 'read']);
    select.value = 'read';
    select.dispatchEvent(new Event('change'));
    expect(model.get('prefix')).toBe('read');
    expect(el.querySelector('.kc-title')?.textContent).toContain('loading');
    // a brush over the timeline (twenty cycles, 82 s to 102 s, over 400 px): a window
    const tl = el.querySelector('canvas.kc-timeline') as HTMLCanvasElement;
    tl.getBoundingClientRect = () => ({ left: 0, top: 0, width: 400, height: 56 }) as DOMRect;
    tl.dispatchEvent(new MouseEvent('pointerdown', { clientX: 360, button: 0 }));
    tl.dispatchEvent(new MouseEvent('pointermove', { clientX: 380 }));
    tl.dispatchEvent(new MouseEvent('pointerup', { clientX: 380 }));
    expect(model.get('start')).toBeCloseTo(100, 6);
    expect(model.get('stop')).toBeCloseTo(101, 6);
    const [next, nb] = profileMessage(null, 2, { selection: { prefix: 'read', start: model.get('start'), stop: model.get('stop') } });
    model.receive([next], nb);
    expect(el.querySelector('.kc-window')?.textContent).toContain(`window ${clockTime(100)} to ${clockTime(101)} (1.00 s;`);
    tl.dispatchEvent(new MouseEvent('dblclick'));
    expect(model.get('start')).toBeNull();
    cleanup();
  });
});
