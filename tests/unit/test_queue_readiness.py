"""policies.readiness: each Queue's Ready condition, decided from all the Queues at once."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from policies import Queue
from policies.model import QueueTree
from policies.readiness import queue_readiness


def q(name: str, parent: str | None = None, weight: float = 1.0) -> Queue:
    return Queue(name, parent=parent, weight=weight)


def test_a_valid_tree_is_ready_throughout() -> None:
    got = queue_readiness({"org": q("org"), "a": q("a", "org"), "b": q("b", "org")})
    assert {n: (r.ready, r.reason) for n, r in got.items()} == {
        "org": (True, "Active"),
        "a": (True, "Active"),
        "b": (True, "Active"),
    }


def test_a_missing_parent_is_named_with_the_queues_there_are() -> None:
    got = queue_readiness({"a": q("a", "nope"), "b": q("b")})
    assert not got["a"].ready and got["a"].reason == "ParentNotFound"
    assert 'spec.parent "nope" names no Queue' in got["a"].message
    assert "one of: b" in got["a"].message
    assert got["b"].ready


def test_every_member_of_a_cycle_says_so_and_names_the_cycle() -> None:
    got = queue_readiness({"a": q("a", "b"), "b": q("b", "c"), "c": q("c", "a"), "d": q("d", "a")})
    for name in "abc":
        assert (got[name].ready, got[name].reason) == (False, "ParentCycle")
        assert "(a -> b -> c -> a)" in got[name].message
    assert (got["d"].ready, got["d"].reason) == (False, "ParentNotReady")
    assert got["d"].message.startswith('queue "a" above it is not ready (ParentCycle)')


def test_a_self_parent_is_a_cycle_of_one() -> None:
    got = queue_readiness({"a": q("a", "a")})
    assert got["a"].reason in ("ParentCycle", "InvalidSpec")
    assert not got["a"].ready


def test_a_bad_spec_and_everything_below_it_is_not_ready_with_the_cause() -> None:
    got = queue_readiness(
        {"org": None, "a": q("a", "org"), "x": q("x", "a"), "w": q("w", weight=0)},
        {"org": 'spec.nominal.cpu: "lots" is not a quantity'},
    )
    assert (got["org"].reason, got["org"].message) == (
        "InvalidSpec",
        'spec.nominal.cpu: "lots" is not a quantity',
    )
    assert got["a"].reason == got["x"].reason == "ParentNotReady"
    assert got["x"].message == got["a"].message  # both name the cause, "org"
    assert 'queue "org" above it is not ready (InvalidSpec)' in got["x"].message
    assert got["w"].reason == "InvalidSpec" and "spec.weight" in got["w"].message


def test_a_gang_reason_names_the_queue_and_the_cause() -> None:
    reason = queue_readiness({"a": q("a", "zz")})["a"].gang_reason("a")
    assert reason.code == "QueueNotReady"
    assert reason.message.startswith('queue "a" is not ready (ParentNotFound): spec.parent "zz"')


NAMES = [f"q{i}" for i in range(8)]


@given(
    st.dictionaries(
        st.sampled_from(NAMES),
        st.one_of(st.none(), st.sampled_from([*NAMES, "ghost"])),
        min_size=1,
    )
)
def test_the_ready_queues_always_form_a_valid_tree_and_every_rooted_queue_is_ready(
    parents: dict[str, str | None],
) -> None:
    queues: dict[str, Queue | None] = {n: q(n, p) for n, p in parents.items()}
    got = queue_readiness(queues)
    assert got.keys() == queues.keys()
    ready = [queue for name, queue in queues.items() if got[name].ready and queue is not None]
    QueueTree.build(ready)  # raises on a missing parent or a cycle
    for name in queues:
        # Walk up: ready exactly when the chain ends at a root without repeating or vanishing.
        seen: set[str] = set()
        current: str | None = name
        rooted = True
        while current is not None:
            if current in seen or current not in queues:
                rooted = False
                break
            seen.add(current)
            current = parents[current]
        assert got[name].ready == rooted, (name, parents, got[name])
