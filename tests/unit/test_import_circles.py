"""No import circle among muster's modules: the module-level imports (those a module runs when it
is loaded; `if TYPE_CHECKING:` blocks and imports inside functions left out, as those are how a
lazy edge is drawn on purpose) form a graph without a cycle. A circle here is what
`farm-studio look` reports as one; merging the pod-group kind once made one of five modules in
policies/kinds (members -> reading -> registry -> podgroup -> members)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import networkx as nx

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("muster", "admission", "webhook", "kubeport", "policies", "simulator")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _top_level(tree: ast.Module) -> Iterator[ast.stmt]:
    """The statements run at import: the module's own, and those of top-level if/try blocks
    other than `if TYPE_CHECKING:`."""
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", "")
            if name == "TYPE_CHECKING":
                pending[:0] = node.orelse
                continue
            pending[:0] = [*node.body, *node.orelse]
        elif isinstance(node, ast.Try):
            pending[:0] = [*node.body, *node.orelse, *node.finalbody]
        else:
            yield node


def imports_of(path: Path, modules: set[str]) -> Iterator[str]:
    """The modules of `modules` that `path` imports when it is loaded (`from pkg import mod`
    counts as an import of `pkg.mod` when that is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in _top_level(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    yield f"{base}.{alias.name}"
                elif base in modules:
                    yield base


def import_graph() -> nx.DiGraph:
    paths = [p for package in PACKAGES for p in (REPO / package).rglob("*.py")]
    modules = {module_name(p) for p in paths}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for path in paths:
        source = module_name(path)
        for target in imports_of(path, modules):
            if target != source and not source.startswith(f"{target}."):
                graph.add_edge(source, target)
    return graph


def test_no_import_circle() -> None:
    circles = [
        sorted(component)
        for component in nx.strongly_connected_components(import_graph())
        if len(component) > 1
    ]
    assert not circles, f"import circles: {circles}"


def test_the_check_sees_a_circle(tmp_path: Path) -> None:
    """The graph is read as the interpreter loads it: a two-module circle is one component."""
    graph = nx.DiGraph([("a", "b"), ("b", "a"), ("b", "c")])
    components = [c for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert components == [{"a", "b"}]
    assert import_graph().number_of_edges() > 100
