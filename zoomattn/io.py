"""Small file helpers shared by every stage: atomic outputs, JSON, hashing."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a scratch directory that replaces ``path`` only if the block finishes.

    A crash leaves ``path`` untouched (absent or the previous complete version), so a partial
    output can never pass as complete.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    yield tmp
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)


def write_json(path: str | Path, obj) -> None:
    """Write JSON atomically (temp file + rename), keys sorted so equal data gives equal bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def read_json(path: str | Path):
    return json.loads(Path(path).read_text())


def sha256_files(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()
