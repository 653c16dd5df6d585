// Issue 30 in JupyterLab: a span explained. The Span Tree panel shows a finished
// span's critical-path length beside its wall time; choosing the span shows its
// explanation (the path by part, idle by why, findings); the Task Stream's
// "Critical path" toggle outlines the path's tasks and dims the rest. Asked on
// demand over the notebook's lab channel, answered once. Screenshots in
// artifacts/lab-explain-*.png.
import { expect, test } from '@jupyterlab/galata';
import { command, openNotebook, panel, PANELS, shot, shots, shutdownKernels } from './lab_helpers';
import * as path from 'path';
import { artifacts } from './lab_helpers';

test.use({ autoGoto: true, viewport: { width: 1600, height: 1000 } });
test.setTimeout(240000);

test.afterEach(async ({ page }) => {
  await shutdownKernels(page);
});

test("a span's explanation and its critical path in the Task Stream", async ({ page, tmpPath }) => {
  await openNotebook(page, tmpPath, PANELS);
  await page.notebook.runCell(0);
  await page.notebook.runCell(1); // the "etl" span: load, then crunch
  const nb = `${tmpPath}/${PANELS}`;
  await command(page, 'kernel-cluster:open', { view: 'span-tree', path: nb, mode: 'split-right' });
  const tree = panel(page, 'span-tree');
  const etl = tree.locator('.kc-tree-row[data-name="etl"]');
  await expect(etl).toBeVisible({ timeout: 30000 });
  // the path's length beside the wall time, once the kernel answered
  await expect(etl.locator('.kc-span-path')).toHaveText(/^path \S+ \S+ of \S+ \S+$/, { timeout: 30000 });
  const pathSeconds = Number(await etl.locator('.kc-span-path').getAttribute('data-seconds'));
  const wallSeconds = Number(await etl.locator('.kc-span-wall').getAttribute('data-seconds'));
  expect(pathSeconds).toBeGreaterThan(0);
  expect(pathSeconds).toBeLessThanOrEqual(wallSeconds * 1.05);

  // choose it: the explanation
  const explain = tree.locator('.kc-explain');
  await expect(explain).toHaveAttribute('data-state', 'none');
  await etl.click();
  await expect(explain).toHaveAttribute('data-state', 'ready', { timeout: 30000 });
  await expect(explain.locator('.kc-path-summary')).toContainText(/path .* wall \(\d+%\), \d+ tasks/);
  await expect(explain.locator('.kc-path-parts .kc-stack-part').first()).toBeVisible();
  // findings, or that there is nothing to report, and what could not be checked
  await expect(explain.locator('.kc-findings-box')).toContainText(/try:|Nothing to report/);
  await explain.scrollIntoViewIfNeeded();
  await shots(page, 'explain-span');

  // the Task Stream beside it: the toggle outlines the chosen span's path
  await command(page, 'kernel-cluster:open', { view: 'task-stream', path: nb, mode: 'split-bottom', ref: await tree.getAttribute('id') });
  const ts = panel(page, 'task-stream');
  await expect(ts.locator('.kc-task-stream .kc-title .kc-note')).toHaveText(/\d+ tasks/, { timeout: 30000 });
  const toggle = ts.locator('.kc-path-toggle');
  await expect(toggle).toHaveAttribute('aria-pressed', 'false');
  await toggle.click();
  await expect(toggle).toHaveAttribute('aria-pressed', 'true');
  await expect(ts.locator('.kc-path-note')).toContainText(/^etl: path/, { timeout: 30000 });
  const canvas = ts.locator('canvas.kc-canvas');
  await expect.poll(async () => Number((await canvas.getAttribute('data-path-rects')) ?? '0'), { timeout: 10000 }).toBeGreaterThan(0);
  await shots(page, 'explain-task-stream');
  await ts.screenshot({ path: path.join(artifacts, 'lab-explain-task-stream-panel.png') });
  // off again: nothing outlined
  await toggle.click();
  await expect.poll(async () => canvas.getAttribute('data-path-rects'), { timeout: 10000 }).toBe('0');
  await shot(page, 'explain-task-stream-off');
});
