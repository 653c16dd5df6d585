// The live widgets in JupyterLab: a notebook runs a workload with spans and shows
// the dashboard; the fine metrics react to the unit selector and the span filter.
import { expect, galata, test } from '@jupyterlab/galata';
import * as fs from 'fs';
import * as path from 'path';

const artifacts = path.resolve(__dirname, '..', 'artifacts');
const NOTEBOOK = 'spans_workload.ipynb';

test.use({ autoGoto: true, viewport: { width: 1280, height: 1600 } });

test('fine metrics widget: bars, unit selector and span filter', async ({ page, tmpPath }) => {
  fs.mkdirSync(artifacts, { recursive: true });
  await page.contents.uploadFile(path.resolve(__dirname, '..', 'notebooks', NOTEBOOK), `${tmpPath}/${NOTEBOOK}`);
  await page.notebook.openByPath(`${tmpPath}/${NOTEBOOK}`);
  await page.notebook.activate(NOTEBOOK);
  await page.notebook.run();

  const fm = page.locator('.kc-fine-metrics');
  const byFunction = fm.locator('[data-panel="by-function"]');
  await fm.scrollIntoViewIfNeeded();
  await expect(byFunction.locator('g[data-label="load"] rect[data-activity="thread-noncpu"]')).toBeVisible({ timeout: 30000 });
  await expect(byFunction.locator('g[data-label="crunch"] rect[data-activity="thread-cpu"]')).toBeVisible();
  await expect(fm.locator('[data-panel="by-activity"] rect[data-activity="thread-cpu"]')).toBeVisible();
  await expect(page.locator('.kc-progress-row[data-prefix="crunch"] .kc-progress-count')).toHaveText('24 / 24');
  await page.screenshot({ path: path.join(artifacts, 'notebook-seconds.png') });

  // unit: bytes
  await fm.locator('select.kc-unit').selectOption('bytes');
  await expect(byFunction.locator('rect[data-activity="output"]').first()).toBeVisible();
  await expect(byFunction.locator('rect[data-activity="thread-cpu"]')).toHaveCount(0);
  await page.screenshot({ path: path.join(artifacts, 'notebook-bytes.png') });

  // span filter by tag: only the crunch span's function is left
  await fm.locator('select.kc-unit').selectOption('seconds');
  const labels = () => byFunction.locator('g.kc-row').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-label')).sort());
  expect(await labels()).toEqual(expect.arrayContaining(['crunch', 'load']));
  await fm.locator('select.kc-span').selectOption('tag:crunch');
  await expect(byFunction.locator('g.kc-row')).toHaveCount(1);
  expect(await labels()).toEqual(['crunch']);
  await page.screenshot({ path: path.join(artifacts, 'notebook-span-crunch.png') });

  // choosing a span in the tree filters too
  await page.locator('.kc-tree-row[data-name="etl / load"]').click();
  await expect(byFunction.locator('g.kc-row')).toHaveCount(1);
  expect(await labels()).toEqual(['load']);
  await page.screenshot({ path: path.join(artifacts, 'notebook-tree-load.png') });

  // the views follow JupyterLab's theme
  await page.theme.setDarkTheme();
  const labelColor = await byFunction.locator('text.kc-label').first().evaluate((t) => getComputedStyle(t).fill);
  expect(labelColor).not.toBe('rgb(31, 35, 40)'); // not the light fallback
  await page.screenshot({ path: path.join(artifacts, 'notebook-dark.png') });
  await page.theme.setLightTheme();
});

test.afterEach(async ({ page }) => {
  // shut the kernel down with the notebook: its cluster's threads go with it
  await page.evaluate(async () => {
    await window.jupyterapp.serviceManager.sessions.shutdownAll();
  });
});

void galata;
