"""NarrativeQA and QuALITY (hard): a question about one long story or article, chunked in reading
order. Formats: docs/datasets/long_context.md §3-4; use: docs/papers.md §1 (OpAmp Table 8).

Neither dataset marks where in the story the answer lies: golden is [] and nothing is injected
(``noise_ratio`` accepted only as 0.0; a record's noise_ratio is 0.0, meaning unknown).
"""

from __future__ import annotations

import random
from pathlib import Path

from zoomattn.data.records import make_record
from zoomattn.data.sources.common import (
    Builder,
    SourceError,
    chunk_text,
    field,
    need_glob,
    read_parquet,
    str_list,
    take_limit,
    word_count,
)
from zoomattn.data.sources.long_context_util import (
    OWN_CONTEXT,
    choice,
    nested,
    own_context_only,
    parse_options,
    read_lines_or_array,
    read_zip_jsonl,
    zip_member,
)

# LongBench's official NarrativeQA instruction (config/dataset2prompt.json, opening paragraph).
NARRATIVEQA_INSTRUCTION = (
    "You are given a story, which can be either a novel or a movie script, and a question. "
    "Answer the question as concisely as you can, using a single phrase if possible. Do not "
    "provide any explanation."
)
# Ours: QuALITY ships no instruction. Acc compares the reply with the answers [option text,
# letter] after normalisation; asking for the letter keeps the reply short and exact.
QUALITY_INSTRUCTION = (
    "Read the article and answer the multiple-choice question with the letter of the correct "
    "option only."
)
LETTERS = "ABCDEFGHIJ"


def _chunks(text: str, words: int, where: str, name: str) -> list[str]:
    chunks = chunk_text(text, words)
    if not chunks:
        raise SourceError(f"{where}: field {name!r} is empty")
    return chunks


# ---- NarrativeQA -------------------------------------------------------------------------


_STORY_COLUMNS = {
    "text": ["document.text", "document.start", "document.end"],
    "summary": ["document.summary.text"],
}


def _story(row: dict, where: str, context: str) -> str:
    """The summary, or the full text cut to the story between its start and end markers (which
    drop e.g. Project Gutenberg's header and licence; kept whole when a marker is not found)."""
    if context == "summary":
        return nested(row, "document.summary.text", where).strip()
    text = nested(row, "document.text", where)
    start = nested(row, "document.start", where, (str, type(None))) or ""
    end = nested(row, "document.end", where, (str, type(None))) or ""
    first = text.find(start) if start.strip() else -1
    if first >= 0:
        text = text[first:]
    last = text.rfind(end) if end.strip() else -1
    if last >= 0:
        text = text[: last + len(end)]
    return text.strip()


def _narrative_answers(row: dict, where: str) -> list[str]:
    answers = []
    for k, item in enumerate(nested(row, "answers", where, list)):
        text = item.get("text") if isinstance(item, dict) else None
        if not isinstance(text, str):
            raise SourceError(f"{where}: field 'answers[{k}].text' missing or not a string")
        if text.strip() and text.strip() not in answers:
            answers.append(text.strip())
    if not answers:
        raise SourceError(f"{where}: field 'answers' is empty")
    return answers


def build_narrativeqa(root: Path, options: dict, rng: random.Random) -> list[dict]:
    """NarrativeQA (deepmind/narrativeqa, parquet data/<split>-*-of-*.parquet): one row per
    question with nested structs document {id, text, start, end, summary {text}}, question
    {text}, answers [{text}] (two references).

    Options: split (test; train, validation), context (text: the full story, as OpAmp's 64K
    context length implies; or summary: the Wikipedia summary), limit, chunk_words (300),
    max_words (None: drop stories longer than this, as OpAmp filtered by context length),
    noise_ratio (0.0 only).

    Documents: the story chunked in reading order; golden []; family long; answers: the
    distinct references. The parquet is read column by column in batches and each story is
    kept once, since every row repeats its full text. instruction: LongBench's NarrativeQA one.
    """
    opts = parse_options(
        "narrativeqa",
        options,
        {
            "split": "test",
            "context": "text",
            "limit": None,
            "chunk_words": 300,
            "max_words": None,
            **OWN_CONTEXT,
        },
    )
    own_context_only("narrativeqa", opts)
    split = choice("narrativeqa", opts, "split", ["test", "train", "validation"])
    context = choice("narrativeqa", opts, "context", ["text", "summary"])
    shards = need_glob(root, f"data/{split}-*.parquet")
    columns = ["document.id", "question.text", "answers", *_STORY_COLUMNS[context]]
    stories: dict[str, str] = {}
    lengths: dict[str, int] = {}
    items, index = [], 0
    for shard in shards:
        for where, row in read_parquet(shard, columns, batch_size=64):
            doc_id = nested(row, "document.id", where)
            if doc_id not in stories:
                stories[doc_id] = _story(row, where, context)
                lengths[doc_id] = word_count([stories[doc_id]])
                if not lengths[doc_id]:
                    raise SourceError(f"{where}: field 'document' has an empty story")
            question = nested(row, "question.text", where).strip()
            answers = _narrative_answers(row, where)
            if not opts["max_words"] or lengths[doc_id] <= opts["max_words"]:
                items.append((index, doc_id, question, answers))
            index += 1
    chunked: dict[str, list[str]] = {}
    records = []
    for i, doc_id, question, answers in take_limit(items, opts["limit"], rng):
        if doc_id not in chunked:
            chunked[doc_id] = chunk_text(stories[doc_id], opts["chunk_words"])
        records.append(
            make_record(
                id=f"narrativeqa/{split}/{i}",
                family="long",
                documents=chunked[doc_id],
                question=question,
                answers=answers,
                instruction=NARRATIVEQA_INSTRUCTION,
            )
        )
    return records


# ---- QuALITY -----------------------------------------------------------------------------


def _check_answer(options: list[str], answer: int, where: str, name: str) -> None:
    if len(options) < 2 or len(options) > len(LETTERS):
        raise SourceError(f"{where}: field 'options' has {len(options)} options")
    if not 0 <= answer < len(options):
        raise SourceError(f"{where}: field {name!r} does not point into the options")


def _quality_emozilla(shards: list[Path]):
    """(id, article, question, options, answer index, hard) per row of emozilla/quality."""
    index = 0
    for shard in shards:
        for where, row in read_parquet(shard):
            options = str_list(row, "options", where)
            answer = field(row, "answer", where, int)  # 0-based
            _check_answer(options, answer, where, "answer")
            hard = field(row, "hard", where, bool)
            article = field(row, "article", where)
            yield str(index), where, article, field(row, "question", where), options, answer, hard
            index += 1


def _quality_nyu(rows):
    """The same per question of the NYU release (one line per article and question set)."""
    for i, (where, row) in enumerate(rows):
        article = field(row, "article", where)
        for j, q in enumerate(field(row, "questions", where, list)):
            at = f"{where} questions[{j}]"
            if not isinstance(q, dict):
                raise SourceError(f"{at}: a question must be a JSON object")
            options = str_list(q, "options", at)
            answer = field(q, "gold_label", at, int) - 1  # 1-based in the file
            _check_answer(options, answer, at, "gold_label")
            hard = field(q, "difficult", at, int) == 1
            key = field(q, "question_unique_id", at, str, default=f"{i}_{j}")
            yield key, at, article, field(q, "question", at), options, answer, hard


def _quality_rows(root: Path, split: str):
    shards = sorted((root / "data").glob(f"{split}-*.parquet"))
    if shards:
        return _quality_emozilla(shards)
    name = f"QuALITY.v1.0.1.htmlstripped.{'dev' if split == 'validation' else split}"
    for folder in (root, root / "data" / "v1.0.1"):
        if (folder / name).is_file():
            return _quality_nyu(read_lines_or_array(folder / name))
        archive = folder / "QuALITY.v1.0.1.zip"
        if archive.is_file() and (member := zip_member(archive, [name])):
            return _quality_nyu(read_zip_jsonl(archive, member))
    raise SourceError(
        f"{root / 'data' / (split + '-*.parquet')}: file missing (looked for emozilla's "
        f"data/{split}-*.parquet and NYU's {name}, plain or in QuALITY.v1.0.1.zip, under {root})"
    )


def build_quality(root: Path, options: dict, rng: random.Random) -> list[dict]:
    """QuALITY (multiple choice over a ~5K-word article). Layouts: emozilla/quality (the
    notes' recommendation; data/<split>-*.parquet with article, question, options, answer
    0-based, hard bool) or the NYU release (QuALITY.v1.0.1.htmlstripped.<train|dev>, JSON Lines,
    plain or inside QuALITY.v1.0.1.zip, with per-question options, gold_label 1-based and
    difficult 0/1).

    Options: split (validation = the official dev set; or train), hard_only (true: OpAmp's
    QuALITY-hard), limit, chunk_words (300), noise_ratio (0.0 only).

    Records: family mc, subset "hard" or "easy", options the choices in order (letters A, B,
    C, D by position), answers [correct option text, its letter]: the instruction asks for the
    letter, and Acc's exact match accepts either. Documents: the article chunked; golden [].
    """
    opts = parse_options(
        "quality",
        options,
        {
            "split": "validation",
            "hard_only": True,
            "limit": None,
            "chunk_words": 300,
            **OWN_CONTEXT,
        },
    )
    own_context_only("quality", opts)
    split = choice("quality", opts, "split", ["validation", "train"])
    if not isinstance(opts["hard_only"], bool):
        raise SourceError("quality: option 'hard_only' must be true or false")
    items = [q for q in _quality_rows(root, split) if q[-1] or not opts["hard_only"]]  # q[-1]: hard
    limit = opts["limit"]
    chunked: dict[str, list[str]] = {}
    records = []
    for key, where, article, question, options_, answer, hard in take_limit(items, limit, rng):
        if article not in chunked:
            chunked[article] = _chunks(article, opts["chunk_words"], where, "article")
        choices = [o.strip() for o in options_]
        records.append(
            make_record(
                id=f"quality/{split}/{key}",
                family="mc",
                subset="hard" if hard else "easy",
                documents=chunked[article],
                question=question.strip(),
                answers=[choices[answer], LETTERS[answer]],
                options=choices,
                instruction=QUALITY_INSTRUCTION,
            )
        )
    return records


BUILDERS = {
    "narrativeqa": Builder(
        build=build_narrativeqa, hub_id="deepmind/narrativeqa", allow_patterns=("data/*.parquet",)
    ),
    "quality": Builder(
        build=build_quality, hub_id="emozilla/quality", allow_patterns=("data/*.parquet",)
    ),
}
