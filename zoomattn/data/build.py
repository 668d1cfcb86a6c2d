"""Building the data of one preset: the world and tokenizer, the training mix, each eval set.

Each stage writes one directory: the split stored with ``datasets`` (Arrow, under ``arrow/``),
the same records as ``records.jsonl``, and ``manifest.json`` with the count, the content hash and
the settings that produced it. Eval sets are seeded from (world seed, benchmark, noise ratio), so
adding a benchmark leaves every other set, and every model, untouched.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from datasets import Dataset, load_from_disk

from zoomattn.data.records import arrow_features, check_record
from zoomattn.data.tasks import (
    benchmark_examples,
    distractor_examples,
    distractor_mix,
    noisy_examples,
    noisy_mix,
    retrieved_examples,
    training_mix,
)
from zoomattn.data.tokenizer import save_tokenizer
from zoomattn.data.world import World
from zoomattn.io import atomic_dir, sha256_files, write_json


def derived_seed(*parts) -> int:
    return int(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:8], 16)


def build_world(cfg: dict, out_dir: Path) -> dict:
    d = cfg["data"]
    world = World.generate(cfg["world_seed"], d["n_entities"], d["n_famous"])
    with atomic_dir(out_dir) as tmp:
        world.save(tmp / "world.json")
        tok = save_tokenizer(world.words(), tmp / "tokenizer")
        manifest = {
            "world_seed": cfg["world_seed"],
            "entities": len(world.entities),
            "famous": len(world.famous),
            "vocab_size": len(tok),
            "sha256": sha256_files([tmp / "world.json"]),
        }
        write_json(tmp / "manifest.json", manifest)
    return manifest


def write_split(records: list[dict], out_dir: Path, settings: dict) -> dict:
    """Save a split (after checking every record against the schema) with its manifest."""
    for i, rec in enumerate(records):
        check_record(rec, f"{out_dir.name} record {i} (id {rec.get('id')!r})")
    with atomic_dir(out_dir) as tmp:
        Dataset.from_list(records, features=arrow_features()).save_to_disk(tmp / "arrow")
        jsonl = tmp / "records.jsonl"
        jsonl.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
        manifest = {"examples": len(records), "sha256": sha256_files([jsonl]), **settings}
        write_json(tmp / "manifest.json", manifest)
    return manifest


def build_train(cfg: dict, world_dir: Path, out_dir: Path) -> dict:
    d = cfg["data"]
    world = World.load(Path(world_dir) / "world.json")
    longest = max((b.get("chunks", 2) for b in cfg["benchmarks"].values()), default=2)
    seed = derived_seed(cfg["world_seed"], "train")
    records = training_mix(world, d["train_mix"], d["n_train"], d["max_noise"], longest, seed)
    return write_split(
        records,
        out_dir,
        {
            "train_mix": d["train_mix"],
            "max_noise": d["max_noise"],
            "long_chunks": longest,
            "seed": seed,
        },
    )


def build_eval(
    cfg: dict, world_dir: Path, benchmark: str, noise_ratio: float, out_dir: Path
) -> dict:
    spec = cfg["benchmarks"][benchmark]
    world = World.load(Path(world_dir) / "world.json")
    seed = derived_seed(cfg["world_seed"], benchmark, noise_ratio)
    records = benchmark_examples(world, benchmark, spec, noise_ratio, cfg["data"]["n_eval"], seed)
    return write_split(
        records,
        out_dir,
        {"benchmark": benchmark, "spec": spec, "noise_ratio": noise_ratio, "seed": seed},
    )


def build_real_train(cfg: dict, out_dir: Path) -> dict:
    """The training set from real datasets: each configured builder's records, then shuffled."""
    from zoomattn.data.sources import build_source

    records = []
    for name, options in cfg["data"]["train"].items():
        records += build_source(name, options, derived_seed(cfg["world_seed"], "train", name))
    random.Random(derived_seed(cfg["world_seed"], "train")).shuffle(records)
    return write_split(records, out_dir, {"train": cfg["data"]["train"]})


def build_real_eval(cfg: dict, benchmark: str, noise_ratio: float, out_dir: Path) -> dict:
    """One real benchmark at one noise ratio, at most data.n_eval examples."""
    from zoomattn.data.sources import build_source

    spec = cfg["benchmarks"][benchmark]
    options = {**spec.get("options", {}), "limit": cfg["data"]["n_eval"]}
    if noise_ratio:  # builders without noise injection take no noise_ratio option
        options["noise_ratio"] = noise_ratio
    seed = derived_seed(cfg["world_seed"], benchmark, noise_ratio)
    records = build_source(spec["source"], options, seed)
    return write_split(
        records,
        out_dir,
        {"benchmark": benchmark, "spec": spec, "noise_ratio": noise_ratio, "seed": seed},
    )


def build_distractor_set(spec: dict, world_dir: Path | None, out_dir: Path) -> dict:
    """A set of a study with data of its own (rectification, docs/papers.md §2; MuDAF, §3;
    LKG-RALM, §4): golden documents plus ``distractors`` hard ones (synthetic; real builders take
    their own options), the question placed as ``placement`` says. The training set when the spec
    names no benchmark.
    The examples are seeded by study and set, not by placement: both layouts hold the same ones.

    An eval spec with ``passages`` (and optionally ``irrelevant``, a share, default 0) is one of
    LKG-RALM's robustness sets (Fig. 6): that many retrieved passages, that share of them replaced
    by irrelevant ones; each (passages, irrelevant) split has its own seed."""
    placement, n_distractors = spec["placement"], spec.get("distractors")
    name = spec.get("benchmark")
    seed = derived_seed(spec["world_seed"], spec.get("study", "rectification"), name or "train")
    retrieval = _retrieval_settings(spec)
    if retrieval:
        seed = derived_seed(seed, retrieval["passages"], retrieval["irrelevant"])
    if "noise_ratio" in spec:
        seed = derived_seed(seed, spec["noise_ratio"])
    if world_dir is not None:
        world = World.load(Path(world_dir) / "world.json")
        if name is None and "max_noise" in spec["train"]:  # the leaderboard's: a noise range
            t = spec["train"]
            records = noisy_mix(world, t["mix"], t["n_train"], t["max_noise"], seed)
        elif name is not None and "noise_ratio" in spec:  # a leaderboard set: one noise ratio
            family, n = spec["spec"]["family"], spec["data"]["n_eval"]
            records = noisy_examples(world, name, family, n, spec["noise_ratio"], seed)
        elif name is None:
            t = spec["train"]
            records = distractor_mix(world, t["mix"], t["n_train"], n_distractors, placement, seed)
        else:
            family, n = spec["spec"]["family"], spec["data"]["n_eval"]
            if retrieval:
                passages, share = retrieval["passages"], retrieval["irrelevant"]
                records = retrieved_examples(world, name, family, n, passages, share, seed)
                for rec in records:
                    rec["placement"] = placement
            else:
                records = distractor_examples(
                    world, name, family, n, n_distractors, placement, seed
                )
    else:
        from zoomattn.data.sources import build_source

        parts = spec["train"] if name is None else {spec["spec"]["source"]: spec["spec"]}
        records = []
        for source, options in parts.items():
            options = dict(options.get("options", {}) if name else options)
            if retrieval:  # an lkg_* builder (checked above): its own passage options
                options.update(
                    passages=retrieval["passages"], irrelevant_share=retrieval["irrelevant"]
                )
            elif n_distractors is not None:  # a study whose builders pick their own negatives
                options.setdefault("distractors", n_distractors)
            if name:
                options.setdefault("limit", spec["data"]["n_eval"])
            records += build_source(source, options, derived_seed(seed, source))
        random.Random(seed).shuffle(records)
        for rec in records:
            rec["placement"] = placement
    settings = {"placement": placement, "distractors": n_distractors, "seed": seed, **retrieval}
    if "noise_ratio" in spec:
        settings["noise_ratio"] = spec["noise_ratio"]
    return write_split(records, out_dir, {**settings, "benchmark": name} if name else settings)


def _retrieval_settings(spec: dict) -> dict:
    """{"passages", "irrelevant"} of a robustness eval spec, {} for any other spec. Real data
    needs an LKG-RALM builder (``lkg_*``): only those read a ranked retrieval list to cut."""
    if "passages" not in spec:
        return {}
    name = spec.get("benchmark")
    if name is None:
        raise ValueError("passages: a setting of eval sets only, not of a training set")
    source = spec["spec"].get("source")
    if source is not None and not source.startswith("lkg_"):
        raise ValueError(
            f"benchmarks.{name}: 'passages' needs an LKG-RALM builder (lkg_*), not {source!r}"
        )
    passages, share = spec["passages"], spec.get("irrelevant", 0.0)
    if isinstance(passages, bool) or not isinstance(passages, int) or passages < 0:
        raise ValueError(f"benchmarks.{name}: passages must be an integer >= 0, got {passages!r}")
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= 1:
        raise ValueError(f"benchmarks.{name}: irrelevant must be a share in [0, 1], got {share!r}")
    return {"passages": passages, "irrelevant": float(share)}


def load_split(split_dir: Path) -> list[dict]:
    path = Path(split_dir) / "arrow"
    if not (Path(split_dir) / "manifest.json").exists():
        raise FileNotFoundError(f"{split_dir}: no complete split here (manifest.json missing)")
    return load_from_disk(str(path)).to_list()
