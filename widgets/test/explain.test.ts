// Spans explained on request: the store's Explanations (what is asked, once), the
// Task Stream's critical-path highlight, the Span Tree's path lengths, the
// explanation view (path, idle by reason, findings) and the idle family's colours.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { activityColor, IDLE_ACTIVITIES, KNOWN } from '../src/colors';
import { ExplainView } from '../src/explain';
import type { Explanation } from '../src/explanations';
import { mount } from '../src/mount';
import { SpanTreeView } from '../src/spanTree';
import { Store } from '../src/store';
import { TaskStreamView } from '../src/taskStream';
import type { SpanRecord } from '../src/types';
import widget from '../src/widget';
import { canvasHost, MockModel, recordingContext, TasksEncoder, type Rec } from './helpers';

let host: HTMLDivElement;
let rec: ReturnType<typeof recordingContext>;
beforeEach(() => {
  ({ host, rec } = canvasHost());
});
afterEach(async () => {
  await new Promise((r) => setTimeout(r, 40));
  vi.restoreAllMocks();
});

function span(name: string[], done: boolean, enqueued = 0, parent: string | null = null): SpanRecord {
  return { name, parent, enqueued, start: enqueued, stop: enqueued + 4, duration: 6, nbytes: 0, states: { memory: 3 }, done, code: [] };
}

const recs: Rec[] = [
  { key: 'a-1', worker: 'tcp://a', thread: 1, ss: [[0, 10, 11]] },
  { key: 'b-1', worker: 'tcp://b', thread: 1, ss: [[0, 10, 10.5]] },
  { key: 'a-2', worker: 'tcp://b', thread: 1, ss: [[1, 11, 11.2], [0, 11.2, 14]] },
];

function loaded(): Store {
  const store = new Store();
  const enc = new TasksEncoder();
  const [part, buffers] = enc.encode(recs);
  part.full = true;
  store.applyUpdate([part, { feed: 'spans', seq: 1, full: true, records: { S: span(['etl'], true, 10) }, removed: [], nbuffers: 0 }], buffers);
  return store;
}

function answer(extra: Partial<Explanation> = {}): Explanation {
  const step = (key: string, begin: number, end: number) => ({ key, worker: 'w', via: 'dependency', begin, end, scheduler: 0, transfer: 0.2, queued: 0, compute: end - begin - 0.2 });
  return {
    type: 'explain', span: 'S', name: ['etl'], done: true, wall: 4,
    path: { length: 4, wall: 4, covered: 1, totals: { scheduler: 0, transfer: 0.2, queued: 0, compute: 3.8 }, ntasks: 2, steps: [step('a-1', 10, 11), step('a-2', 11, 14)] },
    idle: { 'idle: no-ready-task': 1.5, 'idle or other spans': 0.5 },
    findings: {
      found: [
        { rule: 'idle-bound', title: 'Threads idle: nothing ready', cost: 2, evidence: 'no-ready-task share 60%', advice: 'more partitions' },
        { rule: 'transfer-bound', title: 'Waiting for data', cost: 1, evidence: 'ratio 1.2', advice: 'co-locate' },
      ],
      unchecked: { gil: 'needs the profiler' },
    },
    ...extra,
  };
}

describe('idle colours', () => {
  it('gives every idle part one muted colour of its own, apart from the busy activities', () => {
    const idle = IDLE_ACTIVITIES.filter((a) => a !== 'idle').map((a) => activityColor(a));
    expect(new Set(idle).size).toBe(idle.length);
    expect(activityColor('idle or other spans')).toBe(KNOWN['idle or other spans']);
    const busy = Object.keys(KNOWN).filter((a) => !a.startsWith('idle')).map((a) => KNOWN[a]);
    for (const c of idle) expect(busy).not.toContain(c);
  });
});

describe('Explanations', () => {
  it('asks once per span, once more when a running span is done, and takes answers', () => {
    const sent: unknown[] = [];
    const store = new Store();
    store.explain.send = (m) => sent.push(m);
    const running = span(['etl'], false);
    store.explain.want('S', running);
    store.explain.want('S', running);
    expect(sent).toEqual([{ type: 'explain', span: 'S' }]);
    expect(store.explain.receive(answer({ done: false }))).toBe(true);
    store.explain.want('S', running);
    expect(sent.length).toBe(1);
    store.explain.want('S', span(['etl'], true));
    store.explain.want('S', span(['etl'], true));
    expect(sent.length).toBe(2);
    expect(store.explain.receive({ type: 'update', parts: [] })).toBe(false);
  });

  it('asks the path lengths of finished spans only, each once', () => {
    const sent: any[] = [];
    const store = new Store();
    store.explain.send = (m) => sent.push(m);
    const spans = new Map([['A', span(['a'], true)], ['B', span(['b'], false)]]);
    store.explain.askPaths(spans);
    store.explain.askPaths(spans);
    expect(sent).toEqual([{ type: 'paths', spans: ['A'] }]);
  });
});

describe('TaskStreamView critical path', () => {
  it('outlines the path of the latest span and dims the rest, on its toggle', () => {
    const store = loaded();
    const sent: any[] = [];
    store.explain.send = (m) => sent.push(m);
    const view = new TaskStreamView(host, store, { width: 884, height: 220 });
    const toggle = host.querySelector('.kc-path-toggle') as HTMLButtonElement;
    expect(toggle.getAttribute('aria-pressed')).toBe('false');
    toggle.click();
    expect(sent).toEqual([{ type: 'explain', span: 'S' }]);
    expect(host.querySelector('.kc-path-note')?.textContent).toContain('asking');
    store.explain.receive(answer());
    expect(view.pathRects().length).toBe(2); // a-1 and a-2's compute, not b-1's
    rec.fills.length = 0;
    view.draw();
    expect(view.pathDrawn).toBe(2);
    expect(view.canvas.dataset.pathRects).toBe('2');
    expect(rec.calls.get('strokeRect')).toBe(2);
    expect(host.querySelector('.kc-path-note')?.textContent).toBe('etl: path 4.00 s of 4.00 s, 2 tasks');
    toggle.click();
    view.draw();
    expect(view.pathDrawn).toBe(0);
    expect(toggle.getAttribute('aria-pressed')).toBe('false');
    view.destroy();
  });

  it('joins only the run explained when a key was computed again later (a user trial)', () => {
    const store = new Store();
    const enc = new TasksEncoder();
    // the same keys again, later, in another run: a-1 on worker b, a-2 on worker a
    const again: Rec[] = [
      { key: 'a-1', worker: 'tcp://b', thread: 1, ss: [[0, 20, 21]] },
      { key: 'a-2', worker: 'tcp://a', thread: 1, ss: [[0, 21, 23]] },
    ];
    const [part, buffers] = enc.encode([...recs, ...again]);
    part.full = true;
    store.applyUpdate([part, { feed: 'spans', seq: 1, full: true, records: { S: span(['etl'], true, 10) }, removed: [], nbuffers: 0 }], buffers);
    store.explain.send = () => undefined;
    const view = new TaskStreamView(host, store, { width: 884, height: 220 });
    view.setShowPath(true);
    store.explain.receive(answer());
    const t = store.tasks;
    const drawn = view.pathRects().map((r) => [t.task(t.rect(r).task).key, t.rect(r).start, t.rect(r).stop]);
    expect(drawn).toEqual([['a-1', 10, 11], ['a-2', 11.2, 14]]);
    // a step whose run the table no longer holds is left out, not joined to a later run
    store.explain.receive(answer({ path: { ...answer().path!, steps: [...answer().path!.steps, { ...answer().path!.steps[1], key: 'a-1', end: 30 }] } }));
    expect(view.pathRects().length).toBe(2);
    view.destroy();
  });

  it("shows the span chosen in a tree, and says so when the kernel cannot walk it", () => {
    const store = loaded();
    store.explain.send = () => undefined;
    const view = new TaskStreamView(host, store, { width: 884, height: 220 });
    store.explain.setFocus('S');
    view.setShowPath(true);
    store.explain.receive(answer({ path: null, path_error: 'no dependencies known' }));
    expect(host.querySelector('.kc-path-note')?.textContent).toBe('no dependencies known');
    view.draw();
    expect(view.pathDrawn).toBe(0);
    view.destroy();
  });
});

describe('span tree and explanation', () => {
  it("shows a finished span's path beside its wall time, asked once", () => {
    const store = loaded();
    const sent: any[] = [];
    store.explain.send = (m) => sent.push(m);
    new SpanTreeView(host, store);
    expect(sent).toEqual([{ type: 'paths', spans: ['S'] }]);
    store.explain.receive({ type: 'paths', paths: { S: { length: 3.2, wall: 4 } } });
    expect(host.querySelector('[data-span="S"] .kc-span-path')?.textContent).toBe('path 3.20 s of 4.00 s');
    expect(sent.length).toBe(1);
  });

  it('explains the chosen span: path, idle by reason with legend, findings most costly first', () => {
    const store = loaded();
    const sent: any[] = [];
    store.explain.send = (m) => sent.push(m);
    const tree = new SpanTreeView(host, store);
    const view = new ExplainView(host, store);
    expect(view.root.dataset.state).toBe('none');
    (host.querySelector('[data-span="S"]') as HTMLElement).click();
    expect(sent).toContainEqual({ type: 'explain', span: 'S' });
    expect(view.root.dataset.state).toBe('asking');
    store.explain.receive(answer());
    expect(view.root.dataset.state).toBe('ready');
    expect(host.querySelector('.kc-path-summary')?.textContent).toContain('path 4.00 s of 4.00 s wall (100%), 2 tasks: from a-1 to a-2');
    const idle = [...host.querySelectorAll('.kc-idle-parts .kc-legend-item')].map((e) => e.getAttribute('data-label'));
    expect(idle).toEqual(['idle: no-ready-task', 'idle or other spans']);
    const swatch = host.querySelector('.kc-idle-parts [data-label="idle or other spans"] .kc-swatch') as HTMLElement;
    expect(swatch.style.background).toBeTruthy();
    expect([...host.querySelectorAll('.kc-findings li')].map((li) => li.getAttribute('data-rule'))).toEqual(['idle-bound', 'transfer-bound']);
    expect(host.querySelector('.kc-findings li')?.textContent).toContain('try: more partitions');
    expect(host.querySelector('.kc-explain')?.textContent).toContain('Not checked: gil');
    tree.destroy();
    view.destroy();
  });

  it('shows the error the kernel sent back', () => {
    const store = loaded();
    store.explain.send = () => undefined;
    store.explain.setFocus('S');
    new ExplainView(host, store);
    store.explain.receive({ type: 'explain', span: 'S', error: "span='S': no span has this id" });
    expect(host.querySelector('.kc-explain .kc-error')?.textContent).toContain('no span has this id');
  });
});

describe('widget and dashboard', () => {
  it("asks on the widget's comm and hands the answer to the store's views", () => {
    const model = new MockModel({ kind: 'dashboard', _uid: 'explain-1', selected: '', span_filter: '', unit: 'seconds', hidden_functions: [], hidden_activities: [] });
    const cleanup = widget.initialize({ model });
    const dispose = widget.render({ model, el: host });
    expect(host.querySelector('.kc-explain')).not.toBeNull();
    model.emit('msg:custom', { type: 'update', parts: [{ feed: 'spans', seq: 1, full: true, records: { S: span(['etl'], true) }, removed: [], nbuffers: 0 }] }, []);
    (host.querySelector('[data-span="S"]') as HTMLElement).click();
    expect(model.sent).toContainEqual({ type: 'explain', span: 'S' });
    model.emit('msg:custom', answer(), []);
    expect(host.querySelectorAll('.kc-findings li').length).toBe(2);
    dispose();
    cleanup();
  });

  it('mounts an explanation under a span tree', () => {
    const store = loaded();
    const values: Record<string, unknown> = { selected: '' };
    const m = mount('span-tree', host, store, { get: (k) => values[k], set: (v) => Object.assign(values, v), onChange: () => () => undefined });
    expect(m.explain).toBeDefined();
    m.destroy();
  });
});
