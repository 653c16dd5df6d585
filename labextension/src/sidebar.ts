// The left sidebar: the cluster of the notebook in front (the current notebook, or
// the one whose panel is in front): its kind, scheduler, workers, threads, memory,
// tasks and running spans; controls that start, scale and stop it in the notebook's
// kernel; and a button per view.
import type { ILabShell } from '@jupyterlab/application';
import type { INotebookTracker } from '@jupyterlab/notebook';
import { Widget } from '@lumino/widgets';
import { formatBytes } from '@kernel-cluster/widgets';
import type { ClusterConnection, ClusterSummary, ControlRequest } from './connection';
import { describe } from './connection';
import type { Connections } from './connections';
import { ClusterPanel } from './panel';
import { clusterIcon } from './icon';
import { CAPTIONS, LABELS, VIEWS, type View } from './views';

const KINDS: Record<string, string> = {
  embedded: 'embedded',
  processes: 'worker processes',
};

/** What the sidebar runs in a kernel that has not imported kernel_cluster yet, so
 * that the comm is there to carry a start (kernel_cluster/__init__.py registers it). */
export const BOOTSTRAP = 'import kernel_cluster as _kernel_cluster_lab  # the Kernel Cluster sidebar';

export interface SidebarActions {
  open(view: View, path: string): void;
  openAll(path: string): void;
  defaultLayout(path: string): void;
  insertCode(path: string, code: string): void;
}

function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls: string, text = ''): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text) node.textContent = text;
  return node;
}

function numberInput(name: string, value: number, min: number, max: number): HTMLInputElement {
  const input = el('input', 'jp-mod-styled kc-lab-number');
  Object.assign(input, { type: 'number', name, value: String(value), min: String(min), max: String(max), step: '1' });
  input.setAttribute('aria-label', name);
  return input;
}

function labelled(text: string, input: HTMLElement): HTMLLabelElement {
  const label = el('label', 'kc-lab-field');
  label.append(el('span', '', text), input);
  return label;
}

/** The kind of cluster, as a user names it. */
export function kindLabel(c: ClusterSummary): string {
  if (c.engine === 'dask') return 'Dask cluster';
  return KINDS[c.kind] ?? c.kind;
}

export class ClusterSidebar extends Widget {
  private conn: ClusterConnection | null = null;
  private path = '';
  private readonly header = el('div', 'kc-lab-sidebar-notebook');
  private readonly state = el('div', 'kc-lab-state');
  private readonly facts = el('table', 'kc-lab-facts');
  private readonly spans = el('ul', 'kc-lab-spans');
  private readonly controls = el('section', 'kc-lab-controls');
  private readonly startForm = el('form', 'kc-lab-start');
  private readonly liveForm = el('form', 'kc-lab-scale');
  private readonly message = el('div', 'kc-lab-control-message');
  private readonly mode = el('select', 'jp-mod-styled kc-lab-mode');
  private readonly nWorkers = numberInput('workers', 2, 0, 256);
  private readonly nThreads = numberInput('threads per worker', 2, 1, 256);
  private readonly memoryLimit = el('input', 'jp-mod-styled kc-lab-memory-limit');
  private readonly scaleTo = numberInput('scale to', 2, 0, 256);
  private readonly stopButton = el('button', 'jp-Button jp-mod-styled jp-mod-warn kc-lab-stop', 'Stop');
  private readonly scaleButton = el('button', 'jp-Button jp-mod-styled jp-mod-reject kc-lab-scale-button', 'Scale');

  constructor(
    private tracker: INotebookTracker,
    private shell: ILabShell | null,
    private connections: Connections,
    private actions: SidebarActions,
  ) {
    super();
    this.id = 'kernel-cluster-sidebar';
    this.addClass('kc-lab-sidebar');
    this.title.icon = clusterIcon;
    this.title.caption = 'Kernel Cluster';
    this.buildControls();
    const buttons = el('div', 'kc-lab-buttons');
    for (const view of VIEWS) {
      const b = el('button', 'jp-Button jp-mod-styled jp-mod-reject kc-lab-open', LABELS[view]);
      b.dataset.view = view;
      b.title = `Open ${LABELS[view]}: ${CAPTIONS[view]}`;
      b.onclick = () => this.path && actions.open(view, this.path);
      buttons.append(b);
    }
    const all = el('button', 'jp-Button jp-mod-styled jp-mod-accept kc-lab-open-all', 'Open all views as tabs');
    all.onclick = () => this.path && actions.openAll(this.path);
    const layout = el('button', 'jp-Button jp-mod-styled jp-mod-reject kc-lab-layout', 'Default layout');
    layout.title = 'Open the views arranged as the "layout" setting says (Settings Editor, Kernel Cluster)';
    layout.onclick = () => this.path && actions.defaultLayout(this.path);
    buttons.append(all, layout);
    this.node.append(
      el('h2', 'kc-lab-title', 'Kernel Cluster'),
      this.header,
      this.state,
      this.facts,
      this.controls,
      el('h3', '', 'Running spans'),
      this.spans,
      el('h3', '', 'Views'),
      buttons,
    );
    tracker.currentChanged.connect(this.follow, this);
    shell?.currentChanged.connect(this.follow, this);
    connections.changed.connect(this.follow, this);
    this.follow();
  }

  private buildControls(): void {
    for (const [value, text, title] of [
      ['embedded', 'embedded', 'worker threads in the kernel process: no copies between tasks'],
      ['processes', 'processes', 'worker processes: parallel past the GIL, memory apart'],
    ]) {
      const option = el('option', '', text);
      option.value = value;
      option.title = title;
      this.mode.append(option);
    }
    this.mode.setAttribute('aria-label', 'kind');
    Object.assign(this.memoryLimit, { type: 'text', name: 'memory limit', placeholder: 'auto (e.g. 4 GiB)' });
    this.memoryLimit.setAttribute('aria-label', 'memory limit per worker');
    const start = el('button', 'jp-Button jp-mod-styled jp-mod-accept kc-lab-start-button', 'Start cluster');
    start.type = 'submit';
    const insert = el('button', 'jp-Button jp-mod-styled jp-mod-reject kc-lab-insert', 'Insert client code');
    insert.type = 'button';
    insert.title = 'Insert a cell with the code that starts this cluster (or connects to the running one)';
    insert.onclick = () => this.path && this.actions.insertCode(this.path, this.clientCode(this.path));
    this.startForm.append(
      labelled('Kind', this.mode),
      labelled('Workers', this.nWorkers),
      labelled('Threads per worker', this.nThreads),
      labelled('Memory limit per worker', this.memoryLimit),
      start,
    );
    this.startForm.onsubmit = (e) => {
      e.preventDefault();
      this.control({
        type: 'start',
        processes: this.mode.value === 'processes',
        n_workers: this.nWorkers.valueAsNumber,
        threads_per_worker: this.nThreads.valueAsNumber,
        memory_limit: this.memoryLimit.value.trim(),
      });
    };
    this.scaleButton.type = 'submit';
    this.stopButton.type = 'button';
    this.stopButton.title = "Close the kernel's client and its cluster";
    this.stopButton.onclick = () => this.control({ type: 'stop' });
    const row = el('div', 'kc-lab-row');
    row.append(labelled('Workers', this.scaleTo), this.scaleButton, this.stopButton);
    this.liveForm.append(row);
    this.liveForm.onsubmit = (e) => {
      e.preventDefault();
      this.control({ type: 'scale', n_workers: this.scaleTo.valueAsNumber });
    };
    this.controls.append(el('h3', '', 'Cluster'), this.startForm, this.liveForm, insert, this.message);
  }

  private control(request: ControlRequest): void {
    const conn = this.path ? this.connections.get(this.path) : null;
    if (!conn) return;
    void conn.controlCluster(request, BOOTSTRAP);
  }

  /** The code that makes a client of the cluster shown, or of the one the form
   * describes when there is none yet. */
  clientCode(path: string): string {
    const conn = this.connections.get(path);
    const c = conn?.cluster;
    if (c?.client_code) return c.client_code;
    if (c?.engine === 'dask' && c.address) {
      return `from distributed import Client\n\nclient = Client(${JSON.stringify(c.address)})  # the attached Dask cluster`;
    }
    const args = [`n_workers=${this.nWorkers.valueAsNumber}`, `threads_per_worker=${this.nThreads.valueAsNumber}`];
    if (this.mode.value === 'processes') args.push('processes=True');
    const limit = this.memoryLimit.value.trim();
    if (limit) args.push(`memory_limit=${JSON.stringify(limit)}`);
    return `from kernel_cluster import Client, KernelCluster\n\nclient = Client(KernelCluster(${args.join(', ')}))`;
  }

  /** Show the cluster of the notebook in front: the current notebook, or the one
   * whose panel is the current widget. */
  private follow(): void {
    const current = this.shell?.currentWidget;
    const path = current instanceof ClusterPanel ? current.path : (this.tracker.currentWidget?.context.path ?? '');
    const conn = path ? this.connections.get(path) : null;
    if (conn !== this.conn) {
      this.conn?.changed.disconnect(this.render, this);
      this.conn = conn;
      conn?.changed.connect(this.render, this);
    }
    this.path = path;
    this.render();
  }

  private render(): void {
    const conn = this.conn;
    this.node.dataset.state = conn?.state ?? 'no-notebook';
    this.header.textContent = this.path ? this.path.split('/').pop()! : 'No notebook is open.';
    this.header.title = this.path;
    const text = this.path ? describe(conn, this.path) : "Open a notebook: this shows its kernel's cluster.";
    this.state.textContent = text ?? '';
    this.state.hidden = text === null;
    for (const b of this.node.querySelectorAll<HTMLButtonElement>('.kc-lab-buttons button')) b.disabled = !this.path;
    this.renderControls(conn);
    const c = conn?.cluster;
    this.facts.replaceChildren();
    this.spans.replaceChildren();
    if (!conn || !c) return;
    const memory = conn.memory[conn.memory.length - 1];
    const rows: [string, string, string | Node][] = [['kind', 'Cluster', kindLabel(c)]];
    if (c.address) rows.push(['address', 'Scheduler', c.address]);
    if (c.dashboard) {
      const a = el('a', 'kc-lab-dashboard', "Dask's dashboard");
      a.href = c.dashboard;
      a.target = '_blank';
      a.rel = 'noopener noreferrer';
      rows.push(['dashboard', 'Dashboard', a]);
    }
    rows.push(
      ['workers', 'Workers', String(c.workers)],
      ['threads', 'Threads', String(c.threads)],
      ['memory', 'Memory', memory ? `${formatBytes(memory[1])}${c.memory_limit ? ` of ${formatBytes(c.memory_limit)}` : ''}` : '–'],
      ['in-flight', 'Tasks in flight', String(c.tasks.in_flight + c.tasks.waiting)],
      ['done', 'Tasks done', String(c.tasks.done)],
    );
    if (c.tasks.erred) rows.push(['erred', 'Tasks erred', String(c.tasks.erred)]);
    for (const [key, label, value] of rows) {
      const tr = el('tr', '');
      tr.dataset.fact = key;
      const td = el('td', '');
      td.append(value);
      if (typeof value === 'string') td.title = value;
      tr.append(el('th', '', label), td);
      this.facts.append(tr);
    }
    for (const s of c.spans) {
      const li = el('li', '', s.name.join(' / '));
      li.dataset.span = s.id;
      this.spans.append(li);
    }
    if (!c.spans.length) this.spans.append(el('li', 'kc-empty', 'none'));
  }

  private renderControls(conn: ClusterConnection | null): void {
    const c = conn?.cluster ?? null;
    const reachable = !!conn && (conn.state === 'no-cluster' || conn.state === 'no-package' || conn.state === 'live');
    this.controls.hidden = !this.path;
    this.startForm.hidden = !!c;
    const pending = conn?.control.pending ?? null;
    for (const input of this.startForm.querySelectorAll<HTMLInputElement | HTMLSelectElement | HTMLButtonElement>('input, select, button')) {
      input.disabled = !reachable || pending !== null;
    }
    const canScale = !!c?.controls?.scale;
    const canStop = !!c?.controls?.stop;
    this.liveForm.hidden = !c || (!canScale && !canStop);
    this.scaleTo.disabled = !canScale || pending !== null;
    this.scaleButton.disabled = !canScale || pending !== null;
    this.stopButton.disabled = !canStop || pending !== null;
    if (c && document.activeElement !== this.scaleTo && pending === null) this.scaleTo.value = String(c.workers);
    this.message.dataset.kind = '';
    if (pending) {
      this.message.textContent = { start: 'Starting the cluster…', scale: 'Scaling…', stop: 'Stopping the cluster…' }[pending] ?? 'Working…';
      this.message.dataset.kind = 'pending';
    } else if (conn?.control.error) {
      this.message.textContent = conn.control.error;
      this.message.dataset.kind = 'error';
    } else if (c && !canScale && !canStop) {
      this.message.textContent =
        c.engine === 'dask'
          ? 'An attached Dask cluster: scale or close it with its own objects (cluster.scale(n), client.close()).'
          : 'This cluster belongs to other code in the notebook.';
    } else this.message.textContent = conn?.control.done ?? '';
    this.message.hidden = !this.message.textContent;
  }
}
