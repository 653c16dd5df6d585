// Samples per profile cycle over time, under the flame graph: bars on a canvas,
// and a brush (drag across) that chooses the time window the profile covers;
// double-click clears it.
import { ticks } from 'd3-array';
import { capture, fitWidth, FrameScheduler, sizeCanvas, themeColor } from './canvas';
import { h } from './dom';

/** A time (seconds since the epoch) as the local clock shows it: 14:03:27. */
export function clockTime(t: number): string {
  const d = new Date(t * 1000);
  const two = (n: number) => String(n).padStart(2, '0');
  return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
}

export interface TimelineOptions {
  width?: number;
  height?: number;
  /** Seconds a point stands for (the profile cycle). */
  cycle?: number;
  /** Called with the window chosen, or nulls when cleared; no brush without it. */
  onWindow?: (start: number | null, stop: number | null) => void;
}

export class ProfileTimeline {
  readonly root: HTMLDivElement;
  readonly canvas: HTMLCanvasElement;
  points: [number, number][] = [];
  window: [number, number] | null = null;
  private brush: { from: number; to: number } | null = null;
  private frame: FrameScheduler;

  constructor(
    host: HTMLElement,
    private options: TimelineOptions = {},
  ) {
    this.canvas = h('canvas', { class: 'kc-canvas kc-timeline', role: 'img', 'aria-label': 'samples over time' });
    this.root = h('div', { class: 'kc-canvas-box kc-timeline-box' }, this.canvas);
    host.append(this.root);
    this.frame = new FrameScheduler(() => this.draw());
    if (options.onWindow) this.listen(options.onWindow);
    else this.canvas.style.cursor = 'default';
  }

  get width(): number {
    return this.options.width ?? fitWidth(this.root);
  }

  get height(): number {
    return this.options.height ?? 56;
  }

  get cycle(): number {
    return this.options.cycle ?? 1;
  }

  set(points: [number, number][], window: [number, number] | null): void {
    this.points = points;
    this.window = window;
    this.frame.request();
  }

  /** Times at the left and right edges: at least twenty cycles, so that a short
   * history does not fill the timeline with one bar. */
  extent(): [number, number] {
    if (!this.points.length) return [0, 1];
    let a = this.points[0][0] - this.cycle;
    let b = this.points[this.points.length - 1][0];
    if (this.window) {
      a = Math.min(a, this.window[0]);
      b = Math.max(b, this.window[1]);
    }
    return [Math.min(a, b - 20 * this.cycle), b];
  }

  timeAt(px: number): number {
    const [a, b] = this.extent();
    return a + (px / this.width) * (b - a);
  }

  private x(t: number): number {
    const [a, b] = this.extent();
    return ((t - a) / (b - a)) * this.width;
  }

  draw(): void {
    const ctx = sizeCanvas(this.canvas, this.width, this.height);
    if (!ctx) return;
    const W = this.width;
    const H = this.height;
    const axis = 14;
    const plotH = H - axis;
    ctx.clearRect(0, 0, W, H);
    const accent = themeColor(this.root, '--kc-accent', '#1a73e8');
    const fg = themeColor(this.root, '--kc-fg-muted', '#57606a');
    const max = Math.max(1, ...this.points.map((p) => p[1]));
    ctx.fillStyle = accent;
    ctx.globalAlpha = 0.5;
    for (const [t, n] of this.points) {
      const x0 = this.x(t - this.cycle);
      const x1 = this.x(t);
      const bh = (n / max) * (plotH - 2);
      ctx.fillRect(x0, plotH - bh, Math.max(x1 - x0 - 1, 1), bh);
    }
    ctx.globalAlpha = 1;
    const shade = this.brush ? [Math.min(this.brush.from, this.brush.to), Math.max(this.brush.from, this.brush.to)] : this.window;
    if (shade) {
      const x0 = this.x(shade[0]);
      const x1 = this.x(shade[1]);
      ctx.fillStyle = 'rgba(127, 127, 127, 0.25)';
      ctx.fillRect(x0, 0, Math.max(x1 - x0, 1), plotH);
      ctx.fillStyle = fg;
      ctx.fillRect(x0, 0, 1, plotH);
      ctx.fillRect(x1, 0, 1, plotH);
    }
    const [a, b] = this.extent();
    ctx.fillStyle = fg;
    ctx.font = '10px sans-serif';
    ctx.textBaseline = 'top';
    ctx.textAlign = 'center';
    for (const m of ticks(a, b, Math.max(2, Math.floor(W / 110)))) {
      const x = this.x(m);
      if (x > 24 && x < W - 24) ctx.fillText(clockTime(m), x, plotH + 2);
    }
    ctx.textAlign = 'start';
  }

  private listen(onWindow: NonNullable<TimelineOptions['onWindow']>): void {
    const c = this.canvas;
    const at = (e: MouseEvent) => this.timeAt(e.clientX - c.getBoundingClientRect().left);
    c.addEventListener('pointerdown', (e: PointerEvent) => {
      if (!this.points.length || e.button !== 0) return;
      const t = at(e);
      this.brush = { from: t, to: t };
      capture(c, e.pointerId, true);
    });
    c.addEventListener('pointermove', (e: PointerEvent) => {
      if (!this.brush) return;
      this.brush.to = at(e);
      this.frame.request();
    });
    const end = (e: PointerEvent) => {
      if (!this.brush) return;
      const { from, to } = this.brush;
      this.brush = null;
      capture(c, e.pointerId, false);
      const [a, b] = [Math.min(from, to), Math.max(from, to)];
      if (Math.abs(this.x(b) - this.x(a)) < 3) {
        this.frame.request(); // a click, not a drag
        return;
      }
      this.window = [a, b];
      this.frame.request();
      onWindow(a, b);
    };
    c.addEventListener('pointerup', end);
    c.addEventListener('pointercancel', end);
    c.addEventListener('dblclick', () => {
      this.window = null;
      this.frame.request();
      onWindow(null, null);
    });
  }

  destroy(): void {
    this.frame.cancel();
    this.root.remove();
  }
}
