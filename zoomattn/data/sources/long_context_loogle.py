"""LooGLE: QA over one long document (an arXiv paper or a Wikipedia article), chunked, with the
chunks holding the pair's evidence as golden. Format: docs/datasets/long_context.md §2; use:
docs/papers.md §1 (OpAmp Table 8).
"""

from __future__ import annotations

import ast
import random
from pathlib import Path

from zoomattn.data.records import make_record
from zoomattn.data.sources.common import (
    Builder,
    SourceError,
    chunk_text,
    field,
    read_parquet,
    take_limit,
    word_count,
)
from zoomattn.data.sources.long_context_util import (
    OWN_CONTEXT,
    choice,
    locate,
    own_context_only,
    own_noise_ratio,
    parse_options,
    read_lines_or_array,
    read_zip_jsonl,
    zip_member,
)

# The official QA prompt (config/task2prompt.json) is "Please answer the question based on the
# long texts below. \n{input}\nQuestion: {Q}\nAnswer: "; its first sentence is the instruction.
LOOGLE_INSTRUCTION = "Please answer the question based on the long texts below."
LOOGLE_SUBSETS = ("shortdep_qa", "longdep_qa")


def _loogle_rows(root: Path, subset: str):
    """Rows from data/<subset>.json or <subset>.json (JSON Lines despite the suffix), the GitHub
    sample LooGLE-testdata/<subset>.jsonl, data.zip, or <subset>/test-*.parquet."""
    for relative in (
        f"data/{subset}.json",
        f"{subset}.json",
        f"data/{subset}.jsonl",
        f"LooGLE-testdata/{subset}.jsonl",
    ):
        if (root / relative).is_file():
            return read_lines_or_array(root / relative)
    archive = root / "data.zip"
    if archive.is_file():
        member = zip_member(archive, [f"data/{subset}.json", f"{subset}.json", f"{subset}.jsonl"])
        if member is None:
            raise SourceError(f"{archive}: file missing: no member {subset}.json")
        return read_zip_jsonl(archive, member)
    shards = sorted(root.glob(f"{subset}/test-*.parquet"))
    if shards:
        return (item for shard in shards for item in read_parquet(shard))
    raise SourceError(
        f"{root / 'data' / (subset + '.json')}: file missing (looked for data/{subset}.json, "
        f"{subset}.json, data.zip and {subset}/test-*.parquet under {root})"
    )


def _qa_pairs(row: dict, where: str) -> list[dict]:
    """qa_pairs: a Python-literal string of a list of dicts (or "none"), or an actual list."""
    raw = field(row, "qa_pairs", where, (str, list))
    if isinstance(raw, str):
        if raw.strip().lower() == "none":
            return []
        try:
            raw = ast.literal_eval(raw)
        except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
            raise SourceError(
                f"{where}: field 'qa_pairs' is not a Python list literal ({type(exc).__name__})"
            ) from exc
    if not isinstance(raw, list) or not all(isinstance(p, dict) for p in raw):
        raise SourceError(f"{where}: field 'qa_pairs' must be a list of {{'Q', 'A', 'S'}} dicts")
    return raw


def _evidence(pair: dict, where: str) -> list[str]:
    """S: one evidence string (shortdep_qa) or a list of them (longdep_qa); absent: none."""
    s = pair.get("S", [])
    snippets = [s] if isinstance(s, str) else s
    if not isinstance(snippets, list) or not all(isinstance(x, str) for x in snippets):
        raise SourceError(f"{where}: field 'S' must be a string or a list of strings")
    return snippets


def build_loogle(root: Path, options: dict, rng: random.Random) -> list[dict]:
    """LooGLE (bigai-nlco/LooGLE) QA: one row per long document with fields input (the
    document), title, qa_pairs (a Python-literal list of {'Q', 'A', 'S'[, 'type']} dicts);
    one record per QA pair.

    Options: subset (required: shortdep_qa, longdep_qa), split (test, the only one), limit (on
    QA pairs), chunk_words (300), max_words (None: drop documents longer than this, as OpAmp
    filtered LooGLE by context length), noise_ratio (0.0 only).

    The document is chunked in reading order, "Title: <title>" heading the first chunk. golden:
    the chunks holding an evidence sentence of S, found verbatim up to whitespace; [] when none
    is found. family long; answers [A].
    """
    opts = parse_options(
        "loogle",
        options,
        {"split": "test", "limit": None, "chunk_words": 300, "max_words": None, **OWN_CONTEXT},
        required=("subset",),
    )
    own_context_only("loogle", opts)
    subset = choice("loogle", opts, "subset", LOOGLE_SUBSETS)
    choice("loogle", opts, "split", ["test"])
    pairs = []
    for i, (where, row) in enumerate(_loogle_rows(root, subset)):
        text = field(row, "input", where)
        if opts["max_words"] and word_count([text]) > opts["max_words"]:
            continue
        pairs += [(i, j, where, row, pair) for j, pair in enumerate(_qa_pairs(row, where))]
    chunked: dict[int, list[str]] = {}
    records = []
    for i, j, where, row, pair in take_limit(pairs, opts["limit"], rng):
        at = f"{where} qa_pairs[{j}]"
        question, answer = field(pair, "Q", at).strip(), field(pair, "A", at).strip()
        if not answer:
            raise SourceError(f"{at}: field 'A' is empty")
        if i not in chunked:
            chunked[i] = chunk_text(field(row, "input", where), opts["chunk_words"])
            if not chunked[i]:
                raise SourceError(f"{where}: field 'input' is empty")
        gold = locate(chunked[i], _evidence(pair, at))
        docs = list(chunked[i])
        docs[0] = f"Title: {field(row, 'title', where).strip()}\n{docs[0]}"
        records.append(
            make_record(
                id=f"loogle/{subset}/{i}/{j}",
                family="long",
                subset=subset,
                documents=docs,
                golden=gold,
                question=question,
                answers=[answer],
                instruction=LOOGLE_INSTRUCTION,
                noise_ratio=own_noise_ratio(gold, docs),
            )
        )
    return records


BUILDERS = {
    "loogle": Builder(
        build=build_loogle,
        hub_id="bigai-nlco/LooGLE",
        allow_patterns=("data.zip", "data/*.json", "shortdep_qa/*.parquet"),
    ),
}
