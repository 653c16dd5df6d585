"""blog-fine-performance-metrics-and-spans.txt: the blog post's examples, run as
written (adapted as README says: ``from kernel_cluster import Client, span``, and the
client as dask's scheduler).

The post's main example sets ``dask.config.set({"": False})``: the key was lost from
the post's text (the spans document has it: ``optimization.fuse.active``). As written
dask fuses the array's tasks and drops their span annotations on the way, as it
would for Dask: the client says so, naming the spans and the fix.
"""

from __future__ import annotations

import dask
import dask.config
import pytest

from kernel_cluster import span
from tests.seeds import workflows
from tests.seeds.workflows import STEPS, WORKFLOW, span_tree


def test_the_main_example_as_written_names_the_spans_fusion_dropped(client):
    with dask.config.set(scheduler=client):
        dask.config.set({"": False})  # Don't lose task annotations
        try:
            with span("Alice's workflow") as alice:
                with span("data load"):
                    df = workflows.read_array()

                with span("ML preprocessing"):
                    df = workflows.preprocess_array(df)
                with span("Model training"):
                    model = workflows.train_array(df)

            with pytest.warns(UserWarning, match="optimization.fuse.active") as seen:
                model = model.compute()
        finally:
            dask.config.config.pop("", None)
    assert model.shape == (19,)
    (warning,) = [w for w in seen if "carry no annotation" in str(w.message)]
    for step in STEPS:
        assert repr(step) in str(warning.message)
    known = client.run_on_scheduler(
        lambda dask_scheduler: alice in dask_scheduler.extensions["spans"].spans
    )
    assert not known


def test_the_main_example_with_the_key_the_post_lost(client):
    """With ``optimization.fuse.active`` (the spans document's key), each span of the
    blog's list holds its part of the graph, and the parent all of it."""
    with dask.config.set({"scheduler": client, "optimization.fuse.active": False}):
        with span("Alice's workflow") as alice:
            with span("data load"):
                df = workflows.read_array()

            with span("ML preprocessing"):
                df = workflows.preprocess_array(df)
            with span("Model training"):
                model = workflows.train_array(df)

        model = model.compute()
    client.fine_metrics()
    tree = client.run_on_scheduler(span_tree, root_id=alice)
    # "Alice's workflow", "Alice's workflow / data load", ... as the post lists them
    assert sorted(" / ".join(name) for name in tree) == [
        "Alice's workflow",
        "Alice's workflow / ML preprocessing",
        "Alice's workflow / Model training",
        "Alice's workflow / data load",
    ]
    for step in STEPS:
        assert tree[(*WORKFLOW, step)]["tasks"] > 0
        assert tree[(*WORKFLOW, step)]["thread-cpu"] > 0
    assert tree[WORKFLOW]["tasks"] == sum(tree[(*WORKFLOW, s)]["tasks"] for s in STEPS)


def load(i: int) -> list[int]:
    return list(range(1000 * (i + 1)))


def test_parameterised_tags(client):
    """``with span(f"{user}'s workflow"):`` gives Alice's workflow / data load, Bob's
    workflow / data load: one user's work, or one kind of work over all users."""
    for user in ("Alice", "Bob"):
        with span(f"{user}'s workflow"), span("data load"):
            client.gather(client.map(load, range(3)))
    names = client.run_on_scheduler(
        lambda dask_scheduler: {
            " / ".join(s.name)
            for s in dask_scheduler.extensions["spans"].spans.values()
            if s.name[-1] == "data load"
        }
    )
    assert {"Alice's workflow / data load", "Bob's workflow / data load"} <= names
