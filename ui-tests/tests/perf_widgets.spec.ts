// The live task stream and flame graph in JupyterLab: a notebook shows both, then
// runs a workload; the widgets fill in from the kernel's updates, answer hover,
// zoom and the prefix selector (a round trip to the kernel).
import { expect, galata, test } from '@jupyterlab/galata';
import * as fs from 'fs';
import * as path from 'path';
import { paintedPixels } from './canvas';

const artifacts = path.resolve(__dirname, '..', 'artifacts');
const NOTEBOOK = 'perf_widgets.ipynb';

test.use({ autoGoto: true, viewport: { width: 1280, height: 1600 } });

test('live task stream and flame graph widgets', async ({ page, tmpPath }) => {
  fs.mkdirSync(artifacts, { recursive: true });
  await page.contents.uploadFile(path.resolve(__dirname, '..', 'notebooks', NOTEBOOK), `${tmpPath}/${NOTEBOOK}`);
  await page.notebook.openByPath(`${tmpPath}/${NOTEBOOK}`);
  await page.notebook.activate(NOTEBOOK);
  await page.notebook.run();

  // the task stream: 33 + 16 tasks arrive as deltas; hover names one
  const stream = page.locator('.kc-task-stream');
  await stream.scrollIntoViewIfNeeded();
  await expect(stream.locator('.kc-title')).toContainText('49 tasks', { timeout: 30000 });
  await expect(stream.locator('.kc-legend-item[data-label="crunch"]')).toBeVisible();
  const canvas = stream.locator('canvas');
  expect(await paintedPixels(canvas)).toBeGreaterThan(5000);
  const box = (await canvas.boundingBox())!;
  await page.mouse.move(box.x + 84 + 20, box.y + 20);
  // each thread runs a load and, straight after it, the crunch that reads it
  await expect(stream.locator('.kc-tooltip')).toContainText(/(load|crunch)-[0-9a-f]+/);
  // wheel zooms in around the pointer: fewer seconds on the axis
  await page.mouse.wheel(0, -600);
  await page.mouse.move(box.x + 84 + 300, box.y + 300);
  await page.screenshot({ path: path.join(artifacts, 'notebook-task-stream.png') });

  // the flame graph: the profile of every task, then of one prefix from the selector
  const flame = page.locator('.kc-flame-graph');
  await flame.scrollIntoViewIfNeeded();
  await expect(flame.locator('.kc-title')).toContainText(/all tasks · \d+ samples/, { timeout: 30000 });
  await expect(flame.locator('select.kc-prefix-select option[value="crunch"]')).toBeAttached({ timeout: 30000 });
  const flameCanvas = flame.locator('canvas.kc-flame');
  expect(await paintedPixels(flameCanvas)).toBeGreaterThan(2000);
  await flame.locator('select.kc-prefix-select').selectOption('crunch');
  await expect(flame.locator('.kc-title')).toContainText(/crunch · \d+ samples/, { timeout: 30000 });
  const fbox = (await flameCanvas.boundingBox())!;
  await page.mouse.move(fbox.x + 40, fbox.y + 18 + 9); // crunch, under the root
  await expect(flame.locator('.kc-tooltip')).toContainText(/crunch[\s\S]*\.py:\d+[\s\S]*% of all/);
  await page.mouse.click(fbox.x + 40, fbox.y + 18 + 9); // zoom into it
  await page.screenshot({ path: path.join(artifacts, 'notebook-flame-graph.png') });
  // a time window brushed on the timeline reaches the kernel and back
  const timeline = flame.locator('canvas.kc-timeline');
  const tbox = (await timeline.boundingBox())!;
  await page.mouse.move(tbox.x + tbox.width * 0.6, tbox.y + 20);
  await page.mouse.down();
  await page.mouse.move(tbox.x + tbox.width - 2, tbox.y + 20, { steps: 5 });
  await page.mouse.up();
  await expect(flame.locator('.kc-window')).toContainText('window', { timeout: 30000 });
  await expect(flame.locator('.kc-title')).not.toContainText('loading', { timeout: 30000 });

  // MemorySampler: a live bqplot chart while sampling, and plot()'s interactive one
  const figures = page.locator('.bqplot.figure');
  await expect(figures).toHaveCount(2, { timeout: 30000 });
  for (const figure of await figures.all()) {
    const line = figure.locator('path.line').first();
    await expect(line).toBeAttached();
    // several samples drawn (the last update may still be on its way)
    await expect.poll(async () => ((await line.getAttribute('d')) ?? '').split('L').length, { timeout: 15000 }).toBeGreaterThan(3);
  }
  await figures.last().scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(artifacts, 'notebook-memory-sampler.png') });
});

test.afterEach(async ({ page }) => {
  await page.evaluate(async () => {
    await window.jupyterapp.serviceManager.sessions.shutdownAll();
  });
});

void galata;
