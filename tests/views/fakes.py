"""A DiagnosticsSource made of plain dicts, changed by the tests."""

from __future__ import annotations

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
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t
