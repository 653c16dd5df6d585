// A connection per open notebook, made when the notebook opens (so that the
// sidebar and `kernel_cluster.show()` work before any panel exists) and disposed
// when it closes. Panels find theirs by the notebook's path, which survives a reload.
import type { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Signal, type ISignal } from '@lumino/signaling';
import { ClusterConnection, type ShowRequest } from './connection';

export class Connections {
  private byPath = new Map<string, ClusterConnection>();
  private readonly _changed = new Signal<this, string>(this);
  private readonly _show = new Signal<this, ShowRequest & { path: string }>(this);

  constructor(private tracker: INotebookTracker) {
    tracker.widgetAdded.connect((_, panel) => this.track(panel));
    tracker.forEach((panel) => this.track(panel));
  }

  /** A notebook's connection appeared or went (the path). */
  get changed(): ISignal<this, string> {
    return this._changed;
  }

  /** A kernel asked for a panel next to its notebook. */
  get showRequested(): ISignal<this, ShowRequest & { path: string }> {
    return this._show;
  }

  get(path: string): ClusterConnection | null {
    return this.byPath.get(path) ?? null;
  }

  notebook(path: string): NotebookPanel | null {
    return this.tracker.find((p) => p.context.path === path) ?? null;
  }

  private track(panel: NotebookPanel): void {
    let path = panel.context.path;
    const conn = new ClusterConnection(path, panel.sessionContext);
    this.byPath.set(path, conn);
    conn.showRequested.connect((_, req) => this._show.emit({ ...req, path }));
    panel.context.pathChanged.connect((_, now) => {
      this.byPath.delete(path);
      path = now;
      this.byPath.set(path, conn);
      this._changed.emit(path);
    });
    panel.disposed.connect(() => {
      if (this.byPath.get(path) === conn) this.byPath.delete(path);
      conn.dispose();
      this._changed.emit(path);
    });
    this._changed.emit(path);
  }
}
