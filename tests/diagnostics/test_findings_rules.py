"""Each finding's rule fed numbers: a case that triggers it, a healthy one that does
not, and what it says when it cannot check."""

from __future__ import annotations

import pytest

from kernel_cluster.core.critical_path import CriticalPath, Step
from kernel_cluster.diagnostics.queries.findings import (
    NOT_CHECKED,
    RULES,
    Evidence,
    evaluate,
)


def step(key, via, begin, end):
    return Step(key, "w", via, begin, end, 0.0, 0.0, 0.0, end - begin)


CHAIN = CriticalPath(
    tuple(step(i, "dependency" if i else "start", i, i + 1) for i in range(4)), 4.0
)
THREAD_WAITS = CriticalPath(
    tuple(step(i, "thread" if i else "start", i, i + 1) for i in range(4)), 4.0
)


def evidence(seconds=None, other=..., durations=(0.05,) * 20, busy=None, path=THREAD_WAITS,
             split=True) -> Evidence:  # fmt: skip
    base = {"thread-cpu": 8.0, "thread-noncpu": 0.5, "executor": 0.1, "idle: no-ready-task": 0.4}
    return Evidence(
        {**base, **(seconds or {})},
        {("gather-dep", "network"): 0.1} if other is ... else other,
        tuple(durations),
        busy or {"a": 0.5, "b": 0.5},
        path,
        split,
    )


HEALTHY = evidence()

TRIGGERS = {
    "tasks-too-small": evidence(
        {"thread-cpu": 1.0, "executor": 0.8, "idle: scheduler-queued": 0.6},
        durations=[0.0002] * 1000,
    ),
    "spilling": evidence({"disk-read": 1.0, "disk-write": 0.5}),
    "serialization": evidence({"deserialize": 0.5}, other={("get-data", "serialize"): 0.6}),
    "transfer-bound": evidence(
        {"thread-cpu": 1.0, "thread-noncpu": 0.0, "idle: waiting-for-data": 3.0}
    ),
    "idle-bound": evidence({"idle: no-ready-task": 20.0}, path=CHAIN),
    "imbalance": evidence(busy={"a": 2.0, "b": 0.2, "c": 0.3}),
}


def test_a_healthy_workload_raises_nothing():
    assert evaluate(HEALTHY).found == ()


@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_rule_fires_on_its_workload_and_only_it(rule):
    findings = evaluate(TRIGGERS[rule])
    assert rule in findings.rules
    found = findings.found[findings.rules.index(rule)]
    assert found.cost > 0 and found.title and found.advice and found.evidence
    assert RULES[rule](HEALTHY) is None


def test_findings_come_most_costly_first_and_read_as_text():
    both = evidence(
        {"disk-read": 2.0, "disk-write": 1.0, "compress": 0.5, "deserialize": 1.5},
        other={},
    )
    findings = evaluate(both, label="my span")
    assert findings.rules == ["spilling", "serialization"]
    text = str(findings)
    assert text.startswith("Findings for my span: 2")
    assert "try: raise the memory limit" in text
    assert "not checked: gil-contention" in text


def test_idle_bound_needs_the_path_through_dependencies():
    # idle with nothing ready, but the path is threads waiting for one another: the
    # work was throughput-bound, not stuck on a chain
    assert "idle-bound" not in evaluate(evidence({"idle: no-ready-task": 20.0})).rules


def test_what_a_dask_cluster_cannot_tell_is_said_not_guessed():
    dask_like = evidence({"idle": 20.0}, path=None, split=False)
    findings = evaluate(dask_like)
    assert "idle-bound" in findings.unchecked and "idle-bound" not in findings.rules
    assert set(NOT_CHECKED) <= set(findings.unchecked)
    span_of_dask = evidence({"idle": 1.0}, other=None, path=None, split=False)
    assert "transfer-bound" in evaluate(span_of_dask).unchecked
