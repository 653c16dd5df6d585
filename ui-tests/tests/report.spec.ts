// A generated performance report opens from disk, offline, and shows its panels.
import { expect, test } from '@playwright/test';
import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';

const venv = process.env.KC_VENV || path.resolve(__dirname, '..', '..', '.venv');
const artifacts = path.resolve(__dirname, '..', 'artifacts');

test('a performance report opens offline and shows its panels', async ({ browser }) => {
  fs.mkdirSync(artifacts, { recursive: true });
  const file = path.join(artifacts, 'report.html');
  execFileSync(path.join(venv, 'bin', 'python'), [path.join(__dirname, '..', 'scripts', 'make_report.py'), file], {
    stdio: 'inherit',
  });
  const context = await browser.newContext({ offline: true, viewport: { width: 1280, height: 1100 } });
  const page = await context.newPage();
  const outside: string[] = [];
  page.on('request', (r) => {
    if (!r.url().startsWith('file://') && !r.url().startsWith('data:')) outside.push(r.url());
  });
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(`file://${file}`);
  await expect(page.locator('#kc-report[data-ready="true"]')).toBeAttached();
  await expect(page.getByRole('heading', { name: 'kernel-cluster performance report' })).toBeVisible();
  const byFunction = page.locator('[data-panel="by-function"]');
  await expect(byFunction.locator('g[data-label="load"] rect[data-activity="thread-noncpu"]')).toBeVisible();
  await expect(byFunction.locator('g[data-label="crunch"] rect[data-activity="thread-cpu"]')).toBeVisible();
  await expect(page.locator('.kc-tree-row')).toHaveCount(3);
  await expect(page.locator('.kc-summary')).toContainText('Tasks');
  await expect(page.locator('.kc-code')).toContainText('with performance_report');
  await page.screenshot({ path: path.join(artifacts, 'report.png'), fullPage: true });

  // the span tree filters the panels
  await page.locator('.kc-tree-row[data-name="etl / load"]').click();
  await expect(byFunction.locator('g.kc-row')).toHaveCount(1);
  await expect(byFunction.locator('g.kc-row')).toHaveAttribute('data-label', 'load');
  // tooltips: value and share of the row
  await byFunction.locator('g[data-label="load"] rect[data-activity="thread-noncpu"]').hover();
  await expect(page.locator('.kc-tooltip')).toContainText(/load · thread-noncpu: .* \(\d+% of /);
  // the unit selector
  await page.locator('select.kc-unit').selectOption('bytes');
  await expect(byFunction.locator('rect[data-activity="output"]')).toBeVisible();
  await page.locator('.kc-theme-toggle').click();
  await page.screenshot({ path: path.join(artifacts, 'report-dark-bytes.png'), fullPage: true });

  expect(outside).toEqual([]);
  expect(errors).toEqual([]);
  await context.close();
});
