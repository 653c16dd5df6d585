"""The seeds' main example, one workflow per collection kind, shared by the tests of
the blog post and of the spans document (whose examples are the same).

``preprocess`` and ``train`` stand for the user's functions the seeds leave out;
they are collection code (they build graphs), as the seeds' are.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import pandas as pd

WORKFLOW = ("Alice's workflow",)
STEPS = ("data load", "ML preprocessing", "Model training")


def read_array() -> Any:
    """``dd.read_parquet(...)``'s place for arrays: a tall, skinny table of features."""
    return da.random.random((40_000, 20), chunks=(4_000, 20))


def preprocess_array(x: Any) -> Any:
    return (x - x.mean(axis=0)) / x.std(axis=0)


def train_array(x: Any) -> Any:
    """The correlations of the features (the other columns) with the target (the last
    column): the "model"."""
    features, target = x[:, :-1], x[:, -1]
    return features.T @ target / len(target)


def write_parquet(path: Any, n: int = 40_000) -> str:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"user": rng.integers(0, 50, n), "x": rng.random(n), "y": rng.random(n)})
    # a directory of files, as dask writes one; by pandas, so that no dask scheduler
    # (and its thread pool) runs
    path.mkdir()
    for i, part in enumerate(range(0, n, n // 8)):
        frame.iloc[part : part + n // 8].to_parquet(path / f"part.{i}.parquet")
    return str(path)


def preprocess_frame(df: Any) -> Any:
    return df.assign(z=(df.x - df.x.mean()) / df.x.std())


def train_frame(df: Any) -> Any:
    """A per-user mean of the feature: the "model"."""
    return df.groupby("user").z.mean()


def span_tree(dask_scheduler: Any, root_id: str) -> dict[tuple[str, ...], dict[str, Any]]:
    """Run on the scheduler (``client.run_on_scheduler``): the span ``root_id`` and its
    children, by name, with what the seeds say a span is mapped to."""
    root = dask_scheduler.extensions["spans"].spans[root_id]
    out = {}
    for s in root.traverse_spans():
        metrics = s.cumulative_worker_metrics
        out[s.name] = {
            "id": s.id,
            "tasks": sum(s.states.values()),
            "thread-cpu": sum(
                v
                for k, v in metrics.items()
                if k[0] == "execute" and k[2:] == ("thread-cpu", "seconds")
            ),
            "children": [c.id for c in s.children],
        }
    return out
