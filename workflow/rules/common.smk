# Paths, job specs and the glue between them and the rules. The specs (zoomattn/specs.py) hold
# exactly the config values a job depends on plus the hash of the code it runs; each is its job's
# `spec` param, so Snakemake reruns a job when, and only when, one of them changes.

import json
import re
import subprocess
from types import SimpleNamespace

from zoomattn.cluster import JobKind, launch_message
from zoomattn.config_checks import is_synthetic
from zoomattn.grid import Grid
from zoomattn.layout import Layout
from zoomattn.placement import processes
from zoomattn.specs import Specs
from zoomattn.splits import PATTERN as SPLIT_PATTERN

RESULTS = CFG["results"]
OUT = CFG["out"]
PRESET = CFG["preset"]
SYNTHETIC = is_synthetic(CFG)  # tiny/smoke: world + pretrained-here base; paper/small: hub + real data
GRID = Grid(CFG)  # every study of the config (zoomattn/grid.py, zoomattn/studies.py)
STUDIES = GRID.studies  # name -> Study, in report order
SPECS = Specs(CFG, GRID)
LAYOUT = Layout(OUT, GRID)
WORLD = LAYOUT.world
BASE = LAYOUT.model_dir("base")
ALL_MODELS = LAYOUT.all_models  # the bases, then every fine-tuned model
# the studies whose blocks configure each analysis (None: no study runs it)
MARGIN = GRID.analysis("score_margin")  # rectification
HEADS = GRID.analysis("retrieval_heads")  # MuDAF
MASKING = GRID.analysis("head_masking")  # MuDAF
SELECTION = GRID.analysis("selected_heads")  # MuDAF
PATTERNS = GRID.analysis("head_patterns")  # LKG-RALM
# threads, resources and retries of each kind of job (config resources, zoomattn/cluster.py)
DATA_JOB, PRETRAIN_JOB, EVALUATE_JOB = (
    JobKind.of(CFG, kind) for kind in ("data", "pretrain", "evaluate")
)


def finetune_processes(wildcards):
    """The processes a fine-tune runs (its spec's finetune.processes, per study)."""
    return processes(SPECS.finetune(wildcards.trained))


# a fine-tune of N processes asks for N times one process's resources (zoomattn/cluster.py)
FINETUNES = JobKind.per_job(CFG, "finetune", finetune_processes)


def zoomattn_cli(*args, stdin=None):
    """Run a zoomattn command in a subprocess (keeps MLflow out of the Snakemake process)."""
    done = subprocess.run([PYTHON, "-m", "zoomattn", *args, "--results", RESULTS], input=stdin,
                          capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"zoomattn {args[0]} failed:\n{done.stderr}")
    return done.stdout


def _alternatives(names):
    return "|".join(re.escape(n) for n in names) or "none"


wildcard_constraints:
    model=_alternatives(ALL_MODELS),
    trained=_alternatives(GRID.models),
    base=_alternatives(GRID.bases),
    benchmark=_alternatives(b for study in STUDIES.values() for b in study.benchmarks),
    split=SPLIT_PATTERN,
    train_set=_alternatives(GRID.train_sets),
    study=_alternatives(STUDIES),


def as_json(obj):
    return json.dumps(obj, sort_keys=True)


def log_file(name):
    return LAYOUT.log(name)


def model_dir(model):
    return LAYOUT.model_dir(model)


def base_dir(wildcards):
    """The base a model starts from (a base: its own directory)."""
    return model_dir(GRID.base_of(wildcards.model))


def world_input(wildcards):
    """The synthetic data jobs read the world; the real ones read their datasets."""
    return {"world": WORLD} if SYNTHETIC else {}


def world_arg(wildcards, input):
    return f"--world-dir {input.world}" if SYNTHETIC else ""


def finetune_input(wildcards):
    return LAYOUT.finetune_inputs(wildcards.trained)


def optional_arg(name):
    """`--<name> <input>` when the job has that input (a method's analysis of its base)."""
    return lambda wildcards, input: f"--{name} {input[name]}" if name in input.keys() else ""


def model_dirs(files):
    """The model directories that hold these metrics files (a rule's input is the directory a job
    wrote, not a file inside it)."""
    return [os.path.dirname(f) for f in files]


REPORT_INPUTS = {name: LAYOUT.report_inputs(study) for name, study in STUDIES.items()}
REPORTS = [LAYOUT.report_dir(name) for name in STUDIES]
IN_MODEL_DIRS = ("base_metrics", "train_metrics")  # metrics.json files inside a model's directory


def report_input(wildcards):
    """A study's report job reads the files its Study names by kind, and its spec; for the
    metrics files inside model directories, the directories (what the fine-tunes output)."""
    inputs = REPORT_INPUTS[wildcards.study]
    files = {k: model_dirs(f) if k in IN_MODEL_DIRS else f for k, f in inputs.items()}
    return {**files, "spec": report_spec_file(wildcards.study)}


def report_input_files(study):
    """Every file a study's report reads (for `rule all`)."""
    return [f for files in report_input(SimpleNamespace(study=study)).values() for f in
            ([files] if isinstance(files, str) else files)]


def report_inputs_arg(wildcards):
    """The report command's `--inputs`: KIND=PATH PATH ... per kind (KIND= alone: no files)."""
    inputs = REPORT_INPUTS[wildcards.study]
    return " ".join(f"{kind}={' '.join(files)}" for kind, files in inputs.items())


def report_spec_file(study):
    """A report job's spec as an input file, written as the workflow is parsed and only when it
    changed: a changed spec reruns the report (its input is newer) as a changed param would, and
    the spec stays out of the job parameters `snakemake --report` prints under every figure."""
    path = f"{OUT}/specs/report_{study}.json"
    text = as_json(SPECS.report(study)) + "\n"
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

        seeds = GRID.seeds(report_dir.rsplit("/", 1)[-1])  # dir name: its study
        return {"preset": PRESET, "seeds": seeds, "commit": git_commit()}
    try:
        provenance = json.loads(text)
        return {key: provenance[key] for key in ("preset", "seeds", "commit")}
    except (ValueError, KeyError, TypeError) as err:
        unknown = f"unknown: {report_dir}/provenance.json is unreadable ({err!r})"
        return {"preset": unknown, "seeds": [unknown], "commit": unknown}


def report_rules_html():
    """The landing page's table of the run's rules (zoomattn/reporting/common/workflow_rules.py), built
    when `snakemake --report` renders workflow/report/workflow.rst: the DAG exists only then."""
    from zoomattn.reporting.common.workflow_rules import rule_table_html

    return rule_table_html(workflow.dag.toposorted(), workflow.dag.dependencies)


config["_report"] = {  # what `snakemake --report`'s captions print (workflow/report/*.rst)
    "preset": PRESET,
    "seeds": GRID.seeds("leaderboard"),
    "grid_seeds": CFG["seeds"],
    "jobs": {d: report_provenance(d) for d in REPORTS},  # by report directory
    "rules_html": report_rules_html,
}


def _report_subcategory(wildcards):
    return "figures" if wildcards.ext == "png" else "tables"


def report_flag(study="{study}"):
    """A study's report directory, its figures and html tables in `snakemake --report`: under
    the study (the job's wildcard), figures and tables apart, each labelled by its name alone. (A second label with
    two values that split a list in halves, like png/html 4 and 4, becomes a toggle between pairs
    that do not exist here, and the report's page breaks on it.)"""
    return report(directory(LAYOUT.report_dir(study)), patterns=["{name}.{ext,png|html}"],
                  caption="../report/figure.rst", category=study,
                  subcategory=_report_subcategory, labels={"item": "{name}"})
