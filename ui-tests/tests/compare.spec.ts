// The Compare view in a real JupyterLab: the panel opened from code shows the
// comparison of two runs of the notebook's kernel (the history in a file of the
// notebook's own), and answers a choice of other runs through the kernel; the
// inline Compare widget draws the same view. Screenshots go to artifacts/compare-*.png.
import { expect, galata, test, type IJupyterLabPageFixture } from '@jupyterlab/galata';
import * as fs from 'fs';
import * as path from 'path';

const artifacts = path.resolve(__dirname, '..', 'artifacts');
const NOTEBOOK = 'compare.ipynb';

test.use({ autoGoto: true, viewport: { width: 1600, height: 1000 } });

async function shot(page: IJupyterLabPageFixture, name: string): Promise<void> {
  fs.mkdirSync(artifacts, { recursive: true });
  await page.screenshot({ path: path.join(artifacts, `compare-${name}.png`) });
}

test('the Compare panel ranks the slower function, switches bars, and compares other runs', async ({ page, tmpPath }) => {
  await page.contents.uploadFile(path.resolve(__dirname, '..', 'notebooks', NOTEBOOK), `${tmpPath}/${NOTEBOOK}`);
  await page.notebook.openByPath(`${tmpPath}/${NOTEBOOK}`);
  await page.notebook.activate(NOTEBOOK);
  await page.notebook.runCell(0);
  await page.notebook.runCell(1);
  expect(await page.notebook.getCellTextOutput(1)).toEqual([expect.stringContaining('`parse` thread-noncpu +')]);
  await page.notebook.runCell(2);

  const compare = page.locator(`.kc-lab-panel[data-view="compare"][data-path$="${NOTEBOOK}"]`);
  await expect(compare).toBeVisible({ timeout: 30000 });
  const verdict = compare.locator('.kc-verdict');
  await expect(verdict).toContainText('`parse` thread-noncpu +', { timeout: 30000 });
  await expect(compare).toHaveAttribute('data-first-data', /\d+/);
  // side by side: parse's bars, b (slower) longer than a
  const parse = compare.locator('[data-panel="by-function"] g[data-label="parse"]');
  const a = Number(await parse.locator('rect[data-side="a"]').getAttribute('data-value'));
  const b = Number(await parse.locator('rect[data-side="b"]').getAttribute('data-value'));
  expect(b).toBeGreaterThan(a + 0.4);
  await shot(page, 'panel');

  // the change from zero instead: parse's bar goes up
  await compare.locator('select.kc-mode').selectOption('diverging');
  await expect(compare.locator('[data-panel="by-function"] g[data-label="parse"] rect.kc-cmp-up')).toBeVisible();
  // filters act in the browser: hide parse
  await compare.locator('.kc-functions summary').click();
  await compare.locator('.kc-functions input[value="parse"]').uncheck();
  await expect(compare.locator('[data-panel="by-function"] g[data-label="parse"]')).toHaveCount(0);

  // choose the same run on both sides: the kernel compares again, nothing changed
  const pickB = compare.locator('select.kc-pick-b');
  const options = await pickB.locator('option').allTextContents();
  expect(options.length).toBeGreaterThanOrEqual(2);
  const bRef = await pickB.inputValue();
  await compare.locator('select.kc-pick-a').selectOption(bRef);
  await expect(verdict).toHaveText('wall +0%: every function and activity within 5%', { timeout: 30000 });
  await shot(page, 'same-run');

  // the inline widget, from the same renderer library
  await page.notebook.activate(NOTEBOOK);
  await page.notebook.runCell(3);
  const inline = page.locator('.jp-OutputArea .kc-compare');
  await expect(inline.locator('.kc-verdict')).toContainText('`parse` thread-noncpu +', { timeout: 30000 });
  await expect(inline.locator('[data-panel="by-activity"] g[data-label="thread-noncpu"] rect[data-side="b"]')).toBeVisible();
  await inline.scrollIntoViewIfNeeded();
  await shot(page, 'inline');
});

test.afterEach(async ({ page }) => {
  await page.evaluate(async () => {
    const sessions = (window as any).jupyterapp.serviceManager.sessions;
    await sessions.refreshRunning();
    const ids = Array.from(sessions.running(), (m: { id: string }) => m.id);
    await Promise.allSettled(ids.map((id: string) => sessions.shutdown(id)));
  });
});

void galata;
