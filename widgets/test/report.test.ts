import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { flattenNested } from '../src/profileData';
import { decodeBase64, renderFlamePage, renderReport, type EmbeddedProfiles, type ReportData } from '../src/report';
import { bandwidthOverTime } from '../src/reportCharts';
import { bars, manyTasks, recordingContext, smallProfile, TasksEncoder, workload } from './helpers';

beforeEach(() => {
  const rec = recordingContext();
  vi.spyOn(HTMLCanvasElement.prototype, 'getContext').mockImplementation(() => rec.ctx);
});
afterEach(async () => {
  await new Promise((r) => setTimeout(r, 40)); // let scheduled frames draw before the canvas mock goes
  vi.restoreAllMocks();
});

function embedded(): EmbeddedProfiles {
  const t = flattenNested(smallProfile());
  const cols = [t.parent, t.count, t.own, t.name, t.file, t.line, t.text];
  return {
    trees: { '': { header: { strings: t.strings, total: t.total, nframes: t.n }, buffers: cols.map((c) => b64(c.slice().buffer as ArrayBuffer)) } },
    timeline: { counts: [[1, 10]], keys: { crunch: [[1, 6]] } },
    interval: 0.01,
  };
}

function b64(buffer: ArrayBuffer): string {
  return btoa(String.fromCharCode(...new Uint8Array(buffer)));
}

describe('report', () => {
  it('adds the comparison with an earlier run, verdict in the summary', () => {
    const w = workload();
    const sideOf = (tag: string, wall: number) => ({
      ref: tag, id: tag, name: 'etl', label: `etl (${tag})`, where: 'history' as const, start: 0, stop: wall,
      wall, tasks: 10, nbytes: 0, thread_seconds: 1, done: true,
    });
    const data: ReportData = {
      title: 'compared',
      summary: { start: 0, duration: 2.5, tasks: 10, threads: 4, workers: 2, versions: {}, code: '' },
      updates: [{ parts: [w.metrics[0], w.spans, w.progress], buffers: w.metrics[1].map(b64) }],
      sections: {
        compare: {
          a: sideOf('before', 1), b: sideOf('report', 2.5), perTask: false,
          verdict: 'wall +150%: `read_csv` thread-noncpu +1.5 s; everything else within 5%',
          rows: [['read_csv', 'thread-noncpu', 'seconds', 0.5, 2, 10, 10]],
        },
      },
    };
    const root = document.createElement('div');
    renderReport(root, data);
    expect(root.querySelector('.kc-summary')?.textContent).toContain('Compared withetl (before): wall +150%');
    expect(root.querySelector('#compare .kc-verdict')?.textContent).toContain('`read_csv` thread-noncpu +1.5 s');
    const b = root.querySelector('#compare [data-panel="by-function"] rect[data-side="b"]');
    expect(b?.getAttribute('data-value')).toBe('2');
  });

  it('has no comparison section unless asked', () => {
    const w = workload();
    const root = document.createElement('div');
    renderReport(root, {
      title: 't', summary: { start: 0, duration: 1, tasks: 1, threads: 1, workers: 1, versions: {}, code: '' },
      updates: [{ parts: [w.metrics[0], w.spans, w.progress], buffers: w.metrics[1].map(b64) }], sections: {},
    });
    expect(root.querySelector('#compare')).toBeNull();
  });

  it('renders summary, panels, spans and every section from embedded data', () => {
    const w = workload();
    const [tasks, taskBuffers] = new TasksEncoder().encode(manyTasks(50));
    tasks.full = true;
    const data: ReportData = {
      title: 'My report',
      summary: { start: 0, duration: 2.5, tasks: 11, threads: 4, workers: 2, versions: { python: '3.11' }, code: 'with x:\n  pass' },
      updates: [{ parts: [w.metrics[0], w.spans, w.progress, tasks], buffers: [...w.metrics[1], ...taskBuffers].map(b64) }],
      sections: {
        profile: embedded(),
        memory: { time: [0, 0.5, 1], process: [10, 30, 20], managed: [0, 5, 1], spilled: [0, 0, 0] },
        bandwidth: { workers: ['tcp://a', 'tcp://b'], to: [1, 1, 0], from: [0, 0, 1], start: [0.1, 0.5, 0.6], stop: [0.2, 0.7, 0.6], bytes: [1000, 2000, 10], compressed: [500, 2000, 10], window: [0, 1] },
        findings: {
          found: [
            { rule: 'spilling', title: 'Spilling to disk', cost: 2, evidence: 'disk share 30%', advice: 'raise the memory limit' },
            { rule: 'imbalance', title: 'Imbalance', cost: 1, evidence: 'busiest worker seconds 2', advice: 'check restrictions' },
          ],
          unchecked: { 'gil-contention': 'not told apart yet' },
        },
      },
    };
    const root = document.createElement('div');
    renderReport(root, data);
    const found = [...root.querySelectorAll('#findings li')];
    expect(found.map((li) => li.getAttribute('data-rule'))).toEqual(['spilling', 'imbalance']);
    expect(found[0].textContent).toContain('evidence: disk share 30%');
    expect(found[0].textContent).toContain('try: raise the memory limit');
    expect(root.querySelector('#findings > p.kc-note')?.textContent).toContain('gil-contention (not told apart yet)');
    expect(root.querySelector('h1')?.textContent).toBe('My report');
    expect(root.querySelector('.kc-summary')?.textContent).toContain('2.50 s');
    expect(bars(root, 'by-function').length).toBe(4);
    expect(root.querySelectorAll('.kc-tree-row').length).toBe(3);
    expect(root.querySelector('#task-stream .kc-title')?.textContent).toContain('50 tasks');
    expect(root.querySelector('#profile .kc-title')?.textContent).toContain('10 samples');
    expect(root.querySelectorAll('#memory path[data-series]').length).toBe(2); // no spilled: no line
    expect(root.querySelector('#bandwidth .kc-note')?.textContent).toContain('3 transfers, 2.9 KiB');
    const pairs = [...root.querySelectorAll('#bandwidth tr[data-pair]')].map((r) => r.getAttribute('data-pair'));
    expect(pairs).toEqual(['a>b', 'b>a']);
    (root.querySelector('[data-span="C"]') as HTMLElement).click();
    expect(new Set(bars(root, 'by-function').map((b) => b.label))).toEqual(new Set(['sum']));
  });

  it('says so when a section has no data', () => {
    const w = workload();
    const root = document.createElement('div');
    renderReport(root, {
      title: 'r', summary: { start: 0, duration: 1, tasks: 0, threads: 1, workers: 1, versions: {}, code: '' },
      updates: [{ parts: [w.metrics[0]], buffers: w.metrics[1].map(b64) }], sections: {},
    });
    for (const id of ['task-stream', 'profile', 'memory', 'bandwidth', 'findings']) expect(root.querySelector(`#${id} .kc-empty`)).not.toBeNull();
  });

  it('spreads each transfer over its duration, in bytes per second', () => {
    const t = { workers: ['a', 'b'], to: [1, 1], from: [0, 0], start: [0, 1], stop: [1, 1], bytes: [100, 50], compressed: [100, 50], window: [0, 2] as [number, number] };
    const { x, y } = bandwidthOverTime(t, 4);
    expect(x).toEqual([0.25, 0.75, 1.25, 1.75]);
    expect(y).toEqual([100, 100, 100, 0]); // the instant transfer lands in one bin: 50 B in 0.5 s
  });

  it('draws the flame graph page of client.profile(filename=...)', () => {
    const root = document.createElement('div');
    const view = renderFlamePage(root, { page: 'flamegraph', title: 'Profile of all tasks', summary: '10 samples.', profiles: embedded() });
    expect(root.querySelector('h1')?.textContent).toBe('Profile of all tasks');
    expect(view.tree?.n).toBe(6);
    view.destroy();
  });

  it('decodes base64 buffers', () => {
    expect([...new Uint8Array(decodeBase64(btoa('\x01\x02')))]).toEqual([1, 2]);
  });
});
