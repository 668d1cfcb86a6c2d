"""What every real-dataset builder shares: finding the files, reading them, naming bad fields.

A source is read from a local copy laid out exactly as its hub repository (a directory holding the
repo's files), or from its hub id through ``huggingface_hub.snapshot_download``, which honours
``HF_HUB_OFFLINE=1`` (then only the local cache is read). Every reading error names the file, the
record (line or index) and the field.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from zoomattn.data.records import RecordError
from zoomattn.data.world import noise_doc_count


class SourceError(RecordError):
    """A missing file or a malformed record or field of a real dataset."""


@dataclass(frozen=True)
class Builder:
    """One dataset: how to turn its files into records, and where the files live on the hub."""

    build: Callable[[Path | None, dict, random.Random], list[dict]]
    # Default location; a config's `path` overrides it with a local copy or mirror. None: the
    # builder has no files of its own (a mix reading other builders' files through its options),
    # and it gets root None unless the config gives a `path`.
    hub_id: str | None
    allow_patterns: tuple[str, ...] | None = None  # files to fetch from the hub (None: all)


def resolve(location: str, repo_type: str = "dataset", allow_patterns=None) -> Path:
    """A local copy (an existing path) as it is, or the cached/downloaded snapshot of a hub id."""
    path = Path(location).expanduser()
    if path.exists():
        return path
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(location, repo_type=repo_type, allow_patterns=allow_patterns))
    except LocalEntryNotFoundError as exc:
        raise SourceError(
            f"{location}: not a local path, and not in the hub cache while offline "
            f"(HF_HUB_OFFLINE=1); download it first (`hf download {location} --repo-type "
            f"{repo_type}`) or point the config at a local copy"
        ) from exc


# ---- files and reading ---------------------------------------------------------------------


def need_file(root: Path, relative: str) -> Path:
    """``root / relative``, which must be a file; else a SourceError naming it."""
    path = Path(root) / relative
    if not path.is_file():
        raise SourceError(f"{path}: file missing (expected at {relative!r} under {root})")
    return path


def need_glob(root: Path, pattern: str) -> list[Path]:
    """The files under ``root`` matching ``pattern`` (e.g. "data/train-*.parquet"), in name
    order; none is a SourceError naming the folder and the pattern."""
    files = sorted(Path(root).glob(pattern))
    if not files:
        folder = Path(root) / Path(pattern).parent
        raise SourceError(f"{folder}: file missing (expected {pattern} under {root})")
    return files


def open_text(path: Path):
    """A text file opened for reading as UTF-8, gunzipped on the fly when it ends in ``.gz``."""
    path = Path(path)
    return (
        gzip.open(path, "rt", encoding="utf-8")
        if path.suffix == ".gz"
        else open(path, encoding="utf-8")
    )


def parse_json(text: str, label: str):
    """``text`` parsed as JSON; else a SourceError "<label>: not valid JSON (<why>, line N)"."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceError(f"{label}: not valid JSON ({exc.msg}, line {exc.lineno})") from exc


def json_lines(lines: Iterable[str], label: str) -> Iterator[tuple[str, dict]]:
    """(where, row) per non-empty line of JSON Lines text (a file, an archive member, ...);
    ``where`` is "<label>:<line>", lines counted from 1, blank ones included."""
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{label}:{i}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SourceError(f"{where}: not valid JSON ({exc.msg})") from exc
        if not isinstance(row, dict):
            raise SourceError(f"{where}: a record must be a JSON object")
        yield where, row


def json_array(text: str, label: str) -> Iterator[tuple[str, dict]]:
    """(where, row) per element of text holding one JSON array of objects, already read (a
    file's or an archive member's); ``where`` is "<label>[<index>]"."""
    rows = parse_json(text, label)
    if not isinstance(rows, list):
        raise SourceError(f"{label}: expected one JSON array of records, got {type(rows).__name__}")
    for i, row in enumerate(rows):
        where = f"{label}[{i}]"
        if not isinstance(row, dict):
            raise SourceError(f"{where}: a record must be a JSON object")
        yield where, row


def read_jsonl(path: Path) -> Iterator[tuple[str, dict]]:
    """(where, row) per non-empty line; ``where`` is "file:line" for error messages."""
    with open_text(path) as f:
        yield from json_lines(f, str(path))


def read_json_array(path: Path) -> Iterator[tuple[str, dict]]:
    """(where, row) per element of a file holding one JSON array; ``where`` is "file[index]"."""
    with open_text(path) as f:
        text = f.read()
    yield from json_array(text, str(path))


def read_parquet(path: Path, columns=None, batch_size: int = 1024) -> Iterator[tuple[str, dict]]:
    """(where, row) per row of a parquet file, read record batch by record batch (a shard can be
    hundreds of MB: never all of it as Python objects at once); ``where`` is "file row N".

    ``columns``: read only these (a dotted name selects a struct's field, "document.text"); one
    the file lacks is an error naming it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise SourceError(f"{path}: not a readable parquet file ({exc})") from exc
    for column in columns or ():
        fields = {f.name: f for f in parquet.schema_arrow}
        for part in column.split("."):
            if part not in fields:
                raise SourceError(f"{path}: every row: field {column!r} missing (no such column)")
            kind = fields[part].type
            fields = {f.name: f for f in kind} if pa.types.is_struct(kind) else {}
    batches, index = parquet.iter_batches(batch_size=batch_size, columns=columns), 0
    while True:
        try:
            batch = next(batches, None)
        except Exception as exc:  # a corrupt page further on
            raise SourceError(f"{path}: not a readable parquet file ({exc})") from exc
        if batch is None:
            return
        for row in batch.to_pylist():
            yield f"{path} row {index}", row
            index += 1


def read_rows(path: Path) -> Iterator[tuple[str, dict]]:
    """Rows of a .jsonl / .json (array) / .parquet file, by its suffix (.gz allowed for text)."""
    name = path.name.removesuffix(".gz")
    if name.endswith(".jsonl"):
        return read_jsonl(path)
    if name.endswith(".json"):
        return read_json_array(path)
    if name.endswith(".parquet"):
        return read_parquet(path)
    raise SourceError(f"{path}: unknown file type (expected .jsonl, .json or .parquet)")


# ---- options and sampling ------------------------------------------------------------------


def unknown_options(options: dict, known) -> list[str]:
    """The keys of ``options`` that are not in ``known``, in the options' order; ``path`` is
    always known (build_source consumes it before the builder runs)."""
    return [key for key in options if key != "path" and key not in known]


def check_options(options: dict, known, builder: str) -> dict:
    """``options`` unchanged, or a SourceError naming the builder and its unknown keys:
    "<builder>: unknown option(s) ['a', 'b'] (known: x, y)"."""
    unknown = sorted(unknown_options(options, known))
    if unknown:
        raise SourceError(
            f"{builder}: unknown option(s) {unknown} (known: {', '.join(sorted(known))})"
        )
    return options


def take_limit(items: list, limit: int | None, rng: random.Random) -> list:
    """At most ``limit`` items: all of them (the same list) when there are no more than that or
    ``limit`` is None, else a seeded sample kept in source order."""
    if limit is None or len(items) <= limit:
        return items
    return [items[i] for i in sorted(rng.sample(range(len(items)), limit))]


# ---- fields --------------------------------------------------------------------------------

_MISSING = object()


def field(row: dict, name: str, where: str, kind=str, default=_MISSING):
    """``row[name]`` checked to be ``kind`` (a type or tuple); else a SourceError naming it."""
    value = row.get(name, _MISSING) if isinstance(row, dict) else _MISSING
    if value is _MISSING:
        if default is not _MISSING:
            return default
        raise SourceError(f"{where}: field {name!r} missing")
    if not isinstance(value, kind):
        want = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise SourceError(f"{where}: field {name!r} is {type(value).__name__}, expected {want}")
    return value


def str_list(row: dict, name: str, where: str) -> list[str]:
    """A field that must be a list of strings (a bare string is not accepted)."""
    value = field(row, name, where, list)
    if not all(isinstance(x, str) for x in value):
        raise SourceError(f"{where}: field {name!r} must be a list of strings")
    return value


# ---- contexts ------------------------------------------------------------------------------


# The noise documents a ratio asks for: one formula for the synthetic world and every builder.
noise_count = noise_doc_count


def place_golden(
    golden_docs: list[str], noise_docs: list[str], rng: random.Random
) -> tuple[list[str], list[int]]:
    """Golden documents inserted at uniformly random positions among the noise documents."""
    order = list(range(len(golden_docs) + len(noise_docs)))
    rng.shuffle(order)
    docs = [""] * len(order)
    for slot, text in zip(order, golden_docs + noise_docs, strict=True):
        docs[slot] = text
    return docs, sorted(order[: len(golden_docs)])


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def chunk_text(text: str, max_words: int) -> list[str]:
    """Split a text into chunks of at most ``max_words`` words, cutting at sentence ends where
    possible (a sentence longer than the limit is cut by words)."""
    chunks, current = [], []
    for sentence in _SENTENCE_END.split(text.strip()):
        words = sentence.split()
        while len(words) > max_words:
            if current:
                chunks.append(" ".join(current))
                current = []
            chunks.append(" ".join(words[:max_words]))
            words = words[max_words:]
        if len(current) + len(words) > max_words:
            chunks.append(" ".join(current))
            current = []
        current += words
    if current:
        chunks.append(" ".join(current))
    return chunks


def word_count(texts) -> int:
    """Whitespace-separated words in all of ``texts``."""
    return sum(len(t.split()) for t in texts)


def has_phrase(text: str, phrase: str) -> bool:
    """True when ``phrase`` occurs in ``text`` as a run of whole words (word boundaries being
    whitespace, runs of it counting as one space). Case and punctuation are compared as given:
    normalising them is the caller's. An empty phrase is never found."""
    needle = " ".join(phrase.split())
    return bool(needle) and f" {needle} " in f" {' '.join(text.split())} "
