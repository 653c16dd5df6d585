// The profiler plots: records shaped into a task stream and step lines (pure), and
// the view that stacks them on one time axis.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { stepValue } from '../src/lineChart';
import { cacheSteps, plotsExtent, tasksMessage, type CachePlot, type ProfilerPlotsData, type TasksPlot } from '../src/profilerLayout';
import { ProfilerPlotsView } from '../src/profilerPlots';
import { Store } from '../src/store';
import { recordingContext } from './helpers';

const groups = ['random', 'qr', 'dot'];

const tasks: TasksPlot = {
  kind: 'tasks',
  keys: ["('random-1', 0)", "('random-1', 1)", "('qr-2', 0)", "('dot-3', 0)"],
  tasks: ['random(1000)', 'random(1000)', 'qr(...)', 'dot(...)'],
  group: [0, 0, 1, 2],
  worker: [0, 1, 0, 1],
  workers: ['0', '1'],
  start: [0, 0.01, 0.5, 0.6],
  end: [0.4, 0.45, 0.9, 0.6], // the last one takes no time
};

const cache: CachePlot = {
  kind: 'cache',
  metric: 'count',
  group: [0, 0, 1, 2],
  start: [0.4, 0.45, 0.9, 0.6],
  end: [0.9, 0.95, 1.0, null],
  value: [1, 1, 1, 2],
};

function data(): ProfilerPlotsData {
  return {
    page: 'profiler-plots',
    title: 'Profile',
    origin: 1.7e9,
    duration: 1.0,
    groups,
    plots: [
      tasks,
      { kind: 'resource', time: [0, 0.25, 0.5, 0.75, 1.0], mem: [70, 80, 120, 90, 75], cpu: [0, 180, 110, 350, 20] },
      cache,
    ],
  };
}

describe('profiler plots layout', () => {
  it('turns tasks into one rectangle per task, a row per worker, the function as prefix', () => {
    const { part, buffers } = tasksMessage(tasks, groups);
    expect(part.nbuffers).toBe(buffers.length);
    const store = new Store();
    store.applyUpdate([part], buffers);
    const t = store.tasks;
    expect(store.stale).toBe(false);
    expect(t.ntasks).toBe(4);
    expect(t.rows.map((r) => r.worker)).toEqual(['0', '1']);
    expect([...t.prefixes].sort()).toEqual(['dot', 'qr', 'random']);
    const qr = t.rect(2);
    expect([qr.row, qr.start, qr.stop, qr.action]).toEqual([0, 0.5, 0.9, 'compute']);
    expect(t.task(2)).toMatchObject({ key: "('qr-2', 0)", prefix: 'qr' });
    expect([t.minStart, t.maxStop]).toEqual([0, 0.9]);
    // row 1 holds tasks 1 and 3, sorted by start
    expect([...t.byRow[1].data.subarray(0, t.byRow[1].length)]).toEqual([1, 3]);
  });

  it('never draws a task that ends before it starts', () => {
    const odd: TasksPlot = { ...tasks, keys: ['x'], tasks: ['x()'], group: [0], worker: [0], start: [2], end: [1] };
    const { part, buffers } = tasksMessage(odd, groups);
    const store = new Store();
    store.applyUpdate([part], buffers);
    expect(store.tasks.rect(0)).toMatchObject({ start: 2, stop: 2 });
  });

  it('sums the metric in the cache per function, as steps from 0 to the end', () => {
    const steps = cacheSteps(cache, groups, 1.0);
    expect(steps.map((s) => s.name)).toEqual(['random', 'qr', 'dot']);
    const [random, qr, dot] = steps;
    expect(random).toEqual({ name: 'random', x: [0, 0.4, 0.45, 0.9, 0.95, 1.0], y: [0, 1, 2, 1, 0, 0] });
    expect(qr).toEqual({ name: 'qr', x: [0, 0.9, 1.0], y: [0, 1, 0] });
    // never freed: held until the end
    expect(dot).toEqual({ name: 'dot', x: [0, 0.6, 1.0], y: [0, 2, 2] });
    expect(stepValue(random, 0.42)).toBe(1);
    expect(stepValue(random, 0.45)).toBe(2);
    expect(stepValue(random, -1)).toBe(0);
    expect(stepValue(random, 5)).toBe(0);
  });

  it('merges what is stored and freed at one instant, and leaves no float residue', () => {
    const c: CachePlot = { kind: 'cache', metric: 'nbytes', group: [0, 0, 0], start: [0, 0.5, 0.5], end: [0.5, 0.7, 0.7], value: [0.1, 0.2, 0.1] };
    const [s] = cacheSteps(c, ['f'], 1);
    expect(s.x).toEqual([0, 0.5, 0.7, 1]);
    expect(s.y[0]).toBeCloseTo(0.1, 12);
    expect(s.y[1]).toBeCloseTo(0.3, 12);
    expect(s.y.slice(2)).toEqual([0, 0]);
    expect(cacheSteps({ ...c, group: [], start: [], end: [], value: [] }, ['f'], 1)).toEqual([]);
  });

  it('shows every plot with a margin, even when all happened at one instant', () => {
    const [a, b] = plotsExtent(data());
    expect(a).toBeCloseTo(-0.01, 12);
    expect(b).toBeCloseTo(1.01, 12);
    expect(plotsExtent({ ...data(), duration: 0 })).toEqual([-1e-4, 1e-4]);
  });
});

describe('profiler plots view', () => {
  beforeEach(() => {
    const rec = recordingContext();
    vi.spyOn(HTMLCanvasElement.prototype, 'getContext').mockImplementation(() => rec.ctx);
  });
  afterEach(async () => {
    await new Promise((r) => setTimeout(r, 40));
    vi.restoreAllMocks();
  });

  it('stacks tasks, CPU, memory and cache, aligned, one colour per function', async () => {
    const host = document.createElement('div');
    document.body.append(host);
    const view = new ProfilerPlotsView(host, data(), { width: 800 });
    expect([...host.querySelectorAll('[data-plot]')].map((e) => e.getAttribute('data-plot'))).toEqual(['tasks', 'resource', 'cache']);
    expect(host.querySelectorAll('canvas')).toHaveLength(1);
    expect(host.querySelector('[data-chart="cpu"] path[data-series="CPU"]')).not.toBeNull();
    expect(host.querySelector('[data-chart="memory"] path[data-series="memory"]')).not.toBeNull();
    const lines = [...host.querySelectorAll('[data-chart="cache"] path[data-series]')];
    expect(lines.map((l) => l.getAttribute('data-series'))).toEqual(['random', 'qr', 'dot']);
    // the cache line of a function has the task legend's colour
    const stream = view.streams[0];
    expect(lines[1].getAttribute('stroke')).toBe(stream.table.prefixColors.color('qr'));
    const swatch = host.querySelector('[data-plot="tasks"] .kc-legend-item[data-label="qr"] .kc-swatch') as HTMLElement;
    expect(swatch.style.background).not.toBe('');
    expect(host.querySelector('[data-plot="tasks"] .kc-legend-item[data-label="transfer"]')).toBeNull();
    // hover text: key, task, duration and worker
    expect(stream.describe(2)).toBe("('qr-2', 0)\nqr(...)\n400.0 ms on worker 0");
    // the cache plot's hover names the line nearest the pointer (jsdom: the chart at 0, 0)
    const svg = host.querySelector('[data-chart="cache"] svg') as SVGSVGElement;
    const tip = host.querySelector('[data-chart="cache"] .kc-tooltip') as HTMLElement;
    const x = 84 + ((0.5 + 0.01) / 1.02) * (800 - 84); // t = 0.5 s: random holds 2, the others 0
    svg.dispatchEvent(new MouseEvent('mousemove', { clientX: x, clientY: 12 }));
    expect(tip.textContent).toBe('0.50 s\nrandom: 2');
    svg.dispatchEvent(new MouseEvent('mousemove', { clientX: x, clientY: 140 }));
    expect(tip.textContent).toMatch(/^0.50 s\n(qr|dot): 0$/);
    // the task plot drives the others: zoom in, and the charts follow
    stream.setDomain(0.2, 0.6);
    await new Promise((r) => setTimeout(r, 40));
    expect(view.domain).toEqual([0.2, 0.6]);
    const axis = [...host.querySelectorAll('[data-chart="cpu"] text.kc-axis')].map((t) => t.textContent);
    expect(axis).toContain('0.40 s');
    expect(axis).not.toContain('0.80 s');
    view.fit();
    await new Promise((r) => setTimeout(r, 40));
    expect(view.domain[0]).toBeCloseTo(-0.01, 12);
    view.destroy();
    expect(host.children).toHaveLength(0);
  });

  it('names threads by number, with their full ids on hover', () => {
    const host = document.createElement('div');
    const threads = { ...tasks, workers: ['thread 0', 'thread 1'], worker_ids: ['140645648996032', '140645640603328'] };
    const view = new ProfilerPlotsView(host, { ...data(), plots: [threads] }, { width: 600 });
    expect(view.streams[0].describe(1)).toMatch(/on thread 1 \(id 140645640603328\)$/);
    view.destroy();
  });

  it('draws empty plots with a note', () => {
    const host = document.createElement('div');
    const empty: ProfilerPlotsData = {
      title: 'Profile',
      origin: 0,
      duration: 0,
      groups: [],
      plots: [
        { ...tasks, keys: [], tasks: [], group: [], worker: [], workers: [], start: [], end: [] },
        { kind: 'resource', time: [], mem: [], cpu: [] },
        { kind: 'cache', metric: 'count', group: [], start: [], end: [], value: [] },
      ],
    };
    new ProfilerPlotsView(host, empty, { width: 600 });
    expect([...host.querySelectorAll('.kc-empty, .kc-note')].map((e) => e.textContent).join(' | ')).toMatch(
      /No tasks recorded.*No resource samples recorded.*No results were cached/,
    );
    expect(host.querySelectorAll('svg.kc-line-chart')).toHaveLength(3);
    const none = document.createElement('div');
    new ProfilerPlotsView(none, { ...empty, plots: [] }, { width: 600 });
    expect(none.textContent).toContain('nothing to plot');
  });
});
