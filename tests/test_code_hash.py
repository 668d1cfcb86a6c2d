"""The code hash of a job follows what its stage imports, and only the code itself counts.

Each test hashes a scratch copy of the package (never the checkout) before and after an edit.
"""

from __future__ import annotations

import ast
import io
import shutil
import tokenize
from pathlib import Path

import pytest

from zoomattn.code_hash import HEADER, PACKAGE, WHOLE, CodeIndex, code_hash
from zoomattn.methods import METHODS
from zoomattn.stages import STAGES

GRID_MODULE = "grid.py"  # the grid's module: the cross-method report calls it
ANALYSES = ("evaluate", "attention", "retrieval-heads", "head-masking", "head-patterns")
# the stages a fine-tuned model's jobs run: its method's folder counts for them
METHOD_STAGES = ("finetune", "select-heads", *ANALYSES)
DATA_STAGES = ("world", "train-data", "eval-data", "base-model")
REPORTS = ("opamp", "rectification", "mudaf", "lkg", "leaderboard")  # a report job: its study's
COMBOS = (
    [(s, None) for s in STAGES if s != "report"]
    + [("report", study) for study in REPORTS]
    + [(s, m) for s in METHOD_STAGES for m in METHODS]
)


def job_args(combo: tuple) -> dict:
    """(stage, method) or ("report", study) as ``CodeIndex.hash``'s arguments."""
    stage, which = combo
    return {"stage": stage, ("report" if stage == "report" else "method"): which}


@pytest.fixture
def package(tmp_path) -> Path:
    dest = tmp_path / "zoomattn"
    shutil.copytree(PACKAGE, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def hashes(package: Path) -> dict:
    index = CodeIndex(package)
    return {combo: index.hash(**job_args(combo)) for combo in COMBOS}


def changed(before: dict, after: dict) -> set:
    return {combo for combo in before if before[combo] != after[combo]}


def reword_comments_and_docstrings(text: str) -> str:
    """The same code with every docstring reworded, a comment ending every logical line and a
    blank line after it."""
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    docstrings = [
        node.body[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and ast.get_docstring(node, clean=False) is not None
    ]
    for doc in sorted(docstrings, key=lambda d: (d.lineno, d.col_offset), reverse=True):
        first, last = lines[doc.lineno - 1].encode(), lines[doc.end_lineno - 1].encode()
        new = first[: doc.col_offset] + b'"""Reworded."""' + last[doc.end_col_offset :]
        lines[doc.lineno - 1 : doc.end_lineno] = [new.decode()]
    text = "".join(lines)
    lines = text.splitlines()
    ends = {
        tok.start[0]
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        if tok.type == tokenize.NEWLINE and tok.line.strip()
    }
    lines = text.splitlines()
    out = [
        line + ("  # an edited comment\n\n" if n in ends else "\n")
        for n, line in enumerate(lines, 1)
    ]
    return "".join(out)


def test_comment_docstring_and_blank_line_edits_in_every_module_change_no_hash(package):
    before = hashes(package)
    for path in package.rglob("*.py"):
        original = path.read_text()
        path.write_text(reword_comments_and_docstrings(original))
        assert path.read_text() != original or not original.strip(), path
    assert changed(before, hashes(package)) == set()


def test_a_code_edit_in_a_function_changes_exactly_the_jobs_whose_stage_needs_it(package):
    """Each job's hash changes if and only if its code (as the index finds it) holds the edited
    function: edit the first function of a few modules and compare."""
    index = CodeIndex(package)
    modules = ("io.py", "attention/math.py", "data/build.py", "placement.py")
    for relative in (*modules, "evaluation/head_patterns.py", "data/world.py"):
        path = package / relative
        module = "zoomattn." + relative.removesuffix(".py").replace("/", ".")
        original = path.read_text()
        function = next(n for n in ast.parse(original).body if isinstance(n, ast.FunctionDef))
        needing = {c for c in COMBOS if (module, function.name) in index.job_units(**job_args(c))}
        before = hashes(package)
        lines = original.splitlines(keepends=True)
        last = function.body[-1]
        lines.insert(last.lineno - 1, " " * last.col_offset + "_edited = None\n")
        path.write_text("".join(lines))
        assert changed(before, hashes(package)) == needing, relative
        assert needing, f"{relative}: no job needs {function.name}; pick another module"
        path.write_text(original)


def test_an_attention_code_edit_reruns_the_model_jobs_and_not_the_data_nor_the_reports(package):
    before = hashes(package)
    path = package / "attention/math.py"
    path.write_text(path.read_text() + "\nEDITED = True\n")
    after = changed(before, hashes(package))
    assert {("finetune", m) for m in METHODS} | {("evaluate", None)} <= after
    assert not after & {(s, None) for s in DATA_STAGES}
    assert not {c for c in after if c[0] == "report"}


def test_editing_grid_changes_the_hash_of_the_cross_method_report(package):
    before = hashes(package)
    path = package / GRID_MODULE
    path.write_text(path.read_text() + "\nEDITED = True\n")
    after = changed(before, hashes(package))
    assert ("report", "leaderboard") in after
    assert not after & {(s, None) for s in (*DATA_STAGES, "pretrain")}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_editing_one_methods_folder_changes_only_that_methods_model_jobs_hashes(package, method):
    """Its __init__ (which the method registry imports) and every other module of its folder;
    (MuDAF's head selection, which the select-heads stage imports, changes select's for all)."""
    before = hashes(package)
    for path in (package / "methods" / method).rglob("*.py"):
        path.write_text(path.read_text() + "\nEDITED = True\n")
    after = changed(before, hashes(package))
    assert {(s, method) for s in METHOD_STAGES} <= after
    others = [None, *(m for m in METHODS if m != method)]
    assert not after & {(s, m) for s in ("finetune", *ANALYSES) for m in others}
    assert not after & {(s, None) for s in (*DATA_STAGES, "pretrain")}
    assert not {c for c in after if c[0] == "report"}


def test_config_re_exports_the_hash_the_rules_call():
    from zoomattn import config

    assert config.code_hash is code_hash
    assert code_hash("finetune", "opamp") == CodeIndex(PACKAGE).hash("finetune", "opamp")


def test_an_edit_in_one_analysis_reruns_that_analysis_and_not_the_evaluations(package):
    before = hashes(package)
    path = package / "evaluation/head_patterns.py"
    path.write_text(path.read_text() + "\nEDITED = True\n")
    after = changed(before, hashes(package))
    assert ("head-patterns", None) in after
    assert not {c for c in after if c[0] in ("evaluate", "attention", "retrieval-heads")}


def test_an_unknown_stage_or_method_is_named():
    index = CodeIndex(PACKAGE)
    with pytest.raises(ValueError, match="unknown stage 'reports'"):
        index.hash("reports")
    with pytest.raises(ValueError, match="no method folder zoomattn/methods/opam/"):
        index.hash("finetune", "opam")


# ---- the import graph, on a toy package ----
TOY = {
    "__init__.py": "",
    "stage.py": (
        "from toy.shared import helper\n"
        "def run():\n"
        "    from .maths import add  # function-local and relative\n"
        "    from toy import tables  # a submodule, named from its package\n"
        "    from toy.deep.leaf import leaf\n"
        "    return add(helper(), tables.ROWS, leaf())\n"
        "def unused():\n"
        "    from toy.heavy import slow\n"
        "    return slow()\n"
    ),
    "shared.py": "def helper():\n    return 1\n",
    "maths.py": "def add(*xs):\n    return sum(xs)\ndef other():\n    return 0\n",
    "tables.py": "ROWS = 2\n",
    "heavy.py": "def slow():\n    return 3\n",
    "deep/__init__.py": "from toy.heavy import slow\n",
    "deep/leaf.py": "def leaf():\n    return 4\n",
    "registry.py": "PLUGINS = []\ndef register(f):\n    PLUGINS.append(f)\n    return f\n",
    "plugins.py": (
        "from toy.registry import register\n"
        "@register\n"
        "def plug():\n"
        "    return 5\n"
        "class Auto(list):  # a class body runs on import too (a base class may register it)\n"
        "    pass\n"
        "def other():\n"
        "    return 0\n"
    ),
    "runner.py": (
        "def run():\n"
        "    from toy.plugins import other\n"
        "    from toy.registry import PLUGINS\n"
        "    return [p() for p in PLUGINS] + [other()]\n"
    ),
}


@pytest.fixture
def toy(tmp_path) -> CodeIndex:
    for name, text in TOY.items():
        (tmp_path / "toy" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "toy" / name).write_text(text)
    return CodeIndex(tmp_path / "toy")


def test_the_graph_follows_function_local_relative_and_submodule_imports(toy):
    needed = toy.closure([("toy.stage", "run")])
    assert {("toy.maths", "add"), ("toy.tables", HEADER), ("toy.deep.leaf", "leaf")} <= needed
    assert ("toy.shared", "helper") in needed  # its module's header imports it


def test_the_graph_leaves_out_unused_functions_and_the_packages_a_module_sits_in(toy):
    modules = {module for module, _ in toy.closure([("toy.stage", "run")])}
    assert "toy.heavy" not in modules  # only ``unused`` and ``toy.deep``'s __init__ import it
    assert ("toy.maths", "other") not in toy.closure([("toy.stage", "run")])
    assert ("toy.heavy", "slow") in toy.closure([("toy.stage", WHOLE)])


def test_what_runs_on_import_counts_with_its_modules_header(toy):
    """A decorated function (its decorator may register it) and a class count wherever their
    module is imported, though nothing names them."""
    needed = toy.closure([("toy.runner", "run")])
    assert {("toy.plugins", "plug"), ("toy.plugins", "Auto")} <= needed
