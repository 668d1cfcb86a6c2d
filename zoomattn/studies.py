"""A study: one paper's part of the grid, built from its block under ``studies:`` in the config.

Every study has method entries (expanded into cells, each trained once per seed), benchmarks and
their splits, a base model, a training set, the analyses its block configures and a report. What
differs between studies is data: the block, and what the study's code does with it (``KINDS``).
OpAmp trains on the shared training set (``data/train``, built from the preset's ``data``) with
the preset's ``finetune``, is evaluated on shared noise sets, and names its models without a
prefix; every other study trains on a set of its own per query placement
(``data/train-<study>/<placement>``) with its ``finetune`` over the preset's.

Model ids name directories under ``models/`` and ``eval/``: ``<run>_s<seed>`` for the study on
the shared data, else ``<study>/<run>-<placement>_s<seed>`` when the study has a query-placement
axis (rectification) and ``<study>/<run>_s<seed>`` when not. A study starts from ``base``, or from
``base-<study>`` when its block names a ``base_model`` of its own.

A study's block may set ``train_scheme``: ``pooled`` (the default) trains each cell once on every
training set of its ``train:`` block together; ``per_dataset`` trains it once per training set, for
that set's own ``steps`` when it names some, and evaluates each such model only on the benchmarks
whose ``train:`` names its set (``<study>/<run>-<placement>-<set>_s<seed>``, data under
``train-<study>/<placement>-<set>``). A benchmark with ``train: null`` is evaluated on the base
only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from zoomattn.methods import cells, method_of
from zoomattn.splits import Split


@dataclass(frozen=True)
class Kind:
    """What a study's code does with its block, whatever the config says."""

    # trains on the shared training set, is evaluated on the shared noise sets, its model ids and
    # job specs carry no study name
    shared_data: bool = False
    # what its report reads, by kind (zoomattn/layout.py: Layout.report_inputs)
    report: tuple[str, ...] = ("evals",)
    # compares across the grid: its report reads every model's evaluations and analyses, and the
    # other studies' per-model analyses that are not needed for it (MuDAF's head masking) skip it
    cross: bool = False


KINDS = {  # in report order
    "opamp": Kind(shared_data=True, report=("evals", "attention", "base_metrics")),
    "rectification": Kind(report=("evals", "margin")),
    "mudaf": Kind(report=("evals", "heads", "masking", "selections")),
    "lkg": Kind(report=("evals", "patterns", "train_metrics")),
    "leaderboard": Kind(
        report=("evals", "predictions", "attention", "heads", "patterns"), cross=True
    ),
}

# the block key that configures analyses -> the analyses (each a rule of its own)
ANALYSES = {
    "attention": ("attention",),  # golden attention share and answer-token gap
    "margin_examples": ("score_margin",),  # the base's pre-softmax score margin (xi auto)
    # every head's retrieval score (on every model), and the heads a MuDAF cell trains
    "retrieval_heads": ("retrieval_heads", "selected_heads"),
    "masking": ("head_masking",),  # top-k retrieval heads masked vs random ones
    "head_patterns": ("head_patterns",),  # every head edge / uniform / middle-focused
}


@dataclass(frozen=True)
class Model:
    """A fine-tuned model of the grid: one cell of a study at one placement and seed."""

    id: str
    study: str
    base: str  # id of the base model it starts from
    method: str
    values: dict = field(default_factory=dict)
    run: str | None = None  # the cell's name
    seed: int | None = None
    placement: str | None = None  # the query placement of its data (None: the shared data)
    entry: str | None = None  # the study's ``methods:`` entry the cell comes from
    finetune: dict = field(default_factory=dict)  # the entry's own fine-tuning settings (lr)
    train_data: str = "train"  # its training set's directory under ``data/``
    dataset: str | None = None  # per_dataset: the one training set it learns (None: all of them)


@dataclass(frozen=True)
class Entry:
    """A ``methods:`` entry: its method values, the placements it trains at, its own finetune."""

    values: dict
    placements: list
    finetune: dict


def placements(block: dict) -> list[str]:
    """A study's query placements (``vanilla`` alone when the block has no axis)."""
    return block.get("placements", ["vanilla"])


def block_splits(block: dict) -> dict[str, list[Split]]:
    """Benchmark -> the splits every model of a study is evaluated on: each benchmark's own
    ``noise_ratios`` (OpAmp), else the block's noise axis (the leaderboard), else its
    placements."""
    out = {}
    for name, spec in block["benchmarks"].items():
        ratios = spec.get("noise_ratios", block.get("noise_ratios"))
        if ratios is not None:
            out[name] = [Split(noise_ratio=r) for r in ratios]
        else:
            out[name] = [Split(placement=p) for p in placements(block)]
    return out


def robustness_splits(block: dict) -> dict[str, list[Split]]:
    """LKG-RALM's robustness sets (Fig. 6) of a block: ``n<k>``, k retrieved passages with the
    golden ones among them, and ``irr<share>``, that share of ``irrelevant.passages`` passages
    irrelevant; evaluated for the entries ``robustness.models`` lists."""
    rob = block.get("robustness")
    if not rob:
        return {}
    irrelevant = rob.get("irrelevant") or {}
    splits = [Split(passages=k) for k in rob.get("passages", [])]
    splits += [
        Split(passages=irrelevant["passages"], irrelevant=s) for s in irrelevant.get("shares", [])
    ]
    return {rob["benchmark"]: splits}


SCHEMES = ("pooled", "per_dataset")
BUDGET_KEYS = ("steps",)  # what a per_dataset training set may set of its fine-tune


@dataclass(frozen=True)
class Datasets:
    """How a block trains: its scheme, each training set's own fine-tuning budget (per_dataset:
    the sets that train models of their own) and the training set each benchmark names."""

    scheme: str = "pooled"
    budgets: dict = field(default_factory=dict)  # set -> {"steps": n} or {} (per_dataset only)
    served_by: dict = field(default_factory=dict)  # benchmark -> set, None: the base only

    @property
    def names(self) -> list[str | None]:
        """The training sets each cell trains once on: None alone for the pooled scheme."""
        return list(self.budgets) if self.scheme == "per_dataset" else [None]


def datasets(block: dict) -> Datasets:
    """A block's ``train_scheme`` and the training set its benchmarks' ``train:`` name; a name
    that is not one of ``train:``'s sets is an error under either scheme (``pooled`` trains one
    model on them all, whatever a benchmark names)."""
    scheme = block.get("train_scheme", "pooled")
    if scheme not in SCHEMES:
        raise ValueError(f"train_scheme: {scheme!r} is not one of {', '.join(SCHEMES)}")
    train = block.get("train") or {}
    served_by = {b: spec.get("train") for b, spec in block["benchmarks"].items() if "train" in spec}
    if scheme == "pooled":
        sets = list(train) if "n_train" not in train else []
    else:
        sets = _per_dataset_sets(block, train, served_by)
    for benchmark, name in served_by.items():
        if name is not None and name not in sets:
            raise ValueError(
                f"benchmarks.{benchmark}.train: {name!r} is not one of the study's training sets "
                f"(train: {', '.join(sets) or 'none named'})"
            )
    if scheme == "pooled":
        return Datasets(scheme, {}, served_by)
    budgets = {s: {k: v for k, v in train[s].items() if k in BUDGET_KEYS} for s in sets}
    return Datasets(scheme, budgets, served_by)


def without_budget(entry: dict) -> dict:
    return {k: v for k, v in entry.items() if k not in BUDGET_KEYS}


def _per_dataset_sets(block: dict, train: dict, served_by: dict) -> list[str]:
    if "n_train" in train or not all(isinstance(v, dict) for v in train.values()):
        raise ValueError(
            "train: per_dataset needs one entry per training set (set name -> its settings), "
            f"not {train!r}"
        )
    missing = [b for b in block["benchmarks"] if b not in served_by]
    if missing:
        raise ValueError(
            f"benchmarks.{missing[0]}.train: per_dataset needs every benchmark to name the "
            "training set of its models (null: evaluated on the base only)"
        )
    return list(train)


def total_heads(base_model: dict) -> int | None:
    """Query heads of a base the workflow pretrains (None for a hub model: known once loaded)."""
    m = base_model
    return m["layers"] * m["heads"] if m.get("source") == "pretrain" else None


def _clip_heads(values: dict, total: int | None) -> dict:
    """MuDAF head counts above the model's head count clipped to it, a count that clipping
    repeats dropped: the grid trains each distinct selection once."""
    heads = values.get("heads")
    if total and isinstance(heads, list):
        return {**values, "heads": list(dict.fromkeys(min(n, total) for n in heads))}
    if total and isinstance(heads, int):
        return {**values, "heads": min(heads, total)}
    return values


def entries(block: dict, base_model: dict) -> dict[str, Entry]:
    """A block's ``methods:`` entries, with the placements each trains at (its own
    ``placements``, else the block's) and its ``finetune`` (a full fine-tune's smaller lr)."""
    out = {}
    for name, values in block["methods"].items():
        values = dict(values or {})
        entry_placements = values.pop("placements", placements(block))
        entry_finetune = values.pop("finetune", {})
        if method_of(name, values) == "mudaf":
            values = _clip_heads(values, total_heads(base_model))
        out[name] = Entry(values, entry_placements, entry_finetune)
    return out


@dataclass(frozen=True)
class Study:
    name: str
    block: dict  # its config block (after the preset)
    kind: Kind
    base: str  # the id of the base model it starts from
    base_model: dict  # that base's config
    seeds: list[int]
    finetune: dict  # its fine-tuning settings: the preset's, the block's over them
    entries: dict[str, Entry]
    splits: dict[str, list[Split]]  # benchmark -> the splits every model is evaluated on
    robustness: dict[str, list[Split]]  # benchmark -> more splits, for the listed entries only
    datasets: Datasets = field(default_factory=Datasets)  # pooled, or one model per training set

    @classmethod
    def from_config(cls, cfg: dict, name: str) -> Study:
        block = cfg["studies"][name]
        base_model = block.get("base_model", cfg["base_model"])
        return cls(
            name=name,
            block=block,
            kind=KINDS.get(name, Kind()),
            base=f"base-{name}" if "base_model" in block else "base",
            base_model=base_model,
            seeds=block.get("seeds") or cfg["seeds"],
            finetune={**cfg["finetune"], **block.get("finetune", {})},
            entries=entries(block, base_model),
            splits=block_splits(block),
            robustness=robustness_splits(block),
            datasets=datasets(block) if not KINDS.get(name, Kind()).shared_data else Datasets(),
        )

    @property
    def benchmarks(self) -> dict[str, dict]:
        return self.block["benchmarks"]

    @property
    def analyses(self) -> list[str]:
        """The analyses its block configures (each runs as a rule of its own)."""
        return [a for key, analyses in ANALYSES.items() if key in self.block for a in analyses]

    def train_set(self, placement: str | None, dataset: str | None = None) -> str:
        """Its training set's directory under ``data/`` (at a query placement; per_dataset: of
        one of its sets)."""
        if self.kind.shared_data:
            return "train"
        return f"train-{self.name}/{placement}" + (f"-{dataset}" if dataset else "")

    def train_block(self, dataset: str | None) -> dict:
        """What a training set's builder reads of ``train:``: the whole block (pooled), or one
        set's entry without its budget (per_dataset; real data: keyed by its builder)."""
        train = self.block["train"]
        if "n_train" in train:  # synthetic, pooled: one n_train and mix
            return train
        parts = {name: without_budget(entry) for name, entry in train.items()}
        if dataset is None:  # pooled: a set's ``steps`` belong to per_dataset only
            return parts
        entry = parts[dataset]
        return entry if "n_train" in entry else {dataset: entry}

    def train_placements(self, entry: Entry) -> list:
        """The placements an entry trains at: None alone on the shared data (no placement)."""
        return [None] if self.kind.shared_data else entry.placements

    def model_id(self, run: str, placement: str | None, seed: int, dataset=None) -> str:
        name = f"{run}-{placement}" if "placements" in self.block else run
        name += f"-{dataset}" if dataset else ""
        return f"{name}_s{seed}" if self.kind.shared_data else f"{self.name}/{name}_s{seed}"

    @cached_property
    def models(self) -> dict[str, Model]:
        """Model id -> the model, every cell at every placement and seed (per_dataset: and
        training set, for that set's budget, the entry's own finetune over it)."""
        out = {}
        for entry_name, entry in self.entries.items():
            for run, (method, values) in cells({entry_name: entry.values}).items():
                for placement in self.train_placements(entry):
                    for dataset in self.datasets.names:
                        budget = self.datasets.budgets.get(dataset, {})
                        for seed in self.seeds:
                            mid = self.model_id(run, placement, seed, dataset)
                            out[mid] = Model(
                                id=mid,
                                study=self.name,
                                base=self.base,
                                method=method,
                                values=values,
                                run=run,
                                seed=seed,
                                placement=placement,
                                entry=entry_name,
                                finetune={**budget, **entry.finetune},
                                train_data=self.train_set(placement, dataset),
                                dataset=dataset,
                            )
        return out

    def base_evaluations(self) -> list[tuple[str, str, str]]:
        """(base id, benchmark, split) of its base: every split of every benchmark."""
        return [(self.base, b, str(s)) for b, splits in self.splits.items() for s in splits]

    def evaluations(self, model: Model) -> list[tuple[str, str, str]]:
        """(model id, benchmark, split) of one of its models: the splits at its placement (of the
        benchmarks its training set serves, per_dataset), and the robustness sets when its entry
        is listed for them."""
        out = [
            (model.id, b, str(s))
            for b, splits in self.splits.items()
            if model.dataset in (None, self.datasets.served_by.get(b))
            for s in splits
            if model.placement in (None, s.placement)
        ]
        if model.entry in (self.block.get("robustness") or {}).get("models", []):
            out += [(model.id, b, str(s)) for b, splits in self.robustness.items() for s in splits]
        return out

    def analysis_set(self, analysis: str) -> tuple[str, Split] | None:
        """(benchmark, split) of the eval set one of its analyses runs on: the golden share at
        its noise ratio; the score margin on the first benchmark at the first placement; the
        head analyses on their benchmark's vanilla set (head masking: the retrieval heads').
        None for the head selection, which reads the base's scores."""
        if analysis == "selected_heads":
            return None
        if analysis == "attention":
            att = self.block["attention"]
            return att["benchmark"], Split(noise_ratio=att["noise_ratio"])
        if analysis == "score_margin":
            return next(iter(self.benchmarks)), Split(placement=placements(self.block)[0])
        key = "retrieval_heads" if analysis == "head_masking" else analysis
        return self.block[key]["benchmark"], Split()

    def split(self, benchmark: str, name: str) -> Split:
        """The split of one of its eval sets, by name (an analysis may read a set of its own)."""
        sets = [
            (b, s) for b, splits in (*self.splits.items(), *self.robustness.items()) for s in splits
        ]
        sets += filter(None, map(self.analysis_set, self.analyses))
        for b, s in sets:
            if (b, str(s)) == (benchmark, name):
                return s
        raise KeyError(f"study {self.name} has no eval set {benchmark}/{name}")

    def clipped_heads(self) -> dict[int, int]:
        """MuDAF head counts of its block above the base's head count -> the count trained."""
        total = total_heads(self.base_model)
        if not total:
            return {}
        asked = []
        for values in self.block["methods"].values():
            heads = (values or {}).get("heads", [])
            asked += heads if isinstance(heads, list) else [heads]
        return {n: total for n in asked if n > total}
