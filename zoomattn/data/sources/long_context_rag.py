"""MultiHop-RAG: news queries whose evidence spans 2-4 articles, with noise chunks drawn from the
rest of the corpus. Format: docs/datasets/long_context.md §5; use: docs/papers.md §1
(OpAmp Table 8).
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
    need_file,
    noise_count,
    place_golden,
    read_json_array,
    take_limit,
)
from zoomattn.data.sources.long_context_util import (
    locate,
    noise_ratio_option,
    parse_options,
)

QUESTION_TYPES = ("inference_query", "comparison_query", "temporal_query")


def _document(title: str, source: str, published_at: str, text: str) -> str:
    """A chunk headed by its article's title, source and date, which the queries name ("as
    reported by The Verge ... after ...") and the official reader keeps with the body."""
    lines = [f"Title: {title}"]
    lines += [f"Source: {source}"] if source else []
    lines += [f"Published: {published_at}"] if published_at else []
    return "\n".join([*lines, text])


def _corpus(root: Path, chunk_words: int) -> list[dict]:
    """corpus.json (one JSON array): each article with its body chunked."""
    articles = []
    for where, row in read_json_array(need_file(root, "corpus.json")):
        article = {
            "title": field(row, "title", where).strip(),
            "url": field(row, "url", where, str, default=""),
            "source": field(row, "source", where, str, default="").strip(),
            "published_at": field(row, "published_at", where, str, default="").strip(),
            "chunks": chunk_text(field(row, "body", where), chunk_words),
        }
        if not article["chunks"]:
            raise SourceError(f"{where}: field 'body' is empty")
        articles.append(article)
    return articles


def _golden(evidence: list, where: str, articles: list[dict], index: dict) -> tuple[list, set]:
    """The golden documents of a query and the corpus articles they come from.

    Each evidence item is joined to its article by url (else by title); its golden document is
    the chunk (two, when it straddles a boundary) holding its ``fact``, found verbatim up to
    whitespace. When the article is not in the corpus or the fact is not found in it, the
    evidence's own fact sentence, headed like a chunk, is the golden document.
    """
    docs, keys, used = [], [], set()
    for k, item in enumerate(evidence):
        at = f"{where} evidence_list[{k}]"
        if not isinstance(item, dict):
            raise SourceError(f"{at}: an evidence item must be a JSON object")
        fact = field(item, "fact", at).strip()
        url = field(item, "url", at, str, default="")
        title = field(item, "title", at, str, default="").strip()
        a = index.get(("url", url)) if url else None
        a = index.get(("title", title)) if a is None else a
        hits = locate(articles[a]["chunks"], [fact]) if a is not None else []
        if a is not None:
            used.add(a)
        if hits:
            new = [(a, c) for c in hits if (a, c) not in keys]
            art = articles[a]
            docs += [
                _document(art["title"], art["source"], art["published_at"], art["chunks"][c])
                for _, c in new
            ]
            keys += new
        elif ("fact", fact) not in keys:
            source = field(item, "source", at, str, default="").strip()
            published = field(item, "published_at", at, str, default="").strip()
            docs.append(_document(title, source, published, fact))
            keys.append(("fact", fact))
    return docs, used


def build_multihop_rag(root: Path, options: dict, rng: random.Random) -> list[dict]:
    """MultiHop-RAG (yixuantt/MultiHopRAG): MultiHopRAG.json (a JSON array of queries: query,
    answer, question_type, evidence_list [{title, url, source, published_at, fact}]) and
    corpus.json (a JSON array of articles: title, url, source, published_at, body).

    Options: noise_ratio (0.8, a float in [0, 1); noise_count(r, number of golden chunks)
    noise chunks are added), subset (None: every answerable type; or one of inference_query,
    comparison_query, temporal_query), limit, chunk_words (300). null_query items (no
    evidence, answer "Insufficient information.") are left out: 2,556 - 301 = 2,255 queries,
    the count of OpAmp's Table 8.

    Documents: the evidence chunks (golden; see _golden) placed at random among noise chunks
    of corpus articles outside the query's evidence, each chunk headed by its article's title,
    source and date. subset: the query's question_type; family multihop; answers [answer].
    """
    opts = parse_options(
        "multihop_rag",
        options,
        {"noise_ratio": 0.8, "subset": None, "limit": None, "chunk_words": 300},
    )
    ratio = noise_ratio_option("multihop_rag", opts)
    if opts["subset"] is not None and opts["subset"] not in QUESTION_TYPES:
        raise SourceError(
            f"multihop_rag: option subset={opts['subset']!r} is not one of "
            f"{', '.join(QUESTION_TYPES)} (null_query has no evidence to read)"
        )
    queries = []
    for i, (where, row) in enumerate(read_json_array(need_file(root, "MultiHopRAG.json"))):
        kind = field(row, "question_type", where)
        evidence = field(row, "evidence_list", where, list)
        if kind == "null_query" or not evidence or opts["subset"] not in (None, kind):
            continue
        queries.append((i, where, row, kind, evidence))
    queries = take_limit(queries, opts["limit"], rng)
    articles = _corpus(root, opts["chunk_words"]) if queries else []
    index: dict[tuple[str, str], int] = {}
    for a, article in enumerate(articles):
        if article["url"]:
            index.setdefault(("url", article["url"]), a)
        index.setdefault(("title", article["title"]), a)
    pool = [(a, c) for a, article in enumerate(articles) for c in range(len(article["chunks"]))]
    records = []
    for i, where, row, kind, evidence in queries:
        golden_docs, used = _golden(evidence, where, articles, index)
        n_noise = noise_count(ratio, len(golden_docs))
        candidates = [p for p in pool if p[0] not in used]
        if n_noise > len(candidates):
            raise SourceError(
                f"{root / 'corpus.json'}: noise_ratio {ratio} needs {n_noise} noise chunks for "
                f"{where}, but the corpus has only {len(candidates)} outside its evidence"
            )
        noise_docs = []
        for a, c in rng.sample(candidates, n_noise):
            art = articles[a]
            noise_docs.append(
                _document(art["title"], art["source"], art["published_at"], art["chunks"][c])
            )
        documents, golden = place_golden(golden_docs, noise_docs, rng)
        answer = field(row, "answer", where).strip()
        if not answer:
            raise SourceError(f"{where}: field 'answer' is empty")
        records.append(
            make_record(
                id=f"multihop_rag/{i}",
                family="multihop",
                subset=kind,
                documents=documents,
                golden=golden,
                question=field(row, "query", where).strip(),
                answers=[answer],
                noise_ratio=ratio,
            )
        )
    return records


BUILDERS = {
    "multihop_rag": Builder(
        build=build_multihop_rag,
        hub_id="yixuantt/MultiHopRAG",
        allow_patterns=("MultiHopRAG.json", "corpus.json"),
    ),
}
