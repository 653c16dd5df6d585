"""The task thread pool on its own: real threads, no engine around it."""

from __future__ import annotations

import contextvars
import threading

from kernel_cluster.engine.pool import TaskThreadPool

var: contextvars.ContextVar[str | None] = contextvars.ContextVar("var", default=None)


def test_what_a_task_leaves_in_its_context_stays_out_of_the_wake_up():
    """The owner's wake-up runs outside the tasks' context: an asyncio loop would copy
    that context into its callbacks (the metrics listener must not travel that way)."""
    seen: list = []
    woke = threading.Event()

    def wake() -> None:
        seen.append(var.get())
        woke.set()

    pool = TaskThreadPool(1, "ctx", wake)
    try:
        pool.submit(var.set, "set by a task")
        assert woke.wait(10)
        assert seen == [None]
        pool.drain()
        woke.clear()
        pool.submit(var.get)  # the next task on that thread still sees it
        assert woke.wait(10)
        assert pool.drain() == ["set by a task"]
    finally:
        pool.stop()


def test_work_handed_over_one_task_at_a_time_stays_on_one_warm_thread():
    """A chain of tasks (each submitted once the previous one is done) runs on the
    thread that went idle last, so the other threads sleep through it."""
    woke = threading.Semaphore(0)
    pool = TaskThreadPool(4, "lifo", woke.release)
    try:
        threads = []
        for _ in range(50):
            pool.submit(threading.get_ident)
            assert woke.acquire(timeout=10)
            threads += pool.drain()
        assert len(threads) == 50
        assert len(set(threads)) == 1
    finally:
        pool.stop()


def test_every_submitted_task_runs_when_many_arrive_at_once():
    """No wake-up is lost between a thread going idle and work arriving."""
    done = threading.Semaphore(0)
    pool = TaskThreadPool(3, "burst", lambda: None)
    try:
        for _ in range(20):
            for i in range(200):
                pool.submit(lambda i=i: (done.release(), i)[1])
            for _ in range(200):
                assert done.acquire(timeout=10)
        out: list = []
        while len(out) < 4000:
            out += pool.drain()
        assert sorted(out) == sorted(list(range(200)) * 20)
        assert set(pool.idents) == {t.ident for t in pool.threads}
    finally:
        pool.stop()
    assert not any(t.is_alive() for t in pool.threads)


# -- seceding (issue 32.1) -------------------------------------------------------------


def _collect(pool: TaskThreadPool, n: int, timeout: float = 10) -> list:
    out: list = []
    deadline = threading.Event()
    timer = threading.Timer(timeout, deadline.set)
    timer.start()
    try:
        while len(out) < n and not deadline.is_set():
            out += pool.drain()
            deadline.wait(0.002)
    finally:
        timer.cancel()
    assert len(out) >= n, f"{len(out)} of {n} results after {timeout} s"
    return out


def test_a_seceded_task_lets_another_run_and_rejoins_once_a_slot_is_free():
    pool = TaskThreadPool(1, "secede", lambda: None)
    go_on = threading.Event()
    rejoined = threading.Event()
    try:

        def waits() -> str:
            assert pool.secede()
            assert not pool.secede()  # once is enough
            assert go_on.wait(10)
            pool.rejoin()
            rejoined.set()
            return "waited"

        pool.submit(waits)
        pool.submit(lambda: "ran meanwhile")  # the one slot went to another thread
        assert _collect(pool, 1) == ["ran meanwhile"]
        assert len(pool.threads) == 2
        go_on.set()
        assert rejoined.wait(10)  # the other thread went idle: its slot came back
        assert _collect(pool, 1) == ["waited"]
        # the pool still runs one task at a time: two that block in turn do not overlap
        running = []
        both = threading.Barrier(2, timeout=0.5)

        def meets() -> bool:
            running.append(1)
            try:
                both.wait()
            except threading.BrokenBarrierError:
                return False
            return True

        pool.submit(meets)
        pool.submit(meets)
        assert _collect(pool, 2) == [False, False]
    finally:
        pool.stop()
    assert not any(t.is_alive() for t in pool.threads)


def test_a_thread_that_ends_its_task_seceded_becomes_a_spare_used_at_the_next_secede():
    pool = TaskThreadPool(1, "spare", lambda: None)
    try:

        def secedes_and_returns() -> int:
            pool.secede()
            return threading.get_ident()

        for _ in range(5):
            pool.submit(secedes_and_returns)
            _collect(pool, 1)
        assert len(pool.threads) == 2  # one spare, reused each time
        assert not pool.seceded
        pool.submit(lambda: "still works")
        assert _collect(pool, 1) == ["still works"]
    finally:
        pool.stop()
    assert not any(t.is_alive() for t in pool.threads)


def test_stop_ends_threads_waiting_to_rejoin_and_spares():
    pool = TaskThreadPool(1, "stop", lambda: None)
    started = threading.Event()
    release = threading.Event()

    def holds_the_slot() -> None:
        started.set()
        release.wait(10)

    def secedes_then_rejoins() -> str:
        pool.secede()
        pool.submit(holds_the_slot)
        assert started.wait(10)
        pool.rejoin()  # waits: the slot is held; stop lets it go
        return "rejoined"

    pool.submit(secedes_then_rejoins)
    assert started.wait(10)
    stopper = threading.Thread(target=pool.stop)
    stopper.start()
    release.set()
    stopper.join(30)
    assert not stopper.is_alive()
    assert not any(t.is_alive() for t in pool.threads)
