"""Job entry points for tests/test_worker.py, run in forked worker children."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def echo(argv: list[str]) -> None:
    """Print argv, one variable of the environment and the working directory; exit with argv[0]."""
    print(" ".join(argv), os.environ.get("ZOOMATTN_TEST_VALUE"), os.getcwd(), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    sys.exit(int(argv[0]))


def sleep(argv: list[str]) -> None:
    """Write this process's pid to argv[0], then sleep."""
    Path(argv[0]).write_text(str(os.getpid()))
    time.sleep(60)
