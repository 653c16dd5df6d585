"""The wire codec (engine/wire.py) against the hand-built dicts it replaced.

The two messages of every task over TCP: compute-task (scheduler -> worker) and
task-finished (worker -> scheduler), from the sender's objects to the receiver's
state machine events, in batches of 100. "hand" is the code the shells had before
the codec (transcribed here); "wire" is ``encode_batch``/``decode_batch`` and the
shells' dispatch on type. Each side runs 100,000 of each message, alone ("codec")
and through the comm layer's msgpack ("+msgpack"), interleaved over several
rounds; the medians of CPU time (the machine may be shared) are printed.

    .venv/bin/python benchmarks/wire_codec.py [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from kernel_cluster.core.scheduler_messages import (
    ComputeTask,
    ComputeTaskAlone,
    FreeKeys,
    TaskFinished,
)
from kernel_cluster.core.worker_messages import ComputeRequested, SendTaskFinished
from kernel_cluster.engine.comm import dumps, loads
from kernel_cluster.engine.wire import decode_batch, encode_batch

N = 100_000
BATCH = 100
ADDRESS = "tcp://127.0.0.1:40123"


def compute_task(i: int) -> ComputeTask:
    return ComputeTask(
        ADDRESS, ("inc-0a1b2c3d4e5f", i), b"\x80" * 60, {}, {}, (0, i, 0), "inc", "span-1", "s-1"
    )


def task_finished(i: int) -> SendTaskFinished:
    return SendTaskFinished(
        ("inc-0a1b2c3d4e5f", i), 28, "int", [("compute", 1.5, 1.6)], 140234, "s-2"
    )


# -- before: as scheduler.py / worker.py built and parsed them, inline in their loops -----


def hand_encode_compute(insts: list) -> list:
    msgs = []
    for inst in insts:
        msgs.append(
            {
                "op": "compute-task",
                "key": inst.key,
                "spec": inst.spec,
                "who_has": inst.who_has,
                "nbytes": inst.nbytes,
                "priority": inst.priority,
                "prefix": inst.prefix,
                "span_id": inst.span_id,
                "annotation": inst.annotation,
                "stimulus_id": inst.stimulus_id,
            }
        )
    return msgs


def hand_decode_compute(msgs: list) -> list:
    events = []
    for msg in msgs:
        if type(msg) is not dict:
            events.append(msg)
            continue
        op = msg["op"]
        if op == "compute-task":
            events.append(
                ComputeRequested(
                    msg["key"],
                    msg["spec"],
                    msg["who_has"],
                    msg["nbytes"],
                    msg["priority"],
                    msg["prefix"],
                    msg["span_id"],
                    msg["stimulus_id"],
                    msg.get("annotation"),
                )
            )
    return events


def hand_encode_finished(insts: list) -> list:
    msgs = []
    for inst in insts:
        msgs.append(
            {
                "op": "task-finished",
                "key": inst.key,
                "nbytes": inst.nbytes,
                "type": inst.type_name,
                "startstops": inst.startstops,
                "thread": inst.thread,
                "stimulus_id": inst.stimulus_id,
            }
        )
    return msgs


def hand_decode_finished(msgs: list) -> list:
    events = []
    for msg in msgs:
        if type(msg) is SendTaskFinished:
            continue
        op = msg["op"]
        sid = msg.get("stimulus_id") or ""
        if op == "heartbeat":
            pass
        elif op == "task-finished":
            events.append(
                TaskFinished(
                    msg["key"],
                    ADDRESS,
                    msg["nbytes"],
                    msg["startstops"],
                    msg["thread"],
                    msg["type"],
                    sid,
                    0.0,
                )
            )
    return events


# -- after: StreamChannel.send encodes, the reading loop decodes, the shell dispatches -----


def wire_decode_compute(raw: list) -> list:
    events = []
    for msg in decode_batch(raw, "worker", "scheduler"):
        t = type(msg)
        if t is ComputeTask or t is FreeKeys or t is ComputeTaskAlone:
            events.append(msg)  # the worker's state machine takes the ComputeTask itself
    return events


def wire_decode_finished(raw: list) -> list:
    events = []
    for m in decode_batch(raw, "scheduler", "worker"):
        if type(m) is SendTaskFinished:
            events.append(
                TaskFinished(
                    m.key,
                    ADDRESS,
                    m.nbytes,
                    m.startstops,
                    m.thread,
                    m.type_name,
                    m.stimulus_id,
                    0.0,
                )
            )
    return events


def run_codec(objs: list, enc: Callable, dec: Callable) -> float:
    t = time.process_time()
    for i in range(0, len(objs), BATCH):
        dec(enc(objs[i : i + BATCH]))
    return time.process_time() - t


def run_msgpack(objs: list, enc: Callable, dec: Callable) -> float:
    t = time.process_time()
    for i in range(0, len(objs), BATCH):
        dec(loads(dumps(enc(objs[i : i + BATCH]))))
    return time.process_time() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    computes = [compute_task(i) for i in range(N)]
    finishes = [task_finished(i) for i in range(N)]
    cases = {
        "compute-task": (
            computes,
            (hand_encode_compute, hand_decode_compute),
            (encode_batch, wire_decode_compute),
        ),
        "task-finished": (
            finishes,
            (hand_encode_finished, hand_decode_finished),
            (encode_batch, wire_decode_finished),
        ),
    }
    times: dict[tuple, list[float]] = {}
    for _ in range(args.rounds):
        for name, (objs, hand, wire) in cases.items():
            for how, run in [("codec", run_codec), ("+msgpack", run_msgpack)]:
                for side, (enc, dec) in [("hand", hand), ("wire", wire)]:
                    times.setdefault((name, how, side), []).append(run(objs, enc, dec))
    print(f"{N:,} messages each, median of {args.rounds} interleaved rounds (ns per message)")
    print(f"{'message':15} {'path':10} {'hand':>8} {'wire':>8} {'wire/hand':>10}")
    for name in cases:
        for how in ("codec", "+msgpack"):
            hand = statistics.median(times[name, how, "hand"]) / N * 1e9
            wire = statistics.median(times[name, how, "wire"]) / N * 1e9
            print(f"{name:15} {how:10} {hand:8.0f} {wire:8.0f} {wire / hand:10.2f}")


if __name__ == "__main__":
    main()
