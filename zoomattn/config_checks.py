"""What the schema cannot check of a config: its shape before the ``studies:`` mapping, and how
the effective config's values fit together (the scale of the base model and the data, the
method entries, the studies' benchmarks and analyses). Every error names the offending key.
"""

from __future__ import annotations

from zoomattn.evaluation.official import RULES
from zoomattn.methods import METHODS, cells, method_of
from zoomattn.studies import Study, placements


class ConfigError(ValueError):
    pass


# ---- the shape of the raw config -----------------------------------------------------------
OPAMP_KEYS = ("methods", "benchmarks", "attention")  # the OpAmp study's, once at the top level
STUDY_KEYS = ("rectification", "mudaf", "lkg", "leaderboard")  # the other studies' blocks, once


def check_shape(raw: dict) -> None:
    """A config written before every study's settings moved under ``studies:`` (at the top level
    or under a preset) fails naming the first old key and where it moves."""
    presets = raw.get("presets") if isinstance(raw.get("presets"), dict) else {}
    levels = [("", raw)] + [(f"presets.{p}.", v) for p, v in presets.items() if isinstance(v, dict)]
    for prefix, node in levels:
        for key in (*OPAMP_KEYS, *STUDY_KEYS):
            if key not in node:
                continue
            opamp = f"`methods`, `benchmarks` and `attention` to `{prefix}studies.opamp`"
            move = opamp if key in OPAMP_KEYS else f"`{key}:` to `{prefix}studies.{key}:`"
            raise ConfigError(
                f"config.{prefix}{key}: study settings now live under `studies:` — move {move}, "
                f"and each other study's block to `{prefix}studies.<study>:` (see config.yaml)"
            )


# ---- the effective config ------------------------------------------------------------------
ARCHITECTURE_KEYS = ("hidden", "layers", "heads", "kv_heads", "intermediate", "max_positions")

# the analysis a method's cells read (rectify: only with xi auto; mudaf: only with heads),
# and the study whose block configures it in the shipped config
NEEDS = {"rectify": "score_margin", "mudaf": "retrieval_heads", "lkg": "head_patterns"}
HOMES = {"score_margin": "rectification", "retrieval_heads": "mudaf", "head_patterns": "lkg"}


def is_synthetic(cfg: dict) -> bool:
    """The tiny/smoke scale: a world, a tokenizer and a base model the workflow makes itself."""
    return cfg["base_model"]["source"] == "pretrain"


def check_config(cfg: dict, where: str) -> None:
    """The effective config's values fit together (``where``: the preset's key)."""
    _check_scale(cfg, where)
    studies = []
    for name, block in cfg["studies"].items():
        if block:
            try:
                studies.append(Study.from_config(cfg, name))
            except ValueError as exc:
                raise ConfigError(f"config.studies.{name}: {exc}") from exc
    taken: dict[str, str] = {}
    for study in studies:
        _check_study(cfg, study, taken)
    analyses = {a for study in studies for a in study.analyses}
    for study in studies:
        _check_needs(study, analyses)
        _check_processes(cfg, study, where)


def _check_methods(methods: dict, where: str) -> None:
    for name, values in methods.items():
        method = method_of(name, values)
        if method not in METHODS:
            raise ConfigError(f"{where}.{name}: no method {method!r} (known: {', '.join(METHODS)})")
        try:
            for _, cell_values in cells({name: values}).values():
                METHODS[method].make_config(cell_values)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}.{name}: {exc}") from exc


def _check_study(cfg: dict, study: Study, taken: dict[str, str]) -> None:
    """A study's entries, benchmarks (each name one eval set across the grid), training data and
    analyses fit its block and the scale of the base model."""
    block, where = study.block, f"config.studies.{study.name}"
    _check_methods({e: entry.values for e, entry in study.entries.items()}, f"{where}.methods")
    for name, entry in study.entries.items():
        if not set(entry.placements) <= set(placements(block)):
            raise ConfigError(
                f"{where}.methods.{name}.placements: {entry.placements} is not a subset of the "
                f"study's placements {placements(block)}"
            )
    synthetic = is_synthetic(cfg)
    for name, spec in block["benchmarks"].items():
        if name in taken:
            raise ConfigError(
                f"{where}.benchmarks.{name}: the name is already {taken[name]}; "
                "each benchmark name names one eval set"
            )
        taken[name] = f"a benchmark of the {study.name} study"
        _check_scoring(spec, f"{where}.benchmarks.{name}")
        if "source" in spec and synthetic:
            raise ConfigError(
                f"{where}.benchmarks.{name}: a real dataset needs a hub or local base model "
                "(base_model.source is pretrain)"
            )
        if "source" not in spec and not synthetic:
            raise ConfigError(
                f"{where}.benchmarks.{name}: a synthetic family needs base_model.source pretrain "
                "(the world's tokenizer)"
            )
    per_dataset = study.datasets.scheme == "per_dataset"  # its own check, below
    if not per_dataset and "train" in block and ("n_train" in block["train"]) != synthetic:
        raise ConfigError(
            f"{where}.train: a pretrained-here base trains on n_train/mix (the synthetic world), "
            "a hub base on dataset builders"
        )
    own_sets = not study.kind.shared_data and "noise_ratios" not in block  # distractor sets
    if synthetic and own_sets and "distractors" not in block:
        raise ConfigError(
            f"{where}.distractors: the synthetic world's sets need a number of hard distractors"
        )
    if "base_model" in block and synthetic:
        raise ConfigError(f"{where}.base_model: only hub or local base models differ per study")
    if not synthetic:
        named = [(f"benchmarks.{b}.source", s["source"]) for b, s in block["benchmarks"].items()]
        named += [(f"train.{b}", b) for b in block.get("train", {})]
        _check_builders([(f"studies.{study.name}.{key}", name) for key, name in named])
    if per_dataset:
        _check_per_dataset(study, synthetic, where)
    for key in ("attention", "retrieval_heads", "head_patterns", "robustness"):
        benchmark = (block.get(key) or {}).get("benchmark")  # masking uses retrieval_heads'
        if benchmark is not None and benchmark not in block["benchmarks"]:
            raise ConfigError(
                f"{where}.{key}.benchmark: {benchmark!r} is not one of the study's "
                f"benchmarks ({', '.join(block['benchmarks'])})"
            )
    if block.get("robustness"):
        _check_robustness(cfg, study, where)
    if study.kind.cross:
        _check_cross(study, where)


def _check_scoring(spec: dict, where: str) -> None:
    """A benchmark's published rule is a registered one, and its decoding is greedy (one pass)
    or sampled (one pass per seed)."""
    rule = spec.get("published_rule")
    if rule is not None and rule not in RULES:
        raise ConfigError(
            f"{where}.published_rule: no published rule {rule!r} (known: {', '.join(RULES)})"
        )
    decoding = spec.get("decoding")
    if decoding is None:
        return
    temperature, seeds = decoding["temperature"], decoding.get("seeds")
    if temperature > 0 and not seeds:
        raise ConfigError(
            f"{where}.decoding.seeds: sampled decoding (temperature {temperature}) needs seeds, "
            "one generation pass each"
        )
    if temperature == 0 and seeds is not None and len(seeds) != 1:
        raise ConfigError(
            f"{where}.decoding.seeds: greedy decoding (temperature 0) is one pass: give one seed "
            f"or none, not {len(seeds)}"
        )


def _check_per_dataset(study: Study, synthetic: bool, where: str) -> None:
    """Each per_dataset training set: named by a benchmark (else its models are evaluated on
    nothing), synthetic (n_train, mix) at the synthetic scale, a builder's options at the
    paper's, and a positive whole number of ``steps`` when it sets them."""
    served = set(study.datasets.served_by.values())
    for name, entry in study.block["train"].items():
        if name not in served:
            raise ConfigError(
                f"{where}.train.{name}: no benchmark names this training set "
                "(benchmarks.<name>.train): per_dataset would train models nothing evaluates"
            )
        if ("n_train" in entry) != synthetic:
            raise ConfigError(
                f"{where}.train.{name}: a pretrained-here base trains on n_train/mix (the "
                "synthetic world), a hub base on dataset builders"
            )
        if synthetic and "mix" not in entry:
            raise ConfigError(f"{where}.train.{name}: a synthetic training set needs a mix")
        steps = entry.get("steps", 1)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ConfigError(f"{where}.train.{name}.steps: a positive integer, got {steps!r}")


def _check_needs(study: Study, analyses: set[str]) -> None:
    """A cell whose method reads an analysis of its base (MuDAF's heads from the retrieval-head
    scores, LKG-RALM's fused heads from the head patterns, ξ auto from the score margin) needs a
    study in the grid that runs that analysis."""
    for entry, values in ((e, x.values) for e, x in study.entries.items()):
        for run, (method, cell_values) in cells({entry: values}).items():
            need = NEEDS.get(method)
            if method == "mudaf" and not cell_values.get("heads"):
                need = None  # Vanilla SFT: no heads to select
            if method == "rectify" and cell_values.get("xi") != "auto":
                need = None
            if need and need not in analyses:
                raise ConfigError(
                    f"config.studies.{study.name}.methods.{entry}: {run} needs the {HOMES[need]} "
                    f"study in the grid, which runs the {need} analysis "
                    f"(config.studies.{HOMES[need]} is null)"
                )


def _check_cross(study: Study, where: str) -> None:
    """A cross-method comparison: one setting per entry, one training budget, a baseline entry."""
    if study.block["baseline"] not in study.entries:
        raise ConfigError(
            f"{where}.baseline: {study.block['baseline']!r} is not an entry of "
            f"{where}.methods ({', '.join(study.entries)})"
        )
    for name, entry in study.entries.items():
        if set(entry.finetune) - {"lr"}:
            raise ConfigError(
                f"{where}.methods.{name}.finetune: only lr may differ per entry; the budget "
                f"({', '.join(sorted(set(entry.finetune) - {'lr'}))}) is the study's, one for all"
            )
        runs = cells({name: entry.values})
        if len(runs) > 1:
            raise ConfigError(
                f"{where}.methods.{name}: a leaderboard entry is one setting, not a sweep "
                f"({len(runs)} cells)"
            )


def _check_robustness(cfg: dict, study: Study, where: str) -> None:
    rob = study.block["robustness"]
    unknown = [m for m in rob["models"] if m not in study.entries]
    if unknown:
        raise ConfigError(
            f"{where}.robustness.models: {unknown[0]!r} is not an entry of {where}.methods "
            f"({', '.join(study.entries)})"
        )
    spec = study.benchmarks[rob["benchmark"]]
    if not is_synthetic(cfg) and not spec["source"].startswith("lkg_"):
        raise ConfigError(
            f"{where}.robustness.benchmark: {rob['benchmark']!r} reads {spec['source']!r}; the "
            "passage-count and irrelevant-share sets need an lkg_* builder (retrieved passages)"
        )
    if not rob.get("passages") and not (rob.get("irrelevant") or {}).get("shares"):
        raise ConfigError(f"{where}.robustness: give passages, irrelevant.shares or both")


def _check_builders(named: list[tuple[str, str]]) -> None:
    """Each (config key, builder name) names a registered dataset builder."""
    from zoomattn.data.sources import BUILDERS

    for key, name in named:
        if name not in BUILDERS:
            raise ConfigError(
                f"config.{key}: no dataset builder {name!r} (known: {', '.join(sorted(BUILDERS))})"
            )


def _check_scale(cfg: dict, where: str) -> None:
    """A pretrained-here base reads the synthetic world; a hub base reads real datasets."""
    m = cfg["base_model"]
    if is_synthetic(cfg):
        missing = [k for k in ARCHITECTURE_KEYS if k not in m]
        if missing:
            raise ConfigError(f"{where}.base_model: source pretrain needs {', '.join(missing)}")
        if "pretrain" not in cfg:
            raise ConfigError(f"{where}: base_model.source is pretrain but there is no pretrain:")
        if "train" in cfg["data"]:
            raise ConfigError(f"{where}.data.train: real datasets need a hub or local base model")
    else:
        if "train" not in cfg["data"]:
            raise ConfigError(f"{where}.data: a hub base model trains on real datasets: data.train")
        prefix = where[len("config.") :]
        _check_builders([(f"{prefix}.data.train.{b}", b) for b in cfg["data"]["train"]])
    if {"heads", "kv_heads", "hidden"} <= set(m) and (
        m["heads"] % m["kv_heads"] or m["hidden"] % m["heads"]
    ):
        raise ConfigError(
            f"{where}.base_model: heads must divide hidden and kv_heads must divide heads"
        )


def _check_processes(cfg: dict, study: Study, where: str) -> None:
    """Each fine-tune's batch splits into whole micro-batches for each of its processes, and a
    process uses one GPU (torchrun gives it the card of its LOCAL_RANK): caught here, before any
    job runs, rather than by the fine-tune itself (zoomattn/training/finetune.py)."""
    for model in study.models.values():
        ft = {**study.finetune, **model.finetune}
        n = ft.get("processes", 1)
        keys = f"{where}, study {study.name} (model {model.id}): finetune"
        if not isinstance(n, int) or n < 1:
            raise ConfigError(f"{keys}.processes: {n!r} is not a whole number >= 1")
        micro = ft.get("micro_batch_size") or ft["batch_size"] // n
        if micro == 0 or ft["batch_size"] % (micro * n):
            raise ConfigError(
                f"{keys}.batch_size {ft['batch_size']} is not a whole number of micro-batches of "
                f"{micro} (finetune.micro_batch_size) for each of {n} processes "
                "(finetune.processes): batch_size % (micro_batch_size x processes) must be 0"
            )
        full = METHODS[model.method].tuning(METHODS[model.method].make_config(model.values))
        if n > 1 and full == "full" and ft.get("optimizer", "adamw") != "adamw":
            raise ConfigError(
                f"{keys}.optimizer: {ft['optimizer']!r}, but a full fine-tune over {n} processes "
                "shards its own AdamW with fp32 states (docs/distributed.md); set it to adamw"
            )
        gpus = cfg["resources"]["finetune"].get("gpus", 0)
        if n > 1 and gpus > 1:
            raise ConfigError(
                f"{where}.resources.finetune.gpus: {gpus} GPUs "
                f"per process, but each of the {n} processes of {keys}.processes uses one GPU; "
                "set it to 1"
            )
