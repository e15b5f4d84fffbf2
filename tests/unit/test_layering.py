"""Imports point down only: muster/ (commands, benches) may import everything; nothing in
simulator/, admission/, webhook/, kubeport/ or policies/ imports muster; the webhook imports
nothing of the controller (admission/); kubeport/ (the API port) imports none of the packages
above it; policies/ imports neither kubernetes nor kopf (nor the I/O packages). Read from the
source (ast), so a lazy import inside a function counts as much as one at the top."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BELOW_MUSTER = ("simulator", "admission", "webhook", "kubeport", "policies")
# What each package must not import (the first dotted name of the imported module).
FORBIDDEN: dict[str, frozenset[str]] = {
    "simulator": frozenset({"muster"}),
    "admission": frozenset({"muster", "simulator"}),
    # The webhook reads gangs with the pure readers of policies/ and talks to the API through
    # kubeport/: nothing of the controller's.
    "webhook": frozenset({"muster", "simulator", "admission"}),
    "kubeport": frozenset({"muster", "simulator", "admission", "webhook", "policies"}),
    "policies": frozenset(
        {"muster", "simulator", "admission", "webhook", "kubeport", "kopf", "kubernetes", "aiohttp"}
    ),
}


def imported_modules(path: Path, root: Path = REPO) -> Iterator[tuple[int, str]]:
    """(line, module) for every import statement in `path`, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = path.relative_to(root).parent.parts
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                yield node.lineno, ".".join([*base, node.module or ""]).strip(".")
            elif node.module is not None:
                yield node.lineno, node.module


def violations(package: str, root: Path = REPO) -> list[str]:
    found = []
    for path in sorted((root / package).rglob("*.py")):
        for line, module in imported_modules(path, root):
            if module.split(".")[0] in FORBIDDEN[package]:
                found.append(f"{path.relative_to(root)}:{line} imports {module}")
    return found


@pytest.mark.parametrize("package", BELOW_MUSTER)
def test_imports_point_down(package: str) -> None:
    assert violations(package) == []


def test_the_walk_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    # The checker itself: an import inside a function, and relative ones, are found.
    (tmp_path / "policies" / "kinds").mkdir(parents=True)
    (tmp_path / "policies" / "kinds" / "probe.py").write_text(
        "import json\n"
        "def f() -> None:\n"
        "    from muster import cli\n"
        "    from ..model import Gang\n"
        "    import kubernetes.client\n"
    )
    modules = [m for _, m in imported_modules(tmp_path / "policies/kinds/probe.py", tmp_path)]
    assert modules == ["json", "muster", "policies.model", "kubernetes.client"]
    assert violations("policies", tmp_path) == [
        "policies/kinds/probe.py:3 imports muster",
        "policies/kinds/probe.py:5 imports kubernetes.client",
    ]
