"""A queue's `spec.ordering` (policies/ordering.py): SmallestFirst within an aging bound."""

from __future__ import annotations

import dataclasses

import pytest

from policies import AdmittedGang, Gang, Queue, QueueTree, Snapshot, plan
from policies.model import Ordering, PolicyError
from policies.queuespec import parse_queue
from tests.unit.test_planner import cluster, gang

SMALLEST = Ordering(by="SmallestFirst")


def _tree(ordering: Ordering) -> QueueTree:
    return QueueTree.build([Queue("a", size_ratio=None, ordering=ordering)])


def _admitted(ordering: Ordering, now: float, *gangs: Gang) -> list[str]:
    snapshot = Snapshot(cluster(1), _tree(ordering), [], list(gangs), now=now)
    return [admission.gang_id for admission in plan(snapshot).admitted]


def test_the_spec_reads_ordering_and_its_aging_bound() -> None:
    assert parse_queue("a", {}, "spec").ordering == Ordering()
    queue = parse_queue("a", {"ordering": {"by": "SmallestFirst"}}, "spec")
    assert queue.ordering == Ordering(by="SmallestFirst", aging_bound=None)
    queue = parse_queue("a", {"ordering": {"by": "SmallestFirst", "agingBound": "10m"}}, "spec")
    assert queue.ordering.aging_bound == 600.0
    with pytest.raises(PolicyError, match=r"spec.ordering.by: 'Biggest' is not Submission or"):
        parse_queue("a", {"ordering": {"by": "Biggest"}}, "spec")
    with pytest.raises(PolicyError, match=r"spec\.ordering: unknown field 'bound'"):
        parse_queue("a", {"ordering": {"bound": "1m"}}, "spec")
    with pytest.raises(PolicyError, match="agingBound"):
        parse_queue("a", {"ordering": {"by": "SmallestFirst", "agingBound": "soon"}}, "spec")


def test_by_submission_an_older_gang_that_fits_goes_first() -> None:
    # 8 cores: the older 6-core gang goes first and leaves room for one 2-core gang.
    old = gang("old", 1, 6, t=0.0)
    small = [gang(f"s{i}", 1, 2, t=1.0 + i) for i in range(2)]
    assert _admitted(Ordering(), 10.0, old, *small) == ["ns/old", "ns/s0"]


def test_smallest_first_lets_small_gangs_overtake_until_the_bound() -> None:
    old = gang("old", 1, 6, t=0.0)
    small = [gang(f"s{i}", 1, 3, t=1.0 + i) for i in range(2)]
    # Not aged yet (10 s < 120 s): the small gangs go first, the old one does not fit after.
    assert _admitted(SMALLEST, 10.0, old, *small) == ["ns/s0", "ns/s1"]
    # Aged (waited the default bound, 120 s): it goes first again.
    assert _admitted(SMALLEST, 120.0, old, *small) == ["ns/old"]
    # An explicit bound.
    bounded = Ordering(by="SmallestFirst", aging_bound=30.0)
    assert _admitted(bounded, 30.0, old, *small) == ["ns/old"]
    assert _admitted(bounded, 29.0, old, *small) == ["ns/s0", "ns/s1"]


def test_priority_comes_before_size() -> None:
    urgent = gang("urgent", 1, 6, t=5.0, priority=10)
    small = gang("small", 1, 3, t=0.0)
    assert _admitted(SMALLEST, 1.0, small, urgent) == ["ns/urgent"]


def test_an_aged_big_gang_reserves_against_younger_small_ones() -> None:
    # 2 nodes of 8 cores, one busy with an admitted gang: the big gang (2 nodes' worth) waits.
    # Younger small gangs keep off the free node once it has waited its aging bound.
    nodes = cluster(2)
    tree = QueueTree.build([Queue("a", ordering=Ordering(by="SmallestFirst", aging_bound=60.0))])
    running = AdmittedGang(gang("run", 1, 8, t=0.0), 8, {"n0": 8}, admitted_at=0.0, running=True)
    big = gang("big", 1, 16, t=0.0)
    small = gang("small", 1, 2, t=1.0)
    young = plan(Snapshot(nodes, tree, [running], [big, small], now=30.0))
    assert [a.gang_id for a in young.admitted] == ["ns/small"]
    aged = plan(Snapshot(nodes, tree, [running], [big, small], now=60.0))
    assert aged.admitted == []
    assert aged.pending["ns/small"].code == "Reserved"


def test_a_trace_queue_carries_its_ordering_to_the_planner_and_to_kwok() -> None:
    from simulator.kwok_objects import queue_body
    from simulator.trace import from_dict

    trace = from_dict(
        {
            "name": "t",
            "cluster": {"nodes": [{"count": 1, "allocatable": {"cpu": "4"}}]},
            "queues": [{"name": "a", "ordering": {"by": "SmallestFirst", "agingBound": "10m"}}],
            "jobs": [
                {"name": "j", "queue": "a", "size": 1, "runtime": "1s", "podRequests": {"cpu": "1"}}
            ],
        },
        source="test",
    )
    assert trace.queue_tree().queues["a"].ordering == Ordering("SmallestFirst", 600.0)
    body = queue_body(trace.queues[0], 10.0, "run")["spec"]
    assert body["ordering"] == {"by": "SmallestFirst", "agingBound": "60s"}
    plain = dataclasses.replace(trace.queues[0], ordering=Ordering())
    assert "ordering" not in queue_body(plain, 10.0, "run")["spec"]
