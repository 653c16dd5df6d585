// A connection per open notebook document, made when its first view opens (so that
// the sidebar and `kernel_cluster.show()` work before any panel exists) and disposed
// when its last view closes. It belongs to the document's context, which every view
// of the notebook (File > New View) shares with its session: closing one view, a
// rename or a kernel restart leave it in place. Panels find theirs by the notebook's
// path, which follows renames and survives a reload.
import type { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Signal, type ISignal } from '@lumino/signaling';
import { ClusterConnection, type ShowRequest } from './connection';

type Context = NotebookPanel['context'];

export interface Renamed {
  from: string;
  to: string;
}

export class Connections {
  private byContext = new Map<Context, ClusterConnection>();
  private readonly _changed = new Signal<this, string>(this);
  private readonly _renamed = new Signal<this, Renamed>(this);
  private readonly _show = new Signal<this, ShowRequest & { path: string }>(this);

  constructor(private tracker: INotebookTracker) {
    tracker.widgetAdded.connect((_, panel) => this.track(panel));
    tracker.forEach((panel) => this.track(panel));
  }

  /** A notebook's connection appeared or went (the path). */
  get changed(): ISignal<this, string> {
    return this._changed;
  }

  /** A notebook was renamed or moved: its panels follow. */
  get renamed(): ISignal<this, Renamed> {
    return this._renamed;
  }

  /** A kernel asked for a panel next to its notebook. */
  get showRequested(): ISignal<this, ShowRequest & { path: string }> {
    return this._show;
  }

  get(path: string): ClusterConnection | null {
    for (const conn of this.byContext.values()) if (conn.path === path) return conn;
    return null;
  }

  /** A view of the notebook at ``path``: the current one if it is one, else any. */
  notebook(path: string): NotebookPanel | null {
    const current = this.tracker.currentWidget;
    if (current && current.context.path === path && current.isAttached) return current;
    return this.tracker.find((p) => p.context.path === path && p.isAttached) ?? null;
  }

  private track(panel: NotebookPanel): void {
    const context = panel.context;
    if (this.byContext.has(context)) return; // another view of a notebook we follow
    const conn = new ClusterConnection(context.path, context.sessionContext);
    this.byContext.set(context, conn);
    conn.showRequested.connect((_, req) => this._show.emit({ ...req, path: conn.path }));
    context.pathChanged.connect((_, now) => {
      const from = conn.path;
      if (from === now) return;
      conn.path = now;
      this._renamed.emit({ from, to: now });
      this._changed.emit(now);
    });
    context.disposed.connect(() => {
      this.byContext.delete(context);
      conn.dispose();
      this._changed.emit(conn.path);
    });
    this._changed.emit(conn.path);
  }
}
