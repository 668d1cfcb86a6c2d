# Paths and job specs. A spec holds exactly the config values a job depends on plus the hash of
# the code it runs; it is the job's `spec` param, so Snakemake reruns a job when, and only when,
# one of them changes.

import json
import re
import subprocess

from zoomattn import grid
from zoomattn.cluster import retries, rule_resources, threads
from zoomattn.config import code_hash, is_synthetic
from zoomattn.placement import plan

RESULTS = CFG["results"]
OUT = CFG["out"]
PRESET = CFG["preset"]
SYNTHETIC = is_synthetic(CFG)  # tiny/smoke: world + pretrained-here base; paper/small: hub + real data
WORLD = f"{OUT}/data/world"
BASE = f"{OUT}/models/base"
RECT = grid.rect_cfg(CFG)  # the rectification study's block (None: not in the grid)
MUDAF = grid.study_cfg(CFG, grid.MUDAF)  # the MuDAF study's block (None: not in the grid)
LKG = grid.study_cfg(CFG, grid.LKG)  # the LKG-RALM study's block (None: not in the grid)
LEADERBOARD = grid.study_cfg(CFG, grid.LEADERBOARD)  # the cross-method comparison (None: off)
STUDIES = grid.studies(CFG)  # the side studies in the grid
STUDY_BENCHMARKS = [b for s in STUDIES for b in CFG[s]["benchmarks"]]
BASES = grid.base_models(CFG)  # base id -> base_model config
TRAINED = grid.trained_models(CFG)  # model id -> grid.Model
CELLS = {m.run: (m.method, m.values) for m in TRAINED.values() if m.study == "opamp"}
FINETUNED = [m for m in TRAINED if TRAINED[m].study == "opamp"]
MODELS = ["base"] + FINETUNED  # the OpAmp part's models (golden attention share, its report)
EVALUATIONS = grid.evaluations(CFG)


def zoomattn_cli(*args, stdin=None):
    """Run a zoomattn command in a subprocess (keeps MLflow out of the Snakemake process)."""
    done = subprocess.run([PYTHON, "-m", "zoomattn", *args, "--results", RESULTS], input=stdin,
                          capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"zoomattn {args[0]} failed:\n{done.stderr}")
    return done.stdout


def _alternatives(names):
    return "|".join(re.escape(n) for n in names)


wildcard_constraints:
    model=_alternatives([*BASES, *TRAINED]),
    trained=_alternatives(TRAINED) or "none",
    base=_alternatives(BASES),
    seed=r"\d+",
    benchmark=_alternatives([*CFG["benchmarks"], *STUDY_BENCHMARKS]),
    sbenchmark=_alternatives(STUDY_BENCHMARKS or ["none"]),
    study=_alternatives(STUDIES or ["none"]),
    placement="vanilla|reverse",
    ssplit=r"vanilla|reverse|n\d+|irr[0-9.]+|r[0-9.]+",  # a side study's eval set (LKG: robustness
    # sets; the leaderboard: r<noise ratio>)
    split=r"r[0-9.]+|vanilla|reverse|n\d+|irr[0-9.]+",
    noise=r"[0-9.]+",


def as_json(obj):
    return json.dumps(obj, sort_keys=True)


def device_spec(kind):
    """Where a model job of this resource kind runs and in which dtype (zoomattn/placement.py)."""
    return plan(CFG, kind).as_spec()


def world_spec():
    d = CFG["data"]
    return {"preset": PRESET, "world_seed": CFG["world_seed"], "code": code_hash("data"),
            "data": {"n_entities": d["n_entities"], "n_famous": d["n_famous"]}}


def train_data_spec():
    if not SYNTHETIC:
        return {"preset": PRESET, "world_seed": CFG["world_seed"], "code": code_hash("sources"),
                "data": {"train": CFG["data"]["train"]}}
    return {**world_spec(), "data": CFG["data"], "benchmarks": CFG["benchmarks"]}


def eval_data_spec(benchmark, noise):
    if not SYNTHETIC:
        return {"preset": PRESET, "world_seed": CFG["world_seed"], "code": code_hash("sources"),
                "benchmark": benchmark, "noise_ratio": float(noise),
                "benchmarks": {benchmark: CFG["benchmarks"][benchmark]},
                "data": {"n_eval": CFG["data"]["n_eval"]}}
    return {**world_spec(), "benchmark": benchmark, "noise_ratio": float(noise),
            "benchmarks": {benchmark: CFG["benchmarks"][benchmark]},
            "data": {**world_spec()["data"], "n_eval": CFG["data"]["n_eval"]}}


def study_data_spec(study, split, benchmark=None):
    """A side study's train (benchmark None) or eval set: the examples do not depend on the
    placement, only their layout does. An LKG robustness split (``n<k>``, ``irr<share>``) sets
    the number of passages and their irrelevant share."""
    robust = grid.robustness_set(CFG, split) if re.fullmatch(r"n\d+|irr[0-9.]+", split) else {}
    noisy = {"noise_ratio": float(split[1:])} if re.fullmatch(r"r[0-9.]+", split) else {}
    placement = "vanilla" if robust or noisy else split
    block = CFG[study]
    n_eval = block.get("n_eval", CFG["data"]["n_eval"])  # the leaderboard may set its own
    base = {**world_spec(), "data": {**world_spec()["data"], "n_eval": n_eval}} \
        if SYNTHETIC else {"preset": PRESET, "world_seed": CFG["world_seed"],
                           "code": code_hash("sources"), "data": {"n_eval": n_eval}}
    spec = {**base, "study": study, "placement": placement}
    if "distractors" in block:
        spec["distractors"] = block["distractors"]
    if benchmark is None:
        return {**spec, "train": block["train"]}
    return {**spec, **robust, **noisy, "benchmark": benchmark,
            "spec": block["benchmarks"][benchmark]}


def world_input(wildcards):
    """The synthetic data jobs read the world; the real ones read their datasets."""
    return {"world": WORLD} if SYNTHETIC else {}


def world_arg(wildcards, input):
    return f"--world-dir {input.world}" if SYNTHETIC else ""


def pretrain_spec():
    return {"preset": PRESET, "base_model": CFG["base_model"], "pretrain": CFG["pretrain"],
            "device": device_spec("pretrain"), "code": code_hash("pretrain")}


def base_model_spec(base):
    return {"preset": PRESET, "base_model": BASES[base], "code": code_hash("base")}


def finetune_spec(model):
    m = TRAINED[model]
    ft = CFG["finetune"] if m.study == "opamp" else \
        {**CFG["finetune"], **CFG[m.study].get("finetune", {}), **m.finetune}
    spec = {"preset": PRESET, "run": model, "seed": m.seed, "method": m.method,
            "method_config": m.values, "finetune": ft, "device": device_spec("finetune"),
            "code": code_hash("finetune", m.method)}
    if m.study != "opamp":
        spec.update(study=m.study, placement=m.placement, base=m.base)
    return spec


def model_method(model):
    return TRAINED[model].method if model in TRAINED else None


def model_base(model):
    return TRAINED[model].base if model in TRAINED else model


def finetune_input(wildcards):
    m = TRAINED[wildcards.trained]
    inputs = {"data": f"{OUT}/data/{m.train_data}", "base": model_dir(m.base)}
    if m.values.get("xi") == "auto":  # ξ from the base model's score margin
        inputs["margin"] = margin_file(m.base)
    if m.method == "mudaf" and m.values.get("heads", 0) > 0:  # the heads its contrastive loss trains
        inputs["heads"] = selection_file(m.id)
    if m.method == "lkg":  # the fusion runs on the base's middle-focused heads
        inputs["patterns"] = patterns_file(m.base)
    return inputs


def eval_spec(model, benchmark, split):
    study = grid.study_of_benchmark(CFG, benchmark)
    spec = grid.benchmarks(CFG, study)[benchmark]
    out = {"preset": PRESET, "model": model, "benchmark": benchmark, "metric": spec["metric"],
           "split": split, "evaluation": CFG["evaluation"],
           "quantization": CFG["finetune"]["quantization"], "device": device_spec("evaluate"),
           "code": code_hash("evaluate", model_method(model))}
    if study in ("opamp", grid.LEADERBOARD):
        out["noise_ratio"] = float(split[1:])
    if study != "opamp":
        out.update(study=study, placement=split if split in ("vanilla", "reverse") else "vanilla")
    if study in (grid.RECT, grid.LEADERBOARD):
        out["answer_gap_examples"] = CFG[study]["answer_gap_examples"]
    return out


def attention_spec(model):
    return {"preset": PRESET, "model": model, "benchmark": CFG["attention"]["benchmark"],
            "noise_ratio": CFG["attention"]["noise_ratio"],
            "answer_gap_examples": CFG["attention"].get("answer_gap_examples"),
            "attention_examples": CFG["evaluation"]["attention_examples"],
            "quantization": CFG["finetune"]["quantization"], "device": device_spec("evaluate"),
            "code": code_hash("evaluate", model_method(model))}


def margin_file(base):
    return f"{OUT}/analysis/score_margin/{base}.json"


def margin_split():
    """The eval split the score margin is measured on: the first benchmark, first placement."""
    return next(iter(RECT["benchmarks"])), RECT["placements"][0]


def margin_spec(base):
    benchmark, placement = margin_split()
    return {"preset": PRESET, "model": base, "benchmark": benchmark, "placement": placement,
            "examples": RECT["margin_examples"],
            "quantization": CFG["finetune"]["quantization"], "device": device_spec("evaluate"),
            "code": code_hash("evaluate")}


def model_dir(model):
    return f"{OUT}/models/{model}"


def split_dir(benchmark, noise):
    return f"{OUT}/data/eval/{benchmark}/r{float(noise):g}"


EVAL_FILES = [f"{OUT}/eval/{m}/{b}/{s}.json" for m in MODELS for b, s in grid.opamp_splits(CFG)]
ATTENTION_FILES = [f"{OUT}/attention/{m}.json" for m in MODELS]
REPORT = f"{OUT}/report/opamp"
RECT_EVAL_FILES = [f"{OUT}/eval/{m}/{b}/{s}.json" for m, b, s in EVALUATIONS
                   if RECT and b in RECT["benchmarks"]]
RECT_REPORT = f"{OUT}/report/rectification"
MUDAF_EVAL_FILES = [f"{OUT}/eval/{m}/{b}/{s}.json" for m, b, s in EVALUATIONS
                    if MUDAF and b in MUDAF["benchmarks"]]
MUDAF_REPORT = f"{OUT}/report/mudaf"
REPORTS = [REPORT] + ([RECT_REPORT] if RECT else []) + ([MUDAF_REPORT] if MUDAF else [])


ALL_MODELS = [*BASES, *TRAINED]


# ---- MuDAF's head analyses (GRID.md §3): every model of the grid, and the head selection ----
MUDAF_BASE = grid.study_base(CFG, grid.MUDAF) if MUDAF else None
MASKED_MODELS = ([] if not MUDAF else  # "all": every model of the studies (not the leaderboard's)
                 [MUDAF_BASE] if MUDAF["masking"].get("models", "all") == "base" else
                 [m for m in ALL_MODELS if m in BASES or TRAINED[m].study != grid.LEADERBOARD])


def heads_split():
    """The eval set the retrieval-head scores and the masking experiment run on."""
    return f"{OUT}/data/eval/{MUDAF['retrieval_heads']['benchmark']}/vanilla"


def heads_file(model):
    return f"{OUT}/analysis/retrieval_heads/{model}.json"


def masking_file(model):
    return f"{OUT}/analysis/head_masking/{model}.json"


def selection_file(model):
    return f"{OUT}/analysis/selected_heads/{model}.json"


def retrieval_heads_spec(model):
    return {"preset": PRESET, "model": model, "retrieval_heads": MUDAF["retrieval_heads"],
            "quantization": CFG["finetune"]["quantization"], "device": device_spec("evaluate"),
            "code": code_hash("evaluate", model_method(model))}


def masking_spec(model):
    benchmark = MUDAF["retrieval_heads"]["benchmark"]
    return {"preset": PRESET, "model": model, "benchmark": benchmark,
            "metric": MUDAF["benchmarks"][benchmark]["metric"], "masking": MUDAF["masking"],
            "evaluation": CFG["evaluation"], "quantization": CFG["finetune"]["quantization"],
            "device": device_spec("evaluate"),
            "code": code_hash("evaluate", model_method(model))}


def selection_spec(model):
    m = TRAINED[model]
    return {"preset": PRESET, "model": model, "seed": m.seed, "method_config": m.values,
            "code": code_hash("select", m.method)}


# ---- LKG-RALM (GRID.md §4): head patterns of every model, its evaluations and report ----
LKG_BASE = grid.study_base(CFG, grid.LKG) if LKG else None
LKG_EVAL_FILES = [f"{OUT}/eval/{m}/{b}/{s}.json" for m, b, s in EVALUATIONS
                  if LKG and b in LKG["benchmarks"]]
LKG_REPORT = f"{OUT}/report/lkg"
LKG_MODELS = [m for m, t in TRAINED.items() if t.study == grid.LKG]
if LKG:
    REPORTS.append(LKG_REPORT)


def patterns_file(model):
    return f"{OUT}/analysis/head_patterns/{model}.json"


def patterns_split():
    return f"{OUT}/data/eval/{LKG['head_patterns']['benchmark']}/vanilla"


def head_patterns_spec(model):
    return {"preset": PRESET, "model": model, "head_patterns": LKG["head_patterns"],
            "quantization": CFG["finetune"]["quantization"], "device": device_spec("evaluate"),
            "code": code_hash("evaluate", model_method(model))}


def lkg_report_spec():
    return {"preset": PRESET, "lkg": LKG, "base": LKG_BASE, "seeds": CFG["seeds"],
            "cells": {m: {"run": TRAINED[m].run, "entry": TRAINED[m].entry,
                          "method": TRAINED[m].method,
                          "values": TRAINED[m].values, "seed": TRAINED[m].seed}
                      for m in LKG_MODELS},
            "code": code_hash("report")}


# ---- the cross-method report (GRID.md §5): leaderboard, fidelity table, diagnostics ----
LEADERBOARD_REPORT = f"{OUT}/report/leaderboard"
CROSS_INPUTS = grid.cross_report_inputs(CFG, OUT)
if LEADERBOARD:
    REPORTS.append(LEADERBOARD_REPORT)


def leaderboard_report_spec():
    return {**grid.cross_report_spec(CFG), "code": code_hash("report")}


def report_spec_file(report, spec):
    """A report job's spec as an input file, written as the workflow is parsed and only when it
    changed: a changed spec reruns the report (its input is newer) as a changed param would, and
    the spec stays out of the job parameters `snakemake --report` prints under every figure."""
    path = f"{OUT}/specs/report_{report}.json"
    text = as_json(spec) + "\n"
    try:
        if open(path).read() == text:
            return path
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"  # parsing processes (Slurm jobs) may write it at once
    with open(tmp, "w") as out:
        out.write(text)
    os.replace(tmp, path)
    return path


def report_provenance(report_dir):
    """The preset, seeds and commit a report job ran with (its provenance.json), for the
    `snakemake --report` captions; before it exists, the config's and the checkout's commit (the
    commit the job is about to run at). Captions read them from the config, which unlike a param
    never reruns a job. An unreadable provenance.json shows as such in the captions."""
    try:
        text = open(f"{report_dir}/provenance.json").read()
    except OSError:
        from zoomattn.tracking import git_commit

        seeds = grid.study_seeds(CFG, report_dir.rsplit("/", 1)[-1])  # dir name: its study
        return {"preset": PRESET, "seeds": seeds, "commit": git_commit()}
    try:
        provenance = json.loads(text)
        return {key: provenance[key] for key in ("preset", "seeds", "commit")}
    except (ValueError, KeyError, TypeError) as err:
        unknown = f"unknown: {report_dir}/provenance.json is unreadable ({err!r})"
        return {"preset": unknown, "seeds": [unknown], "commit": unknown}


def report_rules_html():
    """The landing page's table of the run's rules (zoomattn/reporting/common/workflow_rules.py),
    built when `snakemake --report` renders workflow/report/workflow.rst: the DAG exists only then."""
    from zoomattn.reporting.common.workflow_rules import rule_table_html

    return rule_table_html(workflow.dag.toposorted(), workflow.dag.dependencies)


config["_report"] = {  # what `snakemake --report`'s captions print (workflow/report/*.rst)
    "preset": PRESET,
    "seeds": grid.study_seeds(CFG, grid.LEADERBOARD),
    "grid_seeds": CFG["seeds"],
    "jobs": {d: report_provenance(d) for d in REPORTS},  # by report directory
    "rules_html": report_rules_html,
}


def _report_subcategory(wildcards):
    return "figures" if wildcards.ext == "png" else "tables"


def report_flag(path, study):
    """A report directory's figures and html tables in `snakemake --report`: under its study,
    figures and tables apart, each labelled by its name alone. (A second label with two values
    that split a list in halves, like png/html 4 and 4, becomes a toggle between pairs that do
    not exist here, and the report's page breaks on it.)"""
    return report(directory(path), patterns=["{name}.{ext,png|html}"],
                  caption="../report/figure.rst", category=study,
                  subcategory=_report_subcategory, labels={"item": "{name}"})
