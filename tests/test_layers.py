"""The package's layers, read from its import statements (function-level imports included): the
lower layers import nothing from the higher ones, and the method folders form no import cycle."""

import ast

import pytest

from zoomattn.code_hash import PACKAGE

LOWER = ("attention", "data", "modeling")
HIGHER = ("methods", "stages", "reporting")


def _module_name(path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path) -> set[str]:
    """Every zoomattn module a file names in an import statement, wherever the statement is."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}  # a submodule imported by name
    return {name for name in out if name.startswith("zoomattn")}


def test_imports_of_reads_function_level_and_from_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "import os\nfrom zoomattn.io import read_json\ndef f():\n    import zoomattn.x\n"
    )
    assert imports_of(source) == {"zoomattn.io", "zoomattn.io.read_json", "zoomattn.x"}


@pytest.mark.parametrize("layer", LOWER)
def test_a_lower_layer_imports_no_higher_one(layer):
    higher = tuple(f"zoomattn.{h}" for h in HIGHER)
    found = {
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        for name in imports_of(path)
        if name == higher or name.startswith(higher)
    }
    assert not found, f"{layer}/ imports a higher layer: {sorted(found)}"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_methods_and_the_layers_below_them_have_no_import_cycle():
    folders = ("methods", "attention", "modeling", "training", "evaluation")
    paths = [p for folder in folders for p in sorted((PACKAGE / folder).rglob("*.py"))]
    modules = {_module_name(p): p for p in paths}
    graph = {name: imports_of(path) & set(modules) - {name} for name, path in modules.items()}
    cycle = _cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"
