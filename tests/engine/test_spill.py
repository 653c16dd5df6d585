"""The spill buffer on real files: exact values back, LRU order, metrics, clean-up."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from kernel_cluster.core.metrics import MeterFrame
from kernel_cluster.engine.process_meter import context_meter
from kernel_cluster.engine.spill import SpillBuffer

MB = 1_000_000


@pytest.fixture
def buf(tmp_path):
    b = SpillBuffer(str(tmp_path / "spill"), target=3 * MB)
    yield b
    b.close()


def arr(i: int) -> np.ndarray:
    return np.random.default_rng(i).random(MB // 8)  # 1 MB, incompressible


def test_values_past_target_go_to_disk_least_recent_first(buf, tmp_path):
    for i in range(5):
        buf[i] = arr(i)
    assert buf.fast_bytes <= 3 * MB
    assert set(buf.slow) == {0, 1}
    assert len(os.listdir(tmp_path / "spill")) == 2
    buf[2]  # touching 2 makes 3 the least recent in memory
    buf[5] = arr(5)
    assert 3 in buf.slow and 2 in buf.fast


def test_round_trip_is_exact_after_spilling_three_times_the_target(buf):
    for i in range(12):
        buf[i] = arr(i)
    assert buf.spilled >= 9 * MB * 0.9
    for i in range(12):
        np.testing.assert_array_equal(buf[i], arr(i))
    assert len(buf) == 12 and set(buf) == set(range(12))


def test_delete_and_pop_remove_files_without_reading_them(buf, tmp_path):
    for i in range(6):
        buf[i] = arr(i)
    seen = []
    with context_meter.scope(lambda *d: seen.append(d), MeterFrame()):
        del buf[0]
        assert buf.pop(1) is None  # spilled: dropped without reading it back
        assert buf.pop(99, "default") == "default"
    assert not any(label == "disk-read" for label, *_ in seen)
    assert 0 not in buf and 1 not in buf
    assert len(os.listdir(tmp_path / "spill")) == len(buf.slow)


def test_spilling_and_unspilling_are_metered(buf):
    seen = []
    with context_meter.scope(lambda *d: seen.append(d), MeterFrame()):
        for i in range(5):
            buf[i] = np.zeros(MB // 8) + i  # compressible
        buf[0]  # from disk
        buf[4]  # from memory
    labels = {(label, unit) for label, _, unit in seen}
    assert {("disk-write", "seconds"), ("disk-write", "bytes"), ("disk-write", "count"),
            ("compress", "seconds"), ("disk-read", "seconds"), ("disk-read", "bytes"),
            ("decompress", "seconds"), ("memory-read", "bytes")} <= labels  # fmt: skip
    written = sum(v for label, v, unit in seen if (label, unit) == ("disk-write", "bytes"))
    assert isinstance(written, int) and 0 < written < 2 * MB // 10  # zeros compress well
    assert all(v >= 0 for _, v, _ in seen)


def test_read_many_reads_memory_and_disk_and_meters_memory_once(buf):
    for i in range(5):
        buf[i] = arr(i)  # 0 and 1 go to disk
    seen = []
    with context_meter.scope(lambda *d: seen.append(d), MeterFrame()):
        out = buf.read_many([4, 0, 3, "missing"])
    assert set(out) == {4, 0, 3}
    for i in (4, 0, 3):
        np.testing.assert_array_equal(out[i], arr(i))
    memory = [v for label, v, unit in seen if (label, unit) == ("memory-read", "bytes")]
    assert memory == [2 * MB]  # 4 and 3, in one metric
    assert any(label == "disk-read" for label, *_ in seen)  # 0 came back from disk


def test_unpicklable_values_stay_in_memory(buf):
    buf["lock"] = threading.Lock()
    for i in range(5):
        buf[i] = arr(i)
    assert "lock" in buf.fast


def test_a_failed_disk_write_keeps_values_in_memory_and_warns_once(buf, caplog):
    """A full disk, or the spill directory removed under the worker: storing must not
    raise (the worker stores a batch of results at once), and nothing is lost."""
    import shutil

    shutil.rmtree(buf.directory)
    with caplog.at_level("WARNING", logger="kernel_cluster.engine.spill"):
        for i in range(6):
            buf[i] = arr(i)
    assert not buf.slow and len(buf.fast) == 6
    assert [np.array_equal(buf[i], arr(i)) for i in range(6)] == [True] * 6
    warnings = [r for r in caplog.records if "Could not spill" in r.getMessage()]
    assert len(warnings) == 1 and "TMPDIR" in warnings[0].getMessage()
    os.makedirs(buf.directory)  # room again: spilling resumes
    buf[6] = arr(6)
    assert buf.slow


def test_close_removes_the_directory(tmp_path):
    b = SpillBuffer(str(tmp_path / "spill"), target=MB)
    for i in range(3):
        b[i] = arr(i)
    b.close()
    assert not (tmp_path / "spill").exists()


def test_concurrent_readers_and_writers_stay_consistent(buf):
    for i in range(8):
        buf[i] = arr(i)
    errors = []

    def reader(offset: int) -> None:
        try:
            for n in range(40):
                i = (n + offset) % 8
                np.testing.assert_array_equal(buf[i], arr(i))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert buf.fast_bytes + buf.spilled == pytest.approx(8 * MB, rel=0.01)
