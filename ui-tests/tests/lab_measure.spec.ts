// Issue 28's measurements, on the demo workload (examples/demo.py, in
// notebooks/lab_demo.ipynb): time from a click in the sidebar to a panel's first
// data, idle and during a CPU-busy cell; bytes per second by what they feed, with
// every panel open while the pipeline runs; channels alive in the kernel after five
// reloads. Numbers go to artifacts/lab-perf.json; screenshots to artifacts/lab-m*.png.
import { expect, galata, test, type IJupyterLabPageFixture } from '@jupyterlab/galata';
import * as path from 'path';
import { command, kernelValue, openSidebar, panel, record, reload, shots, shutdownKernels, sidebar, startCell, stats } from './lab_helpers';

test.use({ autoGoto: true, viewport: { width: 1600, height: 1000 } });
test.setTimeout(600000); // a loaded machine runs the demo cells slower: bounds, not speeds

test.afterEach(async ({ page }) => {
  await shutdownKernels(page);
});

const DEMO = 'lab_demo.ipynb';
const VIEWS = ['fine-metrics', 'span-tree', 'profile', 'task-stream', 'memory', 'progress', 'workers'];

async function openDemo(page: IJupyterLabPageFixture, tmpPath: string): Promise<void> {
  await page.contents.uploadFile(path.resolve(__dirname, '..', '..', 'examples', 'demo.py'), `${tmpPath}/demo.py`);
  await page.contents.uploadFile(path.resolve(__dirname, '..', 'notebooks', DEMO), `${tmpPath}/${DEMO}`);
  await page.notebook.openByPath(`${tmpPath}/${DEMO}`);
  await page.notebook.activate(DEMO);
}

/** Click each view's sidebar button in turn and time, in the page, the click to the
 * panel's first data; each panel is closed again before the next. */
async function clickToData(page: IJupyterLabPageFixture): Promise<Record<string, number | null>> {
  const out: Record<string, number | null> = {};
  for (const view of VIEWS) {
    out[view] = await page.evaluate(async (v) => {
      const button = document.querySelector(`#kernel-cluster-sidebar button[data-view="${v}"]`) as HTMLButtonElement;
      const t0 = performance.now();
      button.click();
      let p: HTMLElement | null = null;
      while (performance.now() - t0 < 20000) {
        p = document.querySelector(`.kc-lab-panel[data-view="${v}"]`);
        if (p?.dataset.firstData) return performance.now() - t0;
        await new Promise((r) => setTimeout(r, 10));
      }
      return null;
    }, view);
    const p = panel(page, view, DEMO);
    await page.evaluate((v) => {
      for (const w of [...(window as any).jupyterapp.shell.widgets('main')]) if (w.node.dataset.view === v) w.close();
    }, view);
    await expect(p).toHaveCount(0);
  }
  return out;
}

test('click to first data per panel, idle and during a CPU-busy cell', async ({ page, tmpPath }) => {
  await openDemo(page, tmpPath);
  await page.notebook.runCell(0);
  await page.notebook.runCell(1, true);
  // each phase on a fresh page: no feed held from an earlier panel
  await reload(page);
  await page.notebook.activate(DEMO);
  await openSidebar(page);
  await expect(sidebar(page).locator('tr[data-fact="workers"] td')).toHaveText('2', { timeout: 30000 });
  await startCell(page, 2);
  await expect(page.locator('.jp-Notebook .jp-Cell').nth(2).locator('.jp-InputPrompt')).toContainText('*');
  await page.waitForTimeout(2000); // well into the busy cell
  const busy = await clickToData(page);
  await expect(page.locator('.jp-Notebook .jp-Cell').nth(2).locator('.jp-InputPrompt')).toContainText('*'); // still busy
  await command(page, 'kernel-cluster:open-all');
  await shots(page, 'm-busy-cell');
  await expect(page.locator('.jp-Notebook .jp-Cell').nth(2).locator('.jp-InputPrompt')).not.toContainText('*', { timeout: 240000 });
  // close every panel, and reload once the workspace is saved without them
  const saved = page.waitForRequest(
    (r) => r.method() === 'PUT' && r.url().includes('/api/workspaces') && !(r.postData() ?? '').includes('kernel-cluster:'),
    { timeout: 30000 },
  );
  await page.evaluate(() => {
    for (const w of [...(window as any).jupyterapp.shell.widgets('main')]) if (w.node.dataset.view) w.close();
  });
  await saved;
  await reload(page);
  await page.notebook.activate(DEMO);
  await openSidebar(page);
  await expect(sidebar(page).locator('tr[data-fact="workers"] td')).toHaveText('2', { timeout: 30000 });
  const idle = await clickToData(page);
  record({ click_to_first_data_ms: { idle, busy_cell: busy } });
  for (const v of VIEWS) {
    expect(idle[v], `${v} idle`).not.toBeNull();
    expect(busy[v], `${v} during the busy cell`).not.toBeNull();
  }
});

test('bytes per second by feed, every panel open, on the demo workload', async ({ page, tmpPath }) => {
  await openDemo(page, tmpPath);
  await page.notebook.runCell(0);
  await openSidebar(page);
  await sidebar(page).locator('button.kc-lab-open-all').click();
  await expect(page.locator('.kc-lab-panel')).toHaveCount(8); // every view, Compare too
  await page.notebook.activate(DEMO);
  const before = await stats(page, DEMO);
  await page.notebook.runCell(1, true);
  const after = await stats(page, DEMO);
  const seconds = after.seconds - before.seconds;
  const perFeed: Record<string, number> = {};
  const by = (after as any).byFeed as Record<string, number>;
  const was = (before as any).byFeed as Record<string, number>;
  for (const [k, v] of Object.entries(by)) perFeed[k] = Math.round((v - (was[k] ?? 0)) / seconds);
  await command(page, 'kernel-cluster:open-task-stream');
  await shots(page, 'm-demo-all-panels');
  const runs = await kernelValue(page, DEMO, 'runs');
  record({
    demo_workload: {
      seconds: +seconds.toFixed(1),
      pipeline_runs: runs,
      bytes_per_second_total: Math.round((after.bytes - before.bytes) / seconds),
      bytes_per_second_by_feed: perFeed,
      messages_per_second: +((after.messages - before.messages) / seconds).toFixed(2),
    },
  });
  expect(after.bytes).toBeGreaterThan(before.bytes);
});

test('one channel alive in the kernel after five reloads', async ({ page, tmpPath }) => {
  await openDemo(page, tmpPath);
  await page.notebook.runCell(0);
  // the workspace saved with the panel before the first reload (else it is lost, as
  // any JupyterLab panel would be)
  const saved = page.waitForRequest(
    (r) => r.method() === 'PUT' && r.url().includes('/api/workspaces') && (r.postData() ?? '').includes('task-stream:'),
    { timeout: 30000 },
  );
  await command(page, 'kernel-cluster:open', { view: 'task-stream', path: `${tmpPath}/${DEMO}` });
  const ts = panel(page, 'task-stream', DEMO);
  await saved;
  for (let i = 0; i < 5; i++) {
    await expect(ts).toBeVisible({ timeout: 30000 });
    await expect(ts).toHaveAttribute('data-state', 'live', { timeout: 30000 });
    await reload(page);
  }
  await expect(ts).toHaveAttribute('data-state', 'live', { timeout: 30000 });
  const t0 = Date.now();
  await expect.poll(() => kernelValue(page, DEMO, 'len(__import__("kernel_cluster.jupyter.lab", fromlist=["lab"]).hub().channels)'), { timeout: 60000 }).toBe(1);
  record({ channels_after_five_reloads: 1, seconds_until_one_channel: (Date.now() - t0) / 1000 });
});

void galata;
