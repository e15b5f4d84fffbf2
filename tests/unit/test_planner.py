"""policies.plan: one test per reason message, and the planner's rules on small worlds."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from policies import (
    AdmittedGang,
    Decisions,
    Gang,
    Node,
    Planner,
    PolicyError,
    Queue,
    QueueTree,
    Reason,
    Resources,
    SizeRatio,
    Snapshot,
    SubmitStamp,
    Taint,
    Toleration,
    plan,
)
from policies.reservation import PARTIAL_HOLD_AFTER, STARVATION_AFTER

GIB = 2**30
CPU = 1000  # one core in millicores


def cluster(count: int = 4, cpu: int = 8, **labels: str) -> list[Node]:
    return [
        Node(f"n{i}", Resources(cpu=cpu * CPU, memory=32 * GIB), labels=dict(labels))
        for i in range(count)
    ]


def gang(
    name: str,
    cpu: float,
    size: int,
    queue: str = "a",
    t: float = 0.0,
    **fields: object,
) -> Gang:
    return Gang(
        f"ns/{name}",
        queue,
        Resources(cpu=int(cpu * CPU)),
        size,
        submitted=SubmitStamp(t, 0, name),
        **fields,  # type: ignore[arg-type]
    )


def queues(*extra: Queue, **a: object) -> QueueTree:
    fields: dict[str, object] = {"size_ratio": None}
    fields.update(a)
    return QueueTree.build([Queue("a", **fields), *extra])  # type: ignore[arg-type]


def run(
    pending: Sequence[Gang],
    tree: QueueTree | None = None,
    nodes: Sequence[Node] | None = None,
    admitted: Sequence[AdmittedGang] = (),
    now: float = 0.0,
    policy: str = "drf",
) -> Decisions:
    snapshot = Snapshot(
        list(nodes if nodes is not None else cluster()),
        tree if tree is not None else queues(),
        list(admitted),
        list(pending),
        now,
    )
    return plan(snapshot, policy)


def admitted_ids(decisions: Decisions) -> list[str]:
    return [a.gang_id for a in decisions.admitted]


def running(g: Gang, placement: dict[str, int], is_running: bool = True) -> AdmittedGang:
    return AdmittedGang(g, sum(placement.values()), placement, admitted_at=0.0, running=is_running)


# --- one test per reason -----------------------------------------------------------------


def test_quota_exhausted() -> None:
    tree = queues(nominal=Resources(cpu=8 * CPU))
    old = running(gang("old", 2, 2), {"n0": 2})
    decisions = run([gang("x", 2, 3)], tree, admitted=[old])
    assert decisions.pending == {
        "ns/x": Reason("QuotaExhausted", "quota of queue a exhausted in cpu: needs 6, 4 available")
    }


def test_no_fit_one_pod_per_node() -> None:
    full = running(gang("full", 8, 2), {"n0": 1, "n1": 1})
    decisions = run([gang("x", 6, 3, one_pod_per_node=True)], admitted=[full])
    assert decisions.pending["ns/x"] == Reason(
        "NoFit", "does not fit nodes: needs 3 nodes with 6 cpu free, 2 available"
    )


def test_no_fit_pods() -> None:
    full = running(gang("full", 8, 2), {"n0": 1, "n1": 1})
    decisions = run([gang("x", 4, 6)], admitted=[full])
    assert decisions.pending["ns/x"] == Reason(
        "NoFit", "does not fit nodes: needs 6 pods of 4 cpu, free capacity holds 4"
    )


def test_no_fit_names_the_node_selector() -> None:
    nodes = [*cluster(2, pool="a"), Node("m", Resources(cpu=64 * CPU), labels={"pool": "b"})]
    decisions = run([gang("x", 8, 3, node_selector={"pool": "a"})], nodes=nodes)
    assert decisions.rejected["ns/x"] == Reason(
        "NeverFits",
        "never fits: needs 3 pods of 8 cpu, the whole cluster (nodes matching its node selector "
        "and tolerations) holds 2",
    )
    busy = running(gang("busy", 8, 1), {"n0": 1})
    decisions = run([gang("y", 8, 2, node_selector={"pool": "a"})], nodes=nodes, admitted=[busy])
    assert decisions.pending["ns/y"] == Reason(
        "NoFit",
        "does not fit nodes: needs 2 pods of 8 cpu, free capacity on nodes matching its node "
        "selector and tolerations holds 1",
    )


def test_size_ratio_serialized() -> None:
    tree = queues(size_ratio=SizeRatio(0.25))
    big = running(gang("big", 8, 2), {"n0": 1, "n1": 1}, is_running=False)
    decisions = run([gang("x", 8, 2), gang("small", 1, 1)], tree, admitted=[big])
    assert decisions.pending["ns/x"] == Reason(
        "SizeRatioSerialized", "size ratio: serialized behind ns/big"
    )
    assert admitted_ids(decisions) == ["ns/small"]  # only big gangs are serialized
    # Once the big gang runs, the next big gang may be admitted.
    started = running(gang("big", 8, 2), {"n0": 1, "n1": 1}, is_running=True)
    assert admitted_ids(run([gang("x", 8, 2)], tree, admitted=[started])) == ["ns/x"]


def test_size_ratio_serializes_within_one_plan() -> None:
    tree = queues(size_ratio=SizeRatio(0.25))
    decisions = run([gang("b1", 8, 2, t=1), gang("b2", 8, 2, t=2)], tree)
    assert admitted_ids(decisions) == ["ns/b1"]
    assert decisions.pending["ns/b2"].message == "size ratio: serialized behind ns/b1"


def test_size_ratio_rejected() -> None:
    tree = queues(size_ratio=SizeRatio(0.25, "Reject"))
    decisions = run([gang("x", 8, 2), gang("ok", 8, 1)], tree)
    assert decisions.rejected == {
        "ns/x": Reason(
            "SizeRatioRejected",
            "size ratio: needs 50% of the cluster's cpu, above queue a's limit of 25%; "
            "split the job or raise the queue's sizeRatio.ratio",
        )
    }
    assert admitted_ids(decisions) == ["ns/ok"]


def test_strict_fifo_blocked() -> None:
    tree = queues(strategy="StrictFIFO")
    decisions = run([gang("head", 8, 5, t=1), gang("next", 1, 1, t=2)], tree, cluster(6))
    assert admitted_ids(decisions) == ["ns/head", "ns/next"]  # sanity: both fit on 6 nodes
    busy = running(gang("busy", 8, 1), {"n0": 1})
    decisions = run([gang("head", 8, 5, t=1), gang("next", 1, 1, t=2)], tree, cluster(5), [busy])
    assert decisions.pending == {
        "ns/head": Reason(
            "NoFit", "does not fit nodes: needs 5 pods of 8 cpu, free capacity holds 4"
        ),
        "ns/next": Reason("StrictFIFOBlocked", "blocked by StrictFIFO head ns/head"),
    }
    # BestEffortFIFO skips the head instead.
    decisions = run([gang("head", 8, 5, t=1), gang("next", 1, 1, t=2)], None, cluster(5), [busy])
    assert admitted_ids(decisions) == ["ns/next"]


def test_never_fits_cluster() -> None:
    decisions = run([gang("x", 1, 100)])
    assert decisions.rejected == {
        "ns/x": Reason(
            "NeverFits", "never fits: needs 100 pods of 1 cpu, the whole cluster holds 32"
        )
    }
    decisions = run([gang("y", 4, 5, one_pod_per_node=True)])
    assert decisions.rejected["ns/y"] == Reason(
        "NeverFits", "never fits: needs 5 nodes with 4 cpu allocatable, the cluster has 4"
    )
    # An elastic gang is judged by its minimum.
    assert run([gang("z", 1, 100, min_size=8)]).rejected == {}


def test_never_fits_quota() -> None:
    tree = queues(nominal=Resources(cpu=4 * CPU))
    decisions = run([gang("x", 1, 8)], tree)
    assert decisions.rejected == {
        "ns/x": Reason(
            "NeverFits",
            "never fits: needs 8 cpu, queue a can get at most 4 cpu (nominal plus what it may "
            "borrow); raise the queue's quota or shrink the job",
        )
    }


def test_elastic_waiting_then_shrinks() -> None:
    busy = running(gang("busy", 8, 2), {"n0": 1, "n1": 1})
    elastic = gang("x", 8, 4, min_size=2, elastic_after=60.0)
    decisions = run([elastic], admitted=[busy], now=10.0)
    assert decisions.pending == {
        "ns/x": Reason(
            "ElasticWaiting",
            "elastic: 2 of 4 pods fit (min 2); it may start smaller 60s after submission, in 50s",
        )
    }
    decisions = run([elastic], admitted=[busy], now=60.0)
    assert [(a.gang_id, a.size) for a in decisions.admitted] == [("ns/x", 2)]
    assert decisions.admitted[0].placement == {"n2": 1, "n3": 1}


def test_elastic_waiting_on_quota() -> None:
    tree = queues(nominal=Resources(cpu=6 * CPU))
    elastic = gang("x", 2, 4, min_size=2, elastic_after=30.0)
    assert run([elastic], tree, now=0.0).pending["ns/x"].code == "ElasticWaiting"
    assert [a.size for a in run([elastic], tree, now=30.0).admitted] == [3]


def test_elastic_admits_the_largest_size_that_fits() -> None:
    busy = running(gang("busy", 4, 5), {"n0": 2, "n1": 2, "n2": 1})
    decisions = run([gang("x", 4, 8, min_size=2)], admitted=[busy])
    assert [(a.size, dict(a.placement)) for a in decisions.admitted] == [(3, {"n2": 1, "n3": 2})]


def test_queue_not_found() -> None:
    tree = QueueTree.build(
        [Queue("team"), Queue("a", parent="team"), Queue("b", parent="team"), Queue("c")]
    )
    decisions = run([gang("x", 1, 1, queue="gpu"), gang("y", 1, 1, queue="team")], tree)
    assert decisions.pending == {
        "ns/x": Reason(
            "QueueNotFound",
            'queue "gpu" not found: create it (kind: Queue) or set muster.dev/queue to one of: '
            "a, b, c",
        ),
        "ns/y": Reason(
            "QueueNotFound",
            'queue "team" is a cohort; set muster.dev/queue to one of its leaf queues: a, b',
        ),
    }


def test_reserved_for() -> None:
    tree = queues(size_ratio=SizeRatio(0.1))
    busy = running(gang("busy", 8, 2), {"n0": 1, "n1": 1})
    pending = [
        gang("older", 1, 1, t=-1),
        gang("big", 8, 3, t=0),
        gang("younger", 1, 1, t=5),
    ]
    decisions = run(pending, tree, admitted=[busy])
    assert admitted_ids(decisions) == ["ns/older"]  # older than the big gang: not held back
    assert decisions.pending == {
        "ns/big": Reason(
            "NoFit",
            "does not fit nodes: needs 3 pods of 8 cpu, free capacity holds 1; holds a "
            "reservation: gangs after it in the policy's order keep off the nodes it needs",
        ),
        "ns/younger": Reason(
            "Reserved",
            "capacity reserved for big gang ns/big, which comes before it in the policy's order "
            "(size ratio: the first big gang that waits for nodes is not starved)",
        ),
    }


def test_reservation_holds_only_against_gangs_after_it_in_policy_order() -> None:
    # Queue b's small gang has the lower weighted DRF share, so it comes first and is not held
    # back by the older big gang of queue a; the big gang then no longer fits and holds the
    # reservation against what comes after it: queue a's younger gang, and queue b's next one,
    # whose weighted share with it (5/32 / 0.1) is above queue a's with the big gang (1.0).
    tree = QueueTree.build(
        [Queue("a", size_ratio=SizeRatio(0.1)), Queue("b", weight=0.1, size_ratio=None)]
    )
    pending = [
        gang("big", 8, 4, queue="a", t=0),
        gang("small", 1, 1, queue="b", t=5),
        gang("later", 1, 1, queue="a", t=6),
        gang("more", 4, 1, queue="b", t=7),
    ]
    decisions = run(pending, tree)
    assert admitted_ids(decisions) == ["ns/small"]
    assert decisions.pending["ns/big"].code == "NoFit"
    assert "holds a reservation" in decisions.pending["ns/big"].message
    assert decisions.pending["ns/later"].code == "Reserved"
    assert decisions.pending["ns/more"].code == "Reserved"


def test_a_big_gang_that_fits_is_admitted_at_its_turn() -> None:
    tree = QueueTree.build(
        [Queue("a", size_ratio=SizeRatio(0.1)), Queue("b", size_ratio=SizeRatio(0.1))]
    )
    pending = [gang("big", 8, 3, queue="a", t=0), gang("small", 1, 1, queue="b", t=5)]
    decisions = run(pending, tree)
    assert admitted_ids(decisions) == ["ns/small", "ns/big"]


# --- the rules -----------------------------------------------------------------------------


def test_admits_as_many_gangs_as_fit_in_one_call() -> None:
    decisions = run([gang(f"g{i}", 1, 4, t=i) for i in range(10)])
    assert len(decisions.admitted) == 8  # 32 cores, 4 per gang
    assert {r.code for r in decisions.pending.values()} == {"NoFit"}


def test_placement_is_best_fit_and_honours_used_capacity() -> None:
    nodes = [
        Node("empty", Resources(cpu=8 * CPU)),
        Node("half", Resources(cpu=8 * CPU), used=Resources(cpu=4 * CPU)),
    ]
    decisions = run([gang("x", 2, 2, t=1), gang("y", 2, 3, t=2)], nodes=nodes)
    assert [dict(a.placement) for a in decisions.admitted] == [{"half": 2}, {"empty": 3}]


def test_taints_and_selectors() -> None:
    gpu = Node(
        "gpu",
        Resources({"cpu": 8 * CPU, "nvidia.com/gpu": 4}),
        labels={"accel": "a100"},
        taints=(Taint("gpu", "yes", "NoSchedule"),),
    )
    nodes = [gpu, Node("plain", Resources(cpu=8 * CPU))]
    plain = gang("plain", 8, 1, t=1)
    tolerant = Gang(
        "ns/tolerant",
        "a",
        Resources({"cpu": CPU, "nvidia.com/gpu": 1}),
        2,
        submitted=SubmitStamp(2),
        node_selector={"accel": "a100"},
        tolerations=(Toleration("gpu", "Exists"),),
    )
    intolerant = Gang(
        "ns/intolerant",
        "a",
        Resources({"cpu": CPU, "nvidia.com/gpu": 1}),
        1,
        submitted=SubmitStamp(3),
    )
    decisions = run([plain, tolerant, intolerant], nodes=nodes)
    assert [(a.gang_id, dict(a.placement)) for a in decisions.admitted] == [
        ("ns/plain", {"plain": 1}),
        ("ns/tolerant", {"gpu": 2}),
    ]
    assert decisions.rejected["ns/intolerant"].code == "NeverFits"
    # PreferNoSchedule does not keep pods off a node.
    soft = Node("soft", Resources(cpu=CPU), taints=(Taint("x", "", "PreferNoSchedule"),))
    assert admitted_ids(run([gang("s", 1, 1)], nodes=[soft])) == ["ns/s"]


def test_pods_capacity_counts_every_pod() -> None:
    nodes = [Node("n", Resources(cpu=8 * CPU, pods=3))]
    decisions = run([gang("x", 1, 2, t=1), gang("y", 1, 2, t=2)], nodes=nodes)
    assert admitted_ids(decisions) == ["ns/x"]
    assert decisions.pending["ns/y"].message == (
        "does not fit nodes: needs 2 pods of 1 cpu, free capacity holds 1"
    )


def test_priority_then_submission_within_a_queue() -> None:
    pending = [
        gang("late", 8, 4, t=5),
        gang("urgent", 8, 2, t=9, priority=1),
        gang("early", 8, 2, t=1),
        gang(
            "tie-b",
            8,
            4,
            t=1,
        ),
    ]
    decisions = run(pending)
    assert admitted_ids(decisions) == ["ns/urgent", "ns/early"]


def test_submission_ties_are_broken_by_sequence_then_name() -> None:
    first = Gang("ns/b", "a", Resources(cpu=8 * CPU), 4, submitted=SubmitStamp(1.0, 0, "b"))
    second = Gang("ns/a", "a", Resources(cpu=8 * CPU), 4, submitted=SubmitStamp(1.0, 1, "a"))
    third = Gang("ns/c", "a", Resources(cpu=8 * CPU), 4, submitted=SubmitStamp(1.0, 1, "c"))
    decisions = run([third, second, first])
    assert admitted_ids(decisions) == ["ns/b"]


def test_drf_interleaves_queues_by_weighted_dominant_share() -> None:
    tree = QueueTree.build([Queue("a", size_ratio=None), Queue("b", size_ratio=None, weight=3)])
    pending = [gang(f"a{i}", 2, 1, queue="a", t=i) for i in range(8)]
    pending += [gang(f"b{i}", 2, 1, queue="b", t=i) for i in range(8)]
    decisions = run(pending, tree, cluster(2))  # 16 cores: room for 8 gangs
    queues_in_order = [a.queue for a in decisions.admitted]
    assert queues_in_order.count("b") == 6 and queues_in_order.count("a") == 2
    # b (weight 3) holds 3/16 after two gangs, a share of 1/16 by weight: still below a's 1/8.
    assert queues_in_order[:3] == ["b", "b", "a"]


def test_fifo_policy_orders_across_queues_by_submission() -> None:
    tree = QueueTree.build([Queue("a", size_ratio=None), Queue("b", size_ratio=None)])
    pending = [gang("a1", 8, 1, queue="a", t=1), gang("a2", 8, 1, queue="a", t=2)]
    pending += [gang("b1", 8, 1, queue="b", t=3), gang("b2", 8, 1, queue="b", t=4)]
    pending += [gang("a3", 8, 1, queue="a", t=5)]
    decisions = run(pending, tree, policy="fifo")
    assert admitted_ids(decisions) == ["ns/a1", "ns/a2", "ns/b1", "ns/b2"]
    drf = run(pending, tree, policy="drf")
    assert admitted_ids(drf) == ["ns/a1", "ns/b1", "ns/a2", "ns/b2"]


def test_strict_fifo_policy_blocks_every_queue() -> None:
    tree = QueueTree.build([Queue("a", size_ratio=None), Queue("b", size_ratio=None)])
    pending = [gang("a1", 8, 3, queue="a", t=1), gang("b1", 8, 4, queue="b", t=2)]
    pending += [gang("a2", 1, 1, queue="a", t=3)]
    decisions = run(pending, tree, policy="strict-fifo")
    assert admitted_ids(decisions) == ["ns/a1"]
    assert decisions.pending == {
        "ns/b1": Reason(
            "NoFit", "does not fit nodes: needs 4 pods of 8 cpu, free capacity holds 1"
        ),
        "ns/a2": Reason("StrictFIFOBlocked", "blocked by StrictFIFO head ns/b1"),
    }
    assert admitted_ids(run(pending, tree, policy="fifo")) == ["ns/a1", "ns/a2"]


def test_unknown_policy() -> None:
    with pytest.raises(PolicyError, match='admission policy "lifo" not found; use one of: drf, '):
        run([], policy="lifo")


def test_queue_without_node_fit_admits_on_quota_alone() -> None:
    tree = queues(node_fit=False, nominal=Resources(cpu=100 * CPU))
    decisions = run([gang("x", 8, 10)], tree)
    assert [(a.size, dict(a.placement)) for a in decisions.admitted] == [(10, {})]


def test_node_blind_queues_hold_while_a_gang_they_admitted_is_stuck() -> None:
    blind = Queue("blind", node_fit=False, size_ratio=None, nominal=Resources(cpu=100 * CPU))
    tree = queues(blind)
    stuck = AdmittedGang(gang("stuck", 6, 4, queue="blind"), 4, {}, admitted_at=0.0)
    pending = [gang("next", 6, 2, queue="blind", t=1.0), gang("aware", 6, 1, queue="a", t=2.0)]
    # Before PARTIAL_HOLD_AFTER the stuck gang is only starting: no hold.
    early = run(pending, tree, admitted=[stuck], now=PARTIAL_HOLD_AFTER - 1)
    assert admitted_ids(early) == ["ns/aware", "ns/next"]
    late = run(pending, tree, admitted=[stuck], now=PARTIAL_HOLD_AFTER)
    # Node-aware queues are not held.
    assert admitted_ids(late) == ["ns/aware"]
    assert late.pending["ns/next"] == Reason(
        "HeldBehindPartial",
        "node-blind queues (nodeFit: false) admit nothing while ns/stuck waits for room for its "
        "pods; admission resumes when it runs or is evicted",
    )
    running = AdmittedGang(stuck.gang, 4, {}, admitted_at=0.0, running=True)
    assert "ns/next" in admitted_ids(run(pending, tree, admitted=[running], now=60.0))


# --- cohorts: borrowing and lending ------------------------------------------------------


def _cohort(a: dict[str, object] | None = None, b: dict[str, object] | None = None) -> QueueTree:
    return QueueTree.build(
        [
            Queue("team"),
            Queue("a", parent="team", nominal=Resources(cpu=8 * CPU), size_ratio=None, **(a or {})),  # type: ignore[arg-type]
            Queue("b", parent="team", nominal=Resources(cpu=8 * CPU), size_ratio=None, **(b or {})),  # type: ignore[arg-type]
        ]
    )


def test_a_queue_borrows_unused_quota_from_its_cohort() -> None:
    decisions = run([gang("x", 1, 12)], _cohort())
    assert admitted_ids(decisions) == ["ns/x"]


def test_borrowing_limit() -> None:
    tree = _cohort(a={"borrowing_limit": Resources(cpu=2 * CPU)})
    decisions = run([gang("x", 1, 12)], tree)
    assert decisions.rejected["ns/x"].message == (
        "never fits: needs 12 cpu, queue a can get at most 10 cpu (nominal plus what it may "
        "borrow); raise the queue's quota or shrink the job"
    )
    decisions = run([gang("y", 1, 10, t=1), gang("z", 1, 1, t=2)], tree)
    assert admitted_ids(decisions) == ["ns/y"]
    assert decisions.pending["ns/z"].message == (
        "quota of queue a exhausted in cpu: needs 1, 0 available"
    )


def test_lending_limit_keeps_part_of_the_quota() -> None:
    tree = _cohort(b={"lending_limit": Resources(cpu=3 * CPU)})
    decisions = run([gang("x", 1, 12)], tree)
    assert decisions.rejected["ns/x"].code == "NeverFits"  # b keeps 5 of its 8 cores
    decisions = run([gang("x", 1, 11, t=1), gang("mine", 1, 5, queue="b", t=2)], tree)
    assert sorted(admitted_ids(decisions)) == ["ns/mine", "ns/x"]


def test_usage_rolls_up_the_tree() -> None:
    tree = QueueTree.build(
        [
            Queue("org", nominal=Resources(cpu=4 * CPU)),
            Queue("team", parent="org"),
            Queue("a", parent="team", nominal=Resources(cpu=4 * CPU), size_ratio=None),
            Queue("b", parent="team", size_ratio=None),
            Queue("c", parent="org", size_ratio=None),
        ]
    )
    busy = running(gang("busy", 1, 6, queue="a"), {"n0": 6})  # a borrows 2 from the tree
    decisions = run(
        [gang("b1", 1, 3, queue="b", t=1), gang("c1", 1, 2, queue="c", t=2)], tree, admitted=[busy]
    )
    assert decisions.pending["ns/b1"].message == (
        "quota of queue b exhausted in cpu: needs 3, 2 available"
    )
    assert admitted_ids(decisions) == ["ns/c1"]


def test_resources_no_queue_names_are_unlimited() -> None:
    tree = queues(nominal=Resources(cpu=64 * CPU))
    big_memory = Gang("ns/m", "a", Resources(cpu=CPU, memory=30 * GIB), 2, submitted=SubmitStamp(0))
    assert admitted_ids(run([big_memory], tree)) == ["ns/m"]
    assert admitted_ids(run([gang("x", 1, 1)], QueueTree.build([Queue("a")]))) == ["ns/x"]


def test_a_nominal_of_zero_limits_rather_than_vanishes() -> None:
    # `nominal: {cpu: "0"}` parses to an empty vector; quota_names keeps cpu under quota.
    zero = queues(nominal=Resources(), quota_names=frozenset({"cpu"}))
    decisions = run([gang("j", 1, 1)], zero)
    assert admitted_ids(decisions) == []
    assert decisions.rejected["ns/j"].code == "NeverFits"
    assert "at most 0 cpu" in decisions.rejected["ns/j"].message
    # Without a name in nominal, cpu is not under quota in this tree.
    assert admitted_ids(run([gang("j", 1, 1)], queues(nominal=Resources()))) == ["ns/j"]


def test_a_big_gang_that_waited_long_holds_against_younger_gangs_of_queues_above_share() -> None:
    # Queue a's big gang (all 4 nodes) has waited STARVATION_AFTER; queue a's own and queue b's
    # younger gangs keep off its nodes although they come first in DRF order, queue c (below
    # its fair share: it holds nothing) is not held back.
    tree = QueueTree.build(
        [
            Queue("a", size_ratio=SizeRatio(0.1)),
            Queue("b", size_ratio=SizeRatio(0.1)),
            Queue("c", size_ratio=SizeRatio(0.1)),
        ]
    )
    # Queue b holds half the cluster, above its fair share of a third.
    busy = running(gang("busy", 8, 2, queue="b"), {"n0": 1, "n1": 1})
    pending = [
        gang("big", 8, 4, queue="a", t=0),
        gang("small", 1, 1, queue="b", t=10),
        gang("tiny", 1, 1, queue="c", t=20),
    ]
    early = run(pending, tree, admitted=[busy], now=STARVATION_AFTER - 1)
    assert admitted_ids(early) == ["ns/tiny", "ns/small"]  # in DRF order, not held back
    late = run(pending, tree, admitted=[busy], now=STARVATION_AFTER)
    assert admitted_ids(late) == ["ns/tiny"]
    assert late.pending["ns/small"] == Reason(
        "Reserved",
        "capacity reserved for big gang ns/big, older and waiting for 2m (size ratio: a big "
        "gang is not starved; queues below their fair share and the big gang's queue are not "
        "held back)",
    )
    assert late.pending["ns/big"].code == "NoFit"


def test_an_aged_big_gang_holds_back_younger_gangs_before_it_but_not_older_ones() -> None:
    # Pinned from Hypothesis (test_a_reservation_never_holds_back_what_comes_before_it): in
    # queue order urgent (priority 1) comes first, then early, then big. Big has waited
    # STARVATION_AFTER, so it holds against younger gangs whatever the order: urgent waits,
    # early (older than big) does not and takes what is free (docs/policies.md, *No starvation*).
    tree = queues(size_ratio=SizeRatio(0.3))
    pending = [
        gang("early", 2, 1, t=0),
        gang("big", 4, 2, t=1),
        gang("urgent", 2, 1, t=2, priority=1),
    ]
    decisions = run(pending, tree, nodes=cluster(1), now=STARVATION_AFTER + 1)
    assert admitted_ids(decisions) == ["ns/early"]
    assert decisions.pending["ns/urgent"].code == "Reserved"
    assert "holds a reservation" in decisions.pending["ns/big"].message


@pytest.mark.parametrize(
    ("strategy", "policy"), [("StrictFIFO", "drf"), ("BestEffortFIFO", "strict-fifo")]
)
def test_an_aged_big_gang_never_holds_back_a_gang_it_waits_behind(
    strategy: str, policy: str
) -> None:
    # Pinned from Hypothesis (test_at_most_one_reservation_and_every_wait_for_it_names_it).
    # Urgent (priority 1) comes before big in a strict order: held back for big, it would block
    # big, and the two would wait for each other in every plan, on an empty cluster too.
    tree = queues(strategy=strategy, size_ratio=SizeRatio(0.3))
    pending = [gang("big", 4, 2, t=0), gang("urgent", 2, 1, t=10, priority=1)]
    decisions = run(pending, tree, nodes=cluster(1), now=STARVATION_AFTER, policy=policy)
    assert admitted_ids(decisions) == ["ns/urgent"]
    assert decisions.pending["ns/big"].code == "NoFit"


def test_an_aged_holder_left_without_quota_still_says_it_holds_the_reservation() -> None:
    # Found by Hypothesis (test_at_most_one_reservation_and_every_wait_for_it_names_it, with
    # more examples). Big's quota sufficed at the start of the plan (it has waited
    # STARVATION_AFTER: it holds from then on); small (queue b, below its fair share, not held
    # back) comes first in DRF order and takes 2 of the 8 cpu both borrow from their cohort.
    # Big now waits for quota, still holding younger off the node: its own reason says so too.
    # (The cohort holds the quota: with 8 cpu of b's nominal quota, b's waiting gang would
    # hold it for b, and big would wait for quota from the start: policies/quotahold.py.)
    tree = QueueTree.build(
        [
            Queue("org", nominal=Resources(cpu=8 * CPU), size_ratio=None),
            Queue("a", parent="org", size_ratio=SizeRatio(0.3)),
            Queue("b", parent="org", size_ratio=None),
        ]
    )
    pending = [
        gang("big", 4, 2, queue="a", t=0),
        gang("younger", 1, 1, queue="a", t=5),
        gang("small", 2, 1, queue="b", t=10),
    ]
    decisions = run(pending, tree, nodes=cluster(1), now=STARVATION_AFTER)
    assert admitted_ids(decisions) == ["ns/small"]
    assert "reserved for big gang ns/big" in decisions.pending["ns/younger"].message
    big = decisions.pending["ns/big"]
    assert big.code == "QuotaExhausted"
    assert "holds a reservation" in big.message


def test_an_aged_holder_overtaken_by_a_big_gang_still_says_it_holds_the_reservation() -> None:
    # Found by Hypothesis (test_at_most_one_reservation_and_every_wait_for_it_names_it, rare).
    # Big fits the empty node, so it is no head that fails; blind (queue b, below its fair
    # share, not held back) comes first in DRF order and takes the size-ratio slot.
    tree = QueueTree.build(
        [Queue("a", size_ratio=SizeRatio(0.3)), Queue("b", size_ratio=SizeRatio(0.3))]
    )
    pending = [
        gang("big", 4, 2, t=0),
        gang("urgent", 1, 1, t=5, priority=1),
        gang("blind", 6, 1, queue="b", t=10),
    ]
    decisions = run(pending, tree, nodes=cluster(1), now=STARVATION_AFTER)
    assert admitted_ids(decisions) == ["ns/blind"]
    assert "reserved for big gang ns/big" in decisions.pending["ns/urgent"].message
    assert "holds a reservation" in decisions.pending["ns/big"].message


# --- backfill by deadline ------------------------------------------------------------------


def _backfill_world(
    younger_limit: float | None, busy_limit: float | None = 100.0
) -> tuple[list[Gang], AdmittedGang]:
    """Four 8-cpu nodes; a running gang admitted at 0 fills n0 and n1 (ending at its limit);
    a big gang needs three whole nodes and holds the reservation (n2, n3 and one busy node);
    a younger one-core gang comes after it in the policy's order."""
    busy = running(gang("busy", 8, 2, runtime_limit=busy_limit), {"n0": 1, "n1": 1})
    pending = [
        gang("big", 8, 3, t=0),
        gang("younger", 1, 1, t=5, runtime_limit=younger_limit),
    ]
    return pending, busy


def test_backfills_when_its_limit_ends_before_the_holder_can_start() -> None:
    # The big gang can start at 100 at the earliest (busy ends by its limit); at now=10 a gang
    # limited to 90 s ends by then, so it may use the reserved nodes.
    pending, busy = _backfill_world(younger_limit=90.0)
    decisions = run(pending, queues(size_ratio=SizeRatio(0.1)), admitted=[busy], now=10.0)
    assert admitted_ids(decisions) == ["ns/younger"]
    assert set(decisions.admitted[0].placement) <= {"n2", "n3"}
    assert "holds a reservation" in decisions.pending["ns/big"].message


def test_no_backfill_around_a_big_gang_that_waited_its_starvation_bound() -> None:
    # The same world, the big gang submitted STARVATION_AFTER ago: it holds because it waited,
    # and nothing backfills around it (it has waited its bound already).
    pending, busy = _backfill_world(younger_limit=1.0)
    busy = dataclasses.replace(busy, admitted_at=STARVATION_AFTER)
    now = STARVATION_AFTER + 10.0
    decisions = run(pending, queues(size_ratio=SizeRatio(0.1)), admitted=[busy], now=now)
    assert admitted_ids(decisions) == []
    assert decisions.pending["ns/younger"].code == "Reserved"
    assert "older and waiting for 2m10s" in decisions.pending["ns/younger"].message


def test_does_not_backfill_when_its_limit_is_too_long() -> None:
    pending, busy = _backfill_world(younger_limit=91.0)
    decisions = run(pending, queues(size_ratio=SizeRatio(0.1)), admitted=[busy], now=10.0)
    assert admitted_ids(decisions) == []
    assert decisions.pending["ns/younger"] == Reason(
        "Reserved",
        "capacity reserved for big gang ns/big, which comes before it in the policy's order; it "
        "cannot backfill: its runtime limit (1m31s) ends after the big gang's earliest start "
        "(in 1m30s)",
    )


def test_does_not_backfill_without_a_limit() -> None:
    pending, busy = _backfill_world(younger_limit=None)
    decisions = run(pending, queues(size_ratio=SizeRatio(0.1)), admitted=[busy], now=10.0)
    assert admitted_ids(decisions) == []
    assert decisions.pending["ns/younger"].code == "Reserved"
    assert "backfill" not in decisions.pending["ns/younger"].message


def test_does_not_backfill_when_a_gang_on_the_reserved_nodes_has_no_limit() -> None:
    pending, busy = _backfill_world(younger_limit=1.0, busy_limit=None)
    decisions = run(pending, queues(size_ratio=SizeRatio(0.1)), admitted=[busy], now=10.0)
    assert admitted_ids(decisions) == []
    reason = decisions.pending["ns/younger"]
    assert reason.code == "Reserved"
    assert "a gang on the reserved nodes has no runtime limit" in reason.message


def test_gangs_off_the_reserved_nodes_do_not_delay_the_holder_start() -> None:
    # A gang without a limit on a node the big gang does not reserve leaves the holder's start
    # at busy's limit. (n0, n1 and n4 are equally full; the reservation takes the first, n0.)
    nodes = cluster(5)
    pending, busy = _backfill_world(younger_limit=90.0)
    elsewhere = running(gang("elsewhere", 8, 1), {"n4": 1})
    decisions = run(
        pending, queues(size_ratio=SizeRatio(0.1)), nodes, admitted=[busy, elsewhere], now=10.0
    )
    assert admitted_ids(decisions) == ["ns/younger"]


def test_the_incremental_planner_backfills_like_plan() -> None:
    pending, busy = _backfill_world(younger_limit=90.0)
    planner = Planner(cluster(), queues(size_ratio=SizeRatio(0.1)))
    planner.add_admitted(busy)
    for g in pending:
        planner.add_pending(g)
    assert admitted_ids(planner.plan(10.0)) == ["ns/younger"]
    # Once busy's record has no limit, the holder's start is unknown: nothing backfills.
    planner.remove_admitted("ns/busy")
    planner.add_admitted(running(gang("busy", 8, 2), {"n0": 1, "n1": 1}))
    assert admitted_ids(planner.plan(10.0)) == []


def test_runtime_limit_must_be_positive_and_finite() -> None:
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(PolicyError, match=r"runtimeLimit \(spec.activeDeadlineSeconds\)"):
            gang("g", 1, 1, runtime_limit=bad)


def test_of_the_big_gangs_past_their_bound_the_queue_lowest_in_share_holds() -> None:
    # a's big gang is older, but a holds a node; c holds nothing: c's big gang holds the
    # reservation, and a's younger small gang keeps off it.
    tree = QueueTree.build(
        [Queue("a", size_ratio=SizeRatio(0.3)), Queue("c", size_ratio=SizeRatio(0.3))]
    )
    busy = running(gang("busy", 8, 1, queue="a"), {"n0": 1})
    pending = [
        gang("old-big", 8, 4, queue="a", t=0),
        gang("young-big", 8, 4, queue="c", t=10),
        gang("small", 2, 1, queue="a", t=20),
    ]
    decisions = run(pending, tree, admitted=[busy], now=STARVATION_AFTER + 20)
    assert "holds a reservation" in decisions.pending["ns/young-big"].message
    assert "reserved for big gang ns/young-big" in decisions.pending["ns/small"].message


def test_a_queue_below_its_share_but_above_the_holders_queue_is_held_back() -> None:
    # Four queues of weight 1 (fair share a quarter each). b holds a node (an eighth: below
    # its quarter) and a, holding nothing, has an aged big gang of eight nodes: b's younger
    # gang keeps off the reservation; d, holding nothing either, is not held back.
    tree = QueueTree.build([Queue(name, size_ratio=SizeRatio(0.3)) for name in "abcd"])
    busy = running(gang("busy", 8, 1, queue="b"), {"n0": 1})
    pending = [
        gang("big", 8, 8, queue="a", t=0),
        gang("more", 2, 1, queue="b", t=10),
        gang("first", 2, 1, queue="d", t=10),
    ]
    decisions = run(pending, tree, nodes=cluster(8), admitted=[busy], now=STARVATION_AFTER)
    assert "ns/first" in admitted_ids(decisions)
    assert decisions.pending["ns/more"].code == "Reserved"


def test_a_preempted_gang_does_not_pass_an_aged_big_gang_by_its_old_stamp() -> None:
    # Requeued at its submission stamp, a preempted gang keeps its place in its queue, but it
    # ran while the big gang waited: it keeps off the reservation as a younger gang would
    # (seed 30 of the trace family: preempted gangs came back onto the reserved nodes again and
    # again, and the big gang waited 7,000 s). A gang as old that was never preempted passes.
    tree = QueueTree.build(
        [Queue("a", size_ratio=SizeRatio(0.3)), Queue("b", size_ratio=SizeRatio(0.3))]
    )
    busy = running(gang("busy", 8, 1, queue="b"), {"n0": 1})
    for preemptions, admitted in ((1, False), (0, True)):
        pending = [
            gang("big", 8, 4, queue="a", t=10),
            gang("back", 2, 1, queue="b", t=0, preemptions=preemptions),
        ]
        decisions = run(pending, tree, admitted=[busy], now=STARVATION_AFTER + 10)
        assert ("ns/back" in admitted_ids(decisions)) is admitted
        if not admitted:
            assert decisions.pending["ns/back"].code == "Reserved"
