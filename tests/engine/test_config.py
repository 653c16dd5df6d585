"""WorkerConfig: checked once, carried whole to embedded workers and worker processes."""

from __future__ import annotations

import os
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel_cluster.client.client import Client
from kernel_cluster.engine.cli import main as worker_main
from kernel_cluster.engine.cluster import KernelCluster, WorkerSettings
from kernel_cluster.engine.config import PER_WORKER, SETTINGS, WorkerConfig

_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"))
_seconds = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False)


_FRACTIONS = ("memory_target_fraction", "memory_spill_fraction", "memory_pause_fraction")
_STRATEGIES = {
    "nthreads": st.integers(1, 512),
    "memory_limit": st.integers(0, 2**50),
    "name": _text,
    "heartbeat_interval": _seconds,
    "fine_metrics": st.booleans(),
    "memory_monitor_interval": _seconds,
    "memory_stuck_seconds": _seconds,
    "memory_terminate_fraction": st.floats(1e-6, 1.0),
    "serialize_timeout": _seconds,
    "loop_stuck_seconds": _seconds,
    "profile": st.booleans(),
    "profile_interval": _seconds,
    "profile_cycle_interval": _seconds,
    "transfer_log_length": st.integers(0, 10**7),
    "shared_memory_limit": st.none() | st.integers(0, 2**50),
    "local_directory": st.none() | _text.filter(bool),  # "" is refused
    "remove_local_directory": st.booleans(),
    "cluster_directory": st.none() | _text,
    "owner_pid": st.none() | st.integers(1, 2**22),
}


@st.composite
def configs(draw: st.DrawFn) -> WorkerConfig:
    fractions = sorted(draw(st.lists(st.floats(1e-6, 1.0), min_size=3, max_size=3)))
    settings = {name: draw(strategy) for name, strategy in _STRATEGIES.items()}
    return WorkerConfig(**settings, **dict(zip(_FRACTIONS, fractions, strict=True)))


@given(configs())
def test_argv_round_trips(config: WorkerConfig) -> None:
    assert WorkerConfig.from_argv(config.to_argv()) == config
    assert pickle.loads(pickle.dumps(config)) == config


def test_every_setting_is_drawn_by_the_property_test() -> None:
    # a setting added later must be drawn by ``configs`` too
    assert {*_STRATEGIES, *_FRACTIONS} == set(SETTINGS)


def test_config_is_frozen() -> None:
    config = WorkerConfig()
    with pytest.raises(AttributeError):
        config.nthreads = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"heartbeat_interval": 0}, "heartbeat_interval must be a positive number of seconds"),
        ({"heartbeat_interval": float("nan")}, "heartbeat_interval"),
        ({"profile_interval": -1}, "profile_interval must be a positive number of seconds"),
        ({"profile_cycle_interval": "1"}, "profile_cycle_interval must be a positive number"),
        ({"memory_monitor_interval": float("inf")}, "memory_monitor_interval"),
        ({"memory_stuck_seconds": 0.0}, "memory_stuck_seconds must be a positive number"),
        ({"memory_spill_fraction": 0.9}, r"target <= spill <= pause .*memory_spill_fraction=0\.9"),
        ({"memory_target_fraction": 0}, "memory_target_fraction=0"),
        ({"memory_pause_fraction": 1.5, "memory_spill_fraction": 1.2}, "pause <= 1"),
        ({"fine_metrics": "yes"}, "fine_metrics must be True or False"),
        ({"profile": 1}, "profile must be True or False"),
        ({"transfer_log_length": -1}, "transfer_log_length must be a whole number >= 0"),
        ({"transfer_log_length": 10.0}, "transfer_log_length must be a whole number"),
        ({"local_directory": 3}, "local_directory must be a string"),
        ({"local_directory": "a\0b"}, "local_directory must be a string without NUL"),
        ({"shared_memory_limit": -1}, "shared_memory_limit must be a byte count >= 0 or None"),
        ({"shared_memory_limit": "1 MB"}, "shared_memory_limit must be a byte count"),
    ],
)
def test_a_bad_setting_fails_at_kernel_cluster_naming_it(settings: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        KernelCluster(n_workers=0, **settings)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ({"threads_per_worker": 0}, "threads_per_worker must be a whole number >= 1"),
        ({"threads_per_worker": True}, "threads_per_worker"),
        ({"memory_limit": -5}, "memory_limit=-5 is not understood"),
        ({"memory_limit": "lots"}, "memory_limit: Cannot read 'lots' as a size"),
    ],
)
def test_threads_and_memory_are_checked_under_their_own_names(args: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        KernelCluster(n_workers=0, **args)


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"nthreads": 2}, "'nthreads'; give threads_per_worker and memory_limit instead"),
        ({"owner_pid": 1}, "'owner_pid'; the cluster sets it for each worker"),
        ({"heartbeat": 1}, "'heartbeat'; the worker settings are: heartbeat_interval"),
    ],
)
def test_unknown_keywords_are_refused(settings: dict, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        KernelCluster(n_workers=0, **settings)


def test_worker_config_must_be_a_worker_config() -> None:
    with pytest.raises(TypeError, match="worker_config must be a WorkerConfig"):
        KernelCluster(n_workers=0, worker_config={"nthreads": 2})  # type: ignore[arg-type]


def test_cluster_keywords_are_worker_settings() -> None:
    keywords = set(WorkerSettings.__annotations__)
    assert keywords <= set(SETTINGS)
    assert not keywords & set(PER_WORKER)
    assert keywords | set(PER_WORKER) | {"nthreads", "memory_limit", "name"} == set(SETTINGS)


def _config(dask_worker) -> WorkerConfig:
    return dask_worker.config


def test_every_worker_gets_the_cluster_settings(processes: bool) -> None:
    settings = {
        "heartbeat_interval": 0.25,
        "fine_metrics": False,
        "memory_target_fraction": 0.5,
        "memory_spill_fraction": 0.65,
        "memory_pause_fraction": 0.9,
        "memory_monitor_interval": 0.05,
        "memory_stuck_seconds": 7.0,
        "profile": False,
        "profile_interval": 0.02,
        "profile_cycle_interval": 2.0,
        "transfer_log_length": 17,
    }
    with (
        KernelCluster(
            n_workers=2, threads_per_worker=1, processes=processes, memory_limit="1 GB", **settings
        ) as cluster,
        Client(cluster) as client,
    ):
        assert cluster.worker_config == WorkerConfig(nthreads=1, memory_limit=10**9, **settings)
        configs = client.run(_config)
        assert len(configs) == 2
        for config in configs.values():
            own = {
                "name": config.name,
                "local_directory": os.path.join(cluster.local_directory, config.name),
            }
            if processes:
                own.update(
                    remove_local_directory=True,
                    cluster_directory=cluster.local_directory,
                    owner_pid=os.getpid(),
                )
            assert config == cluster.worker_config.replace(**own)
        # what the workers do with them
        assert set(client.run(lambda dask_worker: dask_worker.memory_stuck_seconds).values()) == {
            7.0
        }
        logs = client.run(lambda dask_worker: dask_worker.transfer_incoming_log.maxlen)
        assert set(logs.values()) == {17}
        assert set(client.run(lambda dask_worker: dask_worker.profiler).values()) == {None}


def test_a_worker_config_gives_every_setting_at_once() -> None:
    base = WorkerConfig(nthreads=3, memory_limit=123_000_000, profile_interval=0.05, name="x")
    with KernelCluster(n_workers=1, worker_config=base) as cluster:
        # the name is the cluster's to give; the rest is the config's
        assert cluster.worker_config == base.replace(name="")
        (worker,) = cluster.workers.values()
        assert worker.nthreads == 3
        assert worker.memory_limit == 123_000_000
        assert cluster.profile_interval == 0.05
    with KernelCluster(
        n_workers=0,
        threads_per_worker=2,
        memory_limit="1 GB",
        worker_config=base,
        profile_interval=0.5,
    ) as cluster:  # explicit arguments change it
        assert cluster.worker_config == base.replace(
            name="", nthreads=2, memory_limit=10**9, profile_interval=0.5
        )


def test_the_cluster_directory_goes_in_local_directory(tmp_path, processes: bool) -> None:
    with (
        KernelCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=processes,
            memory_limit="1 GB",
            local_directory=str(tmp_path / "scratch"),  # made if need be
        ) as cluster,
        Client(cluster) as client,
    ):
        assert os.path.dirname(cluster.local_directory) == str(tmp_path / "scratch")
        (directory,) = client.run(lambda dask_worker: dask_worker.config.local_directory).values()
        assert os.path.dirname(directory) == cluster.local_directory
        assert os.path.isdir(directory)
    assert os.listdir(tmp_path / "scratch") == []


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--heartbeat-interval=0", "heartbeat_interval must be a positive number of seconds"),
        ("--nthreads=0", "nthreads must be a whole number >= 1"),
        ("--memory-limit=lots", "memory_limit: Cannot read 'lots' as a size"),
        ("--memory-fractions=0.1,x,0.3", "--memory-fractions takes three numbers"),
        ("--memory-fractions=0.9,0.5,0.6", "target <= spill <= pause"),
    ],
)
def test_the_worker_command_line_refuses_a_bad_setting_naming_it(
    capsys, option: str, message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        worker_main(["tcp://127.0.0.1:1", option])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_worker_command_line_reads_every_setting() -> None:
    import argparse

    parser = WorkerConfig.add_arguments(argparse.ArgumentParser())
    args = parser.parse_args(
        ["--nthreads", "2", "--memory-limit", "2 GiB", "--memory-fractions", "0.1,0.2,0.3"]
    )
    config = WorkerConfig.from_namespace(args)
    assert config.nthreads == 2
    assert config.memory_limit == 2 * 2**30
    fractions = (
        config.memory_target_fraction,
        config.memory_spill_fraction,
        config.memory_pause_fraction,
    )
    assert fractions == (0.1, 0.2, 0.3)
    # started by hand with no limit given, a worker takes the machine's memory
    import psutil

    default = WorkerConfig.from_namespace(parser.parse_args([]))
    assert default.memory_limit == psutil.virtual_memory().total
    assert default.replace(memory_limit=0) == WorkerConfig()
