"""No import cycles inside ``liftbridge_nats``.

A cycle of module-level imports makes the outcome depend on which module is imported
first: one of them sees the other half-initialised, and a name it needs may not exist
yet. Imports under ``if TYPE_CHECKING:`` (never run) and inside functions (run after
every module has loaded) cannot do that; everything else that runs at import time can,
class bodies and ``try``/``if`` blocks included. That graph must have no cycle.

The second graph adds the type-only and function-level imports: a cycle there is not a
failure at import time, but two modules that cannot be read, tested or moved apart
(a lazy import is often a cycle in hiding). It must have no cycle either, edges to the
package that encloses a module aside (``from . import __version__``).

Run as a script to print the cycles of both: ``python tests/unit/test_import_graph.py``.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "liftbridge_nats"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE


@dataclass(frozen=True)
class Edge:
    """``source`` imports ``target`` at module level, on ``line`` of its file."""

    source: str
    target: str
    line: int


def module_files(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if "__pycache__" in parts:
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join((package, *parts))] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module, *, deferred: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements that run when the module is imported (with ``deferred``:
    every import statement, type-only and function-level ones too)."""
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif deferred:
            pending.extend(ast.iter_child_nodes(node))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            pending.extend(node.orelse)
        else:
            pending.extend(ast.iter_child_nodes(node))


def _base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ``from X import ...`` statement names as ``X``."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if node.level > 1:
        parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, *([node.module] if node.module else [])])


@functools.cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def import_edges(modules: dict[str, Path], *, deferred: bool = False) -> list[Edge]:
    """The package's module-level imports of its own modules (with ``deferred``: all its
    imports of its own modules, but those of a package enclosing the importer).

    ``from P import name`` is an edge to ``P.name`` when that is a module, else to
    ``P``; the parent packages an import initialises on the way are not edges (they are
    always initialised, or being initialised, before their submodules).
    """
    edges = []
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = _parse(path)
        for node in _imports(tree, deferred=deferred):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _base(module, is_package, node)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            for target in dict.fromkeys(targets):
                if target not in modules or target == module:
                    continue
                if deferred and module.startswith(target + "."):
                    continue
                edges.append(Edge(module, target, node.lineno))
    return edges


def _tangles(graph: dict[str, list[Edge]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm):
    every cycle lies within one of them."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            edge = next(edges, None)
            if edge is not None:
                if edge.target not in index:
                    index[edge.target] = low[edge.target] = len(index)
                    stack.append(edge.target)
                    on_stack.add(edge.target)
                    work.append((edge.target, iter(graph.get(edge.target, []))))
                elif edge.target in on_stack:
                    low[node] = min(low[node], index[edge.target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def cycles(edges: list[Edge], limit: int = 50) -> list[list[Edge]]:
    """The elementary cycles of the graph (at most ``limit``), each once, starting at its
    smallest module."""
    graph: dict[str, list[Edge]] = {}
    for edge in sorted(edges, key=lambda e: (e.source, e.target, e.line)):
        graph.setdefault(edge.source, [])
        if all(e.target != edge.target for e in graph[edge.source]):
            graph[edge.source].append(edge)
    found: list[list[Edge]] = []
    for tangle in _tangles(graph):
        for start in sorted(tangle):
            # Only through modules after ``start``: a cycle is found from its smallest node.
            def ahead(edge: Edge, start: str = start, tangle: set[str] = tangle) -> bool:
                return edge.target in tangle and edge.target >= start

            stack = [(e, 0) for e in reversed(graph[start]) if ahead(e)]
            path: list[Edge] = []
            while stack and len(found) < limit:
                edge, depth = stack.pop()
                del path[depth:]
                if edge.target == start:
                    found.append([*path, edge])
                    continue
                if edge.target in {e.target for e in path}:
                    continue
                path.append(edge)
                stack.extend((e, depth + 1) for e in reversed(graph[edge.target]) if ahead(e))
    return found


def describe(cycle: list[Edge]) -> str:
    """``a (line 3) -> b (line 9) -> a``: each module, and the line of its import."""
    hops = [f"{_short(edge.source)} (line {edge.line})" for edge in cycle]
    return " -> ".join([*hops, _short(cycle[0].source)])


def _short(module: str) -> str:
    return module.removeprefix(PACKAGE + ".")


def _tiny_package(root: Path) -> dict[str, Path]:
    package = root / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("__version__ = '1'\n")
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import b\n"
        "if TYPE_CHECKING:\n"
        "    from .c import C\n"
        "def f():\n"
        "    from . import c, __version__\n"
    )
    (package / "b.py").write_text("try:\n    from .a import x\nexcept ImportError:\n    pass\n")
    (package / "c.py").write_text("class K:\n    from .a import f\n")
    return module_files(package, "pkg")


def test_the_first_graph_sees_module_level_imports_only(tmp_path: Path) -> None:
    edges = import_edges(_tiny_package(tmp_path))
    assert {(e.source, e.target) for e in edges} == {
        ("pkg.a", "pkg.b"),
        ("pkg.b", "pkg.a"),
        ("pkg.c", "pkg.a"),
    }
    assert [describe(c) for c in cycles(edges)] == ["pkg.a (line 2) -> pkg.b (line 2) -> pkg.a"]


def test_the_second_graph_adds_type_only_and_function_imports(tmp_path: Path) -> None:
    edges = import_edges(_tiny_package(tmp_path), deferred=True)
    assert {(e.source, e.target) for e in edges} == {
        ("pkg.a", "pkg.b"),
        ("pkg.a", "pkg.c"),
        ("pkg.b", "pkg.a"),
        ("pkg.c", "pkg.a"),
    }
    assert sorted(describe(c) for c in cycles(edges)) == [
        "pkg.a (line 2) -> pkg.b (line 2) -> pkg.a",
        "pkg.a (line 4) -> pkg.c (line 2) -> pkg.a",
    ]


def test_cycles_are_each_reported_once() -> None:
    edges = [
        Edge("p.a", "p.b", 1),
        Edge("p.b", "p.c", 1),
        Edge("p.c", "p.a", 1),
        Edge("p.b", "p.a", 2),
        Edge("p.d", "p.a", 1),
    ]
    found = sorted(" ".join(e.source for e in c) for c in cycles(edges))
    assert found == ["p.a p.b", "p.a p.b p.c"]


def _report(deferred: bool) -> str:
    edges = import_edges(module_files(), deferred=deferred)
    assert len(edges) > 50  # the graph was read at all
    found = cycles(edges)
    kind = "counting type-only and function-level imports" if deferred else "at module level"
    return (
        f"{len(found)} import cycle(s) in {PACKAGE} {kind}:\n" + "\n".join(map(describe, found))
        if found
        else ""
    )


def test_no_import_cycles_at_module_level() -> None:
    report = _report(deferred=False)
    assert not report, report


def test_no_import_cycles_counting_type_only_and_function_imports() -> None:
    report = _report(deferred=True)
    assert not report, report


if __name__ == "__main__":
    reports = [_report(deferred=False), _report(deferred=True)]
    print("\n".join(r for r in reports if r) or "no import cycles")
    sys.exit(1 if any(reports) else 0)
