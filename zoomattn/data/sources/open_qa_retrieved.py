"""Builders over retrieval-result files: DPR NQ / TriviaQA and ALCE's ASQA for the attention
rectification paper (GRID §2), and LKG-RALM's retrieved passages (GRID §4).

A retrieval result is one question with its passages in rank order (docs/datasets/open_qa.md §2):
``{"question", "answers", "ctxs": [{"id", "title", "text", "score", "has_answer"}, ...]}``; FiD
files may add ``target`` and drop ``score``/``has_answer``, Contriever/Self-RAG files spell the flag
``hasanswer``. A passage holds the answer by its flag, or, when the file has none, by DPR's test:
some gold answer's token sequence occurs in its text (case and accents ignored).
"""

from __future__ import annotations

import random
from pathlib import Path

from zoomattn.data.records import make_record
from zoomattn.data.sources.common import Builder, SourceError, field, read_rows, str_list
from zoomattn.data.sources.open_qa_base import (
    CONTEXT_OPTIONS,
    answer_flag,
    answer_matcher,
    archive_member,
    check_options,
    clean_answers,
    context_plan,
    ctx_list,
    find_file,
    int_option,
    limit_items,
    noise_share,
    passage,
    read_answers,
    share_option,
    split_option,
    text_rows,
)

SPLITS = ("train", "dev", "test")


def _ranked(row: dict, where: str, answers: list[str], key: str = "ctxs", limit=None) -> list:
    """(document, holds_answer, bare text) per retrieved passage, in rank order."""
    holds = answer_matcher(answers)
    ranked = []
    for w, ctx in ctx_list(row, where, key)[:limit]:
        doc, text = passage(ctx, w)
        flag = answer_flag(ctx, w)
        ranked.append((doc, holds(text) if flag is None else flag, text))
    return ranked


def _dpr(name: str, prefix: str):
    def build(root: Path, options: dict, rng: random.Random) -> list[dict]:
        """DPR retriever output (``dense_retriever.py``; FiD and Contriever files have the same
        shape): one JSON list ``{prefix}-{split}.json[.gz]`` (DPR's names), or ``file``.

        Golden: the highest-ranked passage that holds an answer (one gold document; the paper does
        not define gold for NQ/TriviaQA, docs/datasets/open_qa.md §1). Noise: the first
        ``distractors`` (default 3) passages that hold no answer, in rank order; other
        answer-holding passages are neither. Gold and noise are shuffled with the rng. Questions
        with no answer-holding passage are skipped (except with ``top_k``).

        Options: ``split`` train/dev/test (default test), ``file``, ``limit`` (the paper samples
        7000 train / 3000 test), ``distractors``, or ``noise_ratio`` (a share in [0, 1), or
        "uniform" with ``max_noise``, default 0.95: noise documents per GRID §0), or ``top_k``
        (Table 4: the first k passages in rank order, golden = those holding an answer).
        Answers: ``answers`` (a FiD ``target`` first).
        """
        check_options(name, options, ("split", "file", "limit", *CONTEXT_OPTIONS))
        split = split_option(name, options, "test", SPLITS)
        plan = context_plan(name, options)
        default = [f"{prefix}-{split}.json", f"{prefix}-{split}.json.gz"]
        path = find_file(root, [options["file"]] if "file" in options else default)
        items = []
        for index, (where, row) in enumerate(read_rows(path)):
            question = field(row, "question", where, str)
            answers = read_answers(row, where)
            ranked = _ranked(row, where, answers)
            if plan.top_k is None and not any(holds for _, holds, _ in ranked):
                continue
            items.append((index, question, answers, ranked))
        records = []
        for index, question, answers, ranked in limit_items(name, options, items, rng):
            first = next((i for i, (_, holds, _) in enumerate(ranked) if holds), None)
            gold = [ranked[first][0]] if first is not None else []
            others = [doc for doc, holds, _ in ranked if not holds]
            context = plan.assemble(gold, others, [(d, h) for d, h, _ in ranked], rng)
            records.append(
                make_record(
                    id=f"{name}/{split}/{index}",
                    family="open",
                    question=question,
                    answers=answers,
                    **context,
                )
            )
        return records

    return build


def _alce_rows(root: Path, name: str):
    """ALCE's file on disk (the tar unpacked, or ALCE's ``data/``), or read inside ALCE-data.tar."""
    for relative in (name, f"data/{name}", f"ALCE-data/{name}"):
        if (root / relative).is_file():
            return read_rows(root / relative)
    if (root / "ALCE-data.tar").is_file():
        return text_rows(*archive_member(root / "ALCE-data.tar", Path(name).name), jsonl=False)
    raise SourceError(
        f"{root}: file missing (expected {name!r}, 'data/{name}', 'ALCE-data/{name}' or "
        f"'ALCE-data.tar' under {root})"
    )


def _long_answer(row: dict, where: str) -> str:
    """ALCE's ``answer``, else the first ASQA annotation's ``long_answer``, else ""."""
    answer = field(row, "answer", where, str, default="")
    annotations = field(row, "annotations", where, list, default=[])
    if not answer and annotations and isinstance(annotations[0], dict):
        answer = field(annotations[0], "long_answer", f"{where} annotations[0]", str, default="")
    return answer


def build_asqa(root: Path, options: dict, rng: random.Random) -> list[dict]:
    """ASQA from ALCE (``princeton-nlp/ALCE-data``): one JSON list per file, by default
    ``asqa_eval_dpr_top100.json`` (DPR's top-100, as the paper retrieves with DPR; ``file`` may
    name ``asqa_eval_gtr_top100.json``), unpacked or inside ``ALCE-data.tar``. 948 questions (the
    ASQA dev set); ALCE has no training split (only ``split`` "eval").

    Each row: ``question``, ``qa_pairs[{short_answers}]`` (one per disambiguation), ``docs[{title,
    text}]`` in rank order, the long ``answer``. A doc holds pair j by its ``answers_found[j]`` when
    the file has it, else by the DPR token test on its short answers. Golden: for each qa pair the
    highest-ranked doc holding it (deduplicated); noise: the first ``distractors`` docs holding no
    pair. Questions where no doc holds any pair are skipped (except with ``top_k``).

    Options as the DPR builders: ``limit``, ``distractors`` / ``noise_ratio`` / ``top_k``, ``file``.
    Answers: the long answer (the training target), then every short answer of every pair.
    ``answer_groups``: the short answers of each pair, as the file gives them; the paper's metric
    (ALCE's STR-EM, ``official.alce_str_em``) is the share of pairs some short answer of which
    appears in the prediction.
    """
    name = "asqa"
    check_options(name, options, ("split", "file", "limit", *CONTEXT_OPTIONS))
    split = split_option(name, options, "eval", ("eval",))
    plan = context_plan(name, options)
    items = []
    for where, row in _alce_rows(root, options.get("file", "asqa_eval_dpr_top100.json")):
        sample_id = field(row, "sample_id", where, (str, int))
        question = field(row, "question", where, str)
        groups = []
        for j, pair in enumerate(field(row, "qa_pairs", where, list)):
            pair_where = f"{where} qa_pairs[{j}]"
            if not isinstance(pair, dict):
                raise SourceError(f"{pair_where}: a qa pair must be a JSON object")
            groups.append(str_list(pair, "short_answers", pair_where))
        shorts = [a for group in groups for a in group]
        answers = clean_answers([_long_answer(row, where), *shorts], where, "qa_pairs")
        docs = _asqa_docs(row, where, groups)
        holders = [[i for i, (_, held) in enumerate(docs) if j in held] for j in range(len(groups))]
        firsts = [found[0] for found in holders if found]
        gold = sorted(set(firsts))
        if plan.top_k is None and not gold:
            continue
        items.append((sample_id, question, answers, groups, docs, gold))
    records = []
    for sample_id, question, answers, groups, docs, gold in limit_items(name, options, items, rng):
        context = plan.assemble(
            [docs[i][0] for i in gold],
            [doc for doc, held in docs if not held],
            [(doc, bool(held)) for doc, held in docs],
            rng,
        )
        records.append(
            make_record(
                id=f"{name}/{split}/{sample_id}",
                family="open",
                question=question,
                answers=answers,
                answer_groups=groups,
                **context,
            )
        )
    return records


def _asqa_docs(row: dict, where: str, groups: list[list[str]]) -> list[tuple[str, set[int]]]:
    """(document, indices of the qa pairs it holds) per ALCE doc, in rank order."""
    matchers = [answer_matcher(group) for group in groups]
    docs = []
    for w, doc in ctx_list(row, where, "docs"):
        rendered, text = passage(doc, w)
        found = field(doc, "answers_found", w, list, default=None)
        if found is None:
            held = {j for j, holds in enumerate(matchers) if holds(text)}
        elif all(isinstance(f, int) and not isinstance(f, bool) for f in found):
            held = {j for j, f in enumerate(found) if f}
        else:
            raise SourceError(f"{w}: field 'answers_found' must be a list of 0/1 integers")
        docs.append((rendered, held))
    return docs


def _lkg(name: str, prefix: str, default_split: str, family: str, extra: tuple = ()):
    def build(root: Path, options: dict, rng: random.Random) -> list[dict]:
        """LKG-RALM's retrieved passages (the paper retrieves from ATLAS's enwiki-dec2018 with a
        BM25 + dense hybrid and released none): a retrieval result per question, JSONL or one JSON
        list, ``{prefix}-{split}.jsonl`` / ``.json`` (``.gz`` allowed) or ``file``.

        Documents: the first ``passages`` (default 50, the paper's Fig. 6 maximum and its
        irrelevant-passage setting) passages in rank order, unshuffled. Golden: those holding an
        answer (flag or DPR token test; the paper's relevance labels are unpublished).
        ``irrelevant_share`` (in [0, 1], default 0; Fig. 6b) replaces that share of them, at
        seeded positions, by passages retrieved for other questions of the file that do not hold
        this question's answer.

        Answers: ``answers``, else ``answer``, else PopQA's ``possible_answers`` (JSON-encoded).
        Options: ``split`` train/dev/test, ``file``, ``limit``, ``passages``, ``irrelevant_share``.
        """
        check_options(name, options, ("split", "file", "limit", "passages", "irrelevant_share"))
        split = split_option(name, options, default_split, SPLITS)
        k = int_option(name, options, "passages", 50)
        share = share_option(name, options, "irrelevant_share", 0.0, allow_one=True)
        suffixes = (".jsonl", ".json", ".jsonl.gz", ".json.gz")
        default = [f"{prefix}-{split}{suffix}" for suffix in suffixes] + list(extra)
        path = find_file(root, [options["file"]] if "file" in options else default)
        items = []
        for index, (where, row) in enumerate(read_rows(path)):
            question = field(row, "question", where, str)
            answers = read_answers(row, where)
            items.append((index, question, answers, _ranked(row, where, answers, limit=k)))
        pool = [(index, doc, text) for index, _, _, ranked in items for doc, _, text in ranked]
        records = []
        for index, question, answers, ranked in limit_items(name, options, items, rng):
            docs = [doc for doc, _, _ in ranked]
            holds = [h for _, h, _ in ranked]
            for slot in sorted(rng.sample(range(len(docs)), round(share * len(docs)))):
                docs[slot] = _irrelevant(pool, index, answers, set(docs), rng, path)
                holds[slot] = False
            golden = [i for i, h in enumerate(holds) if h]
            records.append(
                make_record(
                    id=f"{name}/{split}/{index}",
                    family=family,
                    question=question,
                    answers=answers,
                    documents=docs,
                    golden=golden,
                    noise_ratio=noise_share(docs, golden),
                )
            )
        return records

    return build


def _irrelevant(pool: list, index: int, answers: list[str], used: set, rng, path: Path) -> str:
    """A passage retrieved for another question that does not hold this one's answer."""
    holds = answer_matcher(answers)
    for _ in range(10 * len(pool)):
        owner, doc, text = pool[rng.randrange(len(pool))]
        if owner != index and doc not in used and not holds(text):
            used.add(doc)
            return doc
    raise SourceError(
        f"{path}: record {index}: option 'irrelevant_share' found no passage of another question "
        "without this question's answer"
    )


def _patterns(prefix: str) -> tuple[str, ...]:
    return (f"{prefix}-*.json", f"{prefix}-*.json.gz", f"{prefix}-*.jsonl", f"{prefix}-*.jsonl.gz")


# No hub repository holds DPR's retrieval results or LKG-RALM's retrievals: their hub ids are the
# question sets' repos, with allow_patterns that fetch only the expected result files, so that a
# config without `path` fails with the missing file named.
BUILDERS = {
    "dpr_nq": Builder(_dpr("dpr_nq", "nq"), "google-research-datasets/nq_open", _patterns("nq")),
    "dpr_triviaqa": Builder(
        _dpr("dpr_triviaqa", "trivia"), "mandarjoshi/trivia_qa", _patterns("trivia")
    ),
    "asqa": Builder(build_asqa, "princeton-nlp/ALCE-data", ("ALCE-data.tar",)),
    "lkg_nq": Builder(
        _lkg("lkg_nq", "nq", "test", "open"), "google-research-datasets/nq_open", _patterns("nq")
    ),
    "lkg_triviaqa": Builder(
        _lkg("lkg_triviaqa", "triviaqa", "test", "open"),
        "mandarjoshi/trivia_qa",
        _patterns("triviaqa"),
    ),
    "lkg_hotpotqa": Builder(
        _lkg("lkg_hotpotqa", "hotpotqa", "dev", "multihop"),
        "hotpotqa/hotpot_qa",
        _patterns("hotpotqa"),
    ),
    "lkg_popqa": Builder(
        _lkg("lkg_popqa", "popqa", "test", "open", extra=("popqa_longtail_w_gs.jsonl",)),
        "akariasai/PopQA",
        (*_patterns("popqa"), "popqa_longtail_w_gs.jsonl"),
    ),
    "lkg_2wiki": Builder(
        _lkg("lkg_2wiki", "2wiki", "dev", "multihop"),
        "kamelliao/2wikimultihopqa",
        _patterns("2wiki"),
    ),
}
