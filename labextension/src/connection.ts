// One notebook kernel's cluster, as the browser sees it: the comm to the kernel
// (kernel_cluster/jupyter/lab.py), the store its panels draw from, the sidebar's
// summary and the memory history. No DOM here: panels and the sidebar listen to
// `changed` and read the fields.
//
// Either side may open the comm: this model when it meets a kernel (a page load,
// a restart) and again after cells while the kernel has no kernel_cluster (`AskAgain`),
// the kernel on `%load_ext kernel_cluster`, `show()` or when a Client starts. A
// kernel without kernel_cluster closes ours.
//
// The comm's messages go to a kernel subshell where the kernel has them (ipykernel
// 7, JupyterLab's "comms over subshells"), so the kernel answers while a cell runs:
// we open the comm only once its subshell is there, so that the kernel's side of it
// lives on that subshell too. While open, we ping the kernel every few seconds; a
// page that is gone stops pinging, and the kernel closes its channel.
import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel, KernelMessage } from '@jupyterlab/services';
import { Signal, type ISignal } from '@lumino/signaling';
import { Store, type Binding, type Buffer, type Part, type WorkerRow } from '@kernel-cluster/widgets';
import { isMode, isView, type Mode, type View } from './views';

export const TARGET = 'kernel-cluster-lab';
const PROTOCOL = 1;

export type Feed = 'tasks' | 'profile' | 'workers' | 'compare';

/** Seconds between two pings (kernel_cluster/jupyter/lab.py closes a channel
 * silent for several of them). */
export const PING_SECONDS = 5;

export interface ClusterSummary {
  kind: string;
  /** 'kernel-cluster', or 'dask' for an attached Dask cluster. */
  engine?: string;
  /** The scheduler's address and its dashboard (Dask's), when there are. */
  address?: string | null;
  dashboard?: string | null;
  workers: number;
  threads: number;
  memory_limit: number;
  tasks: { in_flight: number; waiting: number; done: number; erred: number };
  spans: { id: string; name: string[] }[];
  /** What the sidebar's controls may do to this cluster. */
  controls?: { scale: boolean; stop: boolean };
  /** Code that makes a client of this cluster in the notebook. */
  client_code?: string;
}

/** What the sidebar asks the kernel to do with its cluster. */
export type ControlRequest =
  | { type: 'start'; processes: boolean; n_workers: number; threads_per_worker: number; memory_limit: string }
  | { type: 'scale'; n_workers: number }
  | { type: 'stop' };

/** `[time, process, managed, unmanaged, spilled]`, seconds and bytes. */
export type MemorySample = [number, number, number, number, number];

/**
 * - `connecting`: asked the kernel, no answer yet (it answers between cells)
 * - `no-package`: the kernel has not imported kernel_cluster
 * - `no-cluster`: kernel_cluster is there, but no Client has started
 * - `live`: data flows
 * - `restarting`, `dead`: the kernel's own state
 * - `no-kernel`: the notebook has no kernel, or was closed
 */
export type State = 'connecting' | 'no-package' | 'no-cluster' | 'live' | 'restarting' | 'dead' | 'no-kernel';

export interface ShowRequest {
  view: View;
  mode: Mode;
}

function byteLength(b: Buffer): number {
  return b.byteLength;
}

export class ClusterConnection {
  store = this.newStore();
  state: State = 'connecting';
  /** The kernel restarted (or was replaced) since this page first reached it. */
  restarted = false;
  cluster: ClusterSummary | null = null;
  memory: MemorySample[] = [];
  /** The worker table's rows (while a Workers panel is open). */
  workers: WorkerRow[] = [];
  /** The last control's outcome, for the sidebar: pending, or the kernel's answer. */
  control: { pending: string | null; error: string | null; done: string | null } = { pending: null, error: null, done: null };
  /** How many comms we opened to this kernel (each refused one costs the kernel a log line). */
  asks = 0;
  /** What arrived on the comm, for the measurements (kernel -> browser). */
  readonly stats = { messages: 0, bytes: 0, since: performance.now(), byFeed: {} as Record<string, number> };
  /** The kernel runs a cell now, and whether it reads our messages meanwhile (on a
   * subshell: ipykernel 7 with JupyterLab 4.4+) or only between cells. */
  busy = false;
  subshells = false;
  /** The latest state changes and kernel events, to tell what happened. */
  readonly history: string[] = [];
  private comm: Kernel.IComm | null = null;
  private kernel: Kernel.IKernelConnection | null = null;
  private wants = new Map<string, Feed[]>();
  private subscribed = '';
  private askedRefresh = false;
  private waitingForNewKernel = false;
  /** This kernel process was asked once already (it closes the comm without kernel_cluster). */
  private asked = false;
  /** The kernel said hello on the current comm: kernel_cluster answers on it. */
  private greeted = false;
  /** When to ask a kernel that refused again (see `AskAgain`). */
  private again = new AskAgain();
  private profile: Record<string, unknown> = { prefix: '', start: null, stop: null };
  private profileListeners = new Set<() => void>();
  /** The Compare panel's state: the kernel's answer (runs, a, b, data, error) and its filters. */
  private compare: Record<string, unknown> = { runs: [], a: '', b: '', data: null, error: '' };
  private compareListeners = new Set<() => void>();
  private readonly _changed = new Signal<this, void>(this);
  private readonly _show = new Signal<this, ShowRequest>(this);
  private _disposed = false;
  private pinger: ReturnType<typeof setInterval> | null = null;

  constructor(
    /** The notebook's path; follows renames (connections.ts). */
    public path: string,
    private session: ISessionContext,
  ) {
    session.kernelChanged.connect(this.onKernelChanged, this);
    session.statusChanged.connect(this.onStatus, this);
    session.connectionStatusChanged.connect(this.onConnection, this);
    this.attach(session.session?.kernel ?? null);
  }

  /** Something panels or the sidebar show changed. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The kernel asked for a panel (`kernel_cluster.show()`). */
  get showRequested(): ISignal<this, ShowRequest> {
    return this._show;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  // -- the kernel ----------------------------------------------------------------------

  private onKernelChanged(): void {
    this.attach(this.session.session?.kernel ?? null);
  }

  private attach(kernel: Kernel.IKernelConnection | null): void {
    if (this.kernel === kernel) return;
    if (this.kernel) {
      this.kernel.removeCommTarget(TARGET, this.accept);
      this.kernel.iopubMessage.disconnect(this.onIOPub, this);
      this.restarted = true;
      this.reset();
    }
    this.kernel = kernel;
    if (!kernel) {
      this.setState('no-kernel');
      return;
    }
    kernel.registerCommTarget(TARGET, this.accept);
    kernel.iopubMessage.connect(this.onIOPub, this);
    this.asked = false;
    this.again = new AskAgain();
    this.setState('connecting');
    this.open();
  }

  private note(event: string): void {
    this.history.push(`${Math.round(performance.now())} ${event}`);
    if (this.history.length > 50) this.history.shift();
  }

  private onStatus(_: ISessionContext, status: Kernel.Status): void {
    this.note(`kernel ${status}`);
    const busy = status === 'busy';
    const ran = this.busy && status === 'idle'; // a cell (or a silent request) finished
    if (busy !== this.busy) {
      this.busy = busy;
      this._changed.emit();
    }
    if (status === 'restarting' || status === 'autorestarting') {
      this.restarted = true;
      this.reset();
      this.waitingForNewKernel = true; // late statuses of the old process may still come
      this.setState('restarting');
    } else if (status === 'dead') {
      this.reset();
      this.setState('dead');
    } else if (this.waitingForNewKernel && (status === 'starting' || status === 'idle' || status === 'busy')) {
      this.newKernel();
    } else if (status === 'idle' && !this.waitingForNewKernel && !this.comm && !this.asked && this.state !== 'live') {
      this.open();
    } else if (ran && !this.waitingForNewKernel && !this.comm && this.state === 'no-package' && this.again.due(performance.now())) {
      // `import kernel_cluster` opens no comm (nor starts a thread): it only answers
      // ours. What just ran may have imported it: ask again. A refusal costs the
      // kernel a closed comm and a line in its log, so not after every cell: after
      // code naming kernel_cluster, else seldom (`AskAgain`)
      this.open();
    }
  }

  /** Code the kernel runs (any client's: iopub's execute_input) that names
   * kernel_cluster may import it: ask once that execution is over (its idle status),
   * not at some other idle meanwhile (a subshell's, while the import still runs). */
  private onIOPub(_: Kernel.IKernelConnection, msg: KernelMessage.IIOPubMessage): void {
    const parent = (msg.parent_header as Partial<KernelMessage.IHeader>)?.msg_id ?? '';
    if (msg.header.msg_type === 'execute_input') {
      const code = (msg as KernelMessage.IExecuteInputMsg).content.code;
      if (typeof code === 'string') this.again.ran(code, parent);
    } else if (msg.header.msg_type === 'status') {
      const state = (msg as KernelMessage.IStatusMsg).content.execution_state;
      if (state === 'idle' && this.again.finished(parent)) this.askAgain();
    }
  }

  /** Ask a kernel that refused, if nothing is under way. */
  private askAgain(): void {
    if (!this.waitingForNewKernel && !this.comm && this.state === 'no-package') this.open();
  }

  private onConnection(_: ISessionContext, status: Kernel.ConnectionStatus): void {
    this.note(`connection ${status}`);
    if (status === 'connected' && !this.comm && this.state === 'connecting') this.open();
  }

  /** The kernel is back from a restart. Its new process has not imported
   * kernel_cluster yet: we ask after its first cell (`AskAgain`). (Asking now could
   * reach the old process, whose last messages may still be arriving.) */
  private newKernel(): void {
    this.waitingForNewKernel = false;
    this.asked = true;
    this.again = new AskAgain(); // a new process: ask after its first cell
    this.dropComm();
    this.setState('no-package');
  }

  /** A store whose views ask the kernel to explain spans on this channel. */
  private newStore(): Store {
    const store = new Store();
    store.explain.send = (request) => this.send(request);
    return store;
  }

  /** Forget what this kernel sent: its cluster is gone, and what the sidebar's last
   * control did to it ("Started a cluster of 2 workers") with it; a control still
   * pending gets no answer from the process that went. */
  private reset(): void {
    this.dropComm();
    this.store = this.newStore();
    this.cluster = null;
    this.memory = [];
    this.workers = [];
    this.control = { pending: null, error: null, done: null };
    this.subscribed = '';
    this.askedRefresh = false;
  }

  private dropComm(): void {
    const comm = this.comm;
    this.comm = null;
    this.stopPinging();
    if (comm && !comm.isDisposed) {
      try {
        comm.close();
      } catch {
        // the kernel is gone already
      }
    }
  }

  /** Ask the kernel for its cluster (it refuses, by closing, without kernel_cluster). */
  private open(): void {
    const kernel = this.kernel;
    if (!kernel || this.comm || kernel.connectionStatus !== 'connected') return;
    this.note('opening a comm');
    this.asks += 1;
    this.asked = true;
    this.again.asking();
    const comm = kernel.createComm(TARGET);
    this.wire(comm);
    void this.openOnSubshell(kernel, comm);
  }

  /** Open once the comm's subshell is there (or known not to be): its messages, the
   * open included, then reach the kernel while a cell runs. */
  private async openOnSubshell(kernel: Kernel.IKernelConnection, comm: Kernel.IComm): Promise<void> {
    try {
      await kernel.info;
      this.subshells = kernel.supportsSubshells;
      const started = (comm as Partial<{ subshellStarted: Promise<void> }>).subshellStarted;
      if (kernel.supportsSubshells && started) {
        await Promise.race([started, new Promise((resolve) => setTimeout(resolve, 5000))]);
      }
    } catch (reason) {
      this.note(`no subshell: ${reason}`);
    }
    if (comm.isDisposed || this.comm !== comm) return;
    this.note(`comm open${(comm as Partial<{ subshellId: string | null }>).subshellId ? ' on a subshell' : ''}`);
    comm.open({ protocol: PROTOCOL });
  }

  /** The kernel opened a comm to us: it replaces ours. */
  private accept = (comm: Kernel.IComm): void => {
    this.note('the kernel opened a comm');
    if (this.comm && this.comm !== comm) this.dropComm();
    this.wire(comm);
  };

  private wire(comm: Kernel.IComm): void {
    this.comm = comm;
    this.greeted = false;
    this.subscribed = '';
    this.startPinging();
    comm.onMsg = (msg) => this.onMessage(comm, msg);
    comm.onClose = () => {
      this.note('comm closed');
      if (this.comm !== comm) return;
      this.comm = null;
      this.stopPinging();
      const refused = !this.greeted;
      if (refused) this.again.refused(performance.now());
      if (this.state === 'connecting' || this.state === 'live' || this.state === 'no-cluster') {
        this.setState('no-package');
      }
      // code naming kernel_cluster finished after we asked: ask again
      if (refused && this.again.named) this.askAgain();
    };
  }

  // -- kernel -> browser ---------------------------------------------------------------

  private onMessage(comm: Kernel.IComm, msg: KernelMessage.ICommMsgMsg): void {
    if (comm !== this.comm) return;
    const data = msg.content.data as Record<string, unknown>;
    const buffers = (msg.buffers ?? []) as Buffer[];
    this.stats.messages += 1;
    const size = JSON.stringify(data).length + buffers.reduce((n, b) => n + byteLength(b), 0);
    this.stats.bytes += size;
    this.countByFeed(data, buffers, size);
    if (this.store.explain.receive(data)) return; // a span explained, as a view asked
    switch (data.type) {
      case 'hello':
        this.store.explain.reset(); // what was asked before the channel opened is asked again
        this.greeted = true;
        this.again.answered();
        this.subscribed = '';
        this.subscribe();
        if (this.compareListeners.size) this.askCompare(); // a Compare panel is open
        return;
      case 'compare':
        for (const k of ['runs', 'a', 'b', 'data', 'error']) if (k in data) this.compare[k] = data[k];
        this.compareChanged();
        return;
      case 'status':
        this.onStatusMessage(data);
        return;
      case 'memory':
        if (Array.isArray(data.samples)) this.memory = data.samples as MemorySample[];
        this._changed.emit();
        return;
      case 'update':
        if (Array.isArray(data.parts)) this.onUpdate(data.parts as Part[], buffers);
        return;
      case 'show':
        if (isView(data.kind) && isMode(data.mode)) this._show.emit({ view: data.kind, mode: data.mode });
        return;
      case 'control':
        this.control = {
          pending: null,
          error: data.ok ? null : String(data.message ?? 'failed'),
          done: data.ok ? String(data.message ?? '') : null,
        };
        this._changed.emit();
        return;
      default:
        console.warn('kernel-cluster: ignoring an unknown message', data.type);
    }
  }

  /** Bytes by what they feed: each update part's own, the rest by message type. */
  private countByFeed(data: Record<string, unknown>, buffers: Buffer[], size: number): void {
    const by = this.stats.byFeed;
    if (data.type !== 'update' || !Array.isArray(data.parts)) {
      const key = String(data.type);
      by[key] = (by[key] ?? 0) + size;
      return;
    }
    let at = 0;
    for (const part of data.parts as Part[]) {
      const own = buffers.slice(at, at + part.nbuffers);
      at += part.nbuffers;
      by[part.feed] = (by[part.feed] ?? 0) + JSON.stringify(part).length + own.reduce((n, b) => n + byteLength(b), 0);
    }
  }

  private onStatusMessage(data: Record<string, unknown>): void {
    this.cluster = (data.cluster as ClusterSummary | null) ?? null;
    if (Array.isArray(data.workers)) this.workers = data.workers as WorkerRow[];
    else if (!this.cluster) this.workers = [];
    const sample = data.memory as MemorySample | null;
    const last = this.memory[this.memory.length - 1];
    if (sample && (!last || sample[0] > last[0])) this.memory.push(sample);
    this.setState(this.cluster ? 'live' : 'no-cluster', true);
  }

  private onUpdate(parts: Part[], buffers: Buffer[]): void {
    this.store.applyUpdate(parts, buffers);
    if (this.store.stale && !this.askedRefresh) {
      this.askedRefresh = true; // once, until a full state arrives
      this.send({ type: 'refresh' });
    } else if (!this.store.stale) this.askedRefresh = false;
  }

  private setState(state: State, always = false): void {
    if (this.state !== state) this.note(`${this.state} -> ${state}`);
    if (this.state === state && !always) return;
    this.state = state;
    this._changed.emit();
  }

  // -- browser -> kernel ---------------------------------------------------------------

  private send(content: Record<string, unknown>): void {
    const comm = this.comm;
    if (comm && !comm.isDisposed) comm.send(content as any);
  }

  private startPinging(): void {
    this.stopPinging();
    this.pinger = setInterval(() => this.send({ type: 'ping' }), PING_SECONDS * 1000);
  }

  private stopPinging(): void {
    if (this.pinger !== null) clearInterval(this.pinger);
    this.pinger = null;
  }

  /** Start, scale or stop the kernel's cluster: the kernel does it (lab.py) and
   * answers with a `control` message. Without kernel_cluster in the kernel yet, it
   * is imported first (silently, as a cell would), which opens the comm. */
  async controlCluster(request: ControlRequest, bootstrap: string): Promise<void> {
    this.control = { pending: request.type, error: null, done: null };
    this._changed.emit();
    if (!this.comm) {
      const kernel = this.kernel;
      if (!kernel) {
        this.control = { pending: null, error: 'This notebook has no kernel.', done: null };
        this._changed.emit();
        return;
      }
      this.note('importing kernel_cluster in the kernel');
      const reply = await kernel.requestExecute({ code: bootstrap, silent: true, store_history: false }).done;
      if (reply.content.status !== 'ok') {
        const why = reply.content.status === 'error' ? `${reply.content.ename}: ${reply.content.evalue}` : reply.content.status;
        this.control = { pending: null, error: `Cannot import kernel_cluster in this kernel (${why}).`, done: null };
        this._changed.emit();
        return;
      }
      // kernel_cluster answers our comm now: open it, and wait (bounded) for its hello.
      // Our comm exists at once, but its open reaches the kernel only once its
      // subshell is there: a request sent before then would go to a comm the kernel
      // does not know, and be dropped
      this.open();
      const t0 = performance.now();
      while (!this.greeted && performance.now() - t0 < 10000) await new Promise((r) => setTimeout(r, 50));
      if (!this.greeted) {
        this.control = { pending: null, error: 'The kernel imported kernel_cluster but did not answer.', done: null };
        this._changed.emit();
        return;
      }
    }
    this.send(request as unknown as Record<string, unknown>);
  }

  /** A panel (by id) needs these optional feeds; [] when it closes. */
  setWants(id: string, feeds: Feed[]): void {
    if (feeds.length) this.wants.set(id, feeds);
    else this.wants.delete(id);
    this.subscribe();
  }

  private subscribe(): void {
    const all = new Set<Feed>();
    for (const feeds of this.wants.values()) for (const f of feeds) all.add(f);
    const feeds = [...all].sort();
    const key = feeds.join(',');
    if (!this.comm || key === this.subscribed) return;
    this.subscribed = key;
    this.send({ type: 'subscribe', feeds });
  }

  /** Ask for everything again (a panel that wants to be sure it is complete). */
  refresh(): void {
    this.send({ type: 'refresh' });
  }

  /** The flame graph's selection (task prefix, time window), held for the kernel. */
  profileBinding(): Binding {
    return {
      get: (name) => this.profile[name],
      set: (values) => {
        Object.assign(this.profile, values);
        for (const l of [...this.profileListeners]) l();
        this.send({ type: 'profile', prefix: this.profile.prefix ?? '', start: this.profile.start ?? null, stop: this.profile.stop ?? null });
      },
      onChange: (_names, listener) => {
        this.profileListeners.add(listener);
        return () => this.profileListeners.delete(listener);
      },
    };
  }

  private compareChanged(): void {
    for (const l of [...this.compareListeners]) l();
  }

  private askCompare(): void {
    const ref = (v: unknown) => (typeof v === 'string' && v ? v : null);
    this.send({ type: 'compare', a: ref(this.compare.a), b: ref(this.compare.b) });
  }

  /** The Compare panel's state: choosing runs (a, b) asks the kernel to compare them;
   * its filters stay here. Asks for the current comparison when first used. */
  compareBinding(): Binding {
    if (!this.compareListeners.size) this.askCompare();
    return {
      get: (name) => this.compare[name],
      set: (values) => {
        Object.assign(this.compare, values);
        this.compareChanged();
        if ('a' in values || 'b' in values) this.askCompare();
      },
      onChange: (_names, listener) => {
        this.compareListeners.add(listener);
        return () => this.compareListeners.delete(listener);
      },
    };
  }

  dispose(): void {
    if (this._disposed) return;
    this._disposed = true;
    this.session.kernelChanged.disconnect(this.onKernelChanged, this);
    this.session.statusChanged.disconnect(this.onStatus, this);
    this.session.connectionStatusChanged.disconnect(this.onConnection, this);
    this.kernel?.removeCommTarget(TARGET, this.accept);
    this.kernel?.iopubMessage.disconnect(this.onIOPub, this);
    this.dropComm();
    this.stopPinging();
    this.kernel = null;
    this.setState('no-kernel');
    Signal.clearData(this);
  }
}

/** When to ask again a kernel that refused our comm (it has not imported
 * kernel_cluster): after a cell whose code names kernel_cluster (an import, `%load_ext
 * kernel_cluster`), or else once the wait has passed, a wait that doubles with each
 * refusal (from `FIRST_WAIT` up to `LONGEST_WAIT`): a kernel that imports it through
 * another module is still found, and one that never does costs the kernel a refused
 * comm a few times an hour, not after every cell. Times in milliseconds. */
export class AskAgain {
  static readonly FIRST_WAIT = 30_000;
  static readonly LONGEST_WAIT = 600_000;
  private refusals = 0;
  private refusedAt = -Infinity;
  /** Executions (by request id) whose code names kernel_cluster, not over yet. */
  private naming = new Set<string>();
  /** One of them is over since we last asked. */
  named = false;

  /** The kernel runs `code`, for the request `id`. */
  ran(code: string, id: string): void {
    if (code.includes('kernel_cluster')) this.naming.add(id);
  }

  /** The request `id` is over; whether its code named kernel_cluster. */
  finished(id: string): boolean {
    if (!this.naming.delete(id)) return false;
    this.named = true;
    return true;
  }

  /** Should a kernel that just finished running something be asked now? */
  due(now: number): boolean {
    if (this.refusals === 0 || this.named) return true;
    const wait = Math.min(AskAgain.FIRST_WAIT * 2 ** (this.refusals - 1), AskAgain.LONGEST_WAIT);
    return now - this.refusedAt >= wait;
  }

  /** We ask now. */
  asking(): void {
    this.named = false;
  }

  refused(now: number): void {
    this.refusals += 1;
    this.refusedAt = now;
  }

  answered(): void {
    this.refusals = 0;
    this.refusedAt = -Infinity;
    this.named = false;
  }
}

/** What a panel or the sidebar says for a state (null: nothing to say, data flows). */
export function describe(c: ClusterConnection | null, path: string): string | null {
  const start = 'Start one from the Kernel Cluster sidebar, or in the notebook: from kernel_cluster import Client; client = Client()';
  if (!c) return `Open ${path} to see its kernel's cluster.`;
  switch (c.state) {
    case 'live':
      return null;
    case 'connecting':
      return 'Connecting to the kernel (it answers once the running cell ends)…';
    case 'no-package':
    case 'no-cluster':
      return `${c.restarted ? 'The kernel restarted. ' : ''}No cluster in this kernel yet. ${start}; this view connects on its own.`;
    case 'restarting':
      return 'The kernel is restarting. This view reconnects once the kernel has a cluster again.';
    case 'dead':
      return 'The kernel died. Restart it and start a cluster: this view reconnects on its own.';
    case 'no-kernel':
      return 'This notebook has no kernel. Start one, then a cluster.';
  }
}
