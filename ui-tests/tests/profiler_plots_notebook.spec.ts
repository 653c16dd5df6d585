// visualize() in a notebook: the ProfilerPlots widget draws the three plots in
// JupyterLab. (Run with PYTHONPATH set to the checkout when its kernel_cluster is not
// the one installed in the venv: the server's kernels inherit it.)
import { expect, galata, test } from '@jupyterlab/galata';
import * as fs from 'fs';
import * as path from 'path';
import { paintedPixels } from './canvas';

const artifacts = path.resolve(__dirname, '..', 'artifacts');
const NOTEBOOK = 'profiler_plots.ipynb';

test.use({ autoGoto: true, viewport: { width: 1280, height: 1600 } });

test('visualize shows the profiler plots widget in a notebook', async ({ page, tmpPath }) => {
  fs.mkdirSync(artifacts, { recursive: true });
  await page.contents.uploadFile(path.resolve(__dirname, '..', 'notebooks', NOTEBOOK), `${tmpPath}/${NOTEBOOK}`);
  await page.notebook.openByPath(`${tmpPath}/${NOTEBOOK}`);
  await page.notebook.activate(NOTEBOOK);
  await page.notebook.run();

  const plots = page.locator('.kc-profiler-plots');
  await expect(plots.locator('[data-plot]')).toHaveCount(3, { timeout: 30000 });
  const tasks = plots.locator('[data-plot="tasks"]');
  await expect(tasks.locator('.kc-title')).toContainText('10 tasks');
  const canvas = tasks.locator('canvas');
  await canvas.scrollIntoViewIfNeeded();
  expect(await paintedPixels(canvas)).toBeGreaterThan(5000);
  await expect(plots.locator('[data-chart="cpu"] path[data-series="CPU"]')).toBeAttached();
  await expect(plots.locator('[data-chart="cache"] path[data-series="inc"]')).toBeAttached();
  // the first task, inc-0, on worker 0, from 0 to 0.08 s of about 1.05 s
  const box = (await canvas.boundingBox())!;
  await page.mouse.move(box.x + 84 + (box.width - 84) * (0.05 / 1.07), box.y + 10);
  await expect(tasks.locator('.kc-tooltip')).toContainText('inc-0\ninc(0)');
  await plots.screenshot({ path: path.join(artifacts, 'profiler-plots-notebook.png') });
});

test.afterEach(async ({ page }) => {
  await page.evaluate(async () => {
    await window.jupyterapp.serviceManager.sessions.shutdownAll();
  });
});

void galata;
