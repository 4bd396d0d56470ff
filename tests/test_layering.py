"""The layering rules of the code base, checked on every module's imports.

* a library module never imports the command line (``rstreams.cli``): only
  the command line itself and the bridges' command-line modules (``_cli.py``)
  do;
* no production module imports ``trio.testing`` (``rstreams/testing.py`` is
  the testing helpers' own module);
* no module imports another package's private (underscore) names or
  modules: what a bridge needs of the runtime, or of the kit, has a public
  home (``rstreams.support``, ``rstreams.cli``, ``bridges.kit``);
* the runtime's modules import each other without cycles, type-checking
  imports included.

Imports are read from the source (AST), at every level of the module: one
inside a function counts as much as one at the top.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("rstreams", "bridges")


def _modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join(parts), path


MODULES = dict(_modules())


def _imports(name: str, path: Path, *, top_level_only: bool = False) -> Iterator[tuple[str, tuple[str, ...]]]:
    """``(module imported, names imported from it)`` for each import in the module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = ast.iter_child_nodes(tree) if top_level_only else ast.walk(tree)
    for node in _with_type_checking_blocks(nodes, top_level_only):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                if node.level > 1:
                    base = base[: -(node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield module, tuple(alias.name for alias in node.names)


def _with_type_checking_blocks(nodes: Iterator[ast.AST], top_level_only: bool) -> Iterator[ast.AST]:
    for node in nodes:
        yield node
        if top_level_only and isinstance(node, ast.If):
            # ``if TYPE_CHECKING:`` blocks count: a cycle through them is still a cycle.
            yield from node.body


def _owner(module: str) -> str:
    # Whose private names are whose: the runtime is one owner (its command
    # line included); in bridges, each subpackage is its own (emp, kit, ...).
    parts = module.split(".")
    if parts[0] == "bridges" and len(parts) > 1 and parts[1] in {p.name for p in (ROOT / "bridges").iterdir() if p.is_dir()}:
        return ".".join(parts[:2])
    return parts[0]


def _is_cli(name: str, path: Path) -> bool:
    return name.startswith("rstreams.cli") or name == "rstreams.__main__" or path.name == "_cli.py"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_library_modules_do_not_import_the_command_line(name: str) -> None:
    path = MODULES[name]
    if _is_cli(name, path):
        return
    imported = [module for module, _ in _imports(name, path) if module == "rstreams.cli" or module.startswith("rstreams.cli.")]
    assert imported == [], f"{name} imports the command line"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_production_modules_do_not_import_trio_testing(name: str) -> None:
    if name == "rstreams.testing":
        return
    imported = [
        module
        for module, names in _imports(name, MODULES[name])
        if module.startswith("trio.testing") or (module == "trio" and "testing" in names)
    ]
    assert imported == [], f"{name} imports trio.testing"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_private_names_across_package_boundaries(name: str) -> None:
    owner = _owner(name)
    offences = []
    for module, names in _imports(name, MODULES[name]):
        if module.split(".")[0] not in PACKAGES or _owner(module) == owner:
            continue
        private_parts = [part for part in module.split(".") if part.startswith("_")]
        private_names = [item for item in names if item.startswith("_")]
        if private_parts or private_names:
            offences.append(f"{module} {private_names or ''}".strip())
    assert offences == [], f"{name} imports private parts of another package: {offences}"


def _import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        if not name.startswith("rstreams.") or name.startswith("rstreams.cli") or name.startswith("rstreams.spark"):
            continue
        edges = graph.setdefault(name, set())
        for module, names in _imports(name, path, top_level_only=True):
            targets = [module, *(f"{module}.{item}" for item in names)]
            for target in targets:
                if target in MODULES and target != name and target.startswith("rstreams."):
                    edges.add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    # Tarjan's strongly connected components; a component of two or more
    # modules is an import cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_runtime_has_no_import_cycles() -> None:
    graph = _import_graph()
    # The package __init__ re-exports its modules; an edge into it from one
    # of them would be the cycle, so it is not excluded.
    assert _cycles(graph) == []


def test_the_cycle_check_would_notice() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
