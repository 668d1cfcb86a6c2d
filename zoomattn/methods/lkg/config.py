from __future__ import annotations

from dataclasses import dataclass, field

ESTIMATORS = ("layerwise", "reranker")
RERANKERS = ("bm25",)  # normalised() needs non-negative scores: query likelihood's are log-probs
EXTERNAL_RANKERS = ("bm25", "qlm")  # rankers.RANKERS (not imported: that module stays torch-free)
FUSION_HEADS = ("middle", "all")
N_BOUNDARY = 4  # [d], [e_i], [q], [e_q]


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


@dataclass(frozen=True)
class LkgConfig:
    """LKG-RALM (docs/papers.md §4, paper §4): a layer-wise passage estimator guides the attention
    of the base's middle-focused heads to relevant passages.

    ``estimator``: ``layerwise`` (the paper) or ``reranker`` (ablation w/o LPR: α from the
    normalised ``reranker`` scores at every layer, no estimator pass, no auxiliary losses).
    ``entropy`` False is w/o ELS (H_i = 1, so log(1 + H_i) = log 2); ``fusion`` False is w/o RPF
    (plain attention; the estimator is still trained by the auxiliary losses); ``aux_weight`` 0 is
    w/o auxiliary losses. ``beta`` is eq. 5's update factor (App. D: 0.2); ``alpha_init`` is α
    before the first layer (the paper does not state it: 1 = every passage fully visible).
    ``adapter_dim`` (paper 4096) and ``score_dim`` (width of the relevance and confidence
    cross-attention heads) size the estimator. ``rankers``: the K external rankers of the
    confidence target. ``fusion_heads``: the base's ``middle``-focused heads (``middle_heads``,
    ``[layer, head]`` pairs from the workflow's head-pattern analysis) or ``all`` heads.
    ``boundary_ids``: the tokenizer ids of ``[d] [e_i] [q] [e_q]``. ``resolved`` fills the last
    two in.
    """

    estimator: str = "layerwise"
    reranker: str = "bm25"
    entropy: bool = True
    fusion: bool = True
    aux_weight: float = 1.0
    beta: float = 0.2
    alpha_init: float = 1.0
    adapter_dim: int = 32
    score_dim: int = 16
    dropout: float = 0.1
    rankers: list = field(default_factory=lambda: ["bm25", "qlm"])
    fusion_heads: str = "middle"
    middle_heads: list | None = None
    boundary_ids: list | None = None

    def __post_init__(self):
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"estimator: {self.estimator!r} is not one of {', '.join(ESTIMATORS)}")
        if self.reranker not in RERANKERS:
            raise ValueError(f"reranker: {self.reranker!r} is not one of {', '.join(RERANKERS)}")
        for key in ("entropy", "fusion"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"{key}: true or false, got {getattr(self, key)!r}")
        if not (_is_number(self.aux_weight) and self.aux_weight >= 0):
            raise ValueError(f"aux_weight: a number ≥ 0, got {self.aux_weight!r}")
        if not (_is_number(self.beta) and 0 < self.beta <= 1):
            raise ValueError(f"beta: a number in (0, 1], got {self.beta!r}")
        if not (_is_number(self.alpha_init) and self.alpha_init > 0):
            raise ValueError(f"alpha_init: a number > 0, got {self.alpha_init!r}")
        for key in ("adapter_dim", "score_dim"):
            if not (_is_int(getattr(self, key)) and getattr(self, key) >= 1):
                raise ValueError(f"{key}: an integer ≥ 1, got {getattr(self, key)!r}")
        if not (_is_number(self.dropout) and 0 <= self.dropout < 1):
            raise ValueError(f"dropout: a number in [0, 1), got {self.dropout!r}")
        if not (
            isinstance(self.rankers, list | tuple)
            and self.rankers
            and all(r in EXTERNAL_RANKERS for r in self.rankers)
            and len(set(self.rankers)) == len(self.rankers)
        ):
            raise ValueError(
                f"rankers: a non-empty list of distinct names from {', '.join(EXTERNAL_RANKERS)}, "
                f"got {self.rankers!r}"
            )
        if self.fusion_heads not in FUSION_HEADS:
            raise ValueError(
                f"fusion_heads: {self.fusion_heads!r} is not one of {', '.join(FUSION_HEADS)}"
            )
        if self.middle_heads is not None:
            _check_heads(self.middle_heads)
        if self.boundary_ids is not None and not (
            isinstance(self.boundary_ids, list | tuple)
            and len(self.boundary_ids) == N_BOUNDARY
            and all(_is_int(i) and i >= 0 for i in self.boundary_ids)
            and len(set(self.boundary_ids)) == N_BOUNDARY
        ):
            raise ValueError(
                f"boundary_ids: {N_BOUNDARY} distinct token ids ≥ 0, got {self.boundary_ids!r}"
            )

    @property
    def needs_middle_heads(self) -> bool:
        return self.fusion and self.fusion_heads == "middle"

    def resolved(self, lora: dict, middle_heads=None, tokenizer=None) -> dict:
        """The values a model is built and saved with. ``middle_heads`` (the base's middle-focused
        heads, from the head-pattern analysis) is needed when fusion runs on them; ``tokenizer``
        (the base's) gets the boundary tokens added, whose ids are stored. Values a saved model's
        config already holds are kept."""
        heads = self.middle_heads
        if heads is None and middle_heads is not None:
            heads = [[int(layer), int(head)] for layer, head in middle_heads]
        if heads is None and self.needs_middle_heads:
            raise ValueError(
                "middle_heads: fusion_heads 'middle' needs the base's middle-focused heads "
                "(middle_heads, from the head-pattern analysis); none were given"
            )
        ids = self.boundary_ids
        if ids is None:
            if tokenizer is None:
                raise ValueError("boundary_ids: needs the base's tokenizer to add the markers to")
            from zoomattn.modeling.boundary import add_boundary_tokens

            ids = add_boundary_tokens(tokenizer)
        values = {
            "estimator": self.estimator,
            "reranker": self.reranker,
            "entropy": self.entropy,
            "fusion": self.fusion,
            "aux_weight": float(self.aux_weight),
            "beta": float(self.beta),
            "alpha_init": float(self.alpha_init),
            "adapter_dim": self.adapter_dim,
            "score_dim": self.score_dim,
            "dropout": float(self.dropout),
            "rankers": list(self.rankers),
            "fusion_heads": self.fusion_heads,
            "middle_heads": None if heads is None else [list(p) for p in heads],
            "boundary_ids": [int(i) for i in ids],
        }
        LkgConfig(**values)  # validates the filled-in values
        return values


def _check_heads(heads) -> None:
    pairs = list(heads) if isinstance(heads, list | tuple) else None
    if pairs is None or not all(
        isinstance(p, list | tuple) and len(p) == 2 and all(_is_int(x) and x >= 0 for x in p)
        for p in pairs
    ):
        raise ValueError(f"middle_heads: [layer, head] pairs of integers ≥ 0, got {heads!r}")
    if len({tuple(p) for p in pairs}) != len(pairs):
        raise ValueError(f"middle_heads: a head is listed twice in {heads!r}")
