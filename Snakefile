# zoomattn: data -> base model -> fine-tunes (every study of config.yaml's `studies:`: OpAmp's K
# sweep, the rectification, MuDAF and LKG-RALM studies, the cross-method leaderboard) ->
# evaluation and attention analyses -> one report per study.
# Run from the repository root: `snakemake -j 2` (see README). Logic lives in the zoomattn package;
# rules stay thin: inputs, outputs, params (the job's spec), log, resources, one call.

import json
import os
import sys

from zoomattn import worker
from zoomattn.__main__ import ENV_RESULTS
from zoomattn.config import ConfigError, config_hash, load_config, read_yaml
from zoomattn.rate_limit import drop_default_rate_limit
from zoomattn.tracking import ENV_CONFIG_HASH, ENV_EXPERIMENT, ENV_PARENT


if os.path.exists("config.yaml"):  # Snakemake's own YAML error names neither line nor column
    try:
        read_yaml("config.yaml")
    except ConfigError as err:
        sys.exit(f"zoomattn: invalid configuration: {err}")


configfile: "config.yaml"
report: "workflow/report/workflow.rst"  # `snakemake --report report.html`: every table and figure


try:
    CFG = load_config(config)
except ConfigError as err:
    sys.exit(f"zoomattn: invalid configuration: {err}")

os.environ[ENV_CONFIG_HASH] = config_hash(CFG)
PYTHON = sys.executable
# Rules call plain `python -m zoomattn` from the repository root: this interpreter's environment by
# default; with --use-conda the rule's env (envs/*.yaml), activated in front of it.
# (PATH is extended, never required: no `envvars:` assertion, which would also ship the submitting
# shell's PATH to Slurm jobs)
os.environ.update(PATH=os.pathsep.join([os.path.dirname(PYTHON), os.environ.get("PATH", os.defpath)]))
# Every job's `python -m zoomattn` finds its MLflow store (the default of --results) here, like the
# parent run's id below.
os.environ[ENV_RESULTS] = CFG["results"]


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/report.smk"


localrules:  # light: under --profile slurm they run in the submitting process, not as jobs
    all,
    report,
    select_heads,


rule all:  # the reports, and every model and file they read (README: If a run is interrupted)
    input:
        REPORTS,
        # Snakemake does not rebuild a missing file whose readers are up to date: without these, a
        # model or evaluation whose job an interrupted run had started (its output removed first)
        # would stay missing, silently; with them the next run rebuilds it and reruns its readers.
        [model_dir(m) for m in ALL_MODELS],
        [f for study in STUDIES for f in report_input_files(study)],


WORKER = []  # the warm fork server of a local run (zoomattn/worker.py)


onstart:
    print(f"zoomattn: {drop_default_rate_limit(workflow.scheduler)}", file=sys.stderr)
    # the worker first: it preloads (~10 s) while the parent run is made
    if workflow.local_exec and os.environ.get("ZOOMATTN_NO_WORKER") != "1":
        WORKER.append(worker.start(PYTHON, f"{OUT}/logs/worker.log"))
    # One parent MLflow run per invocation; jobs find it (and the experiment) in the environment.
    ids = json.loads(zoomattn_cli("mlflow-start", "--preset", PRESET, stdin=json.dumps(CFG)))
    os.environ[ENV_EXPERIMENT] = ids["experiment_id"]
    os.environ[ENV_PARENT] = ids["run_id"]


onsuccess:
    for proc in WORKER:
        worker.stop(proc)
    if ENV_PARENT in os.environ:
        zoomattn_cli("mlflow-end", "--run-id", os.environ[ENV_PARENT])


onerror:
    for proc in WORKER:
        worker.stop(proc)
    if ENV_PARENT in os.environ:
        zoomattn_cli("mlflow-end", "--run-id", os.environ[ENV_PARENT], "--failed")
