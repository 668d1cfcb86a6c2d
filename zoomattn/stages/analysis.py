"""Stages that run a trained model: evaluation and the attention analyses."""

from __future__ import annotations

import logging
from pathlib import Path

from zoomattn.io import read_json, write_json
from zoomattn.stages.common import attention_kernels, load_model
from zoomattn.tracking import job_run

log = logging.getLogger("zoomattn")
MAX_TAG_CHARS = 8000  # the longest tag value MLflow stores
CI_KEYS = ("score", "ci_low", "ci_high")


def evaluate(
    spec: dict,
    model_dir: Path,
    base_dir: Path,
    split_dir: Path,
    out: Path,
    predictions: Path,
    threads: int,
    results: Path,
) -> None:
    import json

    from zoomattn.data.build import load_split
    from zoomattn.evaluation.generate import evaluate_records

    name = f"{spec['model']}/{spec['benchmark']}@{spec['split']}"
    with job_run(spec, "evaluate", name, results) as run, attention_kernels(spec, run):
        model, tok = load_model(spec, model_dir, base_dir, threads)
        ev = spec["evaluation"]
        records = load_split(split_dir)
        metrics, rows = evaluate_records(
            model,
            tok,
            records,
            spec["metric"],
            ev["batch_size"],
            ev["max_new_tokens"],
            desc=name,
            decoding=spec.get("decoding"),  # set only where the benchmark names them
            published_rule=spec.get("published_rule"),
        )
        metrics.update(model=spec["model"], benchmark=spec["benchmark"], split=spec["split"])
        if "noise_ratio" in spec:
            metrics["noise_ratio"] = spec["noise_ratio"]
        if spec.get("answer_gap_examples"):  # the rectification paper's Fig. 3
            from zoomattn.evaluation.attention_share import answer_gap

            metrics.update(placement=spec["placement"])
            metrics.update(answer_gap(model, tok, records[: spec["answer_gap_examples"]]))
        predictions.parent.mkdir(parents=True, exist_ok=True)
        predictions.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        write_json(out, metrics)
        flat = {k: metrics[k] for k in CI_KEYS}
        flat.update({f"{k}.score": v["score"] for k, v in metrics.get("subsets", {}).items()})
        if metrics.get("answer_gap") is not None:
            flat["answer_gap"] = metrics["answer_gap"]
        if "published_rule" in metrics:  # the rule of the benchmark's published column
            flat.update({f"published.{k}": metrics["published_rule"][k] for k in CI_KEYS})
        run.log_metrics(flat)
        run.log_artifacts(predictions, "predictions")
        run.log_artifacts(out)


def attention(
    spec: dict,
    model_dir: Path,
    base_dir: Path,
    split_dir: Path,
    out: Path,
    threads: int,
    results: Path,
) -> None:
    from zoomattn.data.build import load_split
    from zoomattn.evaluation.attention_share import golden_attention

    with job_run(spec, "attention", spec["model"], results) as run, attention_kernels(spec, run):
        model, tok = load_model(spec, model_dir, base_dir, threads)
        records = load_split(split_dir)[: spec["attention_examples"]]
        summary = golden_attention(model, tok, records, spec.get("answer_gap_examples") or 0)
        summary["model"] = spec["model"]
        write_json(out, summary)
        keys = ("mean_golden_share", "golden_is_top", "answer_gap")
        run.log_metrics({k: summary[k] for k in keys if summary.get(k) is not None})
        run.log_artifacts(out)


def score_margin(
    spec: dict,
    model_dir: Path,
    base_dir: Path,
    split_dir: Path,
    out: Path,
    threads: int,
    results: Path,
) -> None:
    """The base model's pre-softmax score margins (Fig. 5) and the ξ that covers them."""
    from zoomattn.data.build import load_split
    from zoomattn.evaluation.rectification import score_margins

    with (
        job_run(spec, "analysis", f"score_margin/{spec['model']}", results) as run,
        attention_kernels(spec, run),
    ):
        model, tok = load_model(spec, model_dir, base_dir, threads)
        summary = score_margins(model, tok, load_split(split_dir)[: spec["examples"]])
        summary["model"] = spec["model"]
        write_json(out, summary)
        run.log_metrics({k: summary[k] for k in ("median", "p10", "p90", "xi_auto")})
        run.log_artifacts(out)


def _with_golden(records: list[dict], n: int, split_dir: Path) -> list[dict]:
    """The first n records that mark their golden passages (the retrieval score needs them)."""
    kept = [r for r in records if r["golden"]][:n]
    if not kept:
        raise ValueError(
            f"{split_dir}: no record marks its golden passages; retrieval-head scores need them "
            "(LongBench hotpotqa: set options.golden_file to MuDAF's labels)"
        )
    return kept


def retrieval_heads(
    spec: dict,
    model_dir: Path,
    base_dir: Path,
    split_dir: Path,
    out: Path,
    threads: int,
    results: Path,
) -> None:
    """Every head's retrieval score (MuDAF App. A.2) from the last prompt token's attention."""
    from zoomattn.data.build import load_split
    from zoomattn.evaluation.retrieval_heads import head_scores

    cfg = spec["retrieval_heads"]
    with (
        job_run(spec, "analysis", f"retrieval_heads/{spec['model']}", results) as run,
        attention_kernels(spec, run),
    ):
        model, tok = load_model(spec, model_dir, base_dir, threads)
        records = _with_golden(load_split(split_dir), cfg["examples"], split_dir)
        scores = head_scores(model, tok, records, cfg["threshold"])
        scores.update(model=spec["model"], benchmark=cfg["benchmark"])
        write_json(out, scores)
        run.log_metrics({"mean_f1": scores["mean_f1"], "max_f1": scores["max_f1"]})
        run.log_artifacts(out)


def head_masking(
    spec: dict,
    model_dir: Path,
    base_dir: Path,
    split_dir: Path,
    scores: Path,
    out: Path,
    threads: int,
    results: Path,
) -> None:
    """MuDAF Fig. 4: the score with the model's own top-k retrieval heads masked vs k random."""
    from zoomattn.data.build import load_split
    from zoomattn.evaluation.retrieval_heads import masking_experiment

    cfg, ev = spec["masking"], spec["evaluation"]
    with (
        job_run(spec, "analysis", f"head_masking/{spec['model']}", results) as run,
        attention_kernels(spec, run),
    ):
        model, tok = load_model(spec, model_dir, base_dir, threads)
        records = load_split(split_dir)[: cfg["examples"]]
        summary = masking_experiment(
            model,
            tok,
            records,
            spec["metric"],
            read_json(scores)["f1"],
            cfg["k"],
            cfg["draws"],
            seed=0,
            batch_size=ev["batch_size"],
            max_new_tokens=ev["max_new_tokens"],
        )
        summary.update(model=spec["model"], benchmark=spec["benchmark"])
        write_json(out, summary)
        metrics = {"baseline": summary["baseline"]}
        for row in summary["k"]:
            metrics |= {f"top{row['k']}": row["top"], f"random{row['k']}": row["random_mean"]}
        run.log_metrics(metrics)
        run.log_artifacts(out)


def head_patterns(
    spec: dict,
    model_dir: Path,
    base_dir: Path,
    split_dir: Path,
    out: Path,
    threads: int,
    results: Path,
) -> None:
    """LKG-RALM Fig. 2: every head's attention pattern (edge, uniform, middle, other) from the
    last prompt token's attention; the middle heads are those its fusion acts on."""
    from zoomattn.data.build import load_split
    from zoomattn.evaluation import head_patterns as patterns

    with (
        job_run(spec, "analysis", f"head_patterns/{spec['model']}", results) as run,
        attention_kernels(spec, run),
    ):
        model, tok = load_model(spec, model_dir, base_dir, threads)
        summary = patterns.head_patterns(
            model, tok, load_split(split_dir), spec["head_patterns"]["examples"]
        )
        summary["model"] = spec["model"]
        write_json(out, summary)
        metrics = {f"share_{c}": summary["distribution"][c] for c in patterns.CLASSES}
        run.log_metrics(metrics | {"middle_heads": len(summary["middle_heads"])})
        heads = " ".join(f"{layer}-{head}" for layer, head in summary["middle_heads"])
        if len(heads) > MAX_TAG_CHARS:  # MLflow's limit on a tag value; the JSON has them all
            heads = heads[: heads.rfind(" ", 0, MAX_TAG_CHARS - 4)] + " ..."
        run.set_tags({"lkg.middle_heads": heads})
        run.log_artifacts(out)
