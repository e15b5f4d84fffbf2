"""The policy plug-in interface: built-ins by name, and the custom example from docs/policies.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from policies import (
    AdmissionPolicy,
    Gang,
    Queue,
    QueueTree,
    Resources,
    Snapshot,
    SubmitStamp,
    get_policy,
    plan,
)
from tests.unit.test_planner import cluster

DOC = Path(__file__).resolve().parents[2] / "docs" / "policies.md"


def _example_source() -> str:
    match = re.search(
        r"<!-- example: smallest-first -->\n```python\n(.*?)```", DOC.read_text(), re.S
    )
    assert match, "docs/policies.md lost its smallest-first example"
    return match.group(1)


def _snapshot() -> Snapshot:
    tree = QueueTree.build([Queue(name, size_ratio=None) for name in ("a", "b", "c")])
    pending = [
        Gang("ns/big", "a", Resources(cpu=1000), 24, submitted=SubmitStamp(1.0)),
        Gang("ns/mid", "b", Resources(cpu=1000), 8, submitted=SubmitStamp(2.0)),
        Gang("ns/tiny", "c", Resources(cpu=1000), 2, submitted=SubmitStamp(3.0)),
    ]
    return Snapshot(cluster(4), tree, [], pending, now=10.0)  # 32 cores


def load_doc_example() -> type:
    """Run the documented example (it registers "smallest-first"); its policy class."""
    namespace: dict[str, object] = {}
    exec(compile(_example_source(), str(DOC), "exec"), namespace)  # our own doc
    policy_class = namespace["SmallestFirst"]
    assert isinstance(policy_class, type)
    return policy_class


def test_example_in_the_docs_is_short() -> None:
    lines = [line for line in _example_source().splitlines() if line.strip()]
    assert len(lines) <= 25


def test_custom_policy_from_the_docs() -> None:
    policy = load_doc_example()()
    assert isinstance(policy, AdmissionPolicy)
    assert get_policy("smallest-first").name == "smallest-first"

    by_name = plan(_snapshot(), "smallest-first")
    by_instance = plan(_snapshot(), policy)
    assert by_name == by_instance
    # Smallest first: tiny (2) and mid (8) fit; then big (24) does not: 22 cores left.
    assert [a.gang_id for a in by_name.admitted] == ["ns/tiny", "ns/mid"]
    assert by_name.pending["ns/big"].code == "NoFit"
    # The same world under the built-ins: big (oldest) is admitted first under fifo.
    assert [a.gang_id for a in plan(_snapshot(), "fifo").admitted] == ["ns/big", "ns/mid"]


@pytest.mark.parametrize("name", ["drf", "fifo", "strict-fifo"])
def test_builtins_satisfy_the_protocol(name: str) -> None:
    policy = get_policy(name)
    assert isinstance(policy, AdmissionPolicy)
    assert policy.name == name
    decisions = plan(_snapshot(), name)
    assert decisions.admitted  # something fits in each


def test_head_key_receives_the_share_including_the_head() -> None:
    seen: list[tuple[str, float]] = []

    class Recording:
        name = "recording"

        def head_key(self, gang: Gang, queue: Queue, share: float) -> tuple[float, ...]:
            seen.append((gang.id, share))
            return (share,)

        def blocking(self, queue: Queue) -> str:
            return "skip"

    plan(_snapshot(), Recording())  # type: ignore[arg-type]
    assert seen[:3] == [("ns/big", 24 / 32), ("ns/mid", 8 / 32), ("ns/tiny", 2 / 32)]
