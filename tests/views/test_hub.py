"""The kernel's one update hub (kernel_cluster/jupyter/hub.py): one thread, one read
per tick for every view, deltas per view, resyncs; and the engine's changes_since."""

from __future__ import annotations

import subprocess
import sys
import threading

from kernel_cluster import Client, KernelCluster, span
from kernel_cluster.jupyter.hub import Hub
from kernel_cluster.jupyter.publisher import Publisher

from ..engine.helpers import wait_for
from .fakes import Clock, CountingSource, span_info
from .test_publisher import Browser

CPU = ("execute", "s1", "inc", "thread-cpu", "seconds")
NET = ("gather-dep", "network", "bytes")
NET5 = ("gather-dep", None, None, "network", "bytes")  # as the browser keys it


def views(source, hub, clock, n=4, interval=0.25):
    out = []
    for feeds in [
        ("metrics", "spans"),
        ("spans",),
        ("progress",),
        ("metrics", "spans", "progress"),
    ][:n]:
        browser = Browser()
        pub = Publisher(source, feeds, browser, min_interval=interval, clock=clock, hub=hub)
        pub.send_full()  # the browser listens
        hub.subscribe(pub)
        out.append((pub, browser))
    return out


def test_four_views_one_thread_one_read_per_tick():
    source, clock = CountingSource(), Clock()
    before = set(threading.enumerate())
    h = Hub(pause=clock.pause, clock=clock)
    subs = views(source, h, clock)
    new_threads = set(threading.enumerate()) - before
    assert [t.name for t in new_threads] == ["kernel-cluster-hub"]
    wait_for(lambda: clock.pausing == 1, what="the hub's first pause")
    reads = source.change_reads
    source.metrics[CPU] = 1.0
    source.span_list.append(span_info("s1", ("load",)))
    source.prefixes["inc"] = {"memory": 2}
    clock.t += 0.25  # the views' rate bound
    clock.advance(0.25)  # one tick
    assert source.change_reads == reads + 1  # one read for the four views
    for pub, browser in subs:
        if "metrics" in pub.names:
            assert browser.metrics.as_dict() == {CPU: 1.0}
        if "spans" in pub.names:
            assert browser.spans.records["s1"]["name"] == ["load"]
        if "progress" in pub.names:
            assert browser.progress.records == {"inc": {"memory": 2}}
    for pub, _ in subs:
        pub.close()
    clock.advance(0.25, settle=False)
    wait_for(lambda: not h.running, what="the hub's thread to end with its last view")


def test_each_view_gets_its_own_deltas():
    source, clock = CountingSource(), Clock()
    h = Hub(clock=clock)  # ticked by hand here: no thread
    source.metrics[CPU] = 1.0
    early, late = Browser(), Browser()
    a = Publisher(source, ("metrics",), early, clock=clock, hub=h)
    a.send_full()
    source.metrics[NET] = 5.0
    clock.t += 1
    a.tick()
    assert early.messages[-1][0]["parts"][0]["full"] is False  # a delta: NET only
    b = Publisher(source, ("metrics",), late, clock=clock, hub=h)
    b.send_full()  # joins late: everything, from the mirror
    assert late.metrics.as_dict() == {CPU: 1.0, NET5: 5.0}
    source.metrics[CPU] = 2.0
    clock.t += 1
    h.subscribe(a)
    h.subscribe(b)
    h.stop()
    h.tick()
    for browser in (early, late):
        assert browser.metrics.as_dict() == {CPU: 2.0, NET5: 5.0}
        part = browser.messages[-1][0]["parts"][0]
        assert not part["full"]
    a.close()
    b.close()


def test_a_view_that_skips_ticks_loses_nothing():
    source, clock = CountingSource(), Clock()
    h = Hub(clock=clock)
    fast, slow = Browser(), Browser()
    f = Publisher(source, ("metrics",), fast, min_interval=0.25, clock=clock, hub=h)
    s = Publisher(source, ("metrics",), slow, min_interval=1.0, clock=clock, hub=h)
    for pub in (f, s):
        pub.send_full()
        h.subscribe(pub)
    h.stop()
    source.metrics[CPU] = 1.0  # changed in a tick the slow view skips
    clock.t += 0.25
    h.tick()
    source.metrics[NET] = 2.0  # and in the next
    clock.t += 0.25
    h.tick()
    assert fast.metrics.as_dict() == {CPU: 1.0, NET5: 2.0}
    assert slow.metrics.as_dict() == {}
    clock.t += 0.5
    h.tick()  # nothing new read, but the slow view is due: it gets both rows
    assert slow.metrics.as_dict() == {CPU: 1.0, NET5: 2.0}
    f.close()
    s.close()


def test_a_resync_restates_everything_and_removes_what_went():
    source, clock = CountingSource(), Clock()
    h = Hub(clock=clock)
    browser = Browser()
    pub = Publisher(source, ("spans",), browser, clock=clock, hub=h)
    source.span_list += [span_info("s1", ("a",)), span_info("s2", ("b",))]
    pub.send_full()
    source._differ.changes_since(0)  # another reader: the hub's cursor is stale now
    source.span_list.pop(0)
    clock.t += 1
    assert pub.tick()
    assert set(browser.spans.records) == {"s2"}
    pub.close()


def inc(x: int) -> int:
    return x + 1


def one() -> int:
    return 1


def test_engine_changes_cost_what_changed():
    with KernelCluster(n_workers=1, threads_per_worker=2) as cluster, Client(cluster) as client:
        source = client.diagnostics
        for i in range(20):
            with span(f"step-{i}"):
                client.gather(client.map(inc, range(5), key=[f"inc-{i}-{j}" for j in range(5)]))
        source.fine_metrics(refresh=True)  # every heartbeat in
        full = source.changes_since(0)
        assert full.full and len(full.spans) == 20 and full.metrics and "inc" in full.progress
        with span("last"):
            client.gather(client.submit(one, key="one-0"))
        source.fine_metrics(refresh=True)
        changed = source.changes_since(full.cursor)
        assert not changed.full
        assert [s.name for s in changed.spans] == [("last",)]  # not the 20 before
        assert set(changed.progress) == {"one"}
        assert [r.key for r in changed.tasks] == ["one-0"]
        execute = [k for k in changed.metrics if len(k) == 5]
        assert execute and all(k[1] == changed.spans[0].id for k in execute)
        nothing = source.changes_since(changed.cursor)
        assert (nothing.spans, nothing.metrics, nothing.tasks) == ((), {}, ())
        cluster.scheduler.spans.changes.floor = 10**9  # as if the reader fell off the log
        assert source.changes_since(changed.cursor).full


def test_import_starts_no_thread_and_opens_no_comm():
    code = (
        "import threading, sys\n"
        "before = {t.ident for t in threading.enumerate()}\n"
        "import kernel_cluster\n"
        "after = [t.name for t in threading.enumerate() if t.ident not in before]\n"
        "assert not after, after\n"
        "from kernel_cluster.jupyter import hub, lab\n"
        "assert hub._hub is None and lab._hub is None\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
