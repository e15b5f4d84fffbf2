"""No class over 400 lines without a reason (issue 27: classes you can hold in your head).

A class's length is `end_lineno - lineno + 1` as ast measures it (decorators not counted, its
docstring and methods counted). Every class in the packages below `tests/` longer than MAX_LINES
must say why in its docstring, with a sentence starting with the marker phrase "Long because",
or be split along its seams into classes with one job each.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.unit.test_function_length import MARKER, PACKAGES

REPO = Path(__file__).resolve().parents[2]
MAX_LINES = 400


def classes(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.ClassDef]]:
    """(qualified name, node) for every class in `tree`, nested ones too."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef):
            name = f"{prefix}{node.name}"
            yield name, node
            yield from classes(node, f"{name}.")
        else:
            yield from classes(node, prefix)


def long_classes(root: Path = REPO) -> Iterator[tuple[str, int]]:
    """("path:qualname", length) for every class over MAX_LINES without the marker."""
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            relative = path.relative_to(root).as_posix()
            for name, node in classes(tree):
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1
                if length > MAX_LINES and MARKER not in (ast.get_docstring(node) or ""):
                    yield f"{relative}:{name}", length


def test_no_long_class_without_a_reason() -> None:
    offenders = [f"{length:4d} {where}" for where, length in long_classes()]
    assert not offenders, (
        f"classes over {MAX_LINES} lines: split them along their seams, or say why in the "
        f"docstring with {MARKER!r}:\n" + "\n".join(offenders)
    )


def test_the_walk_finds_a_long_class(tmp_path: Path) -> None:
    package = tmp_path / "policies"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (package / "big.py").write_text(
        f"class Big:\n{body}\n"
        f"class Explained:\n    '''{MARKER} it is a table.'''\n{body}\n"
        "class Small:\n    pass\n",
        encoding="utf-8",
    )
    assert list(long_classes(tmp_path)) == [("policies/big.py:Big", MAX_LINES + 1)]
