// kernel-cluster's JupyterLab plugin: a sidebar for the current notebook kernel's
// cluster (with controls to start, scale and stop it), and commands that open its
// views as main-area panels, restored in place after a reload. The kernel's side is
// kernel_cluster/jupyter/lab.py.
//
// Views open as tabs: the first one beside the notebook (one split), the next ones
// in that panel area, as JupyterLab opens documents; a split is the user's choice
// (drag a tab) or the default layout's.
import { ILabShell, ILayoutRestorer, type JupyterFrontEnd, type JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette, WidgetTracker } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookActions } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import type { ReadonlyPartialJSONObject } from '@lumino/coreutils';
import { DockPanel } from '@lumino/widgets';
import { Connections } from './connections';
import { clusterIcon } from './icon';
import { ClusterPanel } from './panel';
import { ClusterSidebar } from './sidebar';
import { CAPTIONS, isMode, isView, LABELS, VIEWS, type Mode, type View } from './views';

const PLUGIN_ID = '@kernel-cluster/lab:plugin';

export const CommandIDs = {
  open: 'kernel-cluster:open',
  openView: (view: View) => `kernel-cluster:open-${view}`,
  openAll: 'kernel-cluster:open-all',
  defaultLayout: 'kernel-cluster:default-layout',
  insertClient: 'kernel-cluster:insert-client-code',
  stats: 'kernel-cluster:stats',
};

/** One step of the default layout: a view, where it goes, and next to what. */
interface LayoutStep {
  view: View;
  mode: Mode;
  /** "notebook", or a view opened by an earlier step. */
  ref: string;
}

const FALLBACK_LAYOUT: LayoutStep[] = [
  { view: 'fine-metrics', mode: 'split-right', ref: 'notebook' },
  { view: 'task-stream', mode: 'split-bottom', ref: 'fine-metrics' },
  { view: 'span-tree', mode: 'tab-after', ref: 'fine-metrics' },
  { view: 'memory', mode: 'tab-after', ref: 'task-stream' },
];

function readLayout(value: unknown): LayoutStep[] {
  if (!Array.isArray(value)) return FALLBACK_LAYOUT;
  const steps = value.filter(
    (s): s is LayoutStep => typeof s === 'object' && s !== null && isView(s.view) && isMode(s.mode) && typeof s.ref === 'string',
  );
  return steps.length ? steps : FALLBACK_LAYOUT;
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: "Panels of the notebook kernel's kernel-cluster: fine metrics, spans, profile, task stream, memory, progress, workers; a sidebar with the cluster's controls.",
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICommandPalette, ILayoutRestorer, ISettingRegistry, ILabShell],
  activate: (
    app: JupyterFrontEnd,
    notebooks: INotebookTracker,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null,
    settings: ISettingRegistry | null,
    labShell: ILabShell | null,
  ) => {
    const connections = new Connections(notebooks);
    const panels = new WidgetTracker<ClusterPanel>({ namespace: 'kernel-cluster' });
    let layout = FALLBACK_LAYOUT;

    const currentPath = (): string | null => {
      const current = app.shell.currentWidget;
      if (current instanceof ClusterPanel) return current.path;
      return notebooks.currentWidget?.context.path ?? null;
    };

    /** Make ``panel`` the tab shown in its area without activating it: asked for from
     * a cell (``kernel_cluster.show()``), the view comes into sight while the focus
     * stays in the notebook, where the user goes on typing, as for a view opened anew. */
    const toFront = (panel: ClusterPanel): void => {
      const dock = panel.parent;
      if (!(dock instanceof DockPanel)) return; // the shell's main area is one
      for (const bar of dock.tabBars()) {
        if (bar.titles.includes(panel.title)) bar.currentTitle = panel.title;
      }
    };

    const find = (view: View, path: string): ClusterPanel | undefined => panels.find((p) => p.view === view && p.path === path && !p.isDisposed);

    /** Where a new view goes when no mode is asked: as a tab beside the panel of
     * this notebook used last (or any of ours), else split once beside the notebook. */
    const placement = (path: string): { mode: Mode; ref: string | null } => {
      const attached = (p: ClusterPanel | null | undefined): p is ClusterPanel => !!p && !p.isDisposed && p.isAttached;
      const last = panels.currentWidget;
      const mine = panels.filter((p) => p.path === path);
      const anchor = [last?.path === path ? last : null, ...mine, last, ...panels.filter(() => true)].find(attached);
      if (anchor) return { mode: 'tab-after', ref: anchor.id };
      return { mode: 'split-right', ref: connections.notebook(path)?.id ?? null };
    };

    const open = (view: View, path: string, mode?: Mode, ref?: string, activate = true): ClusterPanel => {
      const existing = find(view, path);
      if (existing?.isAttached) {
        if (activate) app.shell.activateById(existing.id);
        else toFront(existing);
        return existing;
      }
      existing?.dispose(); // made by the restorer, then left out of the restored layout
      const panel = new ClusterPanel(view, path, connections);
      const where = mode ? { mode, ref: ref ?? connections.notebook(path)?.id ?? null } : placement(path);
      app.shell.add(panel, 'main', { mode: where.mode, ref: where.ref, activate });
      void panels.add(panel);
      return panel;
    };

    const openAll = (path: string): void => {
      let first: ClusterPanel | null = null;
      for (const view of VIEWS) {
        const panel = open(view, path, undefined, undefined, false);
        first = first ?? panel;
      }
      if (first) app.shell.activateById(first.id);
    };

    const defaultLayout = (path: string): void => {
      const opened = new Map<string, string>();
      const notebook = connections.notebook(path);
      if (notebook) opened.set('notebook', notebook.id);
      for (const step of layout) {
        const panel = open(step.view, path, step.mode, opened.get(step.ref) ?? notebook?.id, false);
        opened.set(step.view, panel.id);
      }
    };

    /** Put ``code`` in a new cell below the active one of the notebook at ``path``. */
    const insertCode = (path: string, code: string): void => {
      const nb = connections.notebook(path);
      if (!nb?.content.model) return;
      app.shell.activateById(nb.id);
      NotebookActions.insertBelow(nb.content);
      const cell = nb.content.activeCell;
      if (cell) cell.model.sharedModel.setSource(code);
    };

    // the panels follow their notebook when it is renamed or moved
    connections.renamed.connect((_, { from, to }) => {
      panels.forEach((p) => {
        if (p.path !== from) return;
        p.setPath(to);
        void panels.save(p);
      });
    });

    app.commands.addCommand(CommandIDs.open, {
      label: (args) => (isView(args.view) ? `Open ${LABELS[args.view]}` : 'Open a Kernel Cluster view'),
      icon: clusterIcon,
      isEnabled: (args) => Boolean(args.path ?? currentPath()),
      execute: (args) => {
        const path = (args.path as string | undefined) ?? currentPath();
        if (!isView(args.view) || !path) return;
        // restoring: the layout restorer puts the panel back where it was
        const mode = isMode(args.mode) ? args.mode : undefined;
        return open(args.view, path, args.restore ? undefined : mode, args.ref as string | undefined);
      },
    });
    for (const view of VIEWS) {
      app.commands.addCommand(CommandIDs.openView(view), {
        label: `Open ${LABELS[view]}`,
        caption: `Kernel Cluster: ${CAPTIONS[view]} (as a tab beside the other views)`,
        icon: clusterIcon,
        isEnabled: () => currentPath() !== null,
        execute: () => {
          const path = currentPath();
          if (path) open(view, path);
        },
      });
      palette?.addItem({ command: CommandIDs.openView(view), category: 'Kernel Cluster' });
    }
    app.commands.addCommand(CommandIDs.openAll, {
      label: 'Open All Views as Tabs',
      caption: "Open every view of the current notebook kernel's cluster, as tabs in one area beside the notebook",
      icon: clusterIcon,
      isEnabled: () => currentPath() !== null,
      execute: () => {
        const path = currentPath();
        if (path) openAll(path);
      },
    });
    palette?.addItem({ command: CommandIDs.openAll, category: 'Kernel Cluster' });
    app.commands.addCommand(CommandIDs.defaultLayout, {
      label: 'Open the Default Layout',
      caption: "Open the views of the current notebook kernel's cluster in the layout set in the settings",
      isEnabled: () => currentPath() !== null,
      execute: () => {
        const path = currentPath();
        if (path) defaultLayout(path);
      },
    });
    palette?.addItem({ command: CommandIDs.defaultLayout, category: 'Kernel Cluster' });
    app.commands.addCommand(CommandIDs.insertClient, {
      label: 'Insert Client Code',
      caption: "Insert a cell that makes a client of the notebook kernel's cluster",
      isEnabled: () => currentPath() !== null,
      execute: () => {
        const path = currentPath();
        if (path) insertCode(path, sidebar.clientCode(path));
      },
    });
    palette?.addItem({ command: CommandIDs.insertClient, category: 'Kernel Cluster' });
    // measurements for the browser tests: what a notebook's connection received
    app.commands.addCommand(CommandIDs.stats, {
      execute: (args): ReadonlyPartialJSONObject => {
        const conn = connections.get(String(args.path ?? currentPath() ?? ''));
        if (!conn) return {};
        return {
          state: conn.state,
          messages: conn.stats.messages,
          bytes: conn.stats.bytes,
          byFeed: { ...conn.stats.byFeed },
          seconds: (performance.now() - conn.stats.since) / 1000,
          history: [...conn.history],
          asks: conn.asks,
        };
      },
    });

    // from a cell (kernel_cluster.show()): the panel opens beside the notebook, which
    // keeps the focus (the user goes on typing there)
    connections.showRequested.connect((_, { view, mode, path }) => {
      open(view, path, mode, undefined, false);
    });

    const sidebar = new ClusterSidebar(notebooks, labShell, connections, {
      open: (view, path) => open(view, path),
      openAll,
      defaultLayout,
      insertCode,
    });
    app.shell.add(sidebar, 'left', { rank: 700 });

    if (restorer) {
      restorer.add(sidebar, sidebar.id);
      void restorer.restore(panels, {
        command: CommandIDs.open,
        args: (panel) => ({ view: panel.view, path: panel.path, restore: true }),
        name: (panel) => `${panel.view}:${panel.path}`,
      });
      // a panel saved in the state but not in the saved layout (closed just before a
      // reload) is made by the restorer and left out of the dock: it would hold its
      // feeds in the kernel for nothing
      void app.restored.then(() => {
        panels.forEach((p) => {
          if (!p.isAttached) p.dispose();
        });
      });
    }
    if (settings) {
      void settings
        .load(PLUGIN_ID)
        .then((s) => {
          const update = () => {
            layout = readLayout(s.composite.layout);
          };
          update();
          s.changed.connect(update);
        })
        .catch((reason) => console.error('kernel-cluster: cannot read the settings', reason));
    }
  },
};

export default plugin;
