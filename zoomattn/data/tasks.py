"""Example builders for every benchmark family, in one normalised record schema.

Records follow the one schema of ``data/records.py`` that the real datasets' builders share:
``golden`` lists the indices of the documents that hold the answer; ``history`` holds earlier
(question, answer) turns of a conversation.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from zoomattn.data.records import make_record
from zoomattn.data.world import (
    ATTRIBUTES,
    CONFLICT,
    RELATION,
    UNKNOWN,
    Fact,
    FactSampler,
    World,
    noise_doc_count,
)

Record = dict


def render_prompt(record: Record) -> str:
    """The model's input: documents, earlier turns, then the question and the answer cue; with
    ``reverse`` placement the question comes first and is not repeated after the documents."""
    docs = [f"document : {d}" for d in record["documents"]]
    turns = [f"question : {q} answer : {a} ." for q, a in record["history"]]
    if record.get("placement") == "reverse":
        return " ".join([*turns, f"question : {record['question']}", *docs, "answer :"])
    return " ".join([*docs, *turns, f"question : {record['question']} answer :"])


def _record(
    family: str,
    subset: str,
    docs: list[str],
    golden: list[int],
    question: str,
    answers: list[str],
    noise_ratio: float,
    history=(),
) -> Record:
    return make_record(
        id="",  # numbered by the caller
        family=family,
        subset=subset,
        documents=docs,
        golden=golden,
        question=question,
        history=history,
        answers=answers,
        noise_ratio=noise_ratio,
    )


def _place(rng: random.Random, noise: list[str], golden_docs: list[str]) -> tuple[list, list]:
    """Insert golden documents at uniformly random positions among the noise documents."""
    docs = list(noise)
    for g in golden_docs:
        docs.insert(rng.randint(0, len(docs)), g)
    return docs, sorted(docs.index(g) for g in golden_docs)


def single_doc(
    s: FactSampler, noise_ratio: float, facts_per_doc: int = 1, hard: float = 0.5
) -> Record:
    """CoQA-like noisy RAG: one golden document among round(1/(1-r))-1 noise documents, a share
    ``hard`` of them hard negatives (the same attribute of another entity)."""
    (entity,) = s.entities(1)
    attribute = s.attribute()
    fact = Fact(entity, attribute, s.value(attribute))
    n_noise = noise_doc_count(noise_ratio)
    noise = s.noise_docs(n_noise, attribute, {entity}, facts_per_doc, hard)
    docs, golden = _place(s.rng, noise, [s.document(fact, facts_per_doc)])
    return _record(
        "single",
        "",
        docs,
        golden,
        f"what is the {attribute} of {entity} ?",
        [fact.value],
        noise_ratio,
    )


def multihop(s: FactSampler, noise_ratio: float, facts_per_doc: int = 1) -> Record:
    """HotpotQA-like: a bridge document names the friend, a second golden one states the fact."""
    first, bridge = s.entities(2)
    attribute = s.attribute()
    answer = Fact(bridge, attribute, s.value(attribute))
    golden = [
        s.document(Fact(first, RELATION, bridge), facts_per_doc),
        s.document(answer, facts_per_doc),
    ]
    n_noise = noise_doc_count(noise_ratio, n_golden=2)
    avoid = {first, bridge}
    noise = []
    for i in range(n_noise):  # alternate distractor friendships and distractor facts
        if i % 2 == 0:
            other = s.rng.choice([e for e in s.world.ordinary if e not in avoid])
            lead = Fact(other, RELATION, s.rng.choice(s.world.ordinary))
        else:
            lead = s.hard_negative(attribute, avoid)
        noise.append(s.document(lead, facts_per_doc))
    docs, gold_idx = _place(s.rng, noise, golden)
    question = f"what is the {attribute} of the {RELATION} of {first} ?"
    return _record("multihop", "", docs, gold_idx, question, [answer.value], noise_ratio)


def long_context(s: FactSampler, n_chunks: int, facts_per_doc: int = 2) -> Record:
    """LooGLE-like: one golden chunk among many longer chunks."""
    rec = single_doc(s, 1.0 - 1.0 / n_chunks, facts_per_doc)
    rec["family"] = "long"
    return rec


def conversational(s: FactSampler, noise_ratio: float, turns: int = 2) -> Record:
    """QuAC-like: earlier turns name the entity; the last question refers to it as 'its'."""
    (entity,) = s.entities(1)
    attributes = s.rng.sample(list(ATTRIBUTES), turns + 1)
    facts = [Fact(entity, a, s.value(a)) for a in attributes]
    golden_doc = " ".join(f.sentence() for f in facts)
    history = [(f"what is the {facts[0].attribute} of {entity} ?", facts[0].value)]
    history += [(f"what is its {f.attribute} ?", f.value) for f in facts[1:turns]]
    target = facts[turns]
    noise = s.noise_docs(noise_doc_count(noise_ratio), target.attribute, {entity}, 1)
    docs, golden = _place(s.rng, noise, [golden_doc])
    return _record(
        "conversational",
        "",
        docs,
        golden,
        f"what is its {target.attribute} ?",
        [target.value],
        noise_ratio,
        history,
    )


def counterfactual(s: FactSampler, n_noise: int = 3) -> Record:
    """FaithEval-like: the context contradicts a famous entity's canonical (pretrained) fact."""
    entity = s.rng.choice(list(s.world.famous))
    attribute = s.attribute()
    canonical = s.world.famous[entity][attribute]
    fact = Fact(entity, attribute, s.value(attribute, exclude=canonical))
    noise = s.noise_docs(n_noise, attribute, {entity}, 1)
    docs, golden = _place(s.rng, noise, [s.document(fact, 1)])
    return _record(
        "faitheval",
        "counterfactual",
        docs,
        golden,
        f"what is the {attribute} of {entity} ?",
        [fact.value],
        0.0,
    )


def unanswerable(s: FactSampler, n_noise: int = 3) -> Record:
    """FaithEval-like: the asked fact is in no document (its entity's other facts are)."""
    (entity,) = s.entities(1)
    attribute = s.attribute()
    others = [a for a in ATTRIBUTES if a != attribute]
    own = " ".join(Fact(entity, a, s.value(a)).sentence() for a in s.rng.sample(others, 2))
    docs, _ = _place(s.rng, s.noise_docs(n_noise, attribute, {entity}, 1), [own])
    return _record(
        "faitheval",
        "unanswerable",
        docs,
        [],
        f"what is the {attribute} of {entity} ?",
        [UNKNOWN],
        0.0,
    )


def inconsistent(s: FactSampler, n_noise: int = 3) -> Record:
    """FaithEval-like: two documents give the entity two different values."""
    (entity,) = s.entities(1)
    attribute = s.attribute()
    first = s.value(attribute)
    pair = [
        s.document(Fact(entity, attribute, v), 1)
        for v in (first, s.value(attribute, exclude=first))
    ]
    docs, golden = _place(s.rng, s.noise_docs(n_noise, attribute, {entity}, 1), pair)
    return _record(
        "faitheval",
        "inconsistent",
        docs,
        golden,
        f"what is the {attribute} of {entity} ?",
        [CONFLICT],
        0.0,
    )


def closed_book(s: FactSampler) -> Record:
    """Tulu-like general data: a famous entity's fact asked with no documents."""
    entity = s.rng.choice(list(s.world.famous))
    attribute = s.attribute()
    return _record(
        "closed_book",
        "",
        [],
        [],
        f"what is the {attribute} of {entity} ?",
        [s.world.famous[entity][attribute]],
        0.0,
    )


FAITHEVAL_SUBSETS: dict[str, Callable[[FactSampler], Record]] = {
    "counterfactual": counterfactual,
    "unanswerable": unanswerable,
    "inconsistent": inconsistent,
}


def distractor_qa(s: FactSampler, family: str, n_distractors: int) -> Record:
    """Attention rectification's protocol (docs/papers.md §2): the golden documents plus exactly
    ``n_distractors`` hard distractors, shuffled. single: hard negatives only; multihop: the
    distractor friendships and facts of ``multihop``."""
    if family == "single":
        return single_doc(s, n_distractors / (n_distractors + 1), hard=1.0)
    if family == "multihop":
        return multihop(s, n_distractors / (n_distractors + 2))
    raise ValueError(f"family {family!r} has no distractor protocol (single, multihop)")


def noisy_qa(s: FactSampler, family: str, noise_ratio: float) -> Record:
    """The leaderboard's protocol: ``distractor_qa``'s hard distractors, as many as the noise
    ratio asks (docs/papers.md §0: round(n_golden/(1-r)) - n_golden)."""
    n_golden = 2 if family == "multihop" else 1
    return distractor_qa(s, family, noise_doc_count(noise_ratio, n_golden))


def noisy_examples(
    world: World, name: str, family: str, n: int, noise_ratio: float, seed: int
) -> list[Record]:
    """n leaderboard records of one family at one noise ratio."""
    s = FactSampler(world, random.Random(seed))
    out = []
    for i in range(n):
        rec = noisy_qa(s, family, noise_ratio)
        rec["id"] = f"{name}-{noise_ratio:g}-{i}"
        out.append(rec)
    return out


def noisy_mix(
    world: World, mix: dict[str, float], n: int, max_noise: float, seed: int
) -> list[Record]:
    """The leaderboard's training set: families mixed by weight, each example's noise ratio
    uniform in [0, max_noise)."""
    s = FactSampler(world, random.Random(seed))
    names, weights = zip(*mix.items(), strict=True)
    out = []
    for i in range(n):
        family = s.rng.choices(names, weights)[0]
        rec = noisy_qa(s, family, s.rng.uniform(0.0, max_noise))
        rec["id"] = f"train-{i}"
        out.append(rec)
    return out


def distractor_examples(
    world: World, name: str, family: str, n: int, n_distractors: int, placement: str, seed: int
) -> list[Record]:
    """n records of ``distractor_qa``; the placement changes the layout, not the examples."""
    s = FactSampler(world, random.Random(seed))
    out = []
    for i in range(n):
        rec = distractor_qa(s, family, n_distractors)
        rec.update(id=f"{name}-{i}", placement=placement)
        out.append(rec)
    return out


def retrieved_examples(
    world: World,
    name: str,
    family: str,
    n: int,
    n_passages: int,
    irrelevant_share: float,
    seed: int,
) -> list[Record]:
    """LKG-RALM's robustness sets (paper Fig. 6): n records of exactly ``n_passages`` documents.

    A retrieval result stands in for each record: ``distractor_qa``'s golden documents plus hard
    distractors up to ``n_passages`` (when fewer passages than golden documents are retrieved,
    the first ones of the shuffled list stay), then round(share · n_passages) positions, uniform
    over all of them, golden ones included, hold an irrelevant document instead (a random fact
    of an entity that neither the question nor a golden document names). ``golden`` keeps the
    golden documents left; 0 passages is the closed-book setting."""
    if n_passages < 0 or not 0.0 <= irrelevant_share <= 1.0:
        raise ValueError(
            f"retrieved_examples: need passages >= 0 and an irrelevant share in [0, 1], "
            f"got {n_passages} and {irrelevant_share}"
        )
    s = FactSampler(world, random.Random(seed))
    names = set(world.entities)
    n_golden = 2 if family == "multihop" else 1  # distractor_qa's golden documents
    out = []
    for i in range(n):
        rec = distractor_qa(s, family, max(n_passages - n_golden, 0))
        docs, golden = rec["documents"], rec["golden"]
        named = [rec["question"], *(docs[g] for g in golden)]
        avoid = {w for text in named for w in text.split() if w in names}
        if n_passages < len(golden):
            docs, golden = [docs[g] for g in golden[:n_passages]], list(range(n_passages))
        replaced = s.rng.sample(range(n_passages), round(irrelevant_share * n_passages))
        for slot in replaced:
            docs[slot] = s.document(s.irrelevant(avoid), 1)
        golden = [g for g in golden if g not in replaced]
        noise = (len(docs) - len(golden)) / len(docs) if docs else 0.0
        rec.update(
            id=f"{name}-{i}", documents=docs, golden=golden, noise_ratio=noise, placement="vanilla"
        )
        out.append(rec)
    return out


def distractor_mix(
    world: World, mix: dict[str, float], n: int, n_distractors: int, placement: str, seed: int
) -> list[Record]:
    """The training set of the rectification study: families mixed by weight."""
    s = FactSampler(world, random.Random(seed))
    names, weights = zip(*mix.items(), strict=True)
    out = []
    for i in range(n):
        rec = distractor_qa(s, s.rng.choices(names, weights)[0], n_distractors)
        rec.update(id=f"train-{i}", placement=placement)
        out.append(rec)
    return out


def benchmark_examples(
    world: World, name: str, spec: dict, noise_ratio: float, n: int, seed: int
) -> list[Record]:
    """n evaluation records of one benchmark family at one noise ratio."""
    s = FactSampler(world, random.Random(seed))
    family = spec["family"]
    out = []
    for i in range(n):
        if family == "single":
            rec = single_doc(s, noise_ratio)
        elif family == "multihop":
            rec = multihop(s, noise_ratio)
        elif family == "long":
            rec = long_context(s, spec["chunks"])
        elif family == "conversational":
            rec = conversational(s, noise_ratio)
        elif family == "faitheval":
            subsets = list(FAITHEVAL_SUBSETS)
            rec = FAITHEVAL_SUBSETS[subsets[i % len(subsets)]](s)
        else:
            raise ValueError(f"benchmarks.{name}.family: unknown family {family!r}")
        rec["id"] = f"{name}-{noise_ratio}-{i}"
        out.append(rec)
    return out


def training_mix(
    world: World, mix: dict[str, float], n: int, max_noise: float, long_chunks: int, seed: int
) -> list[Record]:
    """The NCFT analogue: families mixed by weight, noise ratio uniform in [0, max_noise)."""
    s = FactSampler(world, random.Random(seed))
    makers: dict[str, Callable[[], Record]] = {
        "single": lambda: single_doc(s, s.rng.uniform(0.0, max_noise)),
        "multihop": lambda: multihop(s, s.rng.uniform(0.0, max_noise)),
        "conversational": lambda: conversational(s, s.rng.uniform(0.0, max_noise)),
        "long": lambda: long_context(s, long_chunks),
        "unanswerable": lambda: unanswerable(s, s.rng.randint(1, 6)),
        "inconsistent": lambda: inconsistent(s, s.rng.randint(1, 6)),
        "closed_book": lambda: closed_book(s),
    }
    unknown = set(mix) - set(makers)
    if unknown:
        raise ValueError(f"data.train_mix: unknown families {sorted(unknown)}")
    names, weights = zip(*mix.items(), strict=True)
    out = []
    for i in range(n):
        rec = makers[s.rng.choices(names, weights)[0]]()
        rec["id"] = f"train-{i}"
        out.append(rec)
    return out
