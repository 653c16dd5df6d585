// A statistical profile as the browser holds it: the tree laid out in pre-order
// as columns (kernel_cluster/diagnostics/profile_feed.py), the timeline of samples
// per profile cycle, and the selection (prefix, window) the tree is the profile of.
import { toArrayBuffer } from './buffers';
import { fileColor } from './colors';
import type { Buffer, FlatProfileHeader, ProfilePart, ProfileSelection, Timeline } from './types';

export class FlatProfile {
  readonly n: number;
  /** Left edge of each frame, in samples from the root's left edge. */
  readonly x: Float64Array;
  readonly depth: Int32Array;
  /** Frames at each depth, left to right. */
  readonly byDepth: Int32Array[];
  /** Index into FLAME_PALETTE, by the frame's file. */
  readonly color: Uint8Array;
  readonly maxDepth: number;

  constructor(
    readonly strings: string[],
    readonly parent: Int32Array,
    readonly count: Float64Array,
    readonly own: Float64Array,
    readonly name: Uint32Array,
    readonly file: Uint32Array,
    readonly line: Uint32Array,
    readonly text: Uint32Array,
  ) {
    const n = (this.n = parent.length);
    const x = (this.x = new Float64Array(n));
    const depth = (this.depth = new Int32Array(n));
    const next = new Float64Array(n); // where a frame's next child goes
    const perDepth: number[] = [];
    let maxDepth = 0;
    for (let i = 0; i < n; i++) {
      const p = parent[i];
      if (p >= 0) {
        x[i] = next[p];
        next[p] += count[i];
        depth[i] = depth[p] + 1;
      }
      next[i] = x[i];
      perDepth[depth[i]] = (perDepth[depth[i]] ?? 0) + 1;
      if (depth[i] > maxDepth) maxDepth = depth[i];
    }
    this.maxDepth = maxDepth;
    this.byDepth = perDepth.map((c) => new Int32Array(c));
    const fill = new Int32Array(perDepth.length);
    for (let i = 0; i < n; i++) this.byDepth[depth[i]][fill[depth[i]]++] = i; // pre-order: left to right
    const colors = new Map<number, number>();
    this.color = new Uint8Array(n);
    for (let i = 0; i < n; i++) {
      let c = colors.get(file[i]);
      if (c === undefined) colors.set(file[i], (c = fileColor(strings[file[i]])));
      this.color[i] = c;
    }
  }

  static fromMessage(header: FlatProfileHeader, buffers: Buffer[]): FlatProfile {
    const b = buffers.map(toArrayBuffer);
    return new FlatProfile(
      header.strings,
      new Int32Array(b[0]),
      new Float64Array(b[1]),
      new Float64Array(b[2]),
      new Uint32Array(b[3]),
      new Uint32Array(b[4]),
      new Uint32Array(b[5]),
      new Uint32Array(b[6]),
    );
  }

  get total(): number {
    return this.n ? this.count[0] : 0;
  }

  frame(i: number): { name: string; file: string; line: number; text: string; count: number; own: number } {
    const s = this.strings;
    return {
      name: s[this.name[i]],
      file: s[this.file[i]],
      line: this.line[i],
      text: s[this.text[i]],
      count: this.count[i],
      own: this.own[i],
    };
  }

  /** The frames from the root down to ``i``. */
  ancestors(i: number): number[] {
    const out: number[] = [];
    for (let j = i; j >= 0; j = this.parent[j]) out.push(j);
    return out.reverse();
  }
}

/** A nested tree (tests, synthetic data) as a FlatProfile, children in the given order. */
export interface NestedFrame {
  name: string;
  file: string;
  line: number;
  text?: string;
  count: number;
  children?: NestedFrame[];
}

export function flattenNested(root: NestedFrame): FlatProfile {
  const strings: string[] = [];
  const index = new Map<string, number>();
  const s = (t: string) => {
    let i = index.get(t);
    if (i === undefined) index.set(t, (i = strings.push(t) - 1));
    return i;
  };
  const cols: number[][] = [[], [], [], [], [], [], [], []];
  const stack: [number, NestedFrame][] = [[-1, root]];
  while (stack.length) {
    const [p, f] = stack.pop() as [number, NestedFrame];
    const me = cols[0].length;
    const kids = f.children ?? [];
    const own = f.count - kids.reduce((a, c) => a + c.count, 0);
    [p, f.count, own, s(f.name), s(f.file), f.line, s(f.text ?? '')].forEach((v, k) => cols[k].push(v));
    for (let k = kids.length - 1; k >= 0; k--) stack.push([me, kids[k]]);
  }
  return new FlatProfile(
    strings,
    Int32Array.from(cols[0]),
    Float64Array.from(cols[1]),
    Float64Array.from(cols[2]),
    Uint32Array.from(cols[3]),
    Uint32Array.from(cols[4]),
    Uint32Array.from(cols[5]),
    Uint32Array.from(cols[6]),
  );
}

export class ProfileData {
  seq = 0;
  interval = 0.01;
  selection: ProfileSelection = { prefix: null, start: null, stop: null };
  timeline: Timeline = { counts: [], keys: {} };
  tree: FlatProfile | null = null;
  version = 0;

  apply(part: ProfilePart, buffers: Buffer[]): boolean {
    if (!part.full && part.seq !== this.seq + 1) return false;
    this.seq = part.seq;
    this.interval = part.interval;
    this.selection = part.selection;
    if (part.timeline) this.timeline = part.timeline;
    if (part.tree) this.tree = FlatProfile.fromMessage(part.tree, buffers);
    this.version += 1;
    return true;
  }
}
