// visualize()'s page of the local profilers' plots opens from disk, offline, and
// draws its three plots on one time axis: tasks, resources, cache.
import { expect, test } from '@playwright/test';
import * as path from 'path';
import { paintedPixels } from './canvas';
import { artifacts, openOffline } from './offline';


test('the profiler plots open offline: tasks, CPU and memory, cache, aligned', async ({ browser }) => {
  const { page, outside, errors } = await openOffline(browser, 'make_profile.py', 'profiler-plots.html', { width: 1100, height: 1000 });
  await expect(page.locator('#kc-report[data-ready="true"]')).toBeAttached();
  await expect(page.getByRole('heading', { name: 'QR: profiler plots' })).toBeVisible();
  const plots = page.locator('[data-plot]');
  await expect(plots).toHaveCount(3);
  expect(await plots.evaluateAll((els) => els.map((e) => e.getAttribute('data-plot')))).toEqual(['tasks', 'resource', 'cache']);

  // 1. tasks: a canvas with a row per worker, coloured by function; hover names key and task
  const tasks = page.locator('[data-plot="tasks"]');
  await expect(tasks.locator('.kc-title')).toContainText('33 tasks');
  for (const fn of ['random_sample', 'qr', 'concatenate', 'dot', 'sum']) {
    await expect(tasks.locator(`.kc-legend-item[data-label="${fn}"]`)).toBeVisible();
  }
  const canvas = tasks.locator('canvas');
  expect(await paintedPixels(canvas)).toBeGreaterThan(20000);
  const box = (await canvas.boundingBox())!;
  // worker 0's first task, random_sample, runs from about 0.0 to 0.25 s of 2.3 s
  const plotWidth = box.width - 84;
  await page.mouse.move(box.x + 84 + plotWidth * (0.12 / 2.35), box.y + 12);
  const tip = tasks.locator('.kc-tooltip');
  await expect(tip).toBeVisible();
  await expect(tip).toContainText("('random_sample-5d1f0e2a', 0)");
  await expect(tip).toContainText('random_sample(0)');

  // 2. resources: CPU and memory lines, drawn
  const resource = page.locator('[data-plot="resource"]');
  for (const [chart, series] of [['cpu', 'CPU'], ['memory', 'memory']]) {
    const line = resource.locator(`[data-chart="${chart}"] path[data-series="${series}"]`);
    await expect(line).toBeAttached();
    expect(((await line.getAttribute('d')) ?? '').split('L').length).toBeGreaterThan(20);
  }
  await expect(resource.locator('.kc-title')).toContainText(/peak CPU \d+ %/);

  // 3. cache: one step line per function, in the task plot's colours; hover names one
  const cache = page.locator('[data-plot="cache"]');
  const lines = cache.locator('path[data-series]');
  await expect(lines).toHaveCount(5);
  const swatch = await tasks.locator('.kc-legend-item[data-label="qr"] .kc-swatch').evaluate((e) => getComputedStyle(e).backgroundColor);
  const stroke = await cache.locator('path[data-series="qr"]').evaluate((e) => getComputedStyle(e).stroke);
  expect(stroke).toBe(swatch);
  const svg = cache.locator('svg.kc-line-chart');
  const sbox = (await svg.boundingBox())!;
  // hovering names the line nearest the pointer: its function and its level then
  await page.mouse.move(sbox.x + 84 + (sbox.width - 84) * (0.9 / 2.35), sbox.y + 10);
  await expect(cache.locator('.kc-tooltip')).toContainText(/^[\d.]+ s\n?(random_sample|qr|concatenate|dot|sum): \d+(\.\d)?M$/);
  await page.mouse.move(sbox.x + sbox.width - 3, sbox.y + sbox.height - 20); // the end: all freed
  await expect(cache.locator('.kc-tooltip')).toContainText(/: 0$/);

  // the plots share the time axis: zooming the tasks zooms the others
  const before = await resource.locator('[data-chart="cpu"] text.kc-axis').allTextContents();
  await page.mouse.move(box.x + 84 + plotWidth / 2, box.y + 12);
  await page.mouse.wheel(0, -600);
  await expect.poll(async () => (await resource.locator('[data-chart="cpu"] text.kc-axis').allTextContents()).join()).not.toBe(before.join());
  await page.screenshot({ path: path.join(artifacts, 'profiler-plots-zoomed.png'), fullPage: true });
  await canvas.dblclick();
  await expect.poll(async () => (await resource.locator('[data-chart="cpu"] text.kc-axis').allTextContents()).join()).toBe(before.join());
  // dragging a line chart pans every plot; double-clicking it fits again
  const mem = resource.locator('[data-chart="memory"]');
  const mbox = (await mem.boundingBox())!;
  const taskTicks = async () => (await tasks.locator('canvas').screenshot()).toString('base64');
  const fitted = await taskTicks();
  await page.mouse.move(mbox.x + mbox.width / 2, mbox.y + mbox.height / 2);
  await page.mouse.down();
  await page.mouse.move(mbox.x + mbox.width / 2 - 200, mbox.y + mbox.height / 2, { steps: 5 });
  await page.mouse.up();
  await expect.poll(async () => (await resource.locator('[data-chart="cpu"] text.kc-axis').allTextContents()).join()).not.toBe(before.join());
  expect(await taskTicks()).not.toBe(fitted); // the tasks moved too
  await mem.dblclick();
  await expect.poll(async () => (await resource.locator('[data-chart="cpu"] text.kc-axis').allTextContents()).join()).toBe(before.join());
  await page.mouse.move(box.x + 84 + plotWidth * (0.12 / 2.35), box.y + 12);
  await expect(tip).toBeVisible();
  await page.screenshot({ path: path.join(artifacts, 'profiler-plots.png'), fullPage: true });

  expect(outside).toEqual([]);
  expect(errors).toEqual([]);
  await page.context().close();
});

test("the seed's QR run on the engine under the three profilers, drawn", async ({ browser }) => {
  const { page, outside, errors } = await openOffline(browser, 'make_qr_profile.py', 'profiler-plots-qr.html', { width: 1100, height: 1000 });
  await expect(page.getByRole('heading', { name: 'QR on kernel-cluster' })).toBeVisible();
  const tasks = page.locator('[data-plot="tasks"]');
  // dask's own task prefixes, as the engine ran them
  for (const fn of ['random_sample', 'qr', 'sum-aggregate']) {
    await expect(tasks.locator('.kc-legend-item').filter({ hasText: fn }).first()).toBeVisible();
  }
  expect(await paintedPixels(tasks.locator('canvas'))).toBeGreaterThan(5000);
  const resource = page.locator('[data-plot="resource"]');
  for (const [chart, series] of [['cpu', 'CPU'], ['memory', 'memory']]) {
    await expect(resource.locator(`[data-chart="${chart}"] path[data-series="${series}"]`)).toBeAttached();
  }
  await expect(page.locator('[data-plot="cache"] path[data-series]').first()).toBeAttached();
  await page.screenshot({ path: path.join(artifacts, 'profiler-plots-qr.png'), fullPage: true });
  expect(outside).toEqual([]);
  expect(errors).toEqual([]);
  await page.context().close();
});
