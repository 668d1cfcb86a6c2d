"""What the NCFT builders share: option parsing, the Chinese filter, and the noise recipe.

The noise recipe is OpAmp's Appendix B ("we preserve the chunks with golden documents and introduce
relevant or irrelevant chunks as noise"), applied to a context already cut into chunks:

- the golden chunks are kept;
- a noise ratio r is fixed or drawn per record (``"uniform"``: ``rng.uniform(0, max_noise)``);
  the record gets ``noise_count(r, n_golden)`` noise chunks (docs/papers.md §0);
- relevant noise comes first: the context's own chunks not marked golden (same document);
- irrelevant noise tops it up when the context has too few: chunks of OTHER contexts (never one
  from a record with the same context text), so the share matches r as closely as the available
  chunks allow;
- the golden chunks go to uniformly random positions, keeping their order in the context, and
  the noise fills the other positions in random order;
- the record's ``noise_ratio`` is the share of noise it really got, ``n_noise / (n_noise +
  n_golden)``;
- records whose whole context (all documents) is under ``min_words`` or over ``max_words`` words
  are dropped: the paper's "too long or too short" filter, applied after the noise is added.
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from zoomattn.data.records import make_record
from zoomattn.data.sources.common import SourceError, noise_count, word_count

log = logging.getLogger("zoomattn")

DEFAULT_MAX_NOISE = 0.95
# Appendix A trains on 8192-token sequences: 5,000 English words are about 6,500-7,000 tokens,
# which leaves room for the question, the answer and the chat template.
DEFAULT_MAX_WORDS = 5000
DEFAULT_MIN_WORDS = 50  # under this the "noisy context" is a sentence or two: too short
DEFAULT_CHUNK_WORDS = 100

# CJK ideographs (and extension A, compatibility), CJK punctuation and full-width forms.
_CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")
CJK_MAX_SHARE = 0.1  # English text has next to none; Chinese text is mostly CJK


def is_chinese(*texts: str) -> bool:
    """True when any of the texts has more than 10% CJK characters among its non-space ones."""
    for text in texts:
        letters = len(text) - sum(text.count(c) for c in " \t\r\n")
        if letters and len(_CJK.findall(text)) > CJK_MAX_SHARE * letters:
            return True
    return False


def context_key(text: str) -> str:
    """A stable fingerprint of a context: records sharing one must not be each other's noise."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


# ---------------------------------------------------------------------------------------- options


def int_option(options: dict, key: str, default: int | None, builder: str, minimum: int = 0):
    value = options.get(key, default)
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SourceError(
            f"{builder}: option {key!r} must be an integer >= {minimum}, not {value!r}"
        )
    return value


def choice_option(options: dict, key: str, default: str, choices: tuple[str, ...], builder: str):
    value = options.get(key, default)
    if value not in choices:
        raise SourceError(
            f"{builder}: option {key!r} must be one of {list(choices)}, not {value!r}"
        )
    return value


def noise_option(options: dict, builder: str) -> tuple[Callable[[random.Random], float], float]:
    """(draw the noise ratio of one record, the highest ratio it can draw) from ``noise_ratio``
    (a float in [0, 1), or "uniform", the default: r ~ U(0, ``max_noise``), default 0.95)."""
    max_noise = options.get("max_noise", DEFAULT_MAX_NOISE)
    if isinstance(max_noise, bool) or not isinstance(max_noise, int | float):
        raise SourceError(f"{builder}: option 'max_noise' must be a number, not {max_noise!r}")
    if not 0.0 <= max_noise < 1.0:
        raise SourceError(f"{builder}: option 'max_noise' {max_noise} is not in [0, 1)")
    ratio = options.get("noise_ratio", "uniform")
    if ratio == "uniform":
        return (lambda rng: rng.uniform(0.0, max_noise)), float(max_noise)
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0.0 <= ratio < 1.0:
        raise SourceError(
            f"{builder}: option 'noise_ratio' must be a number in [0, 1) or 'uniform', "
            f"not {ratio!r}"
        )
    return (lambda rng: float(ratio)), float(ratio)


def length_options(options: dict, builder: str) -> tuple[int, int]:
    low = int_option(options, "min_words", DEFAULT_MIN_WORDS, builder)
    high = int_option(options, "max_words", DEFAULT_MAX_WORDS, builder, minimum=1)
    if low > high:
        raise SourceError(f"{builder}: option 'min_words' {low} exceeds 'max_words' {high}")
    return low, high


def log_drops(builder: str, seen: int, kept: int, dropped: Counter) -> None:
    reasons = ", ".join(f"{n} {why}" for why, n in sorted(dropped.items())) or "none"
    log.info("%s: kept %d of %d source records; dropped: %s", builder, kept, seen, reasons)


# ------------------------------------------------------------------------------------ noise recipe


@dataclass(frozen=True)
class Item:
    """One context question before noise: its chunks split into golden and the rest."""

    id: str
    key: str  # context_key of the whole context
    question: str
    answer: str
    golden: list[str]  # chunks holding the answer (at least one)
    relevant: list[str]  # the same context's other chunks: relevant noise


def add_noise(
    builder: str,
    items: list[Item],
    draw_ratio: Callable[[random.Random], float],
    rng: random.Random,
    family: str,
    min_words: int,
    max_words: int,
) -> tuple[list[dict], Counter]:
    """Records with golden chunks and noise chunks mixed as the module docstring describes; the
    second value counts the records dropped as too short / too long."""
    pool = [(item.key, chunk) for item in items for chunk in item.golden + item.relevant]
    per_key = Counter(key for key, _ in pool)
    records, dropped = [], Counter()
    for item in items:
        n_noise = noise_count(draw_ratio(rng), len(item.golden))
        noise = rng.sample(item.relevant, min(n_noise, len(item.relevant)))
        noise += _other_chunks(pool, per_key, item.key, n_noise - len(noise), rng)
        documents, golden = _place(item.golden, noise, rng)
        words = word_count(documents)
        if words < min_words or words > max_words:
            dropped["too short" if words < min_words else "too long"] += 1
            continue
        records.append(
            make_record(
                id=f"{builder}/{item.id}",
                family=family,
                documents=documents,
                golden=golden,
                question=item.question,
                answers=[item.answer],
                noise_ratio=len(noise) / len(documents),
            )
        )
    return records, dropped


def _place(golden: list[str], noise: list[str], rng: random.Random) -> tuple[list[str], list[int]]:
    """Golden chunks at uniformly random positions, in their context's order (an answer spread
    over several chunks still reads in order), noise shuffled into the other positions."""
    total = len(golden) + len(noise)
    slots = sorted(rng.sample(range(total), len(golden)))
    golden_at = dict(zip(slots, golden, strict=True))
    shuffled = iter(rng.sample(noise, len(noise)))
    documents = [golden_at[i] if i in golden_at else next(shuffled) for i in range(total)]
    return documents, slots


def _other_chunks(
    pool: list[tuple[str, str]], per_key: Counter, key: str, k: int, rng: random.Random
) -> list[str]:
    """Up to ``k`` distinct pool chunks whose context is not ``key`` (fewer when the pool runs
    out)."""
    available = len(pool) - per_key[key]
    k = min(k, available)
    if k <= 0:
        return []
    if 2 * k > available:  # most of the candidates are wanted: list them
        return rng.sample([chunk for owner, chunk in pool if owner != key], k)
    picked: set[int] = set()
    while len(picked) < k:  # few wanted from a big pool: rejection sampling is cheap
        i = rng.randrange(len(pool))
        if pool[i][0] != key:
            picked.add(i)
    return [pool[i][1] for i in sorted(picked)]
