// The left sidebar: the current notebook kernel's cluster (kind, workers, threads,
// memory, tasks, running spans) and a button per view.
import type { ILabShell } from '@jupyterlab/application';
import type { INotebookTracker } from '@jupyterlab/notebook';
import { Widget } from '@lumino/widgets';
import { formatBytes } from '@kernel-cluster/widgets';
import type { ClusterConnection } from './connection';
import { describe } from './connection';
import type { Connections } from './connections';
import { ClusterPanel } from './panel';
import { clusterIcon } from './icon';
import { LABELS, VIEWS, type View } from './views';

const KINDS: Record<string, string> = {
  embedded: 'embedded (threads in the kernel)',
  processes: 'worker processes',
  dask: 'attached Dask cluster',
};

function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls: string, text = ''): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text) node.textContent = text;
  return node;
}

export class ClusterSidebar extends Widget {
  private conn: ClusterConnection | null = null;
  private path = '';
  private readonly header = el('div', 'kc-lab-sidebar-notebook');
  private readonly state = el('div', 'kc-lab-state');
  private readonly facts = el('table', 'kc-lab-facts');
  private readonly spans = el('ul', 'kc-lab-spans');

  constructor(
    private tracker: INotebookTracker,
    private shell: ILabShell | null,
    private connections: Connections,
    open: (view: View, path: string) => void,
    defaultLayout: (path: string) => void,
  ) {
    super();
    this.id = 'kernel-cluster-sidebar';
    this.addClass('kc-lab-sidebar');
    this.title.icon = clusterIcon;
    this.title.caption = 'Kernel Cluster';
    const buttons = el('div', 'kc-lab-buttons');
    for (const view of VIEWS) {
      const b = el('button', 'jp-Button jp-mod-styled jp-mod-reject kc-lab-open', LABELS[view]);
      b.dataset.view = view;
      b.onclick = () => this.path && open(view, this.path);
      buttons.append(b);
    }
    const layout = el('button', 'jp-Button jp-mod-styled jp-mod-accept kc-lab-layout', 'Default layout');
    layout.onclick = () => this.path && defaultLayout(this.path);
    buttons.append(layout);
    this.node.append(el('h2', 'kc-lab-title', 'Kernel Cluster'), this.header, this.state, this.facts, el('h3', '', 'Running spans'), this.spans, buttons);
    tracker.currentChanged.connect(this.follow, this);
    shell?.currentChanged.connect(this.follow, this);
    connections.changed.connect(this.follow, this);
    this.follow();
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
    const text = this.path ? describe(conn, this.path) : 'Open a notebook: this shows its kernel\'s cluster.';
    this.state.textContent = text ?? '';
    this.state.hidden = text === null;
    for (const b of this.node.querySelectorAll('button')) b.disabled = !this.path;
    const c = conn?.cluster;
    this.facts.replaceChildren();
    this.spans.replaceChildren();
    if (!conn || !c) return;
    const memory = conn.memory[conn.memory.length - 1];
    const rows: [string, string, string][] = [
      ['kind', 'Cluster', KINDS[c.kind] ?? c.kind],
      ['workers', 'Workers', String(c.workers)],
      ['threads', 'Threads', String(c.threads)],
      ['memory', 'Memory', memory ? `${formatBytes(memory[1])}${c.memory_limit ? ` of ${formatBytes(c.memory_limit)}` : ''}` : '–'],
      ['in-flight', 'Tasks in flight', String(c.tasks.in_flight + c.tasks.waiting)],
      ['done', 'Tasks done', String(c.tasks.done)],
    ];
    if (c.tasks.erred) rows.push(['erred', 'Tasks erred', String(c.tasks.erred)]);
    for (const [key, label, value] of rows) {
      const tr = el('tr', '');
      tr.dataset.fact = key;
      tr.append(el('th', '', label), el('td', '', value));
      this.facts.append(tr);
    }
    for (const s of c.spans) {
      const li = el('li', '', s.name.join(' / '));
      li.dataset.span = s.id;
      this.spans.append(li);
    }
    if (!c.spans.length) this.spans.append(el('li', 'kc-empty', 'none'));
  }
}
