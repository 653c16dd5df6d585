// What a user trial of the panels (wheel in a fresh venv, JupyterLab, Chromium) found
// after issue 28's fixes, each as the user met it. Screenshots: artifacts/lab-trial-*.png.
import { expect, test, type IJupyterLabPageFixture } from '@jupyterlab/galata';
import { command, openNotebook, openSidebar, panel, PANELS, shot, shutdownKernels, sidebar } from './lab_helpers';

test.use({ autoGoto: true, viewport: { width: 1600, height: 1000 } });
test.setTimeout(240000); // a shared machine: kernels, clusters and busy cells take their time

test.afterEach(async ({ page }) => {
  await shutdownKernels(page);
});

async function cluster(page: IJupyterLabPageFixture, tmpPath: string): Promise<void> {
  await openNotebook(page, tmpPath, PANELS);
  await page.notebook.runCell(0);
  await page.notebook.runCell(1);
}

/** Add a code cell at the end of the notebook and run it (the notebook in front).
 * The editor indents after a line ending in a colon: one body line there, at the end. */
async function run(page: IJupyterLabPageFixture, code: string): Promise<void> {
  await page.notebook.activate(PANELS);
  await page.notebook.addCell('code', code);
  const n = await page.notebook.getCellCount();
  await page.notebook.runCell(n - 1);
}

async function openView(page: IJupyterLabPageFixture, tmpPath: string, view: string, extra: Record<string, unknown> = {}): Promise<void> {
  await command(page, 'kernel-cluster:open', { view, path: `${tmpPath}/${PANELS}`, ...extra });
  await expect(panel(page, view)).toBeVisible({ timeout: 30000 });
}

test('1. the Compare panel offers runs recorded after it opened', async ({ page, tmpPath }) => {
  await cluster(page, tmpPath);
  await openView(page, tmpPath, 'compare');
  const compare = panel(page, 'compare');
  await expect(compare.locator('select.kc-pick-b option', { hasText: 'etl' })).toHaveCount(1, { timeout: 30000 });
  const offered = await compare.locator('select.kc-pick-b option').count();
  await run(page, 'with span("second"):\n    client.gather(client.map(crunch, client.map(load, range(100, 108))))');
  // the panel's menus get the new run on their own
  await expect(compare.locator('select.kc-pick-b option', { hasText: 'second' })).toHaveCount(1, { timeout: 20000 });
  await expect(compare.locator('select.kc-pick-a option', { hasText: 'second' })).toHaveCount(1);
  await expect(compare.locator('select.kc-pick-a option')).toHaveCount(offered + 1);
  await shot(page, 'trial-compare');
});

test('2. after a new Client, a span selection that no longer exists is dropped, and the panel says so', async ({ page, tmpPath }) => {
  await cluster(page, tmpPath);
  await openView(page, tmpPath, 'fine-metrics');
  const fm = panel(page, 'fine-metrics');
  const spanSelect = fm.locator('select.kc-span');
  await expect(spanSelect.locator('option[value="tag:load"]')).toHaveCount(1, { timeout: 30000 });
  await spanSelect.selectOption('tag:load');
  await expect(fm.locator('[data-panel="by-function"] g.kc-row')).toHaveCount(1);
  await run(page, 'client.close()\nclient = Client(KernelCluster(n_workers=1, threads_per_worker=2))\nclient.gather(client.map(crunch, [b"abc"] * 4))');
  await expect(spanSelect).toHaveValue('', { timeout: 30000 });
  await expect(fm.locator('.kc-notice')).toContainText('no longer exists');
  await expect(fm.locator('[data-panel="by-function"] g[data-label="crunch"]')).toBeVisible({ timeout: 30000 });
  await shot(page, 'trial-span-dropped');
});

test('3. the Span Tree counts tasks whose results were released as done', async ({ page, tmpPath }) => {
  await cluster(page, tmpPath);
  // only the last result is kept: the scheduler releases the 60 inputs once the sum
  // has them, and keeps them released while the sum (their dependent) lives
  await run(page, 'with span("pipeline"): final = client.submit(sum, client.map(crunch, client.map(load, range(200, 230))))\nfinal.result()');
  await openView(page, tmpPath, 'span-tree');
  const pipeline = panel(page, 'span-tree').locator('.kc-tree-row[data-name="pipeline"]');
  await expect(pipeline).toContainText('61/61 tasks', { timeout: 30000 });
  await shot(page, 'trial-span-tree');
});

test('4. Progress shows the last work once its results are released', async ({ page, tmpPath }) => {
  await cluster(page, tmpPath);
  await run(page, 'del raw, done  # the results are released');
  await openView(page, tmpPath, 'progress');
  const progress = panel(page, 'progress');
  await expect(progress.locator('.kc-progress-row[data-prefix="load"] .kc-progress-count')).toHaveText('24 / 24', { timeout: 30000 });
  await expect(progress.locator('.kc-progress-row[data-prefix="crunch"] .kc-progress-count')).toHaveText('24 / 24');
  await expect(progress.locator('.kc-empty')).toHaveCount(0);
  await shot(page, 'trial-progress');
});

test('5. the sidebar drops the old cluster and what its controls said when the kernel restarts', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, PANELS);
  await openSidebar(page);
  const side = sidebar(page);
  // a cluster started from the sidebar, as in the trial
  await side.locator('select.kc-lab-mode').selectOption('embedded');
  await side.locator('input[name="workers"]').fill('3');
  await side.locator('input[name="threads per worker"]').fill('1');
  await side.locator('button.kc-lab-start-button').click();
  await expect(side.locator('tr[data-fact="workers"] td')).toHaveText('3', { timeout: 60000 });
  await expect(side.locator('.kc-lab-control-message')).toContainText('Started');
  await page.notebook.activate(PANELS);
  await command(page, 'notebook:restart-kernel', {}, false);
  await page.locator('.jp-Dialog .jp-Dialog-button.jp-mod-accept').click();
  await expect(side.locator('.kc-lab-state')).toContainText(/kernel (is restarting|restarted)/i, { timeout: 30000 });
  await expect(side.locator('tr[data-fact]')).toHaveCount(0);
  await expect(side.locator('.kc-lab-control-message')).toBeHidden(); // not "Started ... 3 workers"
  await shot(page, 'trial-sidebar-restarted');
});

test('6. show() brings a view already open to the front, the notebook keeping the focus', async ({ page, tmpPath }) => {
  await cluster(page, tmpPath);
  await run(page, 'import kernel_cluster\nkernel_cluster.show("fine-metrics")');
  const fm = panel(page, 'fine-metrics');
  await expect(fm).toBeVisible({ timeout: 30000 });
  // another view as a tab over it
  const ref = await fm.getAttribute('id');
  await openView(page, tmpPath, 'progress', { mode: 'tab-after', ref });
  await expect(fm).toBeHidden();
  await run(page, 'kernel_cluster.show("fine-metrics")');
  await expect(fm).toBeVisible({ timeout: 30000 });
  const current = await page.evaluate(() => (window as any).jupyterapp.shell.currentWidget?.node.classList.contains('jp-NotebookPanel'));
  expect(current).toBe(true);
  await shot(page, 'trial-show-front');
});
