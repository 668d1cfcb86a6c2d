"""Collect gpu lane selections in one process: ``python tests/benchmarks/lane_selections.py
RECORD OUT`` reads RECORD (one JSON list per line: a lane step's arguments after ``-m pytest``,
as benchmarks/gpu_checks.sh passed them) and writes to OUT, per line, ``<exit status> <number of
tests selected>`` of ``pytest --collect-only`` with those arguments.

Every collection runs in this process: torch, transformers and the kernels are imported once,
where a process per step imported them for each (~6 s a step on 2 cores)."""

import json
import sys
from pathlib import Path

import pytest


class _Selected:
    count = 0

    def pytest_collection_finish(self, session):
        self.count = len(session.items)


def main(record: str, out: str) -> None:
    results = []
    for line in Path(record).read_text().splitlines():
        selected = _Selected()
        status = pytest.main(["--collect-only", *json.loads(line)], plugins=[selected])
        results.append(f"{int(status)} {selected.count}\n")
    Path(out).write_text("".join(results))


if __name__ == "__main__":
    main(*sys.argv[1:])
