"""A DiagnosticsSource made of plain dicts, changed by the tests."""

from __future__ import annotations

import threading

from kernel_cluster.diagnostics.spans import SpanInfo


def span_info(id_: str, name: tuple[str, ...], parent: str | None = None, **kw) -> SpanInfo:
    fields = {
        "id": id_,
        "name": name,
        "parent": parent,
        "children": [],
        "enqueued": 1.0,
        "start": 1.0,
        "stop": 2.0,
        "duration": 1.0,
        "nbytes_total": 0,
        "states": {"memory": 1},
        "done": True,
        "active_cpu_seconds": 1.0,
        "metrics": {},
        "code": [],
    }
    fields.update(kw)
    return SpanInfo(**fields)


class FakeSource:
    def __init__(self) -> None:
        self.metrics: dict[tuple, float] = {}
        self.span_list: list[SpanInfo] = []
        self.prefixes: dict[str, dict[str, int]] = {}
        self.reads = 0
        self.closed = False

    def _check(self) -> None:
        self.reads += 1
        if self.closed:
            raise RuntimeError("cluster closed")

    def fine_metrics(self, refresh: bool = True) -> dict[tuple, float]:
        self._check()
        return dict(self.metrics)

    def spans(self, refresh: bool = True) -> list[SpanInfo]:
        self._check()
        return list(self.span_list)

    def progress(self) -> dict[str, dict[str, int]]:
        self._check()
        return {k: dict(v) for k, v in self.prefixes.items()}

    def info(self) -> dict:
        return {"workers": {"w1": {}}, "total_nthreads": 2}


class Clock:
    """Time that the test moves: ``clock.t += 1`` for a publisher's rate bound, and
    ``advance`` for a ``Poller`` that waits on it (``pause``), so that a test shows
    that nothing happens over some seconds without sleeping through them."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t
        self._cond = threading.Condition()
        self._until: list[float] = []  # when each paused thread's pause ends
        self.pauses = 0  # pauses begun, ever

    def __call__(self) -> float:
        return self.t

    @property
    def pausing(self) -> int:
        """How many threads wait on this clock now."""
        return len(self._until)

    def pause(self, stop: threading.Event, seconds: float) -> bool:
        """A Poller's wait: until ``advance`` has moved the clock ``seconds`` on, or
        ``stop`` is set (which notifies nobody here: checked every 10 ms)."""
        with self._cond:
            until = self.t + seconds
            self._until.append(until)
            self.pauses += 1
            self._cond.notify_all()
            try:
                while self.t < until and not stop.is_set():
                    self._cond.wait(0.01)
            finally:
                self._until.remove(until)
                self._cond.notify_all()
            return stop.is_set()

    def advance(self, seconds: float, settle: bool = True, timeout: float = 10.0) -> None:
        """Move the clock on. ``settle``: return once every thread whose pause that
        ended has paused again (it ticked meanwhile), so the test sees what the ticks
        did; a thread that stops instead would keep it waiting until ``timeout``."""
        with self._cond:
            self.t += seconds
            woken = sum(1 for until in self._until if until <= self.t)
            expected = self.pauses + woken
            self._cond.notify_all()
            if settle:
                done = self._cond.wait_for(lambda: self.pauses >= expected, timeout)
                assert done, f"{woken} paused threads did not come back within {timeout} s"


def record(index: int, key: str, worker: str = "w1", thread: int = 1, start: float = 0.0, **kw):
    """A task stream record: ``startstops`` default to one compute of 1 s at ``start``."""
    out = {
        "index": index,
        "key": key,
        "prefix": key.split("-")[0],
        "span_id": None,
        "worker": worker,
        "thread": thread,
        "status": "OK",
        "nbytes": 8,
        "startstops": [{"action": "compute", "start": start, "stop": start + 1.0}],
    }
    out.update(kw)
    return out


class StreamSource(FakeSource):
    """A FakeSource with a task stream, a profile and memory."""

    def __init__(self) -> None:
        super().__init__()
        self.stream: list[dict] = []
        self.stream_reads = 0
        self.trees: dict[str | None, dict] = {}  # profile by prefix (None: all)
        self.meta: dict = {"counts": [], "keys": {}, "cycle_interval": 1.0}
        self.profile_reads = 0
        self.mem = {"process": 100, "managed": 10, "unmanaged": 90, "spilled": 0}
        self.t = 1000.0

    def add(self, *keys: str, **kw) -> None:
        for key in keys:
            self.stream.append(record(len(self.stream), key, **kw))

    def now(self) -> float:
        return self.t

    def task_stream_index(self) -> int:
        self._check()
        return len(self.stream)

    def task_stream_since(self, index: int) -> list[dict]:
        self._check()
        self.stream_reads += 1
        return [dict(r) for r in self.stream[index:]]

    def profiles(self, start=None, stop=None, prefix=None, workers=None) -> dict:
        from kernel_cluster.core.profile import new_tree, to_flat

        self._check()
        self.profile_reads += 1
        return {"w1": to_flat(self.trees.get(prefix) or new_tree())}

    def profile_metadata(self, start=None, stop=None, workers=None) -> dict:
        self._check()
        return {"w1": self.meta}

    def profile_interval(self) -> float:
        return 0.01

    def memory(self) -> dict:
        self._check()
        return dict(self.mem)
