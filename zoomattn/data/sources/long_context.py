"""Long-context benchmarks: LongBench and ZeroSCROLLS (this module), LooGLE
(long_context_loogle.py), NarrativeQA and QuALITY (long_context_stories.py), MultiHop-RAG
(long_context_rag.py); helpers in long_context_util.py. Formats:
docs/datasets/long_context.md; use: docs/papers.md §1 (OpAmp) and §3 (MuDAF).

LongBench, ZeroSCROLLS, LooGLE, NarrativeQA and QuALITY read the dataset's own context, in
reading order: a multi-document context split into its passages, a single long document cut
into chunks of at most ``chunk_words`` words by ``common.chunk_text``. Nothing is injected there,
so ``noise_ratio`` is accepted only as 0.0, and a record's ``noise_ratio`` is the share of
non-golden documents where golden is known, else 0.0. MultiHop-RAG adds noise chunks from its
corpus to reach the ``noise_ratio`` asked for.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from zoomattn.data.records import make_record
from zoomattn.data.sources import long_context_loogle, long_context_rag, long_context_stories
from zoomattn.data.sources.common import (
    Builder,
    SourceError,
    chunk_text,
    field,
    read_jsonl,
    read_parquet,
    str_list,
    take_limit,
)
from zoomattn.data.sources.long_context_util import (
    OWN_CONTEXT,
    choice,
    own_context_only,
    own_noise_ratio,
    parse_options,
    read_zip_jsonl,
    zip_member,
)

# ---- LongBench ---------------------------------------------------------------------------

# The opening paragraph of each subset's official template (config/dataset2prompt.json),
# verbatim. A template is "<instruction>\n\n<context header>{context}\n\n<the instruction
# restated>\n\nQuestion: {input}\nAnswer:"; the record keeps the instruction, and the context
# header ("Story:", "Article:", "The following are given passages."), the restatement and the
# question/answer scaffolding are left to the prompt renderer.
_MULTI_DOC = (
    "Answer the question based on the given passages. Only give me the answer and do not "
    "output any other words."
)
LONGBENCH_INSTRUCTIONS = {
    "narrativeqa": long_context_stories.NARRATIVEQA_INSTRUCTION,
    "qasper": (
        "You are given a scientific article and a question. Answer the question as concisely as "
        "you can, using a single phrase or sentence if possible. If the question cannot be "
        'answered based on the information in the article, write "unanswerable". If the '
        'question is a yes/no question, answer "yes", "no", or "unanswerable". Do not provide '
        "any explanation."
    ),
    "multifieldqa_en": "Read the following text and answer briefly.",
    "hotpotqa": _MULTI_DOC,
    "2wikimqa": _MULTI_DOC,
    "musique": _MULTI_DOC,
}
LONGBENCH_MULTI_DOC = ("hotpotqa", "2wikimqa", "musique")
_LONGBENCH_SUBSETS = [*LONGBENCH_INSTRUCTIONS] + [
    f"{s}_e" for s in ("qasper", "multifieldqa_en", "hotpotqa", "2wikimqa")
]
_PASSAGE = re.compile(r"Passage \d+:\n")


def _longbench_rows(root: Path, subset: str):
    """The subset's rows from data/<subset>.jsonl, data.zip, or the parquet layout."""
    extracted = root / "data" / f"{subset}.jsonl"
    if extracted.is_file():
        return read_jsonl(extracted)
    if (root / "data.zip").is_file():
        member = zip_member(root / "data.zip", [f"data/{subset}.jsonl"])
        if member is None:
            raise SourceError(f"{root / 'data.zip'}: file missing: no member data/{subset}.jsonl")
        return read_zip_jsonl(root / "data.zip", member)
    shards = sorted(root.glob(f"{subset}/test-*.parquet")) or sorted(
        root.glob(f"{subset}/test/*.parquet")
    )
    if shards:
        return (item for shard in shards for item in read_parquet(shard))
    raise SourceError(
        f"{extracted}: file missing (looked for data/{subset}.jsonl, data.zip and "
        f"{subset}/test-*.parquet under {root})"
    )


def _answers(row: dict, where: str) -> list[str]:
    answers = [a.strip() for a in str_list(row, "answers", where) if a.strip()]
    if not answers:
        raise SourceError(f"{where}: field 'answers' is empty")
    return answers


def _passages(context: str, where: str) -> list[str]:
    """'Passage N:\\n<title>\\n<text>' blocks as "Title: <title>\\n<text>" documents."""
    blocks = _PASSAGE.split(context)[1:]
    if not blocks:
        raise SourceError(f"{where}: field 'context' has no 'Passage N:' markers to split on")
    docs = []
    for block in blocks:
        title, _, text = block.strip().partition("\n")
        docs.append(f"Title: {title}\n{text.strip()}" if text.strip() else title)
    return docs


def _mudaf_golden(path: str, n_passages: dict[int, int]) -> dict[int, list[int]]:
    """Golden document indices per source row from MuDAF's manual annotation file
    (``hotpotqa_golden_passages_ids.json``: one [id1, id2, comment] per LongBench row, ids
    1-based passage numbers, 0 for none; a comment starting "a,b,c;" lists them all instead)."""
    try:
        entries = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SourceError(f"{path}: not a readable JSON golden-passage file ({exc})") from exc
    golden = {}
    for i, n in n_passages.items():
        where = f"{path}[{i}]"
        entry = entries[i] if isinstance(entries, list) and i < len(entries) else None
        if not (isinstance(entry, list) and len(entry) == 3):
            raise SourceError(f"{where}: expected [id1, id2, comment] for LongBench row {i}")
        head = str(entry[2]).split(";")[0]
        try:
            ids = [int(x) for x in head.split(",")] if "," in head else entry[:2]
        except ValueError as exc:
            raise SourceError(f"{where}: comment {entry[2]!r} lists no passage ids") from exc
        if not all(isinstance(x, int) and 0 <= x <= n for x in ids):
            raise SourceError(f"{where}: passage ids {ids} outside 1..{n}")
        golden[i] = sorted({x - 1 for x in ids if x > 0})
    return golden


def build_longbench(root: Path, options: dict, rng: random.Random) -> list[dict]:
    """LongBench v1 (THUDM/LongBench): data.zip holding data/<subset>.jsonl (read in place), an
    extracted data/<subset>.jsonl, or <subset>/test-*.parquet; fields input (the question),
    context, answers (list), _id.

    Options: subset (required: hotpotqa, 2wikimqa, musique, qasper, narrativeqa,
    multifieldqa_en, or a LongBench-E variant such as hotpotqa_e), split (test, the only one),
    limit, chunk_words (300: single-document subsets), golden_file (None: a local copy of
    MuDAF's hotpotqa_golden_passages_ids.json, aligned with the subset's row order),
    noise_ratio (0.0 only).

    Multi-document subsets (family multihop) split ``context`` at its "Passage N:" markers, one
    document per passage. LongBench does not mark golden passages: golden is [] unless a
    golden_file gives MuDAF's manual labels. Single-document subsets (family long) are chunked;
    golden []. instruction: the opening paragraph of the official template.
    """
    opts = parse_options(
        "longbench",
        options,
        {"split": "test", "limit": None, "chunk_words": 300, "golden_file": None, **OWN_CONTEXT},
        required=("subset",),
    )
    own_context_only("longbench", opts)
    subset = choice("longbench", opts, "subset", _LONGBENCH_SUBSETS)
    choice("longbench", opts, "split", ["test"])
    base = subset.removesuffix("_e")
    multi = base in LONGBENCH_MULTI_DOC
    rows = []
    for i, (where, row) in enumerate(_longbench_rows(root, subset)):
        context = field(row, "context", where)
        docs = _passages(context, where) if multi else chunk_text(context, opts["chunk_words"])
        if not docs:
            raise SourceError(f"{where}: field 'context' is empty")
        rows.append((i, where, row, docs))
    golden = {}
    if opts["golden_file"]:
        golden = _mudaf_golden(opts["golden_file"], {i: len(d) for i, _, _, d in rows})
    records = []
    for i, where, row, docs in take_limit(rows, opts["limit"], rng):
        gold = golden.get(i, [])
        records.append(
            make_record(
                id=f"longbench/{subset}/{field(row, '_id', where)}",
                family="multihop" if multi else "long",
                subset=subset,
                documents=docs,
                golden=gold,
                question=field(row, "input", where).strip(),
                answers=_answers(row, where),
                instruction=LONGBENCH_INSTRUCTIONS[base],
                noise_ratio=own_noise_ratio(gold, docs),
            )
        )
    return records


# ---- ZeroSCROLLS -------------------------------------------------------------------------

ZEROSCROLLS_FAMILIES = {"musique": "multihop", "qasper": "long"}


def _zeroscrolls_rows(root: Path, subset: str, split: str):
    """<subset>/<split>.jsonl, extracted or read inside <subset>.zip."""
    extracted = root / subset / f"{split}.jsonl"
    if extracted.is_file():
        return read_jsonl(extracted)
    archive = root / f"{subset}.zip"
    if archive.is_file():
        member = zip_member(archive, [f"{subset}/{split}.jsonl"])
        if member is None:
            raise SourceError(f"{archive}: file missing: no member {subset}/{split}.jsonl")
        return read_zip_jsonl(archive, member)
    raise SourceError(
        f"{extracted}: file missing (looked for {subset}/{split}.jsonl and {subset}.zip "
        f"under {root})"
    )


def _span(row: dict, where: str, name: str, text: str) -> tuple[int, int]:
    """input[<name>_start_index:<name>_end_index], checked to lie inside the input."""
    start = field(row, f"{name}_start_index", where, int)
    end = field(row, f"{name}_end_index", where, int)
    if not 0 <= start <= end <= len(text):
        raise SourceError(
            f"{where}: field '{name}_start_index'/'{name}_end_index' ({start}, {end}) is "
            f"outside the input's {len(text)} characters"
        )
    return start, end


def _paragraphs(row: dict, where: str, text: str, start: int, end: int) -> list[str]:
    starts = field(row, "inner_docs_start_indices", where, list)
    if not starts or starts != sorted(starts) or not all(isinstance(s, int) for s in starts):
        raise SourceError(f"{where}: field 'inner_docs_start_indices' must be increasing ints")
    if starts[0] < start or starts[-1] > end:
        raise SourceError(
            f"{where}: field 'inner_docs_start_indices' leaves the document ({start}, {end})"
        )
    bounds = [*starts, end]
    return [p for a, b in zip(bounds, bounds[1:], strict=False) if (p := text[a:b].strip())]


def build_zeroscrolls(root: Path, options: dict, rng: random.Random) -> list[dict]:
    """ZeroSCROLLS (tau/zero_scrolls), MuDAF's subsets musique and qasper: <subset>.zip holding
    <subset>/{validation,test}.jsonl (read in place) or the extracted file; fields id, input
    (the whole prompt), output, document_/query_start_index and _end_index, and for musique
    inner_docs_start_indices.

    Options: subset (required: musique, qasper), split (test, as MuDAF; or validation), limit,
    chunk_words (300: qasper), noise_ratio (0.0 only).

    The question is input[query_start_index:query_end_index]; the documents are musique's
    paragraphs (input cut at inner_docs_start_indices up to document_end_index; family
    multihop) or qasper's article chunked (family long). golden [] (not marked). Rows sharing
    an id (several references) make one record with every distinct output as an answer; a null
    output (hidden test answers) raises. instruction: the input's opening paragraph, verbatim.
    """
    opts = parse_options(
        "zeroscrolls",
        options,
        {"split": "test", "limit": None, "chunk_words": 300, **OWN_CONTEXT},
        required=("subset",),
    )
    own_context_only("zeroscrolls", opts)
    subset = choice("zeroscrolls", opts, "subset", ZEROSCROLLS_FAMILIES)
    split = choice("zeroscrolls", opts, "split", ["test", "validation"])
    grouped: dict[str, tuple[str, dict, list[str]]] = {}
    for where, row in _zeroscrolls_rows(root, subset, split):
        output = field(row, "output", where, (str, type(None)))
        if output is None or not output.strip():
            raise SourceError(
                f"{where}: field 'output' is {'null' if output is None else 'empty'}: this copy "
                "has no gold answer (ZeroSCROLLS hides its test answers); use split "
                "validation or a copy with the test answers"
            )
        key = field(row, "id", where)
        if key not in grouped:
            grouped[key] = (where, row, [])
        if output.strip() not in grouped[key][2]:
            grouped[key][2].append(output.strip())
    records = []
    for key, (where, row, answers) in take_limit(list(grouped.items()), opts["limit"], rng):
        text = field(row, "input", where)
        start, end = _span(row, where, "document", text)
        q_start, q_end = _span(row, where, "query", text)
        if subset == "musique":
            docs = _paragraphs(row, where, text, start, end)
        else:
            docs = chunk_text(text[start:end], opts["chunk_words"])
        if not docs:
            raise SourceError(f"{where}: field 'input' has an empty document span")
        records.append(
            make_record(
                id=f"zeroscrolls/{subset}/{key}",
                family=ZEROSCROLLS_FAMILIES[subset],
                subset=subset,
                documents=docs,
                question=text[q_start:q_end].strip(),
                answers=answers,
                instruction=text[:start].split("\n\n")[0].strip(),
            )
        )
    return records


BUILDERS = {
    "longbench": Builder(
        build=build_longbench,
        hub_id="THUDM/LongBench",
        allow_patterns=("data.zip", "*/test-*.parquet"),
    ),
    "zeroscrolls": Builder(
        build=build_zeroscrolls,
        hub_id="tau/zero_scrolls",
        allow_patterns=("musique.zip", "qasper.zip"),
    ),
    **long_context_loogle.BUILDERS,
    **long_context_stories.BUILDERS,
    **long_context_rag.BUILDERS,
}
