"""``kernel-cluster-worker ADDRESS``: join a cluster running elsewhere on this machine.

The cluster's secret comes from the ``KERNEL_CLUSTER_TOKEN`` environment variable
(hex) or from ``--token-file``, never from the command line, where other users of
the machine could read it in the process list.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from .engine.cluster import parse_memory_limit
from .engine.comm import TOKEN_ENV, secret_from_env, secret_from_file
from .engine.worker_process import serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kernel-cluster-worker", description="Join a kernel-cluster scheduler as a worker."
    )
    parser.add_argument("address", help="the scheduler's address, e.g. tcp://127.0.0.1:40123")
    parser.add_argument("--nthreads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--memory-limit", default="auto")
    parser.add_argument("--name", default="")
    parser.add_argument("--heartbeat-interval", type=float, default=0.5)
    parser.add_argument("--local-directory", help="where spilled data goes")
    parser.add_argument(
        "--no-fine-metrics", action="store_true", help="do not collect fine performance metrics"
    )
    parser.add_argument(
        "--memory-fractions",
        default="0.6,0.7,0.8",
        help="target,spill,pause fractions of the memory limit",
    )
    parser.add_argument(
        "--no-profile", action="store_true", help="do not run the statistical profiler"
    )
    parser.add_argument(
        "--profile-interval", type=float, default=0.01, help="seconds between stack samples"
    )
    parser.add_argument(
        "--profile-cycle-interval",
        type=float,
        default=1.0,
        help="seconds of samples per entry of the profile's history",
    )
    parser.add_argument(
        "--token-file", help=f"file holding the cluster's secret (default: ${TOKEN_ENV})"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    secret = secret_from_file(args.token_file) if args.token_file else secret_from_env()
    if secret is None:
        print(
            f"kernel-cluster-worker: no secret; set {TOKEN_ENV} or pass --token-file.",
            file=sys.stderr,
        )
        return 2
    if args.local_directory is None:
        import tempfile

        args.local_directory = tempfile.mkdtemp(prefix="kernel-cluster-worker-")
    memory_limit = parse_memory_limit(
        int(args.memory_limit) if args.memory_limit.isdigit() else args.memory_limit, 1
    )
    try:
        code = asyncio.run(
            serve(
                args.address,
                secret,
                nthreads=args.nthreads,
                memory_limit=memory_limit,
                name=args.name,
                heartbeat_interval=args.heartbeat_interval,
                local_directory=args.local_directory,
                fine_metrics=not args.no_fine_metrics,
                memory_fractions=tuple(float(f) for f in args.memory_fractions.split(",")),
                profile=not args.no_profile,
                profile_interval=args.profile_interval,
                profile_cycle_interval=args.profile_cycle_interval,
            )
        )
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"kernel-cluster-worker: cannot reach {args.address}: {exc}", file=sys.stderr)
        return 1
    else:
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
