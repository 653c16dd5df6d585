// The task stream's geometry, apart from any DOM or canvas so that it is tested on
// its own: the order of the rows, the time window (extent, zoom), which rectangles
// are in view and where they go (culling, batching by colour, rasterising the narrow
// ones), and which rectangle is under a point. taskStream.ts draws what this computes.
import { lowerBound } from './canvas';
import type { TaskTable } from './taskTable';

/** Width of the worker names left of the plot, and height of the time axis below it (CSS pixels). */
export const GUTTER = 84;
export const AXIS = 20;

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

/** What a view shows: the time window, the plot's size in CSS pixels, and the
 * display position of each row (``order[pos]`` is the row drawn at ``pos``). */
export interface Viewport {
  domain: [number, number] | null;
  width: number;
  height: number;
  order: number[];
  /** What the legend hides, if anything (see ``hiddenMask``). */
  hidden?: Hidden | null;
}

/** Rectangles left out: by their task's prefix (its index in the table's strings)
 * and by action (transfers, disk, deserialize; 0, compute, follows the prefix). */
export interface Hidden {
  prefix: Uint8Array;
  action: Uint8Array;
}

/** The mask of ``hidden`` names (task prefixes or action names) over ``t``'s strings,
 * or null when nothing is hidden. */
export function hiddenMask(t: TaskTable, hidden: ReadonlySet<string>, actions: readonly string[]): Hidden | null {
  if (!hidden.size) return null;
  const prefix = new Uint8Array(t.strings.length);
  t.strings.forEach((s, i) => {
    if (hidden.has(s)) prefix[i] = 1;
  });
  const action = new Uint8Array(actions.length);
  actions.forEach((a, i) => {
    if (i > 0 && hidden.has(a)) action[i] = 1;
  });
  return { prefix, action };
}

function isHidden(t: TaskTable, hidden: Hidden | null | undefined, i: number): boolean {
  if (!hidden) return false;
  if (hidden.action[t.rectAction.data[i]]) return true;
  return hidden.prefix[t.taskPrefix.data[t.rectTask.data[i] - t.firstTask]] === 1;
}

/** Buffers kept from frame to frame, so that drawing does not allocate. */
export interface Scratch {
  rects: Float32Array[];
  columns: Int16Array;
}

export function newScratch(): Scratch {
  return { rects: [], columns: new Int16Array(0) };
}

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

/** Rows sorted by worker, then thread. */
export function rowOrder(t: TaskTable): number[] {
  const order = t.rows.map((_, i) => i);
  order.sort((a, b) => t.rows[a].worker.localeCompare(t.rows[b].worker) || t.rows[a].thread - t.rows[b].thread);
  return order;
}

/** Every task held, with a margin; null while there is none. */
export function extent(t: TaskTable): [number, number] | null {
  if (!(t.maxStop >= t.minStart)) return null;
  const pad = Math.max((t.maxStop - t.minStart) * 0.01, 1e-4);
  return [t.minStart - pad, t.maxStop + pad];
}

/** ``domain`` zoomed by ``factor`` (<1: in) around time ``at``, which stays where it was. */
export function zoomed(domain: [number, number], factor: number, at: number): [number, number] {
  const [a, b] = domain;
  const span = Math.max((b - a) * factor, 1e-6);
  const f = (at - a) / (b - a);
  return [at - f * span, at - f * span + span];
}

/** The time at ``x`` CSS pixels from the plot's left edge. */
export function timeAt(domain: [number, number] | null, width: number, x: number): number {
  const [a, b] = domain ?? [0, 1];
  return a + (x / width) * (b - a);
}

/** What is in view, without drawing it: rectangles at least two device pixels
 * wide grouped by colour slot; the narrower ones as a raster of one colour per row
 * and device pixel (the last to start wins), so that however many tasks share a
 * pixel it costs one cell. Reuses (and grows) ``scratch``'s buffers. */
export function collect(t: TaskTable, view: Viewport, ratio: number, scratch: Scratch): Batches {
  const nslots = t.colors.length;
  const buffers = scratch.rects;
  while (buffers.length < nslots) buffers.push(new Float32Array(3 * 256));
  buffers.length = nslots;
  const counts = new Int32Array(nslots);
  const rowHeight = t.rows.length ? view.height / t.rows.length : 0;
  const w = view.width;
  const order = view.order;
  const cols = Math.max(1, Math.round(w * ratio));
  const size = cols * order.length;
  if (scratch.columns.length !== size) scratch.columns = new Int16Array(size);
  const columns = scratch.columns;
  columns.fill(-1);
  const out: Batches = { rects: buffers, counts, columns, width: cols, ratio, rowHeight, visited: 0, drawn: 0 };
  if (!view.domain || !t.rows.length) return out;
  const [a, b] = view.domain;
  const scale = w / (b - a);
  const narrow = 2 / ratio; // CSS pixels
  const starts = t.rectStart.data;
  const stops = t.rectStop.data;
  const slots = t.rectSlot.data;
  const base = t.rectBase;
  const key = (r: number) => starts[r - base];
  const hidden = view.hidden;
  for (let pos = 0; pos < order.length; pos++) {
    const r = order[pos];
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
      if (hidden && isHidden(t, hidden, i)) continue;
      out.visited++;
      const x0 = (s0 - a) * scale;
      const x1 = (s1 - a) * scale;
      const slot = slots[i];
      if (x1 - x0 < narrow) {
        const c = Math.floor(((x0 + x1) / 2) * ratio);
        if (c >= 0 && c < cols) columns[rowCells + c] = slot;
        continue;
      }
      let buf = buffers[slot];
      const n = counts[slot];
      if (3 * n + 3 > buf.length) {
        const grown = new Float32Array(buf.length * 2);
        grown.set(buf);
        buf = buffers[slot] = grown;
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

/** The rectangle under the point (x, y) of the plot (CSS pixels from its top left
 * corner), if any: within a pixel, the one that started last. */
export function hit(t: TaskTable, view: Viewport, x: number, y: number): number | null {
  if (!view.domain || !t.rows.length || x < 0) return null;
  const rh = view.height / t.rows.length;
  const pos = Math.floor(y / rh);
  if (pos < 0 || pos >= view.order.length) return null;
  const r = view.order[pos];
  const col = t.byRow[r];
  const time = timeAt(view.domain, view.width, x);
  const slack = (view.domain[1] - view.domain[0]) / view.width; // a pixel
  const key = (rect: number) => t.start(rect);
  let k = lowerBound(col.data, col.length, key, time + slack) - 1;
  let best: number | null = null;
  for (; k >= 0; k--) {
    const rect = col.data[k];
    const s0 = t.start(rect);
    if (s0 < time - t.maxDuration[r] - slack) break;
    if (t.stop(rect) >= time - slack && !isHidden(t, view.hidden, rect - t.rectBase)) {
      if (best === null || t.start(rect) > t.start(best)) best = rect;
      if (s0 <= time) break;
    }
  }
  return best;
}
