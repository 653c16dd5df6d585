"""``client.diagnose()`` on real workloads: each one raises the finding that is true
of it, and a balanced numpy workload raises none."""

from __future__ import annotations

import time

import numpy as np
import pytest

from kernel_cluster import Client, KernelCluster, span, wait


def inc(x):
    return x + 1


def sort(i):
    # 2M floats: 25 ms or more a sort, so that 16 of them are work enough to tell
    # balance from a few milliseconds' noise on a fast or busy machine
    a = np.random.default_rng(i).random(2_000_000)
    a.sort()
    return float(a[0])


def spin(i, seconds=0.02):
    """CPU work of a set length, whatever this machine's speed (a sort of a set size
    took 3 ms here and 20 ms elsewhere: below and above a rule's threshold)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    return i


def link(seconds, *inputs):
    time.sleep(seconds)
    return 1


def make_array(i):
    return np.zeros(1_000_000) + i  # 8 MB, compressible


@pytest.fixture
def dclient():
    with KernelCluster(n_workers=2, threads_per_worker=2, memory_limit=0) as cluster, \
            Client(cluster) as client:  # fmt: skip
        client.gather([client.submit(inc, 0, workers=[w], pure=False) for w in cluster.workers])
        yield client


def test_a_balanced_numpy_workload_raises_nothing(dclient):
    with span("balanced") as span_id:
        dclient.gather(dclient.map(sort, range(16)))
    findings = dclient.diagnose(span_id)
    assert findings.rules == [], str(findings)
    assert "gil-contention" in findings.unchecked  # said, not guessed
    assert str(findings).startswith("Findings for balanced: nothing to report")


def test_many_tiny_tasks_are_too_small(dclient):
    with span("tiny") as span_id:
        dclient.gather(dclient.map(inc, range(3000)))
    findings = dclient.diagnose(span_id)
    assert "tasks-too-small" in findings.rules, str(findings)
    assert {"imbalance", "spilling", "serialization"}.isdisjoint(findings.rules)


def test_a_long_chain_is_idle_bound(dclient):
    graph = {"c0": (link, 0.03)}
    for i in range(1, 10):
        graph[f"c{i}"] = (link, 0.03, f"c{i - 1}")
    with span("chain") as span_id:
        dclient.get(graph, "c9")
    findings = dclient.diagnose(span_id)
    assert findings.rules[0] == "idle-bound", str(findings)


def test_work_held_on_one_worker_is_imbalanced(dclient):
    a = sorted(dclient.scheduler_info()["workers"])[0]
    with span("one worker") as span_id:
        dclient.gather(dclient.map(spin, range(12), workers=[a]))
    findings = dclient.diagnose(span_id)
    assert "imbalance" in findings.rules, str(findings)
    assert a in findings.found[findings.rules.index("imbalance")].title


def test_a_worker_short_of_memory_is_spilling():
    with KernelCluster(n_workers=1, threads_per_worker=2, memory_limit="20 MB") as cluster, \
            Client(cluster) as client:  # fmt: skip
        with span("spill") as span_id:
            arrays = client.map(make_array, range(8))  # 64 MB through a 20 MB worker
            wait(arrays)
            client.gather(client.map(np.sum, arrays))
        findings = client.diagnose(span_id)
        assert "spilling" in findings.rules, str(findings)
        # and for all work: the same, with the gather-dep and get-data contexts read
        assert "spilling" in client.diagnose().rules
