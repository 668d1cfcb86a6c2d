"""Command line of zoomattn: ``python -m zoomattn COMMAND``; ``--help`` is the guide.

A user calls ``regenerate``, ``check-config`` and ``unlock-stale``. The workflow's rules call one
job stage each (``python -m zoomattn STAGE --spec JSON [paths]``, see workflow/rules). ``worker``
(the local run's warm fork server) and ``mlflow-start``/``mlflow-end`` (the Snakefile's
onstart/onsuccess/onerror handlers) are internal and left out of the help.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import inspect
import json
import logging
import os
import sys
import threading
from pathlib import Path

from zoomattn import stages
from zoomattn.gpus import claim_for_spec

# bitsandbytes wraps its CPU 4-bit ops in torch.compile; compiling them costs ~6 s in every job
# process and changed no prediction in our runs (measured). Set TORCHDYNAMO_DISABLE=0 to compile.
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

ENV_RESULTS = "ZOOMATTN_RESULTS"  # the default of every --results
# MLflow's own run context: JSON tags that every run a process starts gets (mlflow
# SystemEnvironmentContext)
ENV_RUN_CONTEXT = "MLFLOW_RUN_CONTEXT"
TAG_CPU = "zoomattn.cpu"
STAGES = stages.STAGES  # stage -> its function (zoomattn/stages: the one table of them)


def stage_paths(stage: str) -> list[str]:
    """A stage's path arguments: its function's required ``Path`` parameters but ``results``
    (``--spec``, ``--results`` and ``--threads`` are every stage's)."""
    params = inspect.signature(stages.function(stage)).parameters.values()
    return [
        p.name
        for p in params
        if p.annotation == "Path" and p.default is p.empty and p.name != "results"
    ]


def threaded(stage: str) -> bool:
    return "threads" in inspect.signature(stages.function(stage)).parameters


def main(argv: list[str] | None = None) -> None:
    """A job stage runs in the warm worker when the local run started one, else right here."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in STAGES:
        from zoomattn.worker import run_in_worker

        code = run_in_worker([sys.argv[0], *argv])
        if code is not None:
            sys.exit(code)
    run_stage(argv)


USER_COMMANDS = {
    "regenerate": "the cross-method report again, from a run's metric files (reads no model)",
    "check-config": "config.yaml and override files checked: YAML syntax, then every value",
    "unlock-stale": "after a kill -9, the killed run's Snakemake lock removed (`make run` does it)",
}
STAGE_HELP = {
    "world": "the synthetic world: entities, facts and the tokenizer (tiny, smoke)",
    "train-data": "a study's fine-tuning set (the shared one, or golden documents and distractors)",
    "eval-data": "one benchmark's evaluation set at one split (noise ratio, placement, passages)",
    "pretrain": "the tiny base model, pretrained on the synthetic world",
    "base-model": "a hub or local base model: resolved, checked and recorded",
    "finetune": "one grid cell (method, setting, seed) fine-tuned on the base model",
    "evaluate": "one model's predictions and score on one evaluation set",
    "attention": "one model's golden-document attention share and answer-token gap",
    "score-margin": "the base's pre-softmax score margins and the xi that covers them",
    "retrieval-heads": "every head's retrieval score (MuDAF)",
    "head-patterns": "every head's attention pattern: edge, uniform, middle, other (LKG-RALM)",
    "head-masking": "the score with the model's top-k retrieval heads masked vs k random (MuDAF)",
    "select-heads": "MuDAF's target heads for one cell, from the base's retrieval-head scores",
    "report": "one study's tables and figures (--study: a folder of zoomattn/reporting/)",
}


def _listing(commands: dict[str, str]) -> str:
    return "\n".join(f"  {name:<20}{text}" for name, text in commands.items())


GUIDE = f"""\
Run the workflow with `make run` or `.venv/bin/snakemake` (README); `COMMAND --help` lists a
command's options.

commands:
{_listing(USER_COMMANDS)}

job stages, called by the workflow's rules (one job each):
{_listing(STAGE_HELP)}
"""


def _add_results(p: argparse.ArgumentParser) -> None:
    from_env = os.environ.get(ENV_RESULTS) or None  # set but empty: unset
    p.add_argument(  # the Snakefile sets ENV_RESULTS for every job
        "--results",
        type=Path,
        default=from_env,
        required=from_env is None,
        help=f"results root (MLflow store); default: ${ENV_RESULTS}",
    )


def _add_stage(sub, stage: str, paths: list[str]) -> None:
    p = sub.add_parser(stage, description=f"{STAGE_HELP[stage]} (called by the workflow's rules)")
    spec = p.add_mutually_exclusive_group(required=True)
    spec.add_argument("--spec", help="the job's config values, as JSON")
    if stage == "report":  # the report rules pass a file: their spec stays out of the HTML report
        spec.add_argument("--spec-file", type=Path, help="the job's config values, a JSON file")
    _add_results(p)
    for name in paths:
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, required=True, type=Path)
    if stage in ("train-data", "eval-data"):
        p.add_argument("--world-dir", type=Path, help="the synthetic world (tiny, smoke)")
    if threaded(stage):
        p.add_argument("--threads", type=int, default=1)
    if stage == "report":
        p.add_argument("--study", required=True, help="opamp, rectification, mudaf, lkg, ...")
        p.add_argument(
            "--inputs",
            nargs="+",
            required=True,
            action=InputsAction,
            metavar="KIND=PATH",
            help="the metric files by kind (zoomattn/reporting/common/inputs.py); a bare PATH "
            "belongs to the KIND before it, KIND= alone is a kind with no file",
        )
    if stage == "finetune":
        p.add_argument("--margin", type=Path, help="the base's score margin (xi: auto)")
        p.add_argument("--heads", type=Path, help="the selected target heads (MuDAF)")
        p.add_argument("--patterns", type=Path, help="the base's head patterns (LKG-RALM)")


class InputsAction(argparse.Action):
    """``--inputs evals=a.json b.json attention=c.json masking=`` -> {kind: [paths]}: the form
    ``kind={input.files}`` takes in a rule's shell line."""

    def __call__(self, parser, namespace, values, option_string=None):
        from zoomattn.reporting.common.inputs import KINDS

        inputs: dict[str, list[Path]] = {}
        kind = None
        for token in values:
            name, equals, path = token.partition("=")
            if equals and name.isidentifier():
                if name not in KINDS:
                    parser.error(f"--inputs: unknown kind {name!r} (kinds: {', '.join(KINDS)})")
                kind = name
                inputs.setdefault(kind, []).extend([Path(path)] if path else [])
            elif kind is None:
                parser.error(f"--inputs: {token!r} has no kind: write KIND=PATH")
            else:
                inputs[kind].append(Path(token))
        setattr(namespace, self.dest, inputs)


def _add_user_commands(sub) -> None:
    p = sub.add_parser("unlock-stale", description=USER_COMMANDS["unlock-stale"])
    p.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="the run's snakemake options")
    for name in ("regenerate", "check-config"):
        p = sub.add_parser(name, description=USER_COMMANDS[name])
        p.add_argument(
            "--config",
            nargs="+",
            type=Path,
            default=[Path("config.yaml")],
            help="config.yaml, then the run's --configfile files, in order (default: config.yaml)",
        )
        p.add_argument("--preset", help="the run's preset, as --config preset=NAME sets it")
        if name == "regenerate":
            p.add_argument("--out", type=Path, required=True, help="where the report goes")
        else:
            p.add_argument(
                "--show", action="store_true", help="also print the effective config (YAML)"
            )


def _add_internal_commands(sub) -> None:
    sub.add_parser("worker").add_argument("--socket", required=True, help="unix socket to serve")
    for name in ("mlflow-start", "mlflow-end"):
        p = sub.add_parser(name)
        _add_results(p)
        p.add_argument("--preset")
        p.add_argument("--run-id")
        p.add_argument("--failed", action="store_true")


def build_parser() -> argparse.ArgumentParser:
    """Every command; the help lists the user's and the job stages (add_parser without help=
    keeps a command out of argparse's own listing, so the internal ones stay unlisted)."""
    parser = argparse.ArgumentParser(
        prog="python -m zoomattn",
        usage="%(prog)s COMMAND [options]",
        description=GUIDE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(
        dest="stage", required=True, metavar="COMMAND", help=argparse.SUPPRESS, prog=parser.prog
    )
    _add_user_commands(sub)
    for stage in STAGES:
        _add_stage(sub, stage, stage_paths(stage))
    _add_internal_commands(sub)
    return parser


def _run_user_command(command: str, args: dict) -> None:
    """A configuration or results problem is one line naming the file (or key), no traceback."""
    from zoomattn.config import ConfigError, load_config, read_configs
    from zoomattn.stages.reports import MissingResultsError

    try:
        if command == "unlock-stale":
            from zoomattn.stale_lock import unlock_if_stale

            unlock_if_stale(Path.cwd(), args["snakemake_args"])
        elif command == "check-config":
            cfg = load_config(read_configs(args["config"], args["preset"]))
            files = " + ".join(map(str, args["config"]))
            protocol = f" (protocol {cfg['protocol']})" if "protocol" in cfg else ""
            print(f"{files}: valid; preset {cfg['preset']}{protocol}, results in {cfg['out']}")
            if args["show"]:
                import yaml

                print(yaml.safe_dump(cfg, sort_keys=False), end="")
        else:
            from zoomattn.stages import regenerate

            regenerate(args["config"], args["out"], args["preset"])
    except (ConfigError, MissingResultsError, RuntimeError) as err:
        sys.exit(f"zoomattn {command}: {err}")


INTERNAL = ("worker", "mlflow-start", "mlflow-end")


def run_stage(argv: list[str]) -> None:
    parser = build_parser()
    known = (*USER_COMMANDS, *STAGES, *INTERNAL)
    if argv and not argv[0].startswith("-") and argv[0] not in known:  # argparse would list all
        parser.error(f"unknown command {argv[0]!r}: `python -m zoomattn --help` lists them")
    args = vars(parser.parse_args(argv))
    stage = args.pop("stage")
    if stage == "worker":  # before logging is configured: its children configure their own
        from zoomattn.worker import serve

        serve(args["socket"])
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if stage in USER_COMMANDS:
        _run_user_command(stage, args)
        return

    from zoomattn import tracking

    if stage == "mlflow-start":
        exp, run = tracking.start_parent(
            args["results"], args["preset"], json.load(sys.stdin), " ".join(sys.argv)
        )
        print(json.dumps({"experiment_id": exp, "run_id": run}))
        return
    if stage == "mlflow-end":
        tracking.end_parent(args["results"], args["run_id"], ok=not args["failed"])
        return
    spec_file = args.pop("spec_file", None)
    args["spec"] = json.loads(spec_file.read_text() if spec_file else args["spec"])
    claim_for_spec(args["spec"])  # before the stage can initialise CUDA, which reads the cards once
    cpu = cpu_description()
    logging.getLogger("zoomattn").info("cpu: %s", cpu)
    tag_every_run({TAG_CPU: cpu})
    stages.function(stage)(**args)


def tag_every_run(tags: dict[str, str]) -> None:
    """Tags for every run that ``mlflow.start_run`` creates in this process and its children (a
    stage's job runs: ``tracking.job_run``), through MLflow's run context variable, merged into
    one already set; a value that is no JSON object stops the job (MLflow alone would warn and
    drop it). Here, outside every stage's code hash, so that adding a tag reruns no job."""
    try:
        context = json.loads(os.environ.get(ENV_RUN_CONTEXT) or "{}")
    except json.JSONDecodeError:
        context = None
    if not isinstance(context, dict):
        sys.exit(f"zoomattn: {ENV_RUN_CONTEXT} is not a JSON object of run tags")
    os.environ[ENV_RUN_CONTEXT] = json.dumps({**context, **tags})


def cpu_description() -> str:
    """The CPU's model and the vector instructions torch's CPU kernels take on it, for the job's
    log and its MLflow runs (``zoomattn.cpu``): the same computation rounds differently on another
    CPU type, and over a fine-tune the difference grows into other metrics (docs/results.md §9).
    Here, outside every stage's code hash, so that recording it reruns no job."""
    import platform

    import torch

    name = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as info:
        name = next((ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name")), "")
    name = name or platform.processor() or platform.machine()
    return f"{name}, {torch.backends.cpu.get_cpu_capability()}"


def exit_without_teardown(code: int = 0) -> None:
    """Leave as Python does after ``main`` returns, less its teardown of the loaded modules, which
    takes ~2.6 s once torch, transformers and peft are in (every job process, each distributed
    rank, the worker): threads joined after threading's exit hooks (an executor's shutdown),
    atexit handlers run (logging's and MLflow's among them), Python's and C's stdio buffers
    flushed, then ``os._exit``. (The warm worker's children, which run the same stages, have
    always left by ``os._exit`` after flushing the streams alone.)
    Under a profiler or tracer (``python -m cProfile``, a debugger), which reports after the
    program returns, it returns and Python exits as usual."""
    monitoring = getattr(sys, "monitoring", None)  # Python 3.12's profilers use it
    tools = (monitoring.get_tool(i) for i in range(6)) if monitoring else ()
    if sys.getprofile() or sys.gettrace() or any(tools):
        return
    threading._shutdown()  # Python's first exit step: threading's exit hooks, threads joined
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    with contextlib.suppress(OSError, AttributeError):  # C's own stdio buffers (extensions)
        ctypes.CDLL(None).fflush(None)
    os._exit(code)


if __name__ == "__main__":
    main()
    exit_without_teardown()
