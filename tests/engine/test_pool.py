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
