// What the canvas views share: sizing for the screen's pixel ratio, frame
// scheduling, growable typed columns, binary search, and time axes (ticks at the
// steps a clock reader expects, and their labels).
import { ticks, tickStep } from 'd3-array';

/** Size a canvas for ``width`` x ``height`` CSS pixels; its 2D context, or null
 * where there is none (jsdom). The context draws in CSS pixels. */
export function sizeCanvas(canvas: HTMLCanvasElement, width: number, height: number): CanvasRenderingContext2D | null {
  const ratio = (typeof window !== 'undefined' && window.devicePixelRatio) || 1;
  const w = Math.max(1, Math.round(width * ratio));
  const h = Math.max(1, Math.round(height * ratio));
  if (canvas.width !== w) canvas.width = w;
  if (canvas.height !== h) canvas.height = h;
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  let ctx: CanvasRenderingContext2D | null = null;
  try {
    ctx = canvas.getContext('2d');
  } catch {
    ctx = null;
  }
  if (ctx) ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  return ctx;
}

/** A canvas view's width: its element's, down to a narrow panel's (160 px), or 400
 * where it has none yet (hidden, or no layout as in jsdom). */
export function fitWidth(el: Element): number {
  const w = el.clientWidth || 0;
  return w > 0 ? Math.max(w, 160) : 400;
}

/** Calls ``fn`` once on the next animation frame however often it is asked. */
export class FrameScheduler {
  private pending = 0;
  private cancelled = false;

  constructor(private fn: () => void) {}

  request(): void {
    if (this.pending || this.cancelled) return;
    const run = () => {
      this.pending = 0;
      if (!this.cancelled) this.fn();
    };
    this.pending =
      typeof requestAnimationFrame === 'function' ? requestAnimationFrame(run) : (setTimeout(run, 16) as unknown as number);
  }

  cancel(): void {
    this.cancelled = true;
  }
}

type Typed = Float64Array | Uint32Array | Uint8Array | Int32Array;
type TypedCtor<A extends Typed> = { new (n: number): A };

/** A typed array that grows at the end and shrinks at the front. */
export class Column<A extends Typed> {
  data: A;
  length = 0;

  constructor(
    private ctor: TypedCtor<A>,
    capacity = 256,
  ) {
    this.data = new ctor(capacity);
  }

  append(values: ArrayLike<number>): void {
    const need = this.length + values.length;
    if (need > this.data.length) {
      const grown = new this.ctor(Math.max(need, this.data.length * 2));
      grown.set(this.data.subarray(0, this.length) as any);
      this.data = grown;
    }
    this.data.set(values as any, this.length);
    this.length = need;
  }

  dropFront(n: number): void {
    if (n <= 0) return;
    n = Math.min(n, this.length);
    this.data.copyWithin(0, n, this.length);
    this.length -= n;
  }

  clear(): void {
    this.length = 0;
  }
}

/** First position in ``order`` whose ``key`` is at least ``value`` (order sorted by key). */
export function lowerBound(order: ArrayLike<number>, n: number, key: (i: number) => number, value: number): number {
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (key(order[mid]) < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Steps a time axis takes from a second up: what a clock reader counts in. */
const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];

/** About ``count`` ticks between ``a`` and ``b`` seconds at a step a reader expects
 * of time (10 s, 30 s, 1 min, 5 min, ...; below a second, d3's decimal steps), and
 * that step. A ten-minute range gets 0, 5, 10 min, never 3.3 and 6.7 min. */
export function timeTicks(a: number, b: number, count: number): { values: number[]; step: number } {
  if (!(b > a)) return { values: [a], step: 1 };
  const rough = (b - a) / Math.max(count, 1);
  if (rough < 1) {
    const step = tickStep(a, b, count);
    return { values: ticks(a, b, count), step };
  }
  const step = TIME_STEPS.find((s) => s >= rough) ?? Math.ceil(rough / 86400) * 86400;
  const values: number[] = [];
  for (let t = Math.ceil(a / step - 1e-9) * step; t <= b + 1e-9; t += step) values.push(t + 0); // + 0: no -0
  return { values, step };
}

/** A time offset in seconds as a short axis label, as precise as the step. */
export function formatOffset(s: number, step: number): string {
  if (step >= 1) {
    const sign = s < 0 ? '-' : '';
    let rest = Math.round(Math.abs(s));
    const h = Math.floor(rest / 3600);
    rest -= h * 3600;
    const m = Math.floor(rest / 60);
    const sec = rest - m * 60;
    const parts: string[] = [];
    if (h) parts.push(`${h} h`);
    if (m) parts.push(`${m} min`);
    if (sec || !parts.length) parts.push(`${sec} s`);
    return sign + parts.join(' ');
  }
  const digits = Math.min(6, Math.max(0, -Math.floor(Math.log10(step))));
  if (step >= 1e-3) return `${s.toFixed(digits)} s`;
  return `${(s * 1e3).toFixed(Math.max(0, digits - 3))} ms`;
}

/** A CSS colour from the theme (the element's computed custom property), or ``fallback``. */
export function themeColor(el: Element, name: string, fallback: string): string {
  try {
    const v = getComputedStyle(el).getPropertyValue(name).trim();
    return v || fallback;
  } catch {
    return fallback;
  }
}

/** Keep (or stop keeping) a pointer's events on ``el`` while it drags; a pointer the
 * browser does not know (a synthetic event) is left alone. */
export function capture(el: Element, pointerId: number, on: boolean): void {
  try {
    if (on) el.setPointerCapture?.(pointerId);
    else el.releasePointerCapture?.(pointerId);
  } catch {
    /* not an active pointer */
  }
}

/** Calls ``fn`` when the page's theme changes (JupyterLab's, or the report's toggle),
 * so canvases, which do not follow CSS, draw again in the new colours. */
export function onThemeChange(fn: () => void): () => void {
  if (typeof MutationObserver !== 'function' || typeof document === 'undefined') return () => {};
  const observer = new MutationObserver(fn);
  const options = { attributes: true, attributeFilter: ['data-theme', 'data-jp-theme-name', 'data-jp-theme-light', 'class'] };
  observer.observe(document.documentElement, options);
  if (document.body) observer.observe(document.body, options);
  return () => observer.disconnect();
}
