"""Parse benchmark command lines in one process: ``python tests/benchmarks/benchmark_arguments.py
RECORD OUT`` reads RECORD (one JSON list per line: a benchmark script's path and its arguments, as
benchmarks/gpu_checks.sh passed them) and writes to OUT, per line, ``ok`` or why the script's own
parser refused them. Each script's ``main`` runs up to its ``parse_args`` and no further: nothing
is measured, no device is asked for."""

import argparse
import contextlib
import importlib
import io
import json
import sys
from pathlib import Path

_parse_args = argparse.ArgumentParser.parse_args


class _Parsed(Exception):
    """Raised where ``parse_args`` would return: the arguments parsed."""


def _parse_then_stop(parser, args=None, namespace=None):
    raise _Parsed(_parse_args(parser, args, namespace))


def verdict(argv: list[str]) -> str:
    """``ok``, or why the parser refused ``argv`` (a script's path, then its arguments)."""
    module = importlib.import_module(Path(argv[0]).stem)
    sys.argv, errors = argv, io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            module.main()
    except _Parsed:
        return "ok"
    except SystemExit as refused:  # argparse's usage, then the reason
        return f"refused (status {refused.code}): {errors.getvalue().strip().splitlines()[-1]}"
    return "main() returned without parsing its arguments"


def main(record: str, out: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    argparse.ArgumentParser.parse_args = _parse_then_stop
    lines = Path(record).read_text().splitlines()
    Path(out).write_text("".join(f"{verdict(json.loads(line))}\n" for line in lines))


if __name__ == "__main__":
    main(*sys.argv[1:])
