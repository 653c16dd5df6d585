import { beforeEach, describe, expect, it } from 'vitest';
import { comparePanels, CompareView, MAX_ROWS, type CompareData, type CompareFilters } from '../src/compare';
import { mount } from '../src/mount';
import { localBinding } from '../src/report';
import { Store } from '../src/store';

function side(tag: string, wall: number, tasks: number) {
  return {
    ref: tag, id: `${tag}-id-0000`, name: 'etl', label: `etl (history ${tag})`, where: 'history' as const,
    start: 0, stop: wall, wall, tasks, nbytes: 0, thread_seconds: 0, done: true, source: null,
  };
}

/** parse slowed down by I/O between a and b; load the same; twice the tasks in b. */
function data(): CompareData {
  return {
    a: side('a', 25, 110),
    b: side('b', 40.5, 220),
    verdict: 'wall +62%: `parse` thread-noncpu +14.1 s; everything else within 5%',
    perTask: true,
    rows: [
      ['parse', 'thread-noncpu', 'seconds', 1, 15.1, 100, 200],
      ['parse', 'thread-cpu', 'seconds', 10, 20, 100, 200],
      ['load', 'thread-cpu', 'seconds', 5, 5, 10, 20],
      [null, 'idle', 'seconds', 3, 1, null, null],
      ['parse', 'tasks', 'count', 100, 200, 100, 200],
    ],
  };
}

const F: CompareFilters = { unit: 'seconds', mode: 'side-by-side', normalise: 'total', hiddenFunctions: [], hiddenActivities: [] };

describe('comparePanels', () => {
  it('sums by function and by activity, largest change first', () => {
    const p = comparePanels(data(), F);
    expect(p.byFunction.map((r) => [r.label, r.a, r.b])).toEqual([['parse', 11, 35.1], ['load', 5, 5]]);
    expect(p.byActivity.map((r) => r.label)).toEqual(['thread-noncpu', 'thread-cpu', 'idle']);
    expect(p.units).toEqual(['seconds', 'count']);
    expect(p.functions).toEqual(['load', 'parse']);
  });

  it('normalises per task of each function, and per wall-clock second', () => {
    const perTask = comparePanels(data(), { ...F, normalise: 'per-task' });
    const parse = perTask.byFunction.find((r) => r.label === 'parse');
    expect(parse?.a).toBeCloseTo(11 / 100);
    expect(parse?.b).toBeCloseTo(35.1 / 200);
    const load = perTask.byFunction.find((r) => r.label === 'load');
    expect(load?.delta).toBeCloseTo(5 / 20 - 5 / 10);
    const idle = perTask.byActivity.find((r) => r.label === 'idle');
    expect(idle?.a).toBeCloseTo(3 / 110); // idle: per task of the run
    const perWall = comparePanels(data(), { ...F, normalise: 'per-wall' });
    expect(perWall.byFunction.find((r) => r.label === 'load')?.b).toBeCloseTo(5 / 40.5);
  });

  it('hides functions and activities; idle only while every function shows', () => {
    const p = comparePanels(data(), { ...F, hiddenFunctions: ['load'], hiddenActivities: ['thread-cpu'] });
    expect(p.byFunction.map((r) => r.label)).toEqual(['parse']);
    expect(p.byActivity.map((r) => r.label)).toEqual(['thread-noncpu']);
  });
});

let host: HTMLDivElement;
beforeEach(() => {
  document.body.replaceChildren();
  host = document.createElement('div');
  document.body.append(host);
});

function bars(panel: string, sideName: string): { label: string; value: number; cls: string }[] {
  return [...host.querySelectorAll(`[data-panel="${panel}"] g.kc-row`)].flatMap((g) =>
    [...g.querySelectorAll(`rect[data-side="${sideName}"]`)].map((r) => ({
      label: g.getAttribute('data-label') ?? '',
      value: Number(r.getAttribute('data-value')),
      cls: r.getAttribute('class') ?? '',
    })),
  );
}

describe('CompareView', () => {
  it('shows the verdict, both runs and paired bars', () => {
    const b = localBinding({ data: data() });
    const view = new CompareView(host, b, { width: 500 });
    expect(host.querySelector('.kc-verdict')?.textContent).toBe(data().verdict);
    expect(host.querySelector('.kc-side-a')?.textContent).toContain('a: etl (history a) · wall 25.00 s · 110 tasks');
    expect(bars('by-function', 'a')).toEqual([
      { label: 'parse', value: 11, cls: 'kc-cmp-bar kc-cmp-a' },
      { label: 'load', value: 5, cls: 'kc-cmp-bar kc-cmp-a' },
    ]);
    expect(bars('by-function', 'b').map((x) => x.value)).toEqual([35.1, 5]);
    expect((host.querySelector('.kc-compare-choose') as HTMLElement).hidden).toBe(true);
    view.destroy();
    expect(host.children.length).toBe(0);
  });

  it('draws the change from zero, up and down, when asked', () => {
    const b = localBinding({ data: data() });
    new CompareView(host, b, { width: 500 });
    const mode = host.querySelector('select.kc-mode') as HTMLSelectElement;
    mode.value = 'diverging';
    mode.dispatchEvent(new Event('change'));
    expect(b.get('mode')).toBe('diverging');
    const deltas = bars('by-activity', 'delta');
    expect(deltas.map((d) => d.label)).toEqual(['thread-noncpu', 'thread-cpu', 'idle']);
    expect(deltas[0].cls).toContain('kc-cmp-up');
    expect(deltas[2].cls).toContain('kc-cmp-down');
    expect(host.querySelector('[data-panel="by-activity"] g.kc-row text.kc-value')?.textContent).toBe('+14.10 s');
  });

  it('switches unit and normalisation through its binding', () => {
    const b = localBinding({ data: data() });
    new CompareView(host, b, { width: 500 });
    const unit = host.querySelector('select.kc-unit') as HTMLSelectElement;
    expect([...unit.options].map((o) => o.value)).toEqual(['seconds', 'count']);
    unit.value = 'count';
    unit.dispatchEvent(new Event('change'));
    expect(bars('by-function', 'b')).toEqual([{ label: 'parse', value: 200, cls: 'kc-cmp-bar kc-cmp-b' }]);
    b.set({ unit: 'seconds', normalise: 'per-task' }); // from the kernel's side
    // per task, load (half the time per task in b) changed more than parse
    expect(bars('by-function', 'b').map((x) => x.label)).toEqual(['load', 'parse']);
    expect(bars('by-function', 'b')[1].value).toBeCloseTo(35.1 / 200);
    expect(host.querySelector('[data-panel="by-function"] .kc-note')?.textContent).toBe(' (seconds per task)');
  });

  it('offers the runs to choose from and asks for the chosen pair', () => {
    const b = localBinding({
      data: null,
      runs: [
        { ref: 'r1', label: 'etl · 10:00' },
        { ref: 'r2', label: 'etl · 11:00' },
      ],
      a: 'r1',
      b: 'r2',
    });
    new CompareView(host, b);
    expect(host.querySelector('.kc-verdict')?.textContent).toBe('Nothing to compare yet: choose two runs.');
    const pickA = host.querySelector('select.kc-pick-a') as HTMLSelectElement;
    expect([...pickA.options].map((o) => o.text)).toEqual(['etl · 10:00', 'etl · 11:00']);
    pickA.value = 'r2';
    pickA.dispatchEvent(new Event('change'));
    expect([b.get('a'), b.get('b')]).toEqual(['r2', 'r2']);
    b.set({ error: 'No run named nope' });
    expect(host.querySelector('.kc-verdict')?.className).toContain('kc-error-text');
  });

  it('shows the largest changes only, saying how many there are', () => {
    const many = data();
    many.rows = Array.from({ length: MAX_ROWS + 5 }, (_, i) => [`f${i}`, 'thread-cpu', 'seconds', 1, 1 + i, 1, 1]);
    new CompareView(host, localBinding({ data: many }), { width: 500 });
    expect(bars('by-function', 'b')).toHaveLength(MAX_ROWS);
    expect(bars('by-function', 'b')[0].label).toBe(`f${MAX_ROWS + 4}`);
    expect(host.querySelector('[data-panel="by-function"] .kc-note')?.textContent).toContain(`of ${MAX_ROWS + 5}`);
  });

  it('is mounted by kind, as the widget and the lab panel do', () => {
    const mounted = mount('compare', host, new Store(), localBinding({ data: data() }), 400);
    expect(mounted.compare).toBeDefined();
    expect(host.querySelector('.kc-compare .kc-verdict')?.textContent).toContain('wall +62%');
    mounted.destroy();
    expect(host.querySelector('.kc-compare')).toBeNull();
  });
});
