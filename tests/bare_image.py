"""Run a script or module as the GPU machine's bare image would: without the packages it lacks.

The device tool's image (CUDA PyTorch, Triton, its own transformers and peft) holds none of the
packages below, which zoomattn, its benchmarks or its tests import by name (read from the image's
package list against requirements.lock, 2026-11-27). Installing ours there takes two calls of a
session's few device minutes, so ``benchmarks/gpu_checks.sh`` runs every step that needs none of
them on the bare image, and names the others skipped. Here each of them is hidden (found by
neither an import nor ``importlib.util.find_spec``, as an absent package), so a test can run a
step's command as the image would and catch a new import that would fail only there. Child
processes hide them too (a benchmark's measuring child, torchrun's workers, a test's subprocess):
``main`` sets ``ZOOMATTN_BARE_IMAGE`` and puts ``bare_image_site`` (a ``sitecustomize``) first on
``PYTHONPATH``; a child whose environment drops either (built from scratch, or given a
``PYTHONPATH`` of its own), or that Python starts isolated (``-I``, ``-E``), sees every package.
What this cannot show: the image's transformers and peft are older than ours (transformers 5.17
against 5.23 when measured).

    python -m tests.bare_image benchmarks/rectified_triton.py --smoke ...
    python -m tests.bare_image -m pytest tests/gpu/...
    python -m tests.bare_image -c "import mlflow"      # fails, as there
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import importlib.util
import os
import runpy
import sys

RUN = [sys.executable, "-m", "tests.bare_image"]  # then a script, ``-m`` module or ``-c`` code
SWITCH = "ZOOMATTN_BARE_IMAGE"  # "1": a process started with SITE first on its path hides them
SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bare_image_site")
ABSENT = (
    "bitsandbytes",
    "datasets",
    "jsonschema",
    "mlflow",
    "selenium",
    "snakemake",
    "snakemake_executor_plugin_slurm",
)


def _absent(name: str) -> bool:
    return name.partition(".")[0] in ABSENT


class _Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if _absent(name):
            message = f"No module named {name!r} (not on the bare image)"
            raise ModuleNotFoundError(message, name=name)
        return None


def hide() -> None:
    real_find_spec, real_version = importlib.util.find_spec, importlib.metadata.version

    def find_spec(name, package=None):  # availability probes (transformers') see it missing
        if not _absent(name):
            return real_find_spec(name, package)
        if "." in name:  # a submodule: find_spec imports its parent first, which fails
            raise ModuleNotFoundError(f"No module named {name.partition('.')[0]!r}", name=name)
        return None

    def version(name):
        if _absent(name.replace("-", "_")):
            raise importlib.metadata.PackageNotFoundError(name)
        return real_version(name)

    importlib.util.find_spec, importlib.metadata.version = find_spec, version
    sys.meta_path.insert(0, _Hidden())


def hide_in_children() -> None:
    """Every process this one starts with its environment hides them too (``bare_image_site``)."""
    os.environ[SWITCH] = "1"
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = SITE + (os.pathsep + path if path else "")


def main(argv: list[str]) -> None:
    hide()
    hide_in_children()
    if argv[:1] == ["-c"]:
        sys.argv = ["-c", *argv[2:]]
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
    elif argv[:1] == ["-m"]:
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))  # as `python SCRIPT` sets it
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
