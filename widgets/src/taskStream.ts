// The task stream: one row per worker thread, a rectangle per compute, transfer,
// disk and deserialize interval, coloured by task prefix (the other actions in
// their fixed colours). Drawn on a canvas: each frame visits only the rectangles
// in view (a search by start per row); those at least two pixels wide are filled
// colour by colour, the narrower ones (a zoomed-out stream of many short tasks)
// are written as pixels, one colour per row and pixel, so a hundred thousand cost
// about what the screen has pixels. Wheel zooms around the pointer, drag pans,
// double-click (or "Fit") shows everything and follows new tasks again; hovering
// names the task. What is in view and where (the layout) is computed in
// taskStreamLayout.ts; this module draws it and handles events.
import { ACTION_COLORS, ACTIONS } from './colors';
import { capture, fitWidth, formatOffset, FrameScheduler, onThemeChange, sizeCanvas, themeColor, timeTicks } from './canvas';
import { h, Tooltip } from './dom';
import { formatBytes, formatSeconds } from './format';
import type { Store } from './store';
import type { TaskTable } from './taskTable';
import * as layout from './taskStreamLayout';
import { AXIS, GUTTER, packColor, shortWorker, type Batches, type Viewport } from './taskStreamLayout';

export { packColor, shortWorker, type Batches };

export interface TaskStreamOptions {
  /** Canvas width in CSS pixels; by default the element's width. */
  width?: number;
  height?: number;
  /** The heading (default 'Task stream'). */
  title?: string;
  /** The time shown as 0 on the axis (default: the first task's start). */
  origin?: number;
  /** What "Fit" shows (default: every task held, with a margin). */
  extent?: () => [number, number] | null;
  /** Display position of the rows (default: by worker, then thread). */
  rowOrder?: (t: TaskTable) => number[];
  /** The hover text of a rectangle (default: key, action, duration, worker, bytes). */
  describe?: (rect: number, t: TaskTable) => string;
  /** List the transfer, disk and deserialize colours in the legend (default true). */
  actions?: boolean;
  /** Called after each frame with the time window drawn: other plots follow it. */
  onDraw?: (domain: [number, number] | null, width: number) => void;
  /** Task prefixes and actions hidden at first (the legend's filter). */
  hidden?: string[];
  /** Called with what the legend hides now, to keep it (a panel, a widget's model). */
  onFilter?: (hidden: string[]) => void;
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
  /** Task prefixes and actions the legend hides. */
  hidden: Set<string>;
  private tooltip: Tooltip;
  private legend: HTMLDivElement;
  private info: HTMLSpanElement;
  private frame: FrameScheduler;
  private unsubscribe: () => void;
  private drag: { x: number; domain: [number, number] } | null = null;
  private legendKey = '';
  private scratch = layout.newScratch();
  private observer: ResizeObserver | null = null;
  private image: ImageData | null = null;

  constructor(
    host: HTMLElement,
    private store: Store,
    private options: TaskStreamOptions = {},
  ) {
    this.hidden = new Set(options.hidden ?? []);
    this.canvas = h('canvas', { class: 'kc-canvas', role: 'img', 'aria-label': 'task stream' });
    this.legend = h('div', { class: 'kc-legend' });
    this.info = h('span', { class: 'kc-note' });
    const fit = h('button', { class: 'kc-fit', text: 'Fit', title: 'Show every task and follow new ones' });
    fit.addEventListener('click', () => this.fit());
    const plot = h('div', { class: 'kc-canvas-box' }, this.canvas);
    this.root = h(
      'div',
      { class: 'kc-view kc-task-stream' },
      h('div', { class: 'kc-title' }, `${options.title ?? 'Task stream'} `, this.info),
      h('div', { class: 'kc-controls' }, fit, h('span', { class: 'kc-note', text: 'wheel: zoom · drag: pan · double-click: fit · legend: click hides, shift-click shows only that' })),
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
      this.observer = new ResizeObserver(() => this.frame.request());
      this.observer.observe(this.root);
    }
    this.changed();
  }

  get table(): TaskTable {
    return this.store.tasks;
  }

  get width(): number {
    return this.options.width ?? fitWidth(this.root);
  }

  get height(): number {
    return this.options.height ?? 260;
  }

  /** Data changed: follow it if following, and draw on the next frame. */
  changed(): void {
    const t = this.table;
    if (this.order.length !== t.rows.length) this.order = (this.options.rowOrder ?? layout.rowOrder)(t);
    if (this.follow) this.domain = this.extent();
    this.info.textContent = t.ntasks ? `${t.ntasks.toLocaleString()} tasks` : '';
    this.updateLegend();
    this.frame.request();
  }

  extent(): [number, number] | null {
    return this.options.extent ? this.options.extent() : layout.extent(this.table);
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
    this.setDomain(...layout.zoomed(this.domain, factor, at));
  }

  pan(seconds: number): void {
    if (!this.domain) return;
    this.setDomain(this.domain[0] + seconds, this.domain[1] + seconds);
  }

  private plotWidth(): number {
    return Math.max(this.width - GUTTER, 10);
  }

  /** The plot as the layout sees it: its size without gutter and axis. */
  private viewport(): Viewport {
    return {
      domain: this.domain,
      width: this.plotWidth(),
      height: this.height - AXIS,
      order: this.order,
      hidden: layout.hiddenMask(this.table, this.hidden, ACTIONS),
    };
  }

  timeAt(px: number): number {
    return layout.timeAt(this.domain, this.plotWidth(), px - GUTTER);
  }

  /** What is in view, without drawing it (see taskStreamLayout.collect). */
  collect(ratio = (typeof window !== 'undefined' && window.devicePixelRatio) || 1): Batches {
    return layout.collect(this.table, this.viewport(), ratio, this.scratch);
  }

  draw(): void {
    const started = performance.now();
    const ctx = sizeCanvas(this.canvas, this.width, this.height);
    const batches = this.collect();
    this.last = batches;
    if (ctx) this.paint(ctx, batches);
    this.lastDrawMs = performance.now() - started;
    this.options.onDraw?.(this.domain, this.width);
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
    const origin = this.options.origin ?? (Number.isFinite(t.minStart) ? t.minStart : a);
    const w = this.plotWidth();
    const count = Math.max(2, Math.floor(w / 90));
    const { values: marks, step } = timeTicks(a - origin, b - origin, count);
    this.canvas.dataset.ticks = JSON.stringify(marks.map((m) => +m.toFixed(6)));
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
    return layout.hit(this.table, this.viewport(), px - GUTTER, py);
  }

  describe(rect: number): string {
    const t = this.table;
    if (this.options.describe) return this.options.describe(rect, t);
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

  /** Hide or show ``name`` (a prefix or an action); ``solo``: show it alone, or
   * everything again if it is alone already. */
  toggle(name: string, solo = false): void {
    const all = [...this.table.prefixes, ...(this.options.actions !== false ? Object.keys(ACTION_COLORS) : [])];
    if (solo) {
      const alone = !this.hidden.has(name) && all.every((n) => n === name || this.hidden.has(n));
      this.hidden = new Set(alone ? [] : all.filter((n) => n !== name));
    } else if (this.hidden.has(name)) this.hidden.delete(name);
    else this.hidden.add(name);
    this.legendKey = '';
    this.updateLegend();
    this.options.onFilter?.([...this.hidden].sort());
    this.frame.request();
  }

  /** Hidden names set from outside (a model): no onFilter echo. */
  setHidden(names: string[]): void {
    this.hidden = new Set(names);
    this.legendKey = '';
    this.updateLegend();
    this.frame.request();
  }

  private updateLegend(): void {
    const prefixes = [...this.table.prefixes].sort();
    const key = prefixes.join('\u0000');
    if (key === this.legendKey) return;
    this.legendKey = key;
    const item = (label: string, color: string) => {
      const off = this.hidden.has(label);
      const b = h(
        'button',
        {
          class: `kc-legend-item${off ? ' kc-off' : ''}`,
          'data-label': label,
          'aria-pressed': String(!off),
          title: `${off ? 'show' : 'hide'} ${label} (shift-click: show only ${label})`,
        },
        h('span', { class: 'kc-swatch', style: `background:${color}` }),
        label,
      );
      b.addEventListener('click', (e) => this.toggle(label, e.shiftKey));
      return b;
    };
    const items: HTMLElement[] = prefixes.slice(0, 40).map((p) => item(p, this.table.prefixColors.color(p)));
    if (prefixes.length > 40) items.push(h('span', { class: 'kc-note', text: `+${prefixes.length - 40} more` }));
    if (this.options.actions !== false) for (const [action, color] of Object.entries(ACTION_COLORS)) items.push(item(action, color));
    this.legend.replaceChildren(...items);
  }

  /** The host changed size: draw again at the new width. */
  resize(): void {
    this.frame.request();
  }

  destroy(): void {
    this.frame.cancel();
    this.observer?.disconnect();
    this.unsubscribe();
    this.root.remove();
  }
}
