"""The architecture, checked from the code's own imports (docs/architecture.md).

Two independent checks: import-linter's contracts (pyproject.toml, ``[tool.importlinter]``:
layers, plugin families, the plugin API) and this module's own reading of every module's
syntax tree (cycles counting imports made inside functions, deferred imports, module length,
file names).
"""

from __future__ import annotations

import ast
import functools
from collections import Counter
from pathlib import Path

import networkx as nx
import pytest

import anonflow
import anonflow_std

ENGINE = Path(anonflow.__file__).parent
PLUGINS = Path(anonflow_std.__file__).parent
#: what a first-party plugin may import of the engine (docs/plugins.md)
PLUGIN_API = {"anonflow", "anonflow.api", "anonflow.errors", "anonflow.testing"}
MAX_LINES = 800
MAX_DEFERRED = 15


def _modules() -> dict[str, Path]:
    found = {}
    for root, package in ((ENGINE, "anonflow"), (PLUGINS, "anonflow_std")):
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


MODULES = _modules()


class Import:
    def __init__(self, source: str, target: str, line: int, deferred: bool, comment: str):
        self.source, self.target, self.line, self.deferred, self.comment = source, target, line, deferred, comment

    def __repr__(self) -> str:
        return f"{self.source}:{self.line} -> {self.target}"


def _target(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


@functools.cache
def _parsed(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for every check that reads it."""
    return ast.parse(path.read_text(encoding="utf-8"))


@functools.cache
def _imports() -> list[Import]:
    """Every import of the engine and the plugins (computed when a test first asks)."""
    found = []
    for module, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        is_package = path.name == "__init__.py"

        def visit(node: ast.AST, in_function: bool, type_checking: bool) -> None:
            for child in ast.iter_child_nodes(node):
                inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                guarded = type_checking or (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test))
                if isinstance(child, (ast.Import, ast.ImportFrom)) and not guarded:
                    if isinstance(child, ast.Import):
                        names = [a.name for a in child.names]
                    else:
                        base = child.module or ""
                        if child.level:
                            here = module.split(".") if is_package else module.split(".")[:-1]
                            here = here[: len(here) - child.level + 1]
                            base = ".".join(here + ([base] if base else []))
                        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in child.names]
                    comment = " ".join(lines[max(0, child.lineno - 2): child.end_lineno])
                    for target in {_target(n) for n in names} - {None, module}:
                        found.append(Import(module, target, child.lineno, inner, comment))
                visit(child, inner, guarded)

        visit(_parsed(path), False, False)
    return found


@functools.cache
def _defined(path: Path) -> set[str]:
    """The names a module binds at its top level, and those its ``__all__`` lists (a package
    may provide names lazily, as ``anonflow`` does)."""
    names: set[str] = set()
    for node in _parsed(path).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
                if isinstance(target, ast.Name) and target.id == "__all__" and node.value is not None:
                    names.update(c.value for c in ast.walk(node.value)
                                 if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return names


def _missing() -> list[str]:
    """``from PACKAGE import NAME`` where NAME is neither a module of the package nor a name it
    defines (a module that was moved or renamed: an editable install of an older tree would
    still find it, a wheel would not)."""
    found = []
    tests = Path(__file__).resolve().parents[1]
    readers = [*MODULES.items(), *((f"tests:{p.relative_to(tests)}", p) for p in sorted(tests.rglob("*.py")))]
    for module, path in readers:
        is_package = path.name == "__init__.py"
        for node in ast.walk(_parsed(path)):
            if not isinstance(node, ast.ImportFrom) or (node.level and module.startswith("tests:")):
                continue
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                here = here[: len(here) - node.level + 1]
                base = ".".join(here + ([base] if base else []))
            if base.split(".")[0] not in ("anonflow", "anonflow_std"):
                continue
            if base not in MODULES:
                found.append(f"{module}:{node.lineno} imports from {base}, which does not exist")
                continue
            defined = _defined(MODULES[base])
            for alias in node.names:
                if f"{base}.{alias.name}" not in MODULES and alias.name != "*" and alias.name not in defined:
                    found.append(f"{module}:{node.lineno} imports {alias.name} from {base}, which has none")
    return found


def test_every_import_of_the_project_names_what_exists():
    """In the engine, the plugins and the tests."""
    assert _missing() == []


def test_no_import_cycles_counting_imports_inside_functions():
    graph = nx.DiGraph((i.source, i.target) for i in _imports())
    # a package's __init__ re-exporting its own modules is not a cycle of concerns
    graph.remove_edges_from([(a, b) for a, b in list(graph.edges) if b.startswith(a + ".")])
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert cycles == []


def test_deferred_imports_are_few_and_each_says_why():
    deferred = [i for i in _imports() if i.deferred]
    assert len({(i.source, i.line) for i in deferred}) <= MAX_DEFERRED, deferred
    unexplained = [i for i in deferred if "# deferred:" not in i.comment]
    assert unexplained == []


def test_first_party_plugins_import_only_the_plugin_api():
    internal = [i for i in _imports() if i.source.startswith("anonflow_std") and not i.target.startswith("anonflow_std")
                and i.target not in PLUGIN_API]
    assert internal == []


def test_the_engine_never_imports_the_plugins():
    assert [i for i in _imports() if i.source.startswith("anonflow.") and i.target.startswith("anonflow_std")] == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_is_over_800_lines(module):
    assert len(MODULES[module].read_text(encoding="utf-8").splitlines()) <= MAX_LINES


def test_module_file_names_are_not_reused_across_packages():
    names = Counter(path.name for path in MODULES.values() if path.name != "__init__.py")
    assert [name for name, n in names.items() if n > 1] == []


def test_import_linter_contracts_hold():
    from importlinter.cli import EXIT_STATUS_SUCCESS, lint_imports  # the test extra brings it

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if not pyproject.is_file():
        pytest.skip("needs the source checkout's pyproject.toml")
    assert lint_imports(config_filename=str(pyproject), no_cache=True, no_logo=True) == EXIT_STATUS_SUCCESS


def test_every_package_folder_is_installed():
    """pyproject.toml lists the packages a wheel holds: a new package folder left out of it
    works in a checkout and is missing from an installed anonflow."""
    import tomllib

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if not pyproject.is_file():
        pytest.skip("needs the source checkout's pyproject.toml")
    listed = set(tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    folders = {m for m, path in MODULES.items() if path.name == "__init__.py"}
    assert folders == listed
