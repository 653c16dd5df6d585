// One row per worker: CPU, memory against its limit (a bar: managed, the rest of the
// process, the limit as the bar's end), tasks executing and ready, bytes spilled to
// disk, and whether it paused for memory. Rows keep their order (by name) from one
// update to the next, so that the eye can follow a worker.
import { h } from './dom';
import { formatBytes } from './format';

export interface WorkerRow {
  address: string;
  name: string;
  nthreads: number;
  /** Percent of one core (a worker process), or of the kernel process (embedded
   * workers, which share it); null where unknown. */
  cpu: number | null;
  memory: number;
  memory_limit: number | null;
  managed: number;
  spilled: number;
  executing: number;
  ready: number;
  paused: boolean;
}

const COLUMNS = ['Worker', 'Threads', 'CPU', 'Memory', 'Executing', 'Ready', 'Spilled', 'State'];

export class WorkerTableView {
  readonly root: HTMLDivElement;
  private body: HTMLTableSectionElement;
  private summary: HTMLSpanElement;

  constructor(host: HTMLElement) {
    this.body = h('tbody');
    this.summary = h('span', { class: 'kc-note' });
    const head = h('thead', {}, h('tr', {}, ...COLUMNS.map((c) => h('th', { text: c, scope: 'col' }))));
    this.root = h(
      'div',
      { class: 'kc-view kc-workers' },
      h('div', { class: 'kc-title' }, 'Workers ', this.summary),
      h('table', { class: 'kc-table kc-worker-table' }, head, this.body),
    );
    host.append(this.root);
  }

  update(rows: WorkerRow[]): void {
    const sorted = [...rows].sort((a, b) => a.name.localeCompare(b.name, undefined, { numeric: true }) || a.address.localeCompare(b.address));
    const paused = sorted.filter((r) => r.paused).length;
    this.summary.textContent = `${sorted.length} worker${sorted.length === 1 ? '' : 's'}${paused ? `, ${paused} paused` : ''}`;
    if (!sorted.length) {
      this.body.replaceChildren(h('tr', {}, h('td', { class: 'kc-empty', colspan: String(COLUMNS.length), text: 'No workers' })));
      return;
    }
    this.body.replaceChildren(...sorted.map((r) => this.row(r)));
  }

  private row(r: WorkerRow): HTMLTableRowElement {
    const limit = r.memory_limit && r.memory_limit > 0 ? r.memory_limit : null;
    const scale = limit ?? Math.max(r.memory, 1);
    const pct = (v: number) => `${Math.min(100, (100 * v) / scale).toFixed(1)}%`;
    const managed = Math.min(r.managed, r.memory);
    const over = limit !== null && r.memory >= 0.8 * limit;
    const bar = h(
      'div',
      {
        class: `kc-memory-bar${over ? ' kc-high' : ''}`,
        title: `process ${formatBytes(r.memory)}, of which ${formatBytes(managed)} results held${limit ? `; limit ${formatBytes(limit)}` : '; no limit'}`,
      },
      h('div', { class: 'kc-memory-managed', style: `width:${pct(managed)}` }),
      h('div', { class: 'kc-memory-unmanaged', style: `width:${pct(r.memory - managed)}` }),
    );
    const memoryText = limit ? `${formatBytes(r.memory)} / ${formatBytes(limit)}` : formatBytes(r.memory);
    const cpu = r.cpu === null ? '–' : `${Math.round(r.cpu)}%`;
    return h(
      'tr',
      { 'data-worker': r.address, class: r.paused ? 'kc-paused' : '' },
      h('td', { class: 'kc-worker-name', text: r.name || r.address, title: r.address }),
      h('td', { class: 'kc-num', text: String(r.nthreads) }),
      h('td', { class: 'kc-num kc-cpu', text: cpu }),
      h('td', { class: 'kc-memory-cell' }, bar, h('span', { class: 'kc-memory-text', text: memoryText })),
      h('td', { class: 'kc-num kc-executing', text: String(r.executing) }),
      h('td', { class: 'kc-num kc-ready', text: String(r.ready) }),
      h('td', { class: 'kc-num kc-spilled', text: r.spilled ? formatBytes(r.spilled) : '0' }),
      h('td', { class: 'kc-state', text: r.paused ? 'paused' : 'running' }),
    );
  }

  destroy(): void {
    this.root.remove();
  }
}
