"""Issue 30: a view's request to explain a span never holds the kernel's thread.

A page reloaded in a long session asked for the critical paths of ~100 finished
spans. They were walked on the thread that reads the browser's messages (the kernel's
shell thread, or the subshell the panels share), and a user's cell stayed queued [*]
behind them for minutes, the panels' other requests too (ui-tests' lab_measure.spec).
Now explain.py answers on a thread of its own: the channel handles the next message
while a walk goes on, and the answer comes when it is done."""

from __future__ import annotations

import threading

from kernel_cluster.jupyter import explain
from tests.engine.helpers import wait_for
from tests.views.test_explain import channel  # noqa: F401 (a fixture)


def test_the_channel_answers_other_messages_while_a_span_is_explained(channel, monkeypatch):  # noqa: F811
    _client, comm, span_id = channel
    release = threading.Event()
    explained_on = []
    real = explain.explain

    def slow_explain(source, span):
        explained_on.append(threading.current_thread())
        release.wait(10)  # bounded: before the fix the request's thread waited here
        return real(source, span)

    monkeypatch.setattr(explain, "explain", slow_explain)
    hellos = len(comm.messages("hello"))
    comm.from_browser({"type": "explain", "span": span_id})
    comm.from_browser({"type": "refresh"})
    # the refresh was answered while the explanation is still being made
    assert len(comm.messages("hello")) == hellos + 1
    assert not comm.messages("explain")
    release.set()
    wait_for(lambda: comm.messages("explain"), 30, "the explanation")
    (answer,) = comm.messages("explain")
    assert answer["span"] == span_id and "error" not in answer
    assert explained_on[0] is not threading.current_thread()
