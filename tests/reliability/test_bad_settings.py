"""Issue 26.5: a bad setting fails at ``KernelCluster(...)``, naming the setting, the
value and what is accepted; nothing has started, and a good cluster starts after it.

Before: ``n_workers=True`` made one worker, ``processes="no"`` started worker
processes, ``memory_limit=True`` was one byte and ``memory_limit=4`` (with processes)
four bytes (the worker restarted for 20 s), ``memory_limit=float("inf")`` raised
OverflowError, a negative or NaN ``worker_saturation``, a negative ``queue_seconds``,
``allowed_failures=-1`` or ``None``, ``death_timeout="10"`` and ``worker_start_timeout=0``
were taken as they were and failed later, far from their cause (a worker that "did not
start", "died 0 times"); a ``local_directory`` naming a file or ``""`` raised a raw
FileExistsError / FileNotFoundError.
"""

from __future__ import annotations

import math
import threading

import pytest

from kernel_cluster.client.client import Client
from kernel_cluster.engine.cluster import KernelCluster
from tests.engine.helpers import assert_nothing_left, running_now

CASES = [
    ({"n_workers": True}, r"n_workers must be a whole number >= 0, got True"),
    ({"n_workers": 1.0}, r"n_workers must be a whole number >= 0, got 1\.0"),
    ({"processes": "no"}, r"processes must be True or False, got 'no'"),
    ({"memory_limit": True}, r"memory_limit=True .*a byte count"),
    ({"memory_limit": math.inf}, r"memory_limit=inf .*a byte count"),
    ({"memory_limit": math.nan}, r"memory_limit=nan"),
    (
        {"memory_limit": 4, "processes": True},
        r"memory_limit=4 is 4 bytes .*at least 32 MiB .*'4 GiB'",
    ),
    ({"memory_limit": "1 KiB", "processes": True}, r"memory_limit='1 KiB' is 1024 bytes"),
    ({"worker_saturation": -1}, r"worker_saturation must be a number > 0 .*got -1\b"),
    ({"worker_saturation": math.nan}, r"worker_saturation must be a number > 0 .*got nan"),
    ({"worker_saturation": "x"}, r"worker_saturation must be a number > 0 .*got 'x'"),
    ({"worker_saturation": True}, r"worker_saturation .*got True"),
    ({"queue_seconds": -1}, r"queue_seconds must be a number of seconds >= 0, got -1\b"),
    ({"queue_seconds": math.inf}, r"queue_seconds .*got inf"),
    ({"allowed_failures": -1}, r"allowed_failures must be a whole number >= 0, got -1\b"),
    ({"allowed_failures": None}, r"allowed_failures must be a whole number >= 0, got None"),
    ({"allowed_failures": 2.5}, r"allowed_failures .*got 2\.5"),
    ({"death_timeout": "10"}, r"death_timeout must be a positive number of seconds, got '10'"),
    ({"death_timeout": 0}, r"death_timeout must be a positive number of seconds, got 0\b"),
    (
        {"worker_start_timeout": 0},
        r"worker_start_timeout must be a positive number of seconds, got 0\b",
    ),
    ({"worker_start_timeout": math.nan}, r"worker_start_timeout .*got nan"),
    ({"task_stream_length": -1}, r"task_stream_length must be a whole number >= 0, got -1\b"),
    ({"task_stream_length": "10"}, r"task_stream_length .*got '10'"),
    ({"local_directory": ""}, r"local_directory must be a directory's path, got ''"),
    (
        {"cancelled_task_timeout": 0, "processes": True},
        r"cancelled_task_timeout must be a positive number of seconds or None, got 0\b",
    ),
    (
        {"cancelled_task_timeout": 5},
        r"cancelled_task_timeout=5 needs worker processes \(processes=True\)",
    ),
]


@pytest.mark.parametrize(("kwargs", "match"), CASES, ids=[repr(c[0]) for c in CASES])
def test_a_bad_setting_fails_at_kernel_cluster_naming_setting_value_and_what_is_accepted(
    kwargs, match
):
    before = running_now()
    kwargs = {"n_workers": 0, **kwargs}
    with pytest.raises(ValueError, match=match):
        KernelCluster(**kwargs)
    assert_nothing_left(before)  # refused before anything started


def test_a_local_directory_that_is_a_file_is_named(tmp_path):
    path = tmp_path / "a-file"
    path.write_text("")
    before = running_now()
    with pytest.raises(ValueError, match=r"local_directory='.*a-file' is a file, not a directory"):
        KernelCluster(n_workers=0, local_directory=str(path))
    inside = path / "sub"
    with pytest.raises(ValueError, match=r"local_directory='.*a-file/sub' cannot be made: "):
        KernelCluster(n_workers=0, local_directory=str(inside))
    assert_nothing_left(before)


def test_good_settings_still_work_after_bad_ones(tmp_path):
    with pytest.raises(ValueError):
        KernelCluster(n_workers=True)
    with (
        KernelCluster(
            n_workers=1,
            threads_per_worker=1,
            worker_saturation=math.inf,
            queue_seconds=0,
            allowed_failures=0,
            death_timeout=5,
            local_directory=str(tmp_path / "new" / "dir"),
        ) as cluster,
        Client(cluster) as client,
    ):
        assert client.submit(sum, [1, 2]).result(timeout=10) == 3
    assert threading.active_count() >= 1
