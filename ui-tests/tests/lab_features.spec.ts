// What users of dask-labextension expect (issue 28): cluster controls in the sidebar,
// a worker table, legend filters on the task stream, views as tabs and all at once,
// the views in the command palette. Screenshots in artifacts/lab-f*.png.
import { expect, galata, test } from '@jupyterlab/galata';
import { command, expectFineMetrics, openNotebook, openSidebar, panel, PANELS, shots, shutdownKernels, sidebar, stats } from './lab_helpers';

test.use({ autoGoto: true, viewport: { width: 1600, height: 1000 } });

test.afterEach(async ({ page }) => {
  await shutdownKernels(page);
});

const CONTROLS = 'lab_controls.ipynb';

test('the sidebar starts a cluster in the kernel, scales it, inserts client code and stops it', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, CONTROLS);
  await page.notebook.runCell(0); // a kernel that has not imported kernel_cluster
  await openSidebar(page);
  const side = sidebar(page);
  await expect(side.locator('form.kc-lab-start')).toBeVisible();
  await side.locator('select.kc-lab-mode').selectOption('embedded');
  await side.locator('input[name="workers"]').fill('2');
  await side.locator('input[name="threads per worker"]').fill('1');
  await shots(page, 'f-controls-start');
  await side.locator('button.kc-lab-start-button').click();
  await expect(side.locator('tr[data-fact="workers"] td')).toHaveText('2', { timeout: 60000 });
  await expect(side.locator('tr[data-fact="threads"] td')).toHaveText('2');
  await expect(side.locator('.kc-lab-control-message')).toContainText('Started');
  await shots(page, 'f-controls-live');
  // the kernel's default client is the sidebar's
  await page.notebook.runCell(1);
  await expect(page.locator('.jp-Cell').nth(1).locator('.jp-OutputArea-output')).toContainText('(2, False)');

  await side.locator('input[name="scale to"]').fill('3');
  await side.locator('button.kc-lab-scale-button').click();
  await expect(side.locator('tr[data-fact="workers"] td')).toHaveText('3', { timeout: 60000 });

  const cells = await page.locator('.jp-Notebook .jp-Cell').count();
  await side.locator('button.kc-lab-insert').click();
  await expect(page.locator('.jp-Notebook .jp-Cell')).toHaveCount(cells + 1);
  await expect(page.locator('.jp-Notebook .jp-Cell .jp-InputArea', { hasText: 'client = get_client()' })).toHaveCount(1);

  await side.locator('button.kc-lab-stop').click();
  await expect(side.locator('.kc-lab-state')).toContainText('No cluster in this kernel yet', { timeout: 60000 });
  await expect(side.locator('form.kc-lab-start')).toBeVisible();
  await shots(page, 'f-controls-stopped');
});

test('the sidebar starts worker processes with a memory limit; bad values are refused by the kernel', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, CONTROLS);
  await page.notebook.runCell(0);
  await openSidebar(page);
  const side = sidebar(page);
  await side.locator('select.kc-lab-mode').selectOption('processes');
  await side.locator('input[name="workers"]').fill('1');
  await side.locator('input[name="threads per worker"]').fill('2');
  await side.locator('input[name="memory limit"]').fill('lots');
  await side.locator('button.kc-lab-start-button').click();
  await expect(side.locator('.kc-lab-control-message')).toContainText('lots', { timeout: 60000 });
  await expect(side.locator('.kc-lab-control-message')).toHaveAttribute('data-kind', 'error');
  await shots(page, 'f-controls-refused');
  await side.locator('input[name="memory limit"]').fill('1 GiB');
  await side.locator('button.kc-lab-start-button').click();
  await expect(side.locator('tr[data-fact="kind"] td')).toHaveText('worker processes', { timeout: 90000 });
  await expect(side.locator('tr[data-fact="memory"] td')).toContainText('of 1.0 GiB');
  await page.notebook.runCell(1);
  await expect(page.locator('.jp-Cell').nth(1).locator('.jp-OutputArea-output')).toContainText('(1, True)');
  // the worker table: one row, its memory against the limit
  await side.locator('button[data-view="workers"]').click();
  const workers = panel(page, 'workers', CONTROLS);
  await expect(workers.locator('tbody tr[data-worker]')).toHaveCount(1, { timeout: 30000 });
  await expect(workers.locator('.kc-memory-text')).toContainText('/ 1.0 GiB');
  await expect(workers.locator('.kc-state')).toHaveText('running');
  await expect(workers.locator('.kc-cpu')).toHaveText(/\d+%/, { timeout: 30000 });
  await shots(page, 'f-workers-processes');
  await side.locator('button.kc-lab-stop').click();
  await expect(side.locator('.kc-lab-state')).toContainText('No cluster', { timeout: 60000 });
});

test('a kernel without kernel_cluster is not asked again after every cell; a cell importing it connects', async ({ page, tmpPath }) => {
  // each ask a kernel refuses costs it a closed comm and a line in its log
  await openNotebook(page, tmpPath, CONTROLS);
  await page.notebook.runCell(0); // a kernel that has not imported kernel_cluster
  await expect.poll(async () => (await stats(page, CONTROLS)).state, { timeout: 60000 }).toBe('no-package');
  const before = (await stats(page, CONTROLS)).asks;
  for (let i = 0; i < 5; i++) await page.notebook.runCell(0);
  // one ask per cell before; now none, or one if the first wait (30 s) passed on a slow machine
  expect((await stats(page, CONTROLS)).asks - before).toBeLessThanOrEqual(1);
  await page.notebook.addCell('code', 'import kernel_cluster');
  await page.notebook.runCell(2);
  await expect.poll(async () => (await stats(page, CONTROLS)).state, { timeout: 60000 }).toBe('no-cluster');
});

test('the worker table follows the workers; the memory chart draws their limit', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, PANELS);
  await page.notebook.runCell(0);
  await page.notebook.runCell(1);
  const path = `${tmpPath}/${PANELS}`;
  await command(page, 'kernel-cluster:open', { view: 'workers', path });
  const workers = panel(page, 'workers');
  await expect(workers.locator('tbody tr[data-worker]')).toHaveCount(2, { timeout: 30000 });
  await expect(workers.locator('tbody tr').first().locator('td').nth(1)).toHaveText('2'); // threads
  // tasks executing show while they run
  await page.notebook.activate(PANELS);
  await page.notebook.addCell('code', 'futs = client.map(time.sleep, [3] * 4, pure=False)');
  await page.notebook.runCell(3);
  await expect.poll(async () => (await workers.locator('.kc-executing').allTextContents()).map(Number).reduce((a, b) => a + b, 0), { timeout: 15000 }).toBeGreaterThan(0);
  await shots(page, 'f-workers');
  await command(page, 'kernel-cluster:open', { view: 'memory', path });
  const mem = panel(page, 'memory');
  // the limit: a line when near the data, named at the top (with an arrow) when far above
  await expect(mem.locator('svg.kc-line-chart .kc-rule-label')).toContainText('limit', { timeout: 30000 });
  const axisTop = Number(await mem.locator('svg.kc-line-chart text.kc-y').last().getAttribute('data-value'));
  const peak = Number(await mem.locator('svg.kc-line-chart').getAttribute('data-max'));
  expect(axisTop).toBeLessThan(4 * peak); // the data is not flattened under the limit
  await shots(page, 'f-memory-limit');
});

test('the task stream legend hides a prefix on click and shows one alone on shift-click', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, PANELS);
  await page.notebook.runCell(0);
  await page.notebook.runCell(1);
  await command(page, 'kernel-cluster:open', { view: 'task-stream', path: `${tmpPath}/${PANELS}` });
  const ts = panel(page, 'task-stream');
  await expect(ts.locator('.kc-task-stream .kc-title .kc-note')).toHaveText('49 tasks', { timeout: 30000 });
  const pixels = () => ts.locator('canvas.kc-canvas').evaluate((c) => (c as HTMLCanvasElement).toDataURL());
  const all = await pixels();
  await ts.locator('.kc-legend-item[data-label="load"]').click();
  await expect(ts.locator('.kc-legend-item[data-label="load"]')).toHaveAttribute('aria-pressed', 'false');
  await expect.poll(pixels).not.toBe(all);
  await shots(page, 'f-legend-hidden');
  await ts.locator('.kc-legend-item[data-label="crunch"]').click({ modifiers: ['Shift'] });
  for (const other of ['load', 'sum', 'transfer']) await expect(ts.locator(`.kc-legend-item[data-label="${other}"]`)).toHaveAttribute('aria-pressed', 'false');
  await expect(ts.locator('.kc-legend-item[data-label="crunch"]')).toHaveAttribute('aria-pressed', 'true');
  await shots(page, 'f-legend-solo');
  await ts.locator('.kc-legend-item[data-label="crunch"]').click({ modifiers: ['Shift'] });
  await expect(ts.locator('.kc-legend-item.kc-off')).toHaveCount(0);
  await expect.poll(pixels).toBe(all);
});

test('open all views as tabs, in one area beside the notebook; the palette lists them', async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, PANELS);
  await page.notebook.runCell(0);
  await page.notebook.runCell(1);
  await openSidebar(page);
  await sidebar(page).locator('button.kc-lab-open-all').click();
  await expect(page.locator('.kc-lab-panel')).toHaveCount(8); // every view, Compare too
  const bars = await page.evaluate(() => {
    const tabs = [...document.querySelectorAll('.lm-DockPanel-tabBar .lm-TabBar-tab')].filter((t) => (t as HTMLElement).dataset.id?.startsWith('kernel-cluster-'));
    return new Set(tabs.map((t) => t.closest('.lm-TabBar'))).size;
  });
  expect(bars).toBe(1);
  const main = (await page.locator('#jp-main-dock-panel').boundingBox())!;
  const notebook = (await page.locator('.jp-NotebookPanel').first().boundingBox())!;
  expect(notebook.width).toBeGreaterThan(main.width * 0.35);
  await expectFineMetrics(panel(page, 'fine-metrics'), ['load', 'crunch']);
  await shots(page, 'f-all-tabs');

  // the palette: every view, searchable
  await page.keyboard.press('Control+Shift+C');
  const palette = page.locator('#command-palette');
  await expect(palette).toBeVisible();
  await palette.locator('input').fill('kernel cluster');
  for (const label of ['Open Fine Metrics', 'Open Workers', 'Open All Views as Tabs', 'Insert Client Code']) {
    await expect(palette.locator('.lm-CommandPalette-itemLabel', { hasText: label }).first()).toBeVisible();
  }
  await palette.locator('input').fill('workers');
  await expect(palette.locator('.lm-CommandPalette-itemLabel', { hasText: 'Open Workers' })).toBeVisible();
  await shots(page, 'f-palette');
  await page.keyboard.press('Escape');
});

void galata;
