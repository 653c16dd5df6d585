// Pages made by a Python script (a performance report, visualize's plots), opened
// from disk in a browser context that has no network: what they request from outside
// and the errors they throw are collected for the test to assert empty.
import type { Browser, Page } from '@playwright/test';
import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';

const venv = process.env.KC_VENV || path.resolve(__dirname, '..', '..', '.venv');
const root = path.resolve(__dirname, '..', '..');
export const artifacts = path.resolve(__dirname, '..', 'artifacts');

export interface OfflinePage {
  page: Page;
  outside: string[];
  errors: string[];
}

/** Runs ui-tests/scripts/`script` to write artifacts/`name`, then opens it offline. */
export async function openOffline(
  browser: Browser,
  script: string,
  name: string,
  viewport: { width: number; height: number },
): Promise<OfflinePage> {
  fs.mkdirSync(artifacts, { recursive: true });
  const file = path.join(artifacts, name);
  // this checkout's kernel_cluster (and its bundles), whichever venv runs it
  const env = { ...process.env, PYTHONPATH: [root, process.env.PYTHONPATH].filter(Boolean).join(path.delimiter) };
  execFileSync(path.join(venv, 'bin', 'python'), [path.join(__dirname, '..', 'scripts', script), file], {
    stdio: 'inherit',
    env,
  });
  const context = await browser.newContext({ offline: true, viewport });
  const page = await context.newPage();
  const outside: string[] = [];
  page.on('request', (r) => {
    if (!r.url().startsWith('file://') && !r.url().startsWith('data:')) outside.push(r.url());
  });
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(`file://${file}`);
  return { page, outside, errors };
}
