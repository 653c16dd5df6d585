// The task stream as the browser holds it: typed columns rebuilt from the kernel's
// messages (kernel_cluster/diagnostics/task_stream_feed.py), plus what drawing needs:
// per row, the rectangles sorted by start, the longest one's duration (so that a
// search by start finds those that began before the view and reach into it), and
// a colour slot per rectangle.
import { ACTION_COLORS, ACTIONS, ColorAssigner } from './colors';
import { Column } from './canvas';
import { toArrayBuffer } from './buffers';
import type { Buffer, TasksPart } from './types';

export interface Row {
  worker: string;
  thread: number;
}

export class TaskTable {
  seq = 0;
  strings: string[] = [];
  rows: Row[] = [];
  firstTask = 0;
  keys: string[] = [];
  taskPrefix = new Column(Uint32Array);
  taskStatus = new Column(Uint8Array);
  taskNbytes = new Column(Float64Array);
  rectTask = new Column(Uint32Array);
  rectRow = new Column(Uint32Array);
  rectAction = new Column(Uint8Array);
  rectStart = new Column(Float64Array);
  rectStop = new Column(Float64Array);
  rectSlot = new Column(Uint8Array);
  /** Number (since the first ever held) of the first rectangle held. */
  rectBase = 0;
  /** Per row: rectangle numbers sorted by start. */
  byRow: Column<Int32Array>[] = [];
  maxDuration: number[] = [];
  /** Colours by slot: rectSlot indexes this. */
  colors: string[] = [];
  private slotOf = new Map<string, number>();
  prefixes = new Set<string>();
  /** Prefix colours, in the order prefixes appeared. */
  prefixColors = new ColorAssigner();
  minStart = Infinity;
  maxStop = -Infinity;
  /** Grows whenever the data changes. */
  version = 0;

  get ntasks(): number {
    return this.keys.length;
  }

  get nrects(): number {
    return this.rectStart.length;
  }

  reset(firstTask = 0): void {
    Object.assign(this, new TaskTable());
    this.firstTask = firstTask;
  }

  /** Apply one message; false if it does not follow the last one (a refresh is needed). */
  apply(part: TasksPart, buffers: Buffer[]): boolean {
    const version = this.version;
    if (part.full) this.reset(part.first_task);
    else if (part.seq !== this.seq + 1) return false;
    this.version = version + 1;
    if (part.drop_before > this.firstTask) this.drop(part.drop_before);
    if (part.first_task !== this.firstTask + this.keys.length) return false;
    this.seq = part.seq;
    for (const s of part.strings) this.strings.push(s);
    for (const [w, n] of part.rows) {
      this.rows.push({ worker: this.strings[w], thread: n });
      this.byRow.push(new Column(Int32Array, 64));
      this.maxDuration.push(0);
    }
    const b = buffers.map(toArrayBuffer);
    const prefix = new Uint32Array(b[0]);
    for (const k of part.keys) this.keys.push(k);
    this.taskPrefix.append(prefix);
    this.taskStatus.append(new Uint8Array(b[1]));
    this.taskNbytes.append(new Float64Array(b[2]));
    const task = new Uint32Array(b[3]);
    const row = new Uint32Array(b[4]);
    const action = new Uint8Array(b[5]);
    const start = new Float64Array(b[6]);
    const stop = new Float64Array(b[7]);
    const first = this.rectBase + this.rectStart.length;
    const slots = new Uint8Array(task.length);
    for (let i = 0; i < task.length; i++) {
      let color: string;
      if (action[i] !== 0) color = ACTION_COLORS[ACTIONS[action[i]]] ?? '#777777';
      else {
        const p = this.strings[this.taskPrefix.data[task[i] - this.firstTask]];
        this.prefixes.add(p);
        color = this.prefixColors.color(p);
      }
      slots[i] = this.slot(color);
    }
    this.rectTask.append(task);
    this.rectRow.append(row);
    this.rectAction.append(action);
    this.rectStart.append(start);
    this.rectStop.append(stop);
    this.rectSlot.append(slots);
    this.index(first, row, start, stop);
    return true;
  }

  private slot(color: string): number {
    let s = this.slotOf.get(color);
    if (s === undefined) {
      s = this.colors.length;
      this.colors.push(color);
      this.slotOf.set(color, s);
    }
    return s;
  }

  start(rect: number): number {
    return this.rectStart.data[rect - this.rectBase];
  }

  stop(rect: number): number {
    return this.rectStop.data[rect - this.rectBase];
  }

  /** Add rectangles ``first``.. to their rows' start-sorted lists. */
  private index(first: number, row: Uint32Array, start: Float64Array, stop: Float64Array): void {
    const groups = new Map<number, number[]>();
    for (let i = 0; i < row.length; i++) {
      let g = groups.get(row[i]);
      if (!g) groups.set(row[i], (g = []));
      g.push(first + i);
      const d = stop[i] - start[i];
      if (d > this.maxDuration[row[i]]) this.maxDuration[row[i]] = d;
      if (start[i] < this.minStart) this.minStart = start[i];
      if (stop[i] > this.maxStop) this.maxStop = stop[i];
    }
    const key = (r: number) => this.start(r);
    for (const [r, added] of groups) {
      added.sort((a, b) => key(a) - key(b));
      const col = this.byRow[r];
      const n = col.length;
      if (n === 0 || key(col.data[n - 1]) <= key(added[0])) {
        col.append(added); // the usual case: later than all held
        continue;
      }
      const merged = new Int32Array(n + added.length);
      let i = 0;
      let j = 0;
      let k = 0;
      const old = col.data;
      while (i < n && j < added.length) merged[k++] = key(old[i]) <= key(added[j]) ? old[i++] : added[j++];
      while (i < n) merged[k++] = old[i++];
      while (j < added.length) merged[k++] = added[j++];
      col.clear();
      col.append(merged);
    }
  }

  /** Forget tasks numbered below ``before``, with their rectangles. */
  private drop(before: number): void {
    const n = Math.min(before - this.firstTask, this.keys.length);
    this.keys.splice(0, n);
    this.taskPrefix.dropFront(n);
    this.taskStatus.dropFront(n);
    this.taskNbytes.dropFront(n);
    const tasks = this.rectTask.data;
    let cut = 0;
    let hi = this.rectTask.length;
    while (cut < hi) {
      const mid = (cut + hi) >>> 1;
      if (tasks[mid] < before) cut = mid + 1;
      else hi = mid;
    }
    for (const c of [this.rectTask, this.rectRow, this.rectAction, this.rectStart, this.rectStop, this.rectSlot]) {
      c.dropFront(cut);
    }
    this.rectBase += cut;
    this.firstTask = before;
    this.minStart = Infinity;
    for (let i = 0; i < this.rectStart.length; i++) this.minStart = Math.min(this.minStart, this.rectStart.data[i]);
    for (const col of this.byRow) {
      const kept = col.data.subarray(0, col.length).filter((r) => r >= this.rectBase);
      col.clear();
      col.append(kept);
    }
  }

  /** Row, task, action and times of rectangle ``rect`` (a number as in ``byRow``). */
  rect(rect: number): { row: number; task: number; action: string; start: number; stop: number } {
    const i = rect - this.rectBase;
    return {
      row: this.rectRow.data[i],
      task: this.rectTask.data[i],
      action: ACTIONS[this.rectAction.data[i]] ?? 'compute',
      start: this.rectStart.data[i],
      stop: this.rectStop.data[i],
    };
  }

  /** Key, prefix, status and bytes of task number ``task``. */
  task(task: number): { key: string; prefix: string; status: string; nbytes: number } {
    const i = task - this.firstTask;
    return {
      key: this.keys[i],
      prefix: this.strings[this.taskPrefix.data[i]],
      status: this.taskStatus.data[i] ? 'error' : 'OK',
      nbytes: this.taskNbytes.data[i],
    };
  }
}
