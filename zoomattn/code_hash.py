"""The hash of the code a workflow job runs, derived from the source itself.

Every job's spec carries ``code: code_hash(stage, method, report)`` (zoomattn/specs.py), so
Snakemake reruns a job when, and only when, the code it runs changes. The stage is a command of
the stage table (zoomattn/stages: its function is where a job's code starts); the rest is read
from the package's syntax trees (``ast``: nothing is imported or run):

- the unit of code is a module's top-level function or class, or its header (every other
  top-level statement, imports included: importing the module runs it);
- a unit needs its module's header, the functions and classes of its module it names, and what
  its imports name, function-local imports included: ``from m import f`` needs ``f`` of ``m``,
  ``import m`` and ``from pkg import m`` all of ``m``. A stage needs its function's unit;
- ``import a.b.c`` needs ``a.b.c`` alone: a package's ``__init__`` counts where its own names are
  imported, not for running first (zoomattn/stages' imports no stage module then);
- a method folder (``methods/<name>/``) counts for its own cells only: the method registry
  imports every method's config, and those imports are not followed; ``method`` adds all of the
  cell's folder and what it needs (a module outside the methods package that imports a method's
  module does need it);
- a unit counts by its normalised source, its syntax tree without docstrings and positions: a
  comment, docstring or formatting edit changes no hash, any code edit changes the hash of every
  stage that needs the unit.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from zoomattn.stages import STAGES

PACKAGE = Path(__file__).resolve().parent

DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
HEADER = None  # the unit of a module's top-level statements other than definitions
WHOLE = "*"  # every unit of a module (``import m``)


@dataclass(frozen=True)
class Unit:
    digest: str  # of the normalised source
    names: frozenset[str]  # the functions and classes of its module it names
    imports: frozenset[tuple[str, str | None]]  # (package module, what of it: a name, WHOLE)


def _runs_on_import(stmt: ast.stmt) -> bool:
    """A class (its body runs, and its base may register it) or a decorated function (so does
    its decorator): it counts with its module's header."""
    return isinstance(stmt, ast.ClassDef) or (
        isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and bool(stmt.decorator_list)
    )


def _strip_docstring(node) -> None:
    first = node.body[0] if node.body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        node.body = node.body[1:] or [ast.Pass()]


def _serialise(node, text: list[str], found: list[ast.AST]) -> None:
    """Append the node's normalised source to ``text``: its type and fields, without docstrings
    and positions (as ``ast.dump``, in one pass); collect its names and imports in ``found``."""
    if isinstance(node, ast.AST):
        if isinstance(node, ast.Name | ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, DEFINITIONS):
            _strip_docstring(node)
        text.append(f"{type(node).__name__}(")
        for field in node._fields:
            _serialise(getattr(node, field, None), text, found)
            text.append(",")
        text.append(")")
    elif isinstance(node, list):
        text.append("[")
        for item in node:
            _serialise(item, text, found)
            text.append(",")
        text.append("]")
    else:
        text.append(repr(node))


class CodeIndex:
    """The modules of one package (``package``: its directory), each parsed when first needed."""

    def __init__(self, package: Path):
        self.root = package.name
        self.files: dict[str, Path] = {}
        for path in sorted(package.rglob("*.py")):
            parts = path.relative_to(package).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            self.files[".".join((self.root, *parts))] = path
        self.hasher = f"{self.root}.code_hash"  # config.py imports it: no job runs it
        self.methods = f"{self.root}.methods"
        self._units: dict[str, dict[str | None, Unit]] = {}

    # ---- reading a module ----
    def units(self, module: str) -> dict[str | None, Unit]:
        """A module's units: its header (key HEADER) and each top-level function and class."""
        if module not in self._units:
            self._units[module] = self._read(module)
        return self._units[module]

    def _read(self, module: str) -> dict[str | None, Unit]:
        path = self.files[module]
        try:
            tree = ast.parse(path.read_text(), str(path))
        except SyntaxError as err:
            raise ValueError(f"{path}: cannot hash code that does not parse: {err}") from err
        _strip_docstring(tree)
        statements: dict[str | None, list[ast.stmt]] = {HEADER: []}
        for stmt in tree.body:
            name = stmt.name if isinstance(stmt, DEFINITIONS) else HEADER
            statements.setdefault(name, []).append(stmt)
        defined = statements.keys() - {HEADER}
        on_import = {stmt.name for stmt in tree.body if _runs_on_import(stmt)}
        units = {}
        for name, stmts in statements.items():
            text: list[str] = []
            found: list[ast.AST] = []
            _serialise(stmts, text, found)
            names = {node.id for node in found if isinstance(node, ast.Name)}
            imports = {
                target
                for node in found
                if not isinstance(node, ast.Name)
                for target in self._imported(node, module)
            }
            digest = hashlib.sha256("".join(text).encode()).hexdigest()
            if name is HEADER:
                names |= on_import
            units[name] = Unit(digest, frozenset((names & defined) - {name}), frozenset(imports))
        return units

    def _imported(self, node: ast.Import | ast.ImportFrom, module: str) -> Iterator[tuple]:
        """What of the package an import statement names: (module, name or WHOLE)."""
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from self._longest_module(alias.name)
            return
        base = self._absolute(node, module)
        for alias in node.names:
            if f"{base}.{alias.name}" in self.files:  # from pkg import module
                yield f"{base}.{alias.name}", WHOLE
            elif base in self.files:
                yield base, WHOLE if alias.name == "*" else alias.name
            else:
                yield from self._longest_module(base)

    def _longest_module(self, dotted: str) -> Iterator[tuple[str, str]]:
        parts = dotted.split(".")
        for end in range(len(parts), 0, -1):
            if ".".join(parts[:end]) in self.files:
                yield ".".join(parts[:end]), WHOLE
                return

    def _absolute(self, node: ast.ImportFrom, module: str) -> str:
        if node.level == 0:
            return node.module or ""
        package = module if self.files[module].name == "__init__.py" else module.rpartition(".")[0]
        parts = package.split(".")
        base = ".".join(parts[: len(parts) - (node.level - 1)])
        return f"{base}.{node.module}" if node.module else base

    # ---- what a job needs ----
    def method_of(self, module: str) -> str | None:
        """The method whose folder holds the module (``<root>.methods.<name>...``), if any."""
        head, _, rest = module.partition(f"{self.methods}.")
        name = rest.split(".")[0]
        folder = f"{self.methods}.{name}"
        is_folder = folder in self.files and self.files[folder].name == "__init__.py"
        return name if not head and name and is_folder else None

    def _follows(self, importer: str, imported: str) -> bool:
        if imported == self.hasher:
            return False
        in_methods = importer == self.methods or importer.startswith(f"{self.methods}.")
        registry = in_methods and self.method_of(importer) is None
        return not (registry and self.method_of(imported))

    def closure(self, starts: Iterable[tuple[str, str | None]]) -> set[tuple[str, str | None]]:
        """The units ``starts`` ((module, name or WHOLE)) need, themselves included."""
        seen: set[tuple[str, str | None]] = set()
        todo = list(starts)
        while todo:
            module, name = todo.pop()
            units = self.units(module)
            if name == WHOLE:
                todo += [(module, unit) for unit in units]
                continue
            name = name if name in units else HEADER  # a name its header binds
            if (module, name) in seen:
                continue
            seen.add((module, name))
            unit = units[name]
            todo += [(module, HEADER), *((module, n) for n in unit.names)]
            todo += [target for target in unit.imports if self._follows(module, target[0])]
        return seen

    def stage_unit(self, stage: str) -> tuple[str, str]:
        module, function = STAGES[stage].split(":")
        if module not in self.files:
            raise ValueError(f"stage {stage}: no module {module} in {self.root} (zoomattn/stages)")
        if function not in self.units(module):
            raise ValueError(f"{self.files[module]}: no function {function!r} (zoomattn/stages)")
        return module, function

    def method_modules(self, method: str) -> list[str]:
        modules = [m for m in self.files if self.method_of(m) == method]
        if not modules:
            raise ValueError(f"no method folder {self.methods.replace('.', '/')}/{method}/")
        return modules

    def report_modules(self, study: str) -> list[str]:
        package = f"{self.root}.reporting.{study}"
        modules = [m for m in self.files if m == package or m.startswith(f"{package}.")]
        if not modules:
            raise ValueError(f"no report package {package.replace('.', '/')}/ for study {study!r}")
        return modules

    def job_units(
        self, stage: str, method: str | None = None, report: str | None = None
    ) -> set[tuple[str, str | None]]:
        """Every unit of code a job of ``stage`` (for a cell of ``method``; the report of study
        ``report``) runs."""
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; the stages: {', '.join(STAGES)}")
        starts = [self.stage_unit(stage)]
        if method is not None:
            starts += [(module, WHOLE) for module in self.method_modules(method)]
        if report is not None:
            starts += [(module, WHOLE) for module in self.report_modules(report)]
        return self.closure(starts)

    def hash(self, stage: str, method: str | None = None, report: str | None = None) -> str:
        h = hashlib.sha256()
        for module, name in sorted(
            self.job_units(stage, method, report), key=lambda u: (u[0], u[1] or "")
        ):
            h.update(f"{module}:{name or ''} {self.units(module)[name].digest}\n".encode())
        return h.hexdigest()[:16]

    def stage_imports(self, stage: str) -> set[str]:
        """The package modules a stage's function imports: itself, its module's header and the
        functions and classes of its module it uses."""
        module, function = self.stage_unit(stage)
        units = self.units(module)
        local: set[str | None] = set()
        todo = [function, HEADER]
        while todo:
            name = todo.pop()
            if name not in local:
                local.add(name)
                todo += units[name].names
        return {target for name in local for target, _ in units[name].imports}


@functools.cache
def package_index() -> CodeIndex:
    """This checkout's package, parsed once per process (Snakemake hashes every job's spec)."""
    return CodeIndex(PACKAGE)


@functools.cache
def code_hash(stage: str, method: str | None = None, report: str | None = None) -> str:
    """The hash of the code a job of ``stage`` runs; ``method``: the cell's method, whose folder
    counts for its own jobs only; ``report``: the study whose report package a report job runs
    (the report stage imports it by name)."""
    return package_index().hash(stage, method, report)


def stage_modules() -> list[str]:
    """Every stage's module and the package modules its function imports (the warm worker
    preloads them)."""
    index = package_index()
    modules = {STAGES[stage].split(":")[0] for stage in STAGES}
    return sorted(modules.union(*(index.stage_imports(stage) for stage in STAGES)))
