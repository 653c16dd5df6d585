import { describe, expect, it } from 'vitest';
import { decodeBase64, renderReport, type ReportData } from '../src/report';
import { bars, workload } from './helpers';

function b64(buffer: ArrayBuffer): string {
  return btoa(String.fromCharCode(...new Uint8Array(buffer)));
}

describe('report', () => {
  it('renders summary, panels, spans and hooks from embedded data', () => {
    const w = workload();
    const data: ReportData = {
      title: 'My report',
      summary: { start: 0, duration: 2.5, tasks: 11, threads: 4, workers: 2, versions: { python: '3.11' }, code: 'with x:\n  pass' },
      updates: [{ parts: [w.metrics[0], w.spans, w.progress], buffers: w.metrics[1].map(b64) }],
      sections: { task_stream: [{ key: 'x' }] },
    };
    const root = document.createElement('div');
    renderReport(root, data);
    expect(root.querySelector('h1')?.textContent).toBe('My report');
    expect(root.querySelector('.kc-summary')?.textContent).toContain('2.50 s');
    expect(bars(root, 'by-function').length).toBe(4);
    expect(root.querySelectorAll('.kc-tree-row').length).toBe(3);
    expect(root.querySelector('[data-hook="task_stream"]')?.textContent).toContain('Recorded');
    expect(root.querySelector('[data-hook="memory"]')?.textContent).toContain('Not recorded');
    (root.querySelector('[data-span="C"]') as HTMLElement).click();
    expect(new Set(bars(root, 'by-function').map((b) => b.label))).toEqual(new Set(['sum']));
  });

  it('decodes base64 buffers', () => {
    expect([...new Uint8Array(decodeBase64(btoa('\x01\x02')))]).toEqual([1, 2]);
  });
});
