/* Helpers shared by the browser tests (not a spec file: Playwright does not run it). */
import type { Locator } from '@playwright/test';

/** Pixels of a canvas that are not transparent: whether a chart was drawn at all. */
export async function paintedPixels(canvas: Locator): Promise<number> {
  return canvas.evaluate((c: HTMLCanvasElement) => {
    const data = (c.getContext('2d') as CanvasRenderingContext2D).getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 3; i < data.length; i += 4) if (data[i] > 0) n++;
    return n;
  });
}
