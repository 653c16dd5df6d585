// A generated performance report opens from disk, offline, and shows its panels.
import { expect, test } from '@playwright/test';
import * as path from 'path';
import { paintedPixels } from './canvas';
import { artifacts, openOffline } from './offline';


test('a performance report opens offline and shows its panels', async ({ browser }) => {
  const { page, outside, errors } = await openOffline(browser, 'make_report.py', 'report.html', { width: 1280, height: 1100 });
  await expect(page.locator('#kc-report[data-ready="true"]')).toBeAttached();
  await expect(page.getByRole('heading', { name: 'kernel-cluster performance report' })).toBeVisible();
  const byFunction = page.locator('[data-panel="by-function"]');
  await expect(byFunction.locator('g[data-label="load"] rect[data-activity="thread-noncpu"]')).toBeVisible();
  await expect(byFunction.locator('g[data-label="crunch"] rect[data-activity="thread-cpu"]')).toBeVisible();
  await expect(page.locator('.kc-tree-row')).toHaveCount(3);
  await expect(page.locator('.kc-summary')).toContainText('Tasks');
  await expect(page.locator('.kc-code')).toContainText('with performance_report');
  await page.screenshot({ path: path.join(artifacts, 'report.png'), fullPage: true });

  // the task stream: a canvas with the block's tasks, and their names on hover
  const stream = page.locator('#task-stream');
  await expect(stream.locator('.kc-title')).toContainText(/49 tasks/);
  const streamCanvas = stream.locator('canvas');
  await streamCanvas.scrollIntoViewIfNeeded();
  expect(await paintedPixels(streamCanvas)).toBeGreaterThan(5000);
  await expect(stream.locator('.kc-legend-item[data-label="load"]')).toBeVisible();
  await expect(stream.locator('.kc-legend-item[data-label="transfer"]')).toBeVisible();
  const box = (await streamCanvas.boundingBox())!;
  await page.mouse.move(box.x + 84 + 40, box.y + 30); // early on the first thread: a load
  await expect(stream.locator('.kc-tooltip')).toContainText(/load-[0-9a-f]+/);
  await stream.screenshot({ path: path.join(artifacts, 'report-task-stream.png') });

  // the flame graph: frames on a canvas; hover names file and line; click zooms
  const flame = page.locator('#profile');
  await expect(flame.locator('.kc-title')).toContainText(/\d+ samples/);
  const flameCanvas = flame.locator('canvas.kc-flame');
  await flameCanvas.scrollIntoViewIfNeeded();
  expect(await paintedPixels(flameCanvas)).toBeGreaterThan(5000);
  const fbox = (await flameCanvas.boundingBox())!;
  await page.mouse.move(fbox.x + 5, fbox.y + 18 + 9); // the first frame under the root
  await expect(flame.locator('.kc-tooltip')).toContainText(/\.py:\d+/);
  await expect(flame.locator('.kc-tooltip')).toContainText(/% of all/);
  await flame.locator('select.kc-prefix-select').selectOption('crunch');
  await expect(flame.locator('.kc-title')).toContainText('crunch ·');
  await flame.screenshot({ path: path.join(artifacts, 'report-flame-graph.png') });

  // memory over time and transfers between the two workers
  await expect(page.locator('#memory path[data-series="process"]')).toBeAttached();
  await expect(page.locator('#bandwidth tr[data-pair]').first()).toBeAttached();
  await page.locator('#memory').screenshot({ path: path.join(artifacts, 'report-memory.png') });
  await page.locator('#bandwidth').screenshot({ path: path.join(artifacts, 'report-bandwidth.png') });

  // the span tree filters the panels
  await page.locator('.kc-tree-row[data-name="etl / load"]').click();
  await expect(byFunction.locator('g.kc-row')).toHaveCount(1);
  await expect(byFunction.locator('g.kc-row')).toHaveAttribute('data-label', 'load');
  // tooltips: value and share of the row
  await byFunction.locator('g[data-label="load"] rect[data-activity="thread-noncpu"]').hover();
  await expect(page.locator('#fine-metrics .kc-tooltip')).toContainText(/load · thread-noncpu: .* \(\d+% of /);
  // the unit selector
  await page.locator('select.kc-unit').selectOption('bytes');
  await expect(byFunction.locator('rect[data-activity="output"]')).toBeVisible();
  await page.locator('.kc-theme-toggle').click();
  await page.screenshot({ path: path.join(artifacts, 'report-dark-bytes.png'), fullPage: true });

  expect(outside).toEqual([]);
  expect(errors).toEqual([]);
  await page.context().close();
});

// the user trial: a report compared with an earlier run showed two empty run menus
// (a report cannot compare other runs: it says which two it compares instead), and
// its Progress said "No tasks yet" though the block ran 13 tasks
test('a compared report shows no empty run menus, and its work in Progress', async ({ browser }) => {
  const { page, outside, errors } = await openOffline(browser, 'make_compare_report.py', 'report-compare.html', { width: 1280, height: 1100 });
  await expect(page.locator('#kc-report[data-ready="true"]')).toBeAttached();
  const compare = page.locator('#compare');
  await expect(compare.locator('.kc-verdict')).toContainText('`parse` thread-noncpu +');
  await expect(compare.locator('.kc-side-a')).toContainText('a: etl');
  await expect(compare.locator('select.kc-pick-a')).toBeHidden();
  await expect(compare.locator('select.kc-pick-b')).toBeHidden();
  await compare.screenshot({ path: path.join(artifacts, 'report-compare.png') });
  const progress = page.locator('.kc-progress-view');
  await expect(progress.locator('.kc-progress-row[data-prefix="parse"] .kc-progress-count')).toHaveText('12 / 12');
  await progress.screenshot({ path: path.join(artifacts, 'report-compare-progress.png') });
  expect(outside).toEqual([]);
  expect(errors).toEqual([]);
});
