// What issue 28 changed in the renderers that the lab panels, the widgets and the
// report share: axes (time and bytes), units, tooltips, the span tree's times, the
// task stream's legend filter, the worker table, redrawing at a new width.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { formatOffset, timeTicks } from '../src/canvas';
import { Tooltip } from '../src/dom';
import { FineMetricsView } from '../src/fineMetrics';
import { byteTicks, formatBytes } from '../src/format';
import { lineChart } from '../src/lineChart';
import { SpanTreeView, wallSeconds } from '../src/spanTree';
import { Store } from '../src/store';
import { TaskStreamView } from '../src/taskStream';
import { WorkerTableView } from '../src/workerTable';
import { canvasHost, records, span, TasksEncoder, workload, type Rec } from './helpers';

describe('time axes', () => {
  it('tick a ten-minute range at 0, 5, 10 min, not at thirds of it', () => {
    const { values, step } = timeTicks(0, 600, 3);
    expect(step).toBe(300);
    expect(values).toEqual([0, 300, 600]);
    expect(values.map((v) => formatOffset(v, step))).toEqual(['0 s', '5 min', '10 min']);
  });

  it('take the steps a clock reader expects, mixing units where the step asks', () => {
    expect(timeTicks(0, 100, 4).step).toBe(30);
    expect(timeTicks(0, 40, 4).step).toBe(10);
    expect(timeTicks(0, 3, 4).step).toBe(1);
    expect(timeTicks(0, 7200, 4).step).toBe(1800);
    expect(formatOffset(90, 30)).toBe('1 min 30 s');
    expect(formatOffset(5400, 1800)).toBe('1 h 30 min');
    // below a second, decimal steps as before
    expect(timeTicks(0, 0.5, 5).values).toEqual([0, 0.1, 0.2, 0.3, 0.4, 0.5]);
    expect(formatOffset(0.2, 0.1)).toBe('0.2 s');
  });
});

describe('byte axes', () => {
  it('tick round numbers of one binary unit, the last at or above the data', () => {
    const t = byteTicks(1000 * 2 ** 20);
    expect(t.labels).toEqual(['0', '250 MiB', '500 MiB', '750 MiB', '1000 MiB']);
    expect(t.top).toBeGreaterThanOrEqual(1000 * 2 ** 20);
    const narrow = byteTicks(109.2 * 2 ** 20);
    expect(new Set(narrow.labels).size).toBe(narrow.labels.length);
    expect(narrow.top).toBeGreaterThanOrEqual(109.2 * 2 ** 20);
  });

  it('write kibibytes as KiB', () => {
    expect(formatBytes(2048)).toBe('2.0 KiB');
    expect(byteTicks(3000).labels[byteTicks(3000).labels.length - 1]).toMatch(/KiB$/);
  });

  it('a line chart labels its y axis with them, and draws a limit as a rule it reaches', () => {
    const host = document.createElement('div');
    document.body.append(host);
    const svg = lineChart(host, [{ name: 'process', color: '#000', x: [0, 1, 2], y: [300 * 2 ** 20, 400 * 2 ** 20, 350 * 2 ** 20] }], {
      format: formatBytes,
      yTicks: (max) => byteTicks(max),
      tooltip: new Tooltip(host),
      width: 400,
      rules: [{ value: 2 ** 30, label: 'limit 1.0 GiB', color: '#f00' }],
    });
    const labels = [...svg.querySelectorAll('text.kc-y')].map((t) => t.textContent);
    expect(labels).toEqual(['0', '0.25 GiB', '0.5 GiB', '0.75 GiB', '1 GiB']);
    expect(svg.querySelector('line.kc-rule')?.getAttribute('data-rule')).toBe('limit 1.0 GiB');
    // a limit far above the data is named, not drawn: the data keeps the chart's height
    host.replaceChildren();
    const far = lineChart(host, [{ name: 'process', color: '#000', x: [0, 1], y: [60 * 2 ** 20, 61 * 2 ** 20] }], {
      format: formatBytes,
      yTicks: (max) => byteTicks(max),
      tooltip: new Tooltip(host),
      width: 400,
      rules: [{ value: 23.5 * 2 ** 30, label: 'limit 23.5 GiB', color: '#f00' }],
    });
    expect(far.querySelector('line.kc-rule')).toBeNull();
    expect(far.querySelector('.kc-rule-label.kc-above')?.textContent).toBe('↑ limit 23.5 GiB');
    expect(Number([...far.querySelectorAll('text.kc-y')].pop()?.getAttribute('data-value'))).toBeLessThan(2 ** 30);
    host.remove();
  });
});

describe('tooltip', () => {
  it('goes left of the pointer where the right edge would cut it off', () => {
    const root = document.createElement('div');
    document.body.append(root);
    vi.spyOn(root, 'getBoundingClientRect').mockReturnValue({ left: 0, top: 0, width: 300, height: 200, right: 300, bottom: 200, x: 0, y: 0, toJSON: () => ({}) });
    const tip = new Tooltip(root);
    Object.defineProperty(tip.node, 'offsetWidth', { value: 120 });
    Object.defineProperty(tip.node, 'offsetHeight', { value: 30 });
    tip.show('a task', new MouseEvent('mousemove', { clientX: 50, clientY: 20 }));
    expect(tip.node.style.left).toBe('62px');
    tip.show('a task', new MouseEvent('mousemove', { clientX: 280, clientY: 20 }));
    expect(parseFloat(tip.node.style.left) + 120).toBeLessThanOrEqual(300);
    root.remove();
  });
});

describe('span tree', () => {
  it('shows wall time and task time, labelled, and indents only the name', () => {
    const store = new Store();
    store.applyUpdate(
      [
        records(
          'spans',
          1,
          {
            root: span(['etl'], null, { enqueued: 10, start: 10.5, stop: 29, duration: 66 }),
            child: span(['etl', 'load'], 'root', { enqueued: 10, start: 10.5, stop: 12, duration: 5 }),
          },
          true,
        ),
      ],
      [],
    );
    const host = document.createElement('div');
    new SpanTreeView(host, store);
    const root = host.querySelector('.kc-tree-row[data-span="root"]') as HTMLElement;
    expect(root.querySelector('.kc-span-wall')?.textContent).toBe('wall 19.00 s');
    expect(root.querySelector('.kc-span-task')?.textContent).toBe('tasks 1.1 min');
    expect(wallSeconds(store.spans.records.get('root')!)).toBe(19);
    const child = host.querySelector('.kc-tree-row[data-span="child"]') as HTMLElement;
    expect(child.style.paddingLeft).toBe('');
    expect((child.querySelector('.kc-span-label') as HTMLElement).style.paddingLeft).toBe('14px');
    expect(child.querySelector('.kc-span-name')?.getAttribute('title')).toBe('etl / load');
  });
});

describe('task stream legend', () => {
  let host: HTMLDivElement;
  beforeEach(() => {
    ({ host } = canvasHost());
  });
  afterEach(async () => {
    await new Promise((r) => setTimeout(r, 40));
    vi.restoreAllMocks();
  });

  const recs: Rec[] = [
    { key: 'load-1', worker: 'tcp://a', thread: 1, ss: [[0, 10, 11]] },
    { key: 'crunch-2', worker: 'tcp://a', thread: 1, ss: [[1, 11, 11.2], [0, 11.2, 12]] },
  ];

  function view(onFilter?: (h: string[]) => void): TaskStreamView {
    const enc = new TasksEncoder();
    const store = new Store();
    const [part, buffers] = enc.encode(recs);
    part.full = true;
    store.applyUpdate([part], buffers);
    return new TaskStreamView(host, store, { width: 884, height: 220, onFilter });
  }

  it('hides a prefix on click, shows it alone on shift-click, and says so', () => {
    const seen: string[][] = [];
    const v = view((h) => seen.push(h));
    expect(v.collect(1).visited).toBe(3);
    (host.querySelector('.kc-legend-item[data-label="load"]') as HTMLButtonElement).click();
    expect(v.collect(1).visited).toBe(2); // crunch's transfer and compute
    expect(host.querySelector('.kc-legend-item[data-label="load"]')?.classList.contains('kc-off')).toBe(true);
    expect(seen[seen.length - 1]).toEqual(['load']);
    (host.querySelector('.kc-legend-item[data-label="load"]') as HTMLButtonElement).dispatchEvent(new MouseEvent('click', { shiftKey: true }));
    expect(v.collect(1).visited).toBe(1); // load alone: crunch and every action hidden
    // the same shift-click again shows everything
    (host.querySelector('.kc-legend-item[data-label="load"]') as HTMLButtonElement).dispatchEvent(new MouseEvent('click', { shiftKey: true }));
    expect(v.collect(1).visited).toBe(3);
    expect(seen[seen.length - 1]).toEqual([]);
  });

  it('hides an action (transfers) on its own', () => {
    const v = view();
    (host.querySelector('.kc-legend-item[data-label="transfer"]') as HTMLButtonElement).click();
    expect(v.collect(1).visited).toBe(2);
    expect(v.hit(84 + 442, 50)).toBeNull(); // where the transfer was: nothing to hover
  });
});

describe('worker table', () => {
  it('a row per worker by name: CPU, memory against its limit, tasks, spill, pause', () => {
    const host = document.createElement('div');
    const t = new WorkerTableView(host);
    const row = { nthreads: 2, cpu: 97.4, memory: 3 * 2 ** 30, memory_limit: 4 * 2 ** 30, managed: 2 ** 30, spilled: 0, executing: 2, ready: 5, paused: false };
    t.update([
      { ...row, address: 'tcp://b', name: 'worker-10' },
      { ...row, address: 'tcp://a', name: 'worker-2', paused: true, spilled: 2 ** 20, cpu: null },
    ]);
    const rows = [...host.querySelectorAll('tbody tr')];
    expect(rows.map((r) => r.getAttribute('data-worker'))).toEqual(['tcp://a', 'tcp://b']);
    expect(rows[0].querySelector('.kc-state')?.textContent).toBe('paused');
    expect(rows[0].querySelector('.kc-spilled')?.textContent).toBe('1.0 MiB');
    expect(rows[0].querySelector('.kc-cpu')?.textContent).toBe('–');
    expect(rows[1].querySelector('.kc-cpu')?.textContent).toBe('97%');
    expect(rows[1].querySelector('.kc-memory-text')?.textContent).toBe('3.0 GiB / 4.0 GiB');
    expect((rows[1].querySelector('.kc-memory-managed') as HTMLElement).style.width).toBe('25%');
    expect(rows[1].querySelector('.kc-memory-bar')?.classList.contains('kc-high')).toBe(false);
    expect(host.querySelector('.kc-title')?.textContent).toBe('Workers 2 workers, 1 paused');
  });
});

describe('fine metrics', () => {
  it('draws its bars again at a new width', async () => {
    const store = new Store();
    const { metrics, spans } = workload();
    store.applyUpdate([metrics[0], spans], metrics[1]);
    const host = document.createElement('div');
    document.body.append(host);
    let width = 900;
    const view = new FineMetricsView(host, store);
    Object.defineProperty(view.root, 'clientWidth', { get: () => width });
    for (const plot of host.querySelectorAll('.kc-plot')) Object.defineProperty(plot, 'clientWidth', { get: () => width / 2 });
    view.render();
    const svgWidth = () => Number(host.querySelector('[data-panel="by-function"] svg')?.getAttribute('width'));
    expect(svgWidth()).toBe(450);
    width = 500;
    view.resize();
    await new Promise((r) => setTimeout(r, 40)); // the next frame
    expect(svgWidth()).toBe(250);
    width = 800;
    view.resize();
    await new Promise((r) => setTimeout(r, 40));
    expect(svgWidth()).toBe(400);
    view.destroy();
    host.remove();
  });
});
