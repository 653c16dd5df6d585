// An interactive flame graph of a statistical profile, drawn on a canvas: the
// root on top, each frame as wide as its share of the samples, coloured by its
// file. Click a frame to zoom into it (animated), click it again, an ancestor or
// "Zoom out" to go back; hover for file:line, time and share. A task-prefix
// selector and a timeline of samples (drag to choose a time window) sit around it.
//
// Each frame of the drawing visits only the rows on screen and, in each, only the
// frames in the zoomed range (a search per row: frames of one depth are laid out
// left to right), skips frames thinner than half a pixel and fills frame colour by
// frame colour, so ten thousand frames draw in a few milliseconds.
import { fitWidth, FrameScheduler, lowerBound, onThemeChange, sizeCanvas, themeColor } from './canvas';
import { FLAME_PALETTE } from './colors';
import { h, Tooltip } from './dom';
import { formatPercent, formatSeconds } from './format';
import type { FlatProfile } from './profileData';
import { clockTime, ProfileTimeline } from './profileTimeline';
import type { ProfileSelection, Timeline } from './types';

export interface ProfileSource {
  tree(): FlatProfile | null;
  timeline(): Timeline;
  /** Seconds between two samples. */
  interval(): number;
  /** What the user chose, and whether the tree shown is not that yet. */
  selection(): ProfileSelection;
  pending(): boolean;
  select(change: Partial<ProfileSelection>): void;
  subscribe(listener: () => void): () => void;
  /** A time window can be chosen (a live widget: the kernel reads its samples). */
  windows: boolean;
}

export interface FlameGraphOptions {
  width?: number;
  /** Rows shown at once; deeper stacks scroll (wheel). */
  rows?: number;
  /** Milliseconds a zoom takes; 0: at once. */
  animate?: number;
}

export const ROW = 18;
const CHAR = 6.6; // width of a character of the label font, about

export class FlameGraphView {
  readonly root: HTMLDivElement;
  readonly canvas: HTMLCanvasElement;
  readonly timeline: ProfileTimeline;
  tree: FlatProfile | null = null;
  /** The frame zoomed into (0: the root). */
  focus = 0;
  /** Range shown, in samples from the root's left edge. */
  domain: [number, number] = [0, 1];
  /** First depth shown (deep stacks scroll). */
  top = 0;
  lastDrawMs = 0;
  /** Frames filled by the last drawing. */
  drawn = 0;
  private tooltip: Tooltip;
  private info: HTMLSpanElement;
  private prefixSelect: HTMLSelectElement;
  private windowNote: HTMLSpanElement;
  private frame: FrameScheduler;
  private anim: { from: [number, number]; to: [number, number]; t0: number } | null = null;
  private unsubscribe: () => void;
  private focusPath: string[] = [];
  private prefixKey = '';
  private observer: ResizeObserver | null = null;

  constructor(
    host: HTMLElement,
    private source: ProfileSource,
    private options: FlameGraphOptions = {},
  ) {
    this.canvas = h('canvas', { class: 'kc-canvas kc-flame', role: 'img', 'aria-label': 'flame graph' });
    this.info = h('span', { class: 'kc-note' });
    this.prefixSelect = h('select', { class: 'kc-prefix-select', 'aria-label': 'Task prefix' });
    this.prefixSelect.addEventListener('change', () => source.select({ prefix: this.prefixSelect.value || null }));
    const out = h('button', { class: 'kc-zoom-out', text: 'Zoom out' });
    out.addEventListener('click', () => this.zoomTo(0));
    this.windowNote = h('span', { class: 'kc-note kc-window' });
    const clear = h('button', { class: 'kc-clear-window', text: 'All time' });
    clear.addEventListener('click', () => source.select({ start: null, stop: null }));
    if (!source.windows) clear.style.display = 'none';
    const timelineHost = h('div', { class: 'kc-timeline-host' });
    this.root = h(
      'div',
      { class: 'kc-view kc-flame-graph' },
      h('div', { class: 'kc-title' }, 'Profile ', this.info),
      h('div', { class: 'kc-controls' }, h('label', {}, 'Tasks ', this.prefixSelect), out, clear, this.windowNote),
      h('div', { class: 'kc-canvas-box' }, this.canvas),
      timelineHost,
    );
    host.append(this.root);
    this.timeline = new ProfileTimeline(timelineHost, {
      width: options.width,
      onWindow: source.windows ? (start, stop) => source.select({ start, stop }) : undefined,
    });
    this.tooltip = new Tooltip(this.root);
    this.frame = new FrameScheduler(() => this.step());
    this.listen();
    const unwatch = onThemeChange(() => {
      this.frame.request();
      this.timeline.draw();
    });
    const unsubscribe = source.subscribe(() => this.changed());
    this.unsubscribe = () => {
      unwatch();
      unsubscribe();
    };
    if (typeof ResizeObserver === 'function' && options.width === undefined) {
      this.observer = new ResizeObserver(() => {
        this.frame.request();
        this.timeline.draw();
      });
      this.observer.observe(this.root);
    }
    this.changed();
  }

  get width(): number {
    return this.options.width ?? fitWidth(this.root);
  }

  get rows(): number {
    const depth = this.tree ? this.tree.maxDepth + 1 : 1;
    return Math.max(1, Math.min(depth, this.options.rows ?? 30));
  }

  get height(): number {
    return this.rows * ROW;
  }

  changed(): void {
    const tree = this.source.tree();
    if (tree !== this.tree) {
      this.tree = tree;
      const focus = tree ? this.find(this.focusPath) : 0;
      this.focus = focus;
      this.domain = this.rangeOf(focus);
      this.anim = null;
      this.top = Math.min(this.top, Math.max(0, (tree?.maxDepth ?? 0) + 1 - this.rows));
    }
    const sel = this.source.selection();
    const prefixes = ['', ...Object.keys(this.source.timeline().keys).sort()];
    if (sel.prefix && !prefixes.includes(sel.prefix)) prefixes.push(sel.prefix);
    if (prefixes.join('\u0000') !== this.prefixKey) {
      this.prefixKey = prefixes.join('\u0000');
      this.prefixSelect.replaceChildren(...prefixes.map((p) => h('option', { value: p, text: p || 'all tasks' })));
    }
    this.prefixSelect.value = sel.prefix ?? '';
    const samples = this.tree?.total ?? 0;
    const what = this.source.pending() ? 'loading…' : `${samples.toLocaleString()} samples, ${formatSeconds(samples * this.source.interval())}`;
    this.info.textContent = `${sel.prefix ? sel.prefix : 'all tasks'} · ${what}`;
    const tl = this.source.timeline();
    const points = sel.prefix ? tl.keys[sel.prefix] ?? [] : tl.counts;
    const win: [number, number] | null = sel.start !== null && sel.stop !== null ? [sel.start, sel.stop] : null;
    this.timeline.set(points, win);
    this.windowNote.textContent = win
      ? `window ${clockTime(win[0])} to ${clockTime(win[1])} (${formatSeconds(win[1] - win[0])}; double-click the timeline for all)`
      : this.source.windows
        ? 'drag over the timeline to choose a time window'
        : '';
    this.frame.request();
  }

  /** A frame's identity that survives a new tree: its names and lines from the root. */
  private pathOf(i: number): string[] {
    const t = this.tree;
    if (!t) return [];
    return t.ancestors(i).slice(1).map((j) => `${t.strings[t.file[j]]}:${t.line[j]}:${t.strings[t.name[j]]}`);
  }

  private find(path: string[]): number {
    const t = this.tree;
    if (!t || !path.length) return 0;
    let node = 0;
    for (const step of path) {
      let next = -1;
      for (const i of t.byDepth[t.depth[node] + 1] ?? []) {
        if (t.parent[i] === node && `${t.strings[t.file[i]]}:${t.line[i]}:${t.strings[t.name[i]]}` === step) {
          next = i;
          break;
        }
      }
      if (next < 0) break;
      node = next;
    }
    return node;
  }

  rangeOf(i: number): [number, number] {
    const t = this.tree;
    if (!t || !t.n) return [0, 1];
    return [t.x[i], t.x[i] + Math.max(t.count[i], 1e-9)];
  }

  /** Zoom into frame ``i`` (0: all). */
  zoomTo(i: number): void {
    if (!this.tree) return;
    this.focus = i;
    this.focusPath = this.pathOf(i);
    const to = this.rangeOf(i);
    const ms = this.options.animate ?? 250;
    if (ms > 0 && typeof performance !== 'undefined') this.anim = { from: [...this.domain] as [number, number], to, t0: performance.now() };
    else this.domain = to;
    const d = this.tree.depth[i];
    if (d < this.top || d >= this.top + this.rows) this.top = Math.max(0, d - 1);
    this.frame.request();
  }

  private step(): void {
    if (this.anim) {
      const ms = this.options.animate ?? 250;
      const k = Math.min(1, (performance.now() - this.anim.t0) / ms);
      const e = 1 - Math.pow(1 - k, 3);
      const { from, to } = this.anim;
      this.domain = [from[0] + (to[0] - from[0]) * e, from[1] + (to[1] - from[1]) * e];
      if (k >= 1) this.anim = null;
      else this.frame.request();
    }
    this.draw();
  }

  draw(): void {
    const started = performance.now();
    const W = this.width;
    const ctx = sizeCanvas(this.canvas, W, this.height);
    this.drawn = 0;
    const t = this.tree;
    if (ctx) ctx.clearRect(0, 0, W, this.height);
    if (!t || !t.n || t.total === 0) {
      if (ctx) {
        ctx.fillStyle = themeColor(this.root, '--kc-fg-muted', '#57606a');
        ctx.font = 'italic 12px sans-serif';
        ctx.textBaseline = 'middle';
        ctx.fillText(this.source.pending() ? 'Reading the profile…' : 'No samples in this profile', 8, ROW / 2);
      }
      this.lastDrawMs = performance.now() - started;
      return;
    }
    const [a, b] = this.domain;
    const scale = W / (b - a);
    const focusDepth = t.depth[this.focus];
    const batches: number[][] = FLAME_PALETTE.map(() => []);
    const labels: number[] = [];
    const right = (i: number) => t.x[i] + t.count[i];
    for (let d = this.top; d < Math.min(this.top + this.rows, t.byDepth.length); d++) {
      const row = t.byDepth[d];
      let k = lowerBound(row, row.length, right, a + 1e-12);
      for (; k < row.length; k++) {
        const i = row[k];
        if (t.x[i] >= b) break;
        const x0 = Math.max((t.x[i] - a) * scale, 0);
        const x1 = Math.min((right(i) - a) * scale, W);
        if (x1 - x0 < 0.5) continue;
        batches[t.color[i]].push(i, x0, x1 - x0);
        if (x1 - x0 > 3 * CHAR + 6) labels.push(i, x0, x1 - x0);
      }
    }
    this.drawn = batches.reduce((n, bt) => n + bt.length / 3, 0);
    if (ctx) {
      for (let c = 0; c < batches.length; c++) {
        const bt = batches[c];
        if (!bt.length) continue;
        ctx.fillStyle = FLAME_PALETTE[c];
        for (let j = 0; j < bt.length; j += 3) {
          const i = bt[j];
          const y = (t.depth[i] - this.top) * ROW;
          ctx.globalAlpha = t.depth[i] < focusDepth ? 0.55 : 1; // ancestors of the zoomed frame
          ctx.fillRect(bt[j + 1], y, Math.max(bt[j + 2] - 1, 0.5), ROW - 1);
        }
      }
      ctx.globalAlpha = 1;
      ctx.fillStyle = '#1f1f1f';
      ctx.font = '11px ui-monospace, "DejaVu Sans Mono", monospace';
      ctx.textBaseline = 'middle';
      for (let j = 0; j < labels.length; j += 3) {
        const i = labels[j];
        const fit = Math.floor((labels[j + 2] - 6) / CHAR);
        const name = i === 0 ? 'all' : t.strings[t.name[i]];
        const text = name.length > fit ? `${name.slice(0, fit - 1)}…` : name;
        ctx.fillText(text, labels[j + 1] + 3, (t.depth[i] - this.top) * ROW + ROW / 2);
      }
    }
    this.lastDrawMs = performance.now() - started;
  }

  /** The frame under a point of the canvas (CSS pixels), or null. */
  hit(px: number, py: number): number | null {
    const t = this.tree;
    if (!t || !t.n) return null;
    const d = Math.floor(py / ROW) + this.top;
    if (d < 0 || d >= t.byDepth.length) return null;
    const [a, b] = this.domain;
    const x = a + (px / this.width) * (b - a);
    const row = t.byDepth[d];
    const k = lowerBound(row, row.length, (i) => t.x[i] + t.count[i], x + 1e-12);
    if (k >= row.length) return null;
    const i = row[k];
    return t.x[i] <= x ? i : null;
  }

  describe(i: number): string {
    const t = this.tree as FlatProfile;
    const f = t.frame(i);
    const dt = this.source.interval();
    const lines = [i === 0 ? 'all' : f.name];
    if (i !== 0) lines.push(`${f.file}:${f.line}`);
    if (f.text) lines.push(`  ${f.text.trim()}`);
    let share = `${formatSeconds(f.count * dt)} (${f.count.toLocaleString()} samples), ${formatPercent(f.count / t.total)} of all`;
    if (this.focus !== 0 && i !== this.focus) share += `, ${formatPercent(f.count / t.count[this.focus])} of ${t.strings[t.name[this.focus]]}`;
    lines.push(share);
    if (f.own) lines.push(`${formatSeconds(f.own * dt)} on this line itself`);
    return lines.join('\n');
  }

  private listen(): void {
    const c = this.canvas;
    const local = (e: MouseEvent): [number, number] => {
      const box = c.getBoundingClientRect();
      return [e.clientX - box.left, e.clientY - box.top];
    };
    c.addEventListener('click', (e) => {
      const i = this.hit(...local(e));
      if (i === null || !this.tree) return;
      this.zoomTo(i === this.focus && i !== 0 ? this.tree.parent[i] : i);
    });
    c.addEventListener('mousemove', (e) => {
      const i = this.hit(...local(e));
      if (i === null) this.tooltip.hide();
      else this.tooltip.show(this.describe(i), e);
    });
    c.addEventListener('mouseleave', () => this.tooltip.hide());
    c.addEventListener(
      'wheel',
      (e: WheelEvent) => {
        const t = this.tree;
        if (!t || t.maxDepth + 1 <= this.rows) return; // nothing to scroll: the page scrolls
        const top = Math.max(0, Math.min(t.maxDepth + 1 - this.rows, this.top + Math.sign(e.deltaY) * 3));
        if (top === this.top) return;
        e.preventDefault();
        this.top = top;
        this.frame.request();
      },
      { passive: false },
    );
  }

  /** The host changed size: draw again at the new width. */
  resize(): void {
    this.frame.request();
    this.timeline.draw();
  }

  destroy(): void {
    this.frame.cancel();
    this.observer?.disconnect();
    this.timeline.destroy();
    this.unsubscribe();
    this.root.remove();
  }
}
