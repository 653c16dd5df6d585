// A main-area panel holding one view of one notebook kernel's cluster. The view is
// the renderer library's (widgets/src, the same as the inline widget's), drawn from
// the connection's store; its filters live here, in the browser, so they act at
// once even while the kernel runs a cell.
import { Widget } from '@lumino/widgets';
import { memoryView, mount, type Binding, type Mounted, type Store } from '@kernel-cluster/widgets';
import type { ClusterConnection } from './connection';
import { describe } from './connection';
import type { Connections } from './connections';
import { clusterIcon } from './icon';
import { FEEDS, LABELS, RENDERER, type View } from './views';

export function panelId(view: View, path: string): string {
  return `kernel-cluster-${view}-${encodeURIComponent(path)}`;
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
  private memoryDrawn = -1;
  private unwatchCompare: (() => void) | null = null;
  private readonly banner: HTMLDivElement;
  private readonly body: HTMLDivElement;
  private readonly binding = localBinding({ unit: 'seconds', span_filter: '', hidden_functions: [], hidden_activities: [], selected: '' });
  /** performance.now() when the panel opened, and when it first drew data. */
  readonly opened = performance.now();
  firstData: number | null = null;

  constructor(
    readonly view: View,
    readonly path: string,
    private connections: Connections,
  ) {
    super();
    this.id = panelId(view, path);
    this.addClass('kc-lab-panel');
    this.node.dataset.view = view;
    this.node.dataset.path = path;
    const name = (path.split('/').pop() ?? path).replace(/\.ipynb$/, '');
    this.title.label = `${LABELS[view]} · ${name}`;
    this.title.caption = `${LABELS[view]} of the cluster in ${path}'s kernel`;
    this.title.icon = clusterIcon;
    this.title.closable = true;
    this.banner = document.createElement('div');
    this.banner.className = 'kc-lab-state';
    this.body = document.createElement('div');
    this.body.className = 'kc-widget kc-lab-body';
    this.node.append(this.banner, this.body);
    connections.changed.connect(this.onConnections, this);
    this.bind(connections.get(path));
  }

  private onConnections(_: Connections, path: string): void {
    if (path === this.path) this.bind(this.connections.get(path));
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
    this.memoryDrawn = -1;
    this.body.replaceChildren();
  }

  /** Draw the state line, and (re)mount the view when the store was replaced. */
  private refresh(): void {
    const conn = this.conn;
    const text = describe(conn, this.path);
    this.node.dataset.state = conn?.state ?? 'no-notebook';
    this.banner.textContent = text ?? '';
    this.banner.hidden = text === null;
    if (!conn) return;
    if (this.view === 'memory') {
      this.drawMemory(conn);
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
    }
  }

  private drawMemory(conn: ClusterConnection): void {
    const samples = conn.memory;
    if (samples.length === this.memoryDrawn || !this.isVisible) return;
    this.memoryDrawn = samples.length;
    this.body.replaceChildren();
    if (!samples.length) return;
    memoryView(this.body, {
      time: samples.map((s) => s[0]),
      process: samples.map((s) => s[1]),
      managed: samples.map((s) => s[2]),
      spilled: samples.map((s) => s[4]),
    });
    this.sawData();
  }

  protected onAfterShow(): void {
    if (this.conn && this.view === 'memory') this.drawMemory(this.conn);
  }

  protected onResize(): void {
    if (this.conn && this.view === 'memory') {
      this.memoryDrawn = -1; // the line chart takes its width when drawn
      this.drawMemory(this.conn);
    }
  }

  dispose(): void {
    if (this.isDisposed) return;
    this.connections.changed.disconnect(this.onConnections, this);
    this.bind(null);
    super.dispose();
  }
}
