// What the JupyterLab panel specs share: opening a notebook, finding panels and the
// sidebar, asking the notebook's kernel a question, screenshots in both themes,
// and the measurements file.
import { expect, type IJupyterLabPageFixture } from '@jupyterlab/galata';
import type { Locator } from '@playwright/test';
import * as fs from 'fs';
import * as path from 'path';

export const artifacts = path.resolve(__dirname, '..', 'artifacts');
export const PANELS = 'lab_panels.ipynb';
export const OTHER = 'lab_other.ipynb';
const perfFile = path.join(artifacts, 'lab-perf.json');

export function record(values: Record<string, unknown>): void {
  fs.mkdirSync(artifacts, { recursive: true });
  const old = fs.existsSync(perfFile) ? JSON.parse(fs.readFileSync(perfFile, 'utf8')) : {};
  fs.writeFileSync(perfFile, JSON.stringify({ ...old, ...values }, null, 2));
}

export async function shot(page: IJupyterLabPageFixture, name: string): Promise<void> {
  fs.mkdirSync(artifacts, { recursive: true });
  await page.screenshot({ path: path.join(artifacts, `lab-${name}.png`) });
}

/** The same state in the light and the dark theme (back to light after). */
export async function shots(page: IJupyterLabPageFixture, name: string): Promise<void> {
  await shot(page, `${name}-light`);
  await page.theme.setDarkTheme();
  await shot(page, `${name}-dark`);
  await page.theme.setLightTheme();
}

/** Upload a notebook and open it. Opened with JupyterLab's document command, not
 * Galata's file-browser walk: on a busy machine its click on the breadcrumbs' home
 * could be lost while the listing refreshed, and it waited for ever for the home
 * listing (lab_defects 7 in a fresh-clone run with two CPU-bound jobs beside it). */
export async function openNotebook(page: IJupyterLabPageFixture, tmpPath: string, name: string): Promise<void> {
  await page.contents.uploadFile(path.resolve(__dirname, '..', 'notebooks', name), `${tmpPath}/${name}`);
  await page.evaluate(async (where) => {
    await (window as any).jupyterapp.commands.execute('docmanager:open', { path: where, factory: 'Notebook' });
  }, `${tmpPath}/${name}`);
  await page.getByRole('main').getByRole('tab', { name: new RegExp(`^${name.replace('.', '\\.')}`) }).last().waitFor({ state: 'visible' });
  await page.notebook.activate(name);
}

export function panel(page: IJupyterLabPageFixture, view: string, notebook = PANELS): Locator {
  return page.locator(`.kc-lab-panel[data-view="${view}"][data-path$="${notebook}"]`);
}

export const sidebar = (page: IJupyterLabPageFixture): Locator => page.locator('#kernel-cluster-sidebar');

/** Show the sidebar (a restored layout may show it already: a click would hide it). */
export async function openSidebar(page: IJupyterLabPageFixture): Promise<void> {
  if (!(await sidebar(page).isVisible())) await page.locator('.jp-SideBar .lm-TabBar-tab[data-id="kernel-cluster-sidebar"]').click();
  await expect(sidebar(page)).toBeVisible();
}

/** The tab of a main-area widget, by the widget's node. */
export async function tabOf(page: IJupyterLabPageFixture, widget: Locator): Promise<Locator> {
  const id = await widget.getAttribute('id');
  return page.locator(`.lm-DockPanel-tabBar .lm-TabBar-tab[data-id="${id}"]`);
}

/** Bars of the fine metrics panel, by function, for the notebook's workload. */
export async function expectFineMetrics(fm: Locator, fns: string[]): Promise<void> {
  const byFunction = fm.locator('[data-panel="by-function"]');
  for (const fn of fns) await expect(byFunction.locator(`g[data-label="${fn}"] rect`).first()).toBeVisible({ timeout: 30000 });
}

/** Run a command of the app (not waiting when `wait` is false: a cell that runs on). */
export async function command(page: IJupyterLabPageFixture, id: string, args: Record<string, unknown> = {}, wait = true): Promise<unknown> {
  return page.evaluate(
    async ({ id, args, wait }) => {
      const p = (window as any).jupyterapp.commands.execute(id, args);
      if (wait) return p.then((r: unknown) => (r && typeof r === 'object' && 'node' in (r as object) ? null : r));
      void p;
      return null;
    },
    { id, args, wait },
  );
}

/** Start running cell `index` of the current notebook without waiting for it. */
export async function startCell(page: IJupyterLabPageFixture, index: number): Promise<void> {
  await page.notebook.selectCells(index);
  await command(page, 'notebook:run-cell', {}, false);
}

/** The value of a Python expression in the kernel of the notebook `notebook`, as
 * JSON (the kernel answers between cells, or at once from a subshell). */
export async function kernelValue(page: IJupyterLabPageFixture, notebook: string, expression: string): Promise<any> {
  const text = await page.evaluate(
    async ({ nb, expression }) => {
      const app = (window as any).jupyterapp;
      const w = [...app.shell.widgets('main')].find((x: any) => x.context?.path?.endsWith(nb) && x.sessionContext);
      const kernel = w.sessionContext.session.kernel;
      const code = `import json as _kc_json\nprint("KC-VALUE" + _kc_json.dumps(${expression}))`;
      const future = kernel.requestExecute({ code, silent: false, store_history: false });
      let out = '';
      future.onIOPub = (msg: any) => {
        if (msg.header.msg_type === 'stream') out += msg.content.text;
        if (msg.header.msg_type === 'error') out += `ERROR ${msg.content.ename}: ${msg.content.evalue}`;
      };
      await future.done;
      return out;
    },
    { nb: notebook, expression },
  );
  const at = text.indexOf('KC-VALUE');
  if (at < 0) throw new Error(`kernel: ${text}`);
  return JSON.parse(text.slice(at + 'KC-VALUE'.length));
}

/** What the notebook's connection received, by the extension's stats command. */
export async function stats(page: IJupyterLabPageFixture, notebook: string): Promise<{ bytes: number; messages: number; seconds: number; history: string[]; state: string; asks: number }> {
  return page.evaluate(async (nb) => {
    const app = (window as any).jupyterapp;
    const found = [...app.shell.widgets('main')].find((w: any) => w.context?.path?.endsWith(nb));
    return app.commands.execute('kernel-cluster:stats', { path: found.context.path });
  }, notebook);
}

/** Reload the page, waiting for JupyterLab rather than for the Launcher (a restored
 * layout has none in front). */
export async function reload(page: IJupyterLabPageFixture): Promise<void> {
  await page.reload({ waitForIsReady: false });
  await page.locator('#jupyterlab-splash').waitFor({ state: 'detached' });
}

/** Shut every kernel down one by one (a killed one may still be restarting). */
export async function shutdownKernels(page: IJupyterLabPageFixture): Promise<void> {
  await page.evaluate(async () => {
    const sessions = (window as any).jupyterapp.serviceManager.sessions;
    await sessions.refreshRunning();
    const ids = Array.from(sessions.running(), (m: { id: string }) => m.id);
    await Promise.allSettled(ids.map((id: string) => sessions.shutdown(id)));
  });
}
