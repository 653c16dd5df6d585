// The task stream: one row per worker thread, a rectangle per compute, transfer,
// disk and deserialize interval, coloured by task prefix (the other actions in
// their fixed colours). Drawn on a canvas: each frame visits only the rectangles
// in view (a search by start per row); those at least two pixels wide are filled
// colour by colour, the narrower ones (a zoomed-out stream of many short tasks)
// are written as pixels, one colour per row and pixel, so a hundred thousand cost
// about what the screen has pixels. Wheel zooms around the pointer, drag pans,
// double-click (or "Fit") shows everything and follows new tasks again; hovering
// names the task.
import { ACTION_COLORS } from './colors';
import { capture, FrameScheduler, formatOffset, lowerBound, onThemeChange, sizeCanvas, themeColor, ticks } from './canvas';
import { h, Tooltip } from './dom';
import { formatBytes, formatSeconds } from './format';
import type { Store } from './store';
import type { TaskTable } from './taskTable';

export interface TaskStreamOptions {
  /** Canvas width in CSS pixels; by default the element's width. */
  width?: number;
  height?: number;
}

export interface Batches {
  /** Wide rectangles, per colour slot: x, width and y of each (CSS pixels), and how many. */
  rects: Float32Array[];
  counts: Int32Array;
  /** Narrow ones, rasterised: per row and device-pixel column, the colour slot (-1: none). */
  columns: Int16Array;
  /** Device-pixel columns of the plot. */
  width: number;
  ratio: number;
  rowHeight: number;
  visited: number;
  /** Wide rectangles filled plus raster cells coloured. */
  drawn: number;
}

const GUTTER = 84; // worker names
const AXIS = 20;

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/** '#rrggbb' as the 32-bit value of an opaque pixel of an ImageData. */
export function packColor(hex: string): number {
  const v = parseInt(hex.slice(1, 7), 16);
  const [r, g, b] = [(v >> 16) & 255, (v >> 8) & 255, v & 255];
  return (LITTLE_ENDIAN ? ((255 << 24) | (b << 16) | (g << 8) | r) : ((r << 24) | (g << 16) | (b << 8) | 255)) >>> 0;
}

export function shortWorker(address: string): string {
  const tail = address.split('/').filter(Boolean).pop() ?? address;
  return tail.length > 14 ? `…${tail.slice(-13)}` : tail;
}

export class TaskStreamView {
  readonly root: HTMLDivElement;
  readonly canvas: HTMLCanvasElement;
  /** Times shown, left and right edges; null until there is data. */
  domain: [number, number] | null = null;
  /** Show everything, and keep showing everything as tasks arrive. */
  follow = true;
  /** Display position of each row: rows sorted by worker, then thread. */
  order: number[] = [];
  last: Batches | null = null;
  lastDrawMs = 0;
  private tooltip: Tooltip;
  private legend: HTMLDivElement;
  private info: HTMLSpanElement;
  private frame: FrameScheduler;
  private unsubscribe: () => void;
  private drag: { x: number; domain: [number, number] } | null = null;
  private legendKey = '';
  private buffers: Float32Array[] = [];
  private resize: ResizeObserver | null = null;
  private columns = new Int16Array(0);
  private image: ImageData | null = null;

  constructor(
    host: HTMLElement,
    private store: Store,
    private options: TaskStreamOptions = {},
  ) {
    this.canvas = h('canvas', { class: 'kc-canvas', role: 'img', 'aria-label': 'task stream' });
    this.legend = h('div', { class: 'kc-legend' });
    this.info = h('span', { class: 'kc-note' });
    const fit = h('button', { class: 'kc-fit', text: 'Fit', title: 'Show every task and follow new ones' });
    fit.addEventListener('click', () => this.fit());
    const plot = h('div', { class: 'kc-canvas-box' }, this.canvas);
    this.root = h(
      'div',
      { class: 'kc-view kc-task-stream' },
      h('div', { class: 'kc-title' }, 'Task stream ', this.info),
      h('div', { class: 'kc-controls' }, fit, h('span', { class: 'kc-note', text: 'wheel: zoom · drag: pan · double-click: fit' })),
      this.legend,
      plot,
    );
    host.append(this.root);
    this.tooltip = new Tooltip(this.root);
    this.frame = new FrameScheduler(() => this.draw());
    this.listen();
    const unwatch = onThemeChange(() => this.frame.request());
    const unsubscribe = store.subscribe(() => this.changed());
    this.unsubscribe = () => {
      unwatch();
      unsubscribe();
    };
    if (typeof ResizeObserver === 'function' && options.width === undefined) {
      this.resize = new ResizeObserver(() => this.frame.request());
      this.resize.observe(this.root);
    }
    this.changed();
  }

  get table(): TaskTable {
    return this.store.tasks;
  }

  get width(): number {
    return this.options.width ?? Math.max(this.root.clientWidth || 0, 400);
  }

  get height(): number {
    return this.options.height ?? 260;
  }

  /** Data changed: follow it if following, and draw on the next frame. */
  changed(): void {
    const t = this.table;
    if (this.order.length !== t.rows.length) {
      this.order = t.rows.map((_, i) => i);
      this.order.sort((a, b) => t.rows[a].worker.localeCompare(t.rows[b].worker) || t.rows[a].thread - t.rows[b].thread);
    }
    if (this.follow) this.domain = this.extent();
    this.info.textContent = t.ntasks ? `${t.ntasks.toLocaleString()} tasks` : '';
    this.updateLegend();
    this.frame.request();
  }

  extent(): [number, number] | null {
    const t = this.table;
    if (!(t.maxStop >= t.minStart)) return null;
    const pad = Math.max((t.maxStop - t.minStart) * 0.01, 1e-4);
    return [t.minStart - pad, t.maxStop + pad];
  }

  fit(): void {
    this.follow = true;
    this.domain = this.extent();
    this.frame.request();
  }

  setDomain(a: number, b: number): void {
    if (!(b > a)) return;
    this.follow = false;
    this.domain = [a, b];
    this.frame.request();
  }

  /** Zoom by ``factor`` (<1: in) around time ``at``. */
  zoom(factor: number, at: number): void {
    if (!this.domain) return;
    const [a, b] = this.domain;
    const span = Math.max((b - a) * factor, 1e-6);
    const f = (at - a) / (b - a);
    this.setDomain(at - f * span, at - f * span + span);
  }

  pan(seconds: number): void {
    if (!this.domain) return;
    this.setDomain(this.domain[0] + seconds, this.domain[1] + seconds);
  }

  private plotWidth(): number {
    return Math.max(this.width - GUTTER, 10);
  }

  timeAt(px: number): number {
    const [a, b] = this.domain ?? [0, 1];
    return a + ((px - GUTTER) / this.plotWidth()) * (b - a);
  }

  /** What is in view, without drawing it: rectangles at least two device pixels
   * wide grouped by colour; the narrower ones as a raster of one colour per row and
   * device pixel (the last to start wins), so that however many tasks share a pixel
   * it costs one cell. */
  collect(ratio = (typeof window !== 'undefined' && window.devicePixelRatio) || 1): Batches {
    const t = this.table;
    const nslots = t.colors.length;
    while (this.buffers.length < nslots) this.buffers.push(new Float32Array(3 * 256));
    this.buffers.length = nslots;
    const counts = new Int32Array(nslots);
    const rowHeight = t.rows.length ? (this.height - AXIS) / t.rows.length : 0;
    const w = this.plotWidth();
    const cols = Math.max(1, Math.round(w * ratio));
    const size = cols * this.order.length;
    if (this.columns.length !== size) this.columns = new Int16Array(size);
    const columns = this.columns;
    columns.fill(-1);
    const out: Batches = { rects: this.buffers, counts, columns, width: cols, ratio, rowHeight, visited: 0, drawn: 0 };
    if (!this.domain || !t.rows.length) return out;
    const [a, b] = this.domain;
    const scale = w / (b - a);
    const narrow = 2 / ratio; // CSS pixels
    const starts = t.rectStart.data;
    const stops = t.rectStop.data;
    const slots = t.rectSlot.data;
    const base = t.rectBase;
    const key = (r: number) => starts[r - base];
    for (let pos = 0; pos < this.order.length; pos++) {
      const r = this.order[pos];
      const col = t.byRow[r];
      const y = pos * rowHeight;
      const rowCells = pos * cols;
      let k = lowerBound(col.data, col.length, key, a - t.maxDuration[r]);
      for (; k < col.length; k++) {
        const i = col.data[k] - base;
        const s0 = starts[i];
        if (s0 > b) break;
        const s1 = stops[i];
        if (s1 < a) continue;
        out.visited++;
        const x0 = (s0 - a) * scale;
        const x1 = (s1 - a) * scale;
        const slot = slots[i];
        if (x1 - x0 < narrow) {
          const c = Math.floor(((x0 + x1) / 2) * ratio);
          if (c >= 0 && c < cols) columns[rowCells + c] = slot;
          continue;
        }
        let buf = this.buffers[slot];
        const n = counts[slot];
        if (3 * n + 3 > buf.length) {
          const grown = new Float32Array(buf.length * 2);
          grown.set(buf);
          buf = this.buffers[slot] = grown;
        }
        const left = Math.max(x0, -1);
        buf[3 * n] = left;
        buf[3 * n + 1] = Math.min(x1, w + 1) - left;
        buf[3 * n + 2] = y;
        counts[slot] = n + 1;
        out.drawn++;
      }
    }
    for (let c = 0; c < size; c++) if (columns[c] >= 0) out.drawn++;
    return out;
  }

  draw(): void {
    const started = performance.now();
    const ctx = sizeCanvas(this.canvas, this.width, this.height);
    const batches = this.collect();
    this.last = batches;
    if (ctx) this.paint(ctx, batches);
    this.lastDrawMs = performance.now() - started;
  }

  private paint(ctx: CanvasRenderingContext2D, batches: Batches): void {
    const t = this.table;
    const W = this.width;
    const H = this.height;
    const fg = themeColor(this.root, '--kc-fg', '#1f2328');
    const muted = themeColor(this.root, '--kc-fg-muted', '#57606a');
    const border = themeColor(this.root, '--kc-border', '#d0d7de');
    ctx.clearRect(0, 0, W, H);
    const plotH = H - AXIS;
    const rh = batches.rowHeight;
    const gap = rh >= 4 ? 1 : 0;
    this.paintRaster(ctx, batches, gap);
    ctx.save();
    ctx.beginPath();
    ctx.rect(GUTTER, 0, W - GUTTER, plotH);
    ctx.clip();
    ctx.translate(GUTTER, 0);
    for (let s = 0; s < batches.counts.length; s++) {
      const n = batches.counts[s];
      if (!n) continue;
      ctx.fillStyle = t.colors[s];
      const buf = batches.rects[s];
      for (let i = 0; i < n; i++) {
        const w = buf[3 * i + 1];
        ctx.fillRect(buf[3 * i], buf[3 * i + 2], w >= 4 ? w - 1 : w, rh - gap); // a gap after each
      }
    }
    ctx.restore();
    // worker names in the gutter, a line between workers
    ctx.font = '11px sans-serif';
    ctx.textBaseline = 'top';
    let previous = '';
    for (let pos = 0; pos < this.order.length; pos++) {
      const worker = t.rows[this.order[pos]].worker;
      if (worker === previous) continue;
      previous = worker;
      const y = pos * rh;
      ctx.fillStyle = border;
      if (pos) ctx.fillRect(0, y - 0.5, W, 1);
      ctx.fillStyle = muted;
      ctx.fillText(shortWorker(worker), 4, y + 2, GUTTER - 8);
    }
    // the time axis, in seconds from the first task held
    if (!this.domain) return;
    const [a, b] = this.domain;
    const origin = Number.isFinite(t.minStart) ? t.minStart : a;
    const w = this.plotWidth();
    const marks = ticks(a - origin, b - origin, Math.max(2, Math.floor(w / 90)));
    const step = marks.length > 1 ? marks[1] - marks[0] : b - a;
    ctx.fillStyle = border;
    ctx.fillRect(GUTTER, plotH, w, 1);
    ctx.fillStyle = fg;
    ctx.textBaseline = 'top';
    ctx.textAlign = 'center';
    for (const m of marks) {
      const x = GUTTER + ((m + origin - a) / (b - a)) * w;
      ctx.fillRect(x, plotH, 1, 4);
      ctx.fillText(formatOffset(m, step), x, plotH + 5);
    }
    ctx.textAlign = 'start';
  }

  /** The narrow rectangles: one colour per row and device pixel, written straight
   * into the canvas's pixels (no path, no fill per rectangle). */
  private paintRaster(ctx: CanvasRenderingContext2D, batches: Batches, gap: number): void {
    const cols = batches.width;
    const rows = this.order.length;
    const r = batches.ratio;
    const height = Math.max(1, Math.round((this.height - AXIS) * r));
    if (!rows || typeof ctx.createImageData !== 'function') return;
    if (!this.image || this.image.width !== cols || this.image.height !== height) this.image = ctx.createImageData(cols, height);
    const pixels = new Uint32Array(this.image.data.buffer);
    pixels.fill(0);
    const rgba = this.table.colors.map(packColor);
    const cells = batches.columns;
    let any = false;
    for (let pos = 0; pos < rows; pos++) {
      const y0 = Math.round(pos * batches.rowHeight * r);
      const y1 = Math.max(y0 + 1, Math.round(((pos + 1) * batches.rowHeight - gap) * r));
      const at = pos * cols;
      for (let c = 0; c < cols; c++) {
        const slot = cells[at + c];
        if (slot < 0) continue;
        any = true;
        const color = rgba[slot];
        for (let y = y0; y < y1; y++) pixels[y * cols + c] = color;
      }
    }
    if (any) ctx.putImageData(this.image, Math.round(GUTTER * r), 0);
  }

  /** The rectangle under a point of the canvas (CSS pixels), if any. */
  hit(px: number, py: number): number | null {
    const t = this.table;
    if (!this.domain || !t.rows.length || px < GUTTER) return null;
    const rh = (this.height - AXIS) / t.rows.length;
    const pos = Math.floor(py / rh);
    if (pos < 0 || pos >= this.order.length) return null;
    const r = this.order[pos];
    const col = t.byRow[r];
    const time = this.timeAt(px);
    const slack = (this.domain[1] - this.domain[0]) / this.plotWidth(); // a pixel
    const key = (x: number) => t.start(x);
    let k = lowerBound(col.data, col.length, key, time + slack) - 1;
    let best: number | null = null;
    for (; k >= 0; k--) {
      const rect = col.data[k];
      const s0 = t.start(rect);
      if (s0 < time - t.maxDuration[r] - slack) break;
      if (t.stop(rect) >= time - slack) {
        if (best === null || t.start(rect) > t.start(best)) best = rect;
        if (s0 <= time) break;
      }
    }
    return best;
  }

  describe(rect: number): string {
    const t = this.table;
    const r = t.rect(rect);
    const task = t.task(r.task);
    const row = t.rows[r.row];
    const what = r.action === 'compute' ? task.prefix : r.action;
    const lines = [
      task.key,
      `${what}: ${formatSeconds(r.stop - r.start)}${task.status === 'error' ? ' (erred)' : ''}`,
      `${shortWorker(row.worker)}, thread ${row.thread} · ${formatBytes(task.nbytes)}`,
    ];
    return lines.join('\n');
  }

  private listen(): void {
    const c = this.canvas;
    const local = (e: MouseEvent): [number, number] => {
      const box = c.getBoundingClientRect();
      return [e.clientX - box.left, e.clientY - box.top];
    };
    c.addEventListener(
      'wheel',
      (e: WheelEvent) => {
        if (!this.domain) return;
        e.preventDefault();
        const [x] = local(e);
        const dy = e.deltaMode === 1 ? e.deltaY * 16 : e.deltaY;
        if (Math.abs(e.deltaX) > Math.abs(dy)) this.pan((e.deltaX / this.plotWidth()) * (this.domain[1] - this.domain[0]));
        else this.zoom(Math.exp(dy * 0.0015), this.timeAt(Math.max(x, GUTTER)));
      },
      { passive: false },
    );
    c.addEventListener('pointerdown', (e: PointerEvent) => {
      if (!this.domain || e.button !== 0) return;
      this.drag = { x: e.clientX, domain: [...this.domain] as [number, number] };
      capture(c, e.pointerId, true);
      this.tooltip.hide();
    });
    c.addEventListener('pointermove', (e: PointerEvent) => {
      if (this.drag) {
        const [a, b] = this.drag.domain;
        const dt = ((e.clientX - this.drag.x) / this.plotWidth()) * (b - a);
        this.setDomain(a - dt, b - dt);
        return;
      }
      const [x, y] = local(e);
      const rect = this.hit(x, y);
      if (rect === null) this.tooltip.hide();
      else this.tooltip.show(this.describe(rect), e);
    });
    const end = (e: PointerEvent) => {
      this.drag = null;
      capture(c, e.pointerId, false);
    };
    c.addEventListener('pointerup', end);
    c.addEventListener('pointercancel', end);
    c.addEventListener('pointerleave', () => this.tooltip.hide());
    c.addEventListener('dblclick', () => this.fit());
  }

  private updateLegend(): void {
    const prefixes = [...this.table.prefixes].sort();
    const key = prefixes.join('\u0000');
    if (key === this.legendKey) return;
    this.legendKey = key;
    const item = (label: string, color: string) =>
      h('span', { class: 'kc-legend-item kc-static', 'data-label': label }, h('span', { class: 'kc-swatch', style: `background:${color}` }), label);
    const items = prefixes.slice(0, 40).map((p) => item(p, this.table.prefixColors.color(p)));
    if (prefixes.length > 40) items.push(h('span', { class: 'kc-note', text: `+${prefixes.length - 40} more` }));
    for (const [action, color] of Object.entries(ACTION_COLORS)) items.push(item(action, color));
    this.legend.replaceChildren(...items);
  }

  destroy(): void {
    this.frame.cancel();
    this.resize?.disconnect();
    this.unsubscribe();
    this.root.remove();
  }
}
