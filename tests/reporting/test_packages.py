"""The layout of zoomattn/reporting: common/ shared by one package per study, no import cycle, and
the cross-method report reading the papers only through what their packages export."""

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import zoomattn.reporting as reporting

ROOT = "zoomattn.reporting"
PAPERS = ("opamp", "rectification", "mudaf", "lkg")
CROSS = "leaderboard"


def modules() -> dict[str, Path]:
    """Every module of the reporting package -> its file."""
    out = {ROOT: Path(reporting.__file__)}
    for info in pkgutil.walk_packages(reporting.__path__, prefix=f"{ROOT}."):
        spec = importlib.util.find_spec(info.name)
        out[info.name] = Path(spec.origin)
    return out


MODULES = modules()


def imports(path: Path) -> list[tuple[str, str | None]]:
    """(module, name) of every ``from module import name`` (or ``import module``: name None) in a
    file, inside functions too, for modules of the reporting package."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.module, a.name) for a in node.names]
    return [(m, n) for m, n in found if m == ROOT or m.startswith(f"{ROOT}.")]


def targets(module: str, name: str | None) -> str:
    """The reporting module an import reaches: ``from pkg import sub`` the submodule itself."""
    return f"{module}.{name}" if f"{module}.{name}" in MODULES else module


GRAPH = {m: {targets(*i) for i in imports(p)} - {m} for m, p in MODULES.items()}


def package(module: str) -> str:
    """The reporting package a module lives in: common, a study's, or the root."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "."


def test_the_layout_has_common_and_one_package_per_study():
    folders = {package(m) for m in MODULES} - {"."}
    assert folders == {"common", *PAPERS, CROSS}
    assert all(package(m) != "." or m == ROOT for m in MODULES)  # nothing left flat


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_reporting_module_imports(module):
    importlib.import_module(module)


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path, or None."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node, [node])):
            return found
    return None


def test_the_reporting_modules_import_each_other_without_a_cycle():
    assert _cycle(GRAPH) is None


def test_the_package_graph_has_no_cycle():
    packages: dict[str, set[str]] = {}
    for module, reached in GRAPH.items():
        packages.setdefault(package(module), set()).update(package(t) for t in reached)
    assert _cycle({p: r - {p} for p, r in packages.items()}) is None


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


@pytest.mark.parametrize("study", ["common", *PAPERS])
def test_a_study_package_imports_only_itself_and_common(study):
    reached = {package(t) for m, ts in GRAPH.items() if package(m) == study for t in ts} - {study}
    assert reached <= {"common"}


def test_the_cross_method_report_reads_the_papers_only_through_their_exports():
    for module, path in MODULES.items():
        if package(module) != CROSS:
            continue
        for imported, name in imports(path):
            paper = package(imported)
            if paper not in PAPERS:
                continue
            exported = importlib.import_module(f"{ROOT}.{paper}").__all__
            where = f"{module} imports {imported}" + (f".{name}" if name else "")
            assert imported == f"{ROOT}.{paper}", where  # the package, not one of its modules
            assert name in exported, where
        for imported, name in imports(path):
            if imported == ROOT:
                assert name in (*PAPERS, "common"), f"{module} imports {ROOT}.{name}"
