// A main-area panel holding one view of one notebook kernel's cluster. The view is
// the renderer library's (widgets/src, the same as the inline widget's), drawn from
// the connection's store; its filters live here, in the browser, so they act at
// once even while the kernel runs a cell.
//
// The panel follows its notebook's connection (connections.ts), not a notebook
// widget: other views of the notebook, renames and restarts leave it bound. Closing
// it disposes it: its feeds stop in the kernel, and the same view can open again.
import type { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';
import { memoryView, mount, WorkerTableView, type Binding, type Mounted, type Store } from '@kernel-cluster/widgets';
import type { ClusterConnection } from './connection';
import { describe } from './connection';
import type { Connections } from './connections';
import { clusterIcon } from './icon';
import { FEEDS, LABELS, RENDERER, type View } from './views';

let made = 0;

/** A new panel's id: unique, and the same whatever the notebook is renamed to. */
function newId(view: View): string {
  made += 1;
  return `kernel-cluster-${view}-${Date.now().toString(36)}-${made}`;
}

/** Filter state that lives with the panel (the inline widget keeps it in traits). */
function localBinding(initial: Record<string, unknown>): Binding {
  const values: Record<string, unknown> = { ...initial };
  const listeners = new Map<() => void, string[]>();
  return {
    get: (name) => values[name],
    set(change) {
      Object.assign(values, change);
      const names = Object.keys(change);
      for (const [l, watched] of [...listeners]) if (watched.some((n) => names.includes(n))) l();
    },
    onChange(names, listener) {
      listeners.set(listener, names);
      return () => listeners.delete(listener);
    },
  };
}

/** The store holds what this view draws. */
function hasData(view: View, store: Store): boolean {
  if (view === 'task-stream') return store.tasks.ntasks > 0;
  if (view === 'profile') return store.profile.tree !== null;
  if (view === 'span-tree') return store.spans.records.size > 0;
  if (view === 'progress') return store.progress.records.size > 0;
  if (view === 'compare') return false; // its data is not the store's (sawData is called on its own)
  return store.metrics.length > 0;
}

export class ClusterPanel extends Widget {
  private conn: ClusterConnection | null = null;
  private mounted: Mounted | null = null;
  private mountedStore: Store | null = null;
  private workerTable: WorkerTableView | null = null;
  private memoryDrawn = '';
  private resizeFrame = 0;
  private unwatchCompare: (() => void) | null = null;
  private readonly banner: HTMLDivElement;
  private readonly body: HTMLDivElement;
  private readonly binding = localBinding({ unit: 'seconds', span_filter: '', hidden_functions: [], hidden_activities: [], selected: '', hidden_prefixes: [] });
  /** performance.now() when the panel opened, and when it first drew data. */
  readonly opened = performance.now();
  firstData: number | null = null;

  constructor(
    readonly view: View,
    private _path: string,
    private connections: Connections,
  ) {
    super();
    this.id = newId(view);
    this.addClass('kc-lab-panel');
    this.node.tabIndex = -1; // focusable: activating it makes it the shell's current widget
    this.node.dataset.view = view;
    this.title.icon = clusterIcon;
    this.title.closable = true;
    this.banner = document.createElement('div');
    this.banner.className = 'kc-lab-state';
    this.body = document.createElement('div');
    this.body.className = 'kc-widget kc-lab-body';
    this.node.append(this.banner, this.body);
    this.setPath(_path);
    connections.changed.connect(this.onConnections, this);
    this.bind(connections.get(_path));
  }

  /** The notebook whose kernel's cluster this shows. */
  get path(): string {
    return this._path;
  }

  /** The notebook was renamed or moved. */
  setPath(path: string): void {
    this._path = path;
    this.node.dataset.path = path;
    const name = (path.split('/').pop() ?? path).replace(/\.ipynb$/, '');
    this.title.label = `${LABELS[this.view]} · ${name}`;
    this.title.caption = `${LABELS[this.view]} of the cluster in ${path}'s kernel`;
    this.refresh();
  }

  private onConnections(_: Connections, path: string): void {
    if (path === this._path) this.bind(this.connections.get(path));
  }

  private bind(conn: ClusterConnection | null): void {
    if (conn === this.conn) return;
    if (this.conn) {
      this.conn.changed.disconnect(this.refresh, this);
      this.conn.setWants(this.id, []);
    }
    this.unmount();
    this.conn = conn;
    if (conn) {
      conn.changed.connect(this.refresh, this);
      conn.setWants(this.id, FEEDS[this.view]);
    }
    this.refresh();
  }

  private unmount(): void {
    this.unwatchCompare?.();
    this.unwatchCompare = null;
    this.mounted?.destroy();
    this.mounted = null;
    this.mountedStore = null;
    this.workerTable?.destroy();
    this.workerTable = null;
    this.memoryDrawn = '';
    this.body.replaceChildren();
  }

  /** Draw the state line, and (re)mount the view when the store was replaced. */
  private refresh(): void {
    if (!this.banner) return; // setPath from the constructor, before the DOM is made
    const conn = this.conn;
    let text = describe(conn, this._path);
    if (text === null && conn && conn.busy && !conn.subshells && this.firstData === null && this.view !== 'memory') {
      // an older kernel reads what we ask (this view's data) only between cells
      text = 'Waiting for the running cell to end: this kernel (ipykernel before 7) reads the panels\' requests only between cells.';
    }
    this.node.dataset.state = conn?.state ?? 'no-notebook';
    this.banner.textContent = text ?? '';
    this.banner.hidden = text === null;
    if (!conn) return;
    if (this.view === 'memory') {
      this.drawMemory(conn);
      return;
    }
    if (this.view === 'workers') {
      this.drawWorkers(conn);
      return;
    }
    if (this.mountedStore !== conn.store) {
      this.unmount();
      const binding =
        this.view === 'profile' ? conn.profileBinding() : this.view === 'compare' ? conn.compareBinding() : this.binding;
      if (this.view === 'compare') {
        const seen = () => void (binding.get('data') && this.sawData());
        this.unwatchCompare = binding.onChange(['data'], seen);
        seen();
      }
      this.mounted = mount(RENDERER[this.view], this.body, conn.store, binding);
      this.mountedStore = conn.store;
      const store = conn.store;
      const check = () => hasData(this.view, store) && this.sawData();
      store.subscribe(check);
      check(); // drawn at once from what the store already holds
    }
  }

  private sawData(): void {
    if (this.firstData === null) {
      this.firstData = performance.now();
      this.node.dataset.firstData = String(Math.round(this.firstData - this.opened));
      if (!this.banner.hidden) this.refresh(); // a "waiting" line goes
    }
  }

  private drawMemory(conn: ClusterConnection): void {
    const samples = conn.memory;
    if (!this.isVisible) return;
    const limit = conn.cluster?.memory_limit ?? 0;
    const width = this.body.clientWidth;
    const height = this.body.clientHeight;
    const key = `${samples.length}:${samples[samples.length - 1]?.[0] ?? 0}:${limit}:${width}x${height}`;
    if (key === this.memoryDrawn) return;
    this.memoryDrawn = key;
    this.body.replaceChildren();
    if (!samples.length) return;
    memoryView(
      this.body,
      {
        time: samples.map((s) => s[0]),
        process: samples.map((s) => s[1]),
        managed: samples.map((s) => s[2]),
        spilled: samples.map((s) => s[4]),
      },
      // the chart takes the panel's height, less the title, note and legend above it
      { title: 'Memory', limit, width: Math.max(width - 4, 320), height: Math.max(160, height - 90) },
    );
    this.sawData();
  }

  private drawWorkers(conn: ClusterConnection): void {
    if (!this.workerTable) this.workerTable = new WorkerTableView(this.body);
    this.workerTable.update(conn.cluster ? conn.workers : []);
    if (conn.workers.length) this.sawData();
  }

  protected onActivateRequest(_msg: Message): void {
    if (this.isAttached) this.node.focus();
  }

  protected onCloseRequest(msg: Message): void {
    super.onCloseRequest(msg);
    this.dispose(); // closed for good: its feeds stop, the view can open anew
  }

  protected onAfterShow(): void {
    if (this.conn && this.view === 'memory') this.drawMemory(this.conn);
    this.mounted?.resize();
  }

  /** Lumino tells of every size change (splits, the sidebar, the window): redraw once
   * per frame at the new size. */
  protected onResize(_msg: Widget.ResizeMessage): void {
    if (this.resizeFrame) return;
    this.resizeFrame = requestAnimationFrame(() => {
      this.resizeFrame = 0;
      if (this.isDisposed) return;
      if (this.conn && this.view === 'memory') this.drawMemory(this.conn);
      this.mounted?.resize();
    });
  }

  dispose(): void {
    if (this.isDisposed) return;
    if (this.resizeFrame) cancelAnimationFrame(this.resizeFrame);
    this.connections.changed.disconnect(this.onConnections, this);
    this.bind(null);
    super.dispose();
  }
}
