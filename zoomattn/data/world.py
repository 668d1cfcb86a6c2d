"""A seeded synthetic world: entities, attributes and the documents that state their facts.

Facts are re-sampled for every example (docs/notes.md §1: a fixed world is memorised, not read), so
the documents in the context are the only source of an answer. The exception is a small set of
*famous* entities whose canonical facts appear in the pretraining corpus as plain text; the
FaithEval-like counterfactual subset contradicts them.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Attribute -> possible values. Multi-word values make token-F1 (PM) differ from EM.
ATTRIBUTES: dict[str, list[str]] = {
    "city": [
        "paris",
        "london",
        "tokyo",
        "cairo",
        "lima",
        "oslo",
        "rome",
        "delhi",
        "new york",
        "san diego",
        "hong kong",
        "cape town",
        "kyoto",
        "quito",
    ],
    "job": [
        "baker",
        "pilot",
        "nurse",
        "farmer",
        "lawyer",
        "painter",
        "chef",
        "bus driver",
        "police officer",
        "film director",
        "tailor",
        "miner",
    ],
    "color": [
        "red",
        "blue",
        "green",
        "yellow",
        "purple",
        "orange",
        "black",
        "white",
        "dark blue",
        "light green",
        "pink",
        "grey",
    ],
    "pet": [
        "dog",
        "cat",
        "parrot",
        "rabbit",
        "horse",
        "snake",
        "turtle",
        "goldfish",
        "hamster",
        "guinea pig",
        "lizard",
        "ferret",
    ],
    "food": [
        "pizza",
        "rice",
        "soup",
        "bread",
        "cheese",
        "apples",
        "noodles",
        "fried fish",
        "tomato salad",
        "beans",
        "pie",
        "curry",
    ],
    "sport": [
        "tennis",
        "golf",
        "rugby",
        "chess",
        "boxing",
        "rowing",
        "cricket",
        "table tennis",
        "ice hockey",
        "judo",
        "skiing",
        "cycling",
    ],
    "instrument": [
        "piano",
        "violin",
        "drums",
        "flute",
        "guitar",
        "cello",
        "harp",
        "trumpet",
        "bass guitar",
        "banjo",
        "organ",
        "oboe",
    ],
    "country": [
        "france",
        "japan",
        "egypt",
        "peru",
        "norway",
        "italy",
        "india",
        "brazil",
        "kenya",
        "canada",
        "south korea",
        "new zealand",
    ],
}
RELATION = "friend"  # entity-valued attribute used by multi-hop questions
UNKNOWN = "unknown"  # answer to an unanswerable question
CONFLICT = "conflict"  # answer when the context contradicts itself
STRUCTURE_WORDS = [
    "document",
    ":",
    "question",
    "answer",
    "what",
    "is",
    "the",
    "of",
    "?",
    ".",
    "its",
    "and",
    RELATION,
]
_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ru",
    "ze",
    "ta",
    "vo",
    "ni",
    "pe",
    "su",
    "do",
    "ra",
    "fi",
    "gu",
    "be",
    "xo",
    "ly",
    "wa",
    "ho",
    "je",
]


@dataclass(frozen=True)
class Fact:
    entity: str
    attribute: str
    value: str

    def sentence(self) -> str:
        return f"the {self.attribute} of {self.entity} is {self.value} ."


@dataclass
class World:
    """Names and value sets drawn from one seed; the canonical facts of the famous entities."""

    seed: int
    entities: list[str]
    famous: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def generate(cls, seed: int, n_entities: int, n_famous: int) -> World:
        rng = random.Random(seed)
        names: set[str] = set()
        while len(names) < n_entities:
            names.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.choice([2, 3]))))
        entities = sorted(names)
        rng.shuffle(entities)
        famous = {
            e: {a: rng.choice(vals) for a, vals in ATTRIBUTES.items()} for e in entities[:n_famous]
        }
        return cls(seed=seed, entities=entities, famous=famous)

    @property
    def ordinary(self) -> list[str]:
        return [e for e in self.entities if e not in self.famous]

    def words(self) -> list[str]:
        """Every word a rendered example can contain, in a stable order (the tokenizer vocab)."""
        seen: dict[str, None] = {}
        for w in STRUCTURE_WORDS + [UNKNOWN, CONFLICT] + self.entities:
            seen.setdefault(w, None)
        for attr, values in ATTRIBUTES.items():
            seen.setdefault(attr, None)
            for v in values:
                for w in v.split():
                    seen.setdefault(w, None)
        return list(seen)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: Path) -> World:
        return cls(**json.loads(Path(path).read_text()))


def noise_doc_count(noise_ratio: float, n_golden: int = 1) -> int:
    """Noise documents for a noise ratio r: round(n_golden/(1-r)) - n_golden (docs/papers.md §0)."""
    if not 0.0 <= noise_ratio < 1.0:
        raise ValueError(f"noise ratio must lie in [0, 1), got {noise_ratio}")
    return round(n_golden / (1.0 - noise_ratio)) - n_golden


class FactSampler:
    """Draws fresh facts for one example: every example gets its own random assignment."""

    def __init__(self, world: World, rng: random.Random):
        self.world = world
        self.rng = rng

    def entities(self, k: int) -> list[str]:
        return self.rng.sample(self.world.ordinary, k)

    def value(self, attribute: str, exclude: str | None = None) -> str:
        choices = [v for v in ATTRIBUTES[attribute] if v != exclude]
        return self.rng.choice(choices)

    def attribute(self, exclude: str | None = None) -> str:
        return self.rng.choice([a for a in ATTRIBUTES if a != exclude])

    def hard_negative(self, attribute: str, avoid: set[str]) -> Fact:
        """Same attribute, another entity: the distractor that needs the entity to be read."""
        entity = self.rng.choice([e for e in self.world.ordinary if e not in avoid])
        return Fact(entity, attribute, self.value(attribute))

    def irrelevant(self, avoid: set[str]) -> Fact:
        entity = self.rng.choice([e for e in self.world.ordinary if e not in avoid])
        attribute = self.attribute()
        return Fact(entity, attribute, self.value(attribute))

    def noise_docs(
        self, n: int, attribute: str, avoid: set[str], facts_per_doc: int, hard: float = 0.5
    ) -> list[str]:
        """A share ``hard`` of hard negatives, the rest irrelevant facts, each document about one
        other entity."""
        docs = []
        for _ in range(n):
            lead = (
                self.hard_negative(attribute, avoid)
                if self.rng.random() < hard
                else self.irrelevant(avoid)
            )
            docs.append(self.document(lead, facts_per_doc))
        return docs

    def document(self, lead: Fact, facts_per_doc: int) -> str:
        """A short document about lead.entity: the lead fact plus other facts of the same entity."""
        others = [a for a in ATTRIBUTES if a != lead.attribute]
        extra = [
            Fact(lead.entity, a, self.value(a)) for a in self.rng.sample(others, facts_per_doc - 1)
        ]
        facts = [lead, *extra]
        self.rng.shuffle(facts)
        return " ".join(f.sentence() for f in facts)
