// What the kernel answered about spans, asked on demand (kernel_cluster/jupyter/
// explain.py): a span's explanation (critical path, idle by reason, findings) and
// finished spans' critical-path lengths. Costly to compute, so never in the periodic
// updates: a view asks, the host sends the request (a widget's comm, a lab channel)
// and hands the answer back here. Each span is asked once; a span explained while it
// ran is asked once more when it is done.
import type { SpanRecord } from './types';

export interface FindingData {
  rule: string;
  title: string;
  cost: number;
  evidence: string;
  advice: string;
}

export interface FindingsData {
  found: FindingData[];
  unchecked: Record<string, string>;
}

export interface PathStep {
  key: string;
  worker: string;
  via: string;
  begin: number;
  end: number;
  scheduler: number;
  transfer: number;
  queued: number;
  compute: number;
}

export interface PathData {
  length: number;
  wall: number;
  covered: number;
  totals: Record<string, number>;
  ntasks: number;
  steps: PathStep[];
}

export interface Explanation {
  type: 'explain';
  span: string | null;
  name?: string[];
  done?: boolean;
  wall?: number;
  path?: PathData | null;
  path_error?: string;
  idle?: Record<string, number>;
  findings?: FindingsData | null;
  findings_error?: string;
  error?: string;
}

export interface PathLength {
  length: number;
  wall: number;
}

type Send = (message: Record<string, unknown>) => void;

export class Explanations {
  /** The span the views explain: chosen in a span tree (shared by the host's views). */
  focus = '';
  answers = new Map<string, Explanation>();
  /** Answers to "paths": null where the span has no path (yet). */
  paths = new Map<string, PathLength | null>();
  /** The last answer's error that names no span (a bad request, no cluster). */
  error = '';
  private asked = new Set<string>();
  private askedPaths = new Set<string>();
  private refreshed = new Set<string>();
  private listeners = new Set<() => void>();

  /** How requests reach the kernel; unset (a static page): nothing is asked. */
  constructor(public send: Send | null = null) {}

  setFocus(span: string): void {
    if (span === this.focus) return;
    this.focus = span;
    this.notify();
  }

  /** Ask for ``span``'s explanation if it was never asked, or if the answer held is
   * of a span still running then and ``record`` says it is done now (once). */
  want(span: string, record?: SpanRecord): void {
    if (!span || !this.send) return;
    const held = this.answers.get(span);
    const stale = held !== undefined && !held.done && !held.error && record?.done === true;
    if (this.asked.has(span) && !(stale && !this.refreshed.has(span))) return;
    if (stale) this.refreshed.add(span);
    this.asked.add(span);
    this.send({ type: 'explain', span });
  }

  /** Ask for the path lengths of the finished spans not asked yet (one message). */
  askPaths(spans: Map<string, SpanRecord>): void {
    if (!this.send) return;
    const ids = [...spans].filter(([id, s]) => s.done && !this.askedPaths.has(id)).map(([id]) => id).slice(0, 200);
    if (!ids.length) return;
    for (const id of ids) this.askedPaths.add(id);
    this.send({ type: 'paths', spans: ids });
  }

  /** A message from the kernel: true if it was one of ours. */
  receive(msg: unknown): boolean {
    if (typeof msg !== 'object' || msg === null) return false;
    const m = msg as Record<string, unknown>;
    if (m.type === 'explain') {
      const answer = m as unknown as Explanation;
      if (typeof answer.span === 'string' && answer.span) {
        this.answers.set(answer.span, answer);
      } else this.error = answer.error ?? '';
      this.notify();
      return true;
    }
    if (m.type === 'paths') {
      const paths = (m.paths ?? {}) as Record<string, PathLength | null>;
      // only finished spans are asked: null says it has no path (not asked again)
      for (const [id, p] of Object.entries(paths)) this.paths.set(id, p);
      if (typeof m.error === 'string') this.error = m.error;
      this.notify();
      return true;
    }
    return false;
  }

  /** A new kernel, or a refresh: what was asked is asked again. */
  reset(): void {
    this.asked.clear();
    this.askedPaths.clear();
    this.refreshed.clear();
    this.answers.clear();
    this.paths.clear();
    this.notify();
  }

  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
    };
  }

  private notify(): void {
    for (const l of [...this.listeners]) l();
  }
}
