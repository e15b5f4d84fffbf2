"""A kind lives in its module of `policies/kinds/` and its registration: the controller, the
webhook, the commands and the simulator reach it through the `Kind` protocol and the registry
(`policies.kinds.registry`), never by its name (issue 27). This test reads their code (comments
and docstrings left out) and fails on a branch on a kind's name outside the places listed below,
each with its reason. What adding a kind touches besides its module and registration is then:
`kubeport/access.py` (the mirror of manifests/base/rbac.yaml's rights, tests/unit/test_access.py
keeps them equal) and, for a kind whose operator the local control plane runs,
`simulator/controlplane/operators.py` and `versions.py` (the operator's record and pinned
version); the trace reader (`simulator/trace*.py`) names the kinds a trace may hold."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from policies.kinds.registry import KINDS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("admission", "webhook", "muster", "kubeport", "simulator", "policies")

EVERY_KIND = {
    "policies/kinds/registry.py": "the registration",
    "policies/kinds/__init__.py": "the package's exports",
    "kubeport/access.py": "the mirror of the RBAC manifest's rights",
    "simulator/tracemodel.py": "the trace reader",
    "simulator/traceparse.py": "the trace reader",
    "simulator/tracecsv.py": "the trace reader",
    "simulator/controlplane/operators.py": "the operators the local control plane builds",
    "simulator/controlplane/versions.py": "the operators' pinned versions",
}
"""Where any kind may be named."""
OLDER: dict[str, dict[str, str]] = {
    "MiniCluster": {
        "kubeport/kubeapi.py": "the MiniCluster resource, older than the registry",
        "webhook/configuration.py": "MINICLUSTER_PATH, for the never-fits tests",
        "simulator/controlplane/minicluster.py": "the stand-in for the Flux Operator",
        "simulator/controlplane/operatorrun.py": "the Flux Operator's CRD wait",
        "simulator/kwok_submit.py": "the stand-in for the Flux Operator",
        "simulator/kwok_session.py": "the stand-in for the Flux Operator",
        "simulator/burst.py": "the blog burst's gangs are MiniClusters",
        "muster/commands/trace.py": "`trace burst --kind`",
        "muster/commands/status.py": "its Job's owner, in `muster status`",
        "muster/bench/admit.py": "the benches submit MiniClusters",
        "muster/bench/kueue_perf.py": "the benches submit MiniClusters",
        "muster/bench/plan.py": "the benches submit MiniClusters",
    },
    "PodGroup": {
        "policies/kinds/nativegroups.py": "scheduling.k8s.io's own PodGroup (the native gang API), "
        "a homonym",
    },
}
"""Where the first kinds besides Job are still named (older than the seam), or a homonym is: a
new kind has no entry here."""


def code_lines(path: Path) -> list[str]:
    """The file's code, line by line, without comments, docstrings and long strings (messages
    and help texts may name a kind)."""
    source = path.read_text()
    skipped: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            skipped.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    lines: dict[int, list[str]] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT or token.start[0] in skipped:
            continue
        if token.type == tokenize.STRING and " " in token.string:
            continue
        lines.setdefault(token.start[0], []).append(token.string)
    return [" ".join(tokens) for _, tokens in sorted(lines.items())]


def pattern(name: str) -> re.Pattern[str]:
    """A kind's name as code spells it: the string, the constant, the module."""
    upper = name.upper()
    return re.compile(rf"[\"']{name}[\"']|\b{upper}S?\b|\b{name.lower()}\b")


@pytest.mark.parametrize("name", sorted(set(KINDS) - {"Job"}))
def test_no_code_outside_the_seam_names_a_kind(name: str) -> None:
    allowed = {**EVERY_KIND, **OLDER.get(name, {})}
    own = f"policies/kinds/{name.lower()}.py"
    found = pattern(name)
    named = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            where = str(path.relative_to(ROOT))
            if where == own or where in allowed:
                continue
            hits = [line for line in code_lines(path) if found.search(line)]
            if hits:
                named.append(f"{where}: {hits[0]}")
    assert not named, (
        f"code outside {own} branches on {name}; reach it through policies.kinds.Kind and the "
        "registry instead:\n" + "\n".join(named)
    )


def test_the_allowed_places_exist() -> None:
    """An entry for a file that is gone would hide nothing, and would go unnoticed."""
    for where in [*EVERY_KIND, *(w for entries in OLDER.values() for w in entries)]:
        assert (ROOT / where).exists(), where
