"""``python -m kernel_cluster.worker_cli``: the same as ``python -m kernel_cluster.engine.cli``."""

import sys

from ..engine.cli import main

sys.exit(main())
