"""Job entry points for tests/test_worker.py, run in forked worker children, and the pretend CUDA
that tests start a server with."""

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


def pretend_cuda(record: str) -> None:
    """Make torch in this process report a CUDA build with one card, and append to ``record`` the
    call stack of every call that asks the card (or the driver) anything."""
    import traceback

    import torch

    def recording(name, real, fake):
        def call(*args, **kwargs):
            frames = [f for f in traceback.extract_stack()[:-1] if "<frozen" not in f.filename]
            stack = "".join(traceback.format_list(frames[-8:]))
            with open(record, "a") as out:
                out.write(f"{name}() asked the device from:\n{stack}\n")
            return fake if real is None else real(*args, **kwargs)

        return call

    torch.version.cuda = "12.8"
    torch.cuda.is_available = lambda: True
    fakes = {"device_count": 1, "get_device_capability": (8, 0), "current_device": 0}
    for name in (
        "_lazy_init",
        "init",
        "device_count",
        "current_device",
        "get_device_capability",
        "get_device_properties",
        "get_device_name",
        "mem_get_info",
    ):
        # On a real GPU build, each initialises CUDA or may ask its driver.
        real = None if name in fakes else getattr(torch.cuda, name)
        setattr(torch.cuda, name, recording(name, real, fakes.get(name)))
    for name in ("_cuda_getDeviceCount", "_cuda_init"):  # present in CUDA builds only
        if hasattr(torch._C, name):
            setattr(torch._C, name, recording(name, getattr(torch._C, name), None))
