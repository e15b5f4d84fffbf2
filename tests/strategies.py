"""Hypothesis strategies for muster's model: clusters, queue trees, gangs, snapshots.

Small worlds on purpose (a handful of nodes, queues and gangs, few distinct amounts) so that
quotas run out, nodes fill up, stamps tie and cohorts borrow in most examples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

from hypothesis import strategies as st

from policies import (
    AdmittedGang,
    BorrowWithinCohort,
    Gang,
    Node,
    PodSet,
    Preemption,
    Queue,
    QueueTree,
    Resources,
    SizeRatio,
    Snapshot,
    SubmitStamp,
    Taint,
    Toleration,
    plan,
)
from policies.model import ReclaimWithinCohort
from policies.packing import Packing
from policies.topology import Topology, TopologyRequest

GIB = 2**30
GPU = "nvidia.com/gpu"
TAINT = Taint("dedicated", "gpu", "NoSchedule")
TOLERATION = Toleration("dedicated", "Equal", "gpu", "NoSchedule")


@st.composite
def nodes(draw: st.DrawFn, max_nodes: int = 6, with_pods: bool | None = None) -> list[Node]:
    """A small cluster: mixed sizes, two pools, some tainted gpu nodes, some held capacity."""
    count = draw(st.integers(1, max_nodes))
    pods = draw(st.booleans()) if with_pods is None else with_pods
    result = []
    for i in range(count):
        amounts = {
            "cpu": draw(st.sampled_from((1_000, 2_000, 4_000, 8_000))),
            "memory": draw(st.sampled_from((2, 4, 8, 16))) * GIB,
        }
        if pods:
            amounts["pods"] = draw(st.integers(1, 6))
        gpu_node = draw(st.integers(0, 4)) == 0
        if gpu_node:
            amounts[GPU] = draw(st.integers(1, 4))
        used = Resources()
        if draw(st.integers(0, 4)) == 0:
            used = Resources({"cpu": 500})
        result.append(
            Node(
                f"node-{i}",
                Resources(amounts),
                labels={"pool": draw(st.sampled_from(("a", "b")))},
                taints=(TAINT,) if gpu_node and draw(st.booleans()) else (),
                used=used,
            )
        )
    return result


def _amounts(resources: Sequence[str]) -> st.SearchStrategy[Resources]:
    per_resource = {
        "cpu": st.sampled_from((0, 1_000, 2_000, 4_000, 8_000, 16_000)),
        "memory": st.sampled_from((0, 4 * GIB, 8 * GIB, 32 * GIB)),
        GPU: st.integers(0, 4),
        "pods": st.integers(0, 8),
    }
    return st.fixed_dictionaries({r: per_resource[r] for r in resources}).map(Resources)


@st.composite
def queue_trees(draw: st.DrawFn, strict: bool | None = None, size_ratio: bool = True) -> QueueTree:
    """One to three trees: a standalone leaf, or a cohort (maybe nested) with leaves."""
    quota_resources = draw(
        st.lists(st.sampled_from(("cpu", "memory", GPU, "pods")), unique=True, max_size=3)
    )
    queues: list[Queue] = []
    counter = 0

    def leaf_or_cohort(parent: str | None, depth: int) -> None:
        nonlocal counter
        name = f"q{counter}"
        counter += 1
        nominal = draw(st.none() | _amounts(quota_resources)) if quota_resources else None
        borrowing = draw(st.none() | _amounts(quota_resources)) if parent else None
        lending = None
        if nominal is not None and draw(st.booleans()):
            lending = Resources({r: draw(st.integers(0, amount)) for r, amount in nominal.items()})
        ratio = None
        if size_ratio and draw(st.booleans()):
            ratio = SizeRatio(
                draw(st.sampled_from((0.1, 0.3, 0.6, 1.0))),
                draw(st.sampled_from(("Serialize", "Reject"))),
            )
        strategy: Literal["BestEffortFIFO", "StrictFIFO"]
        if strict is None:
            strategy = draw(st.sampled_from(("BestEffortFIFO", "StrictFIFO")))
        else:
            strategy = "StrictFIFO" if strict else "BestEffortFIFO"
        queues.append(
            Queue(
                name,
                parent=parent,
                weight=draw(st.sampled_from((0.5, 1.0, 2.0))),
                nominal=nominal,
                borrowing_limit=borrowing,
                lending_limit=lending,
                strategy=strategy,
                size_ratio=ratio,
                node_fit=draw(st.integers(0, 9)) > 0,
                preemption=draw(preemptions()),
            )
        )
        if depth < 2 and draw(st.integers(0, 2)) == 0:
            for _ in range(draw(st.integers(1, 3))):
                leaf_or_cohort(name, depth + 1)

    for _ in range(draw(st.integers(1, 3))):
        leaf_or_cohort(None, 0)
    return QueueTree.build(queues)


@st.composite
def preemptions(draw: st.DrawFn) -> Preemption:
    """Mostly none, as queues are by default; else any mix of the rules."""
    if draw(st.integers(0, 2)) == 0:
        return Preemption()
    reclaim: ReclaimWithinCohort = draw(st.sampled_from(("Never", "LowerPriority", "Any")))
    borrow = BorrowWithinCohort()
    if reclaim != "Never" and draw(st.booleans()):
        threshold = draw(st.sampled_from((None, 0, 5)))
        borrow = BorrowWithinCohort(policy="LowerPriority", max_priority_threshold=threshold)
    return Preemption(
        reclaim_within_cohort=reclaim,
        within_queue=draw(st.sampled_from(("Never", "LowerPriority"))),
        fair_share=draw(st.sampled_from(("Never", "Reclaim"))),
        protect_after=draw(st.integers(1, 3)),
        protect_for=draw(st.sampled_from((0.0, 50.0, 1000.0))),
        borrow_within_cohort=borrow,
    )


@st.composite
def other_pod_sets(draw: st.DrawFn) -> tuple[PodSet, ...]:
    """A gang's pod sets besides its main one: mostly none; else a launcher-like set or two,
    with requests, selectors and one-pod-per-node of their own."""
    if draw(st.integers(0, 3)) > 0:
        return ()
    sets = []
    for k in range(draw(st.integers(1, 2))):
        request = {
            "cpu": draw(st.sampled_from((0, 500, 1_000, 4_000))),
            "memory": draw(st.sampled_from((0, GIB, 4 * GIB))),
        }
        if draw(st.integers(0, 5)) == 0:
            request[GPU] = 1
        sets.append(
            PodSet(
                f"set{k}",
                draw(st.integers(1, 3)),
                Resources(request),
                one_pod_per_node=draw(st.booleans()),
                node_selector=(
                    {"pool": draw(st.sampled_from(("a", "b")))} if draw(st.booleans()) else {}
                ),
                tolerations=(TOLERATION,) if draw(st.booleans()) else (),
            )
        )
    return tuple(sets)


@st.composite
def gangs(
    draw: st.DrawFn,
    tree: QueueTree,
    prefix: str,
    max_gangs: int = 12,
    unknown_queues: bool = True,
    pod_sets: bool = True,
) -> list[Gang]:
    """Pending gangs over the tree's leaves (and, rarely, a queue that does not exist); with
    ``pod_sets``, some of several pod sets."""
    targets = list(tree.leaves)
    if unknown_queues:
        targets.append("missing")
    count = draw(st.integers(0, max_gangs))
    result = []
    for k in range(count):
        request = {
            "cpu": draw(st.sampled_from((0, 250, 500, 1_000, 2_000, 4_000))),
            "memory": draw(st.sampled_from((0, GIB, 2 * GIB))),
        }
        if draw(st.integers(0, 5)) == 0:
            request[GPU] = 1
        others = draw(other_pod_sets()) if pod_sets else ()
        fixed = sum(other.count for other in others)
        size = fixed + draw(st.integers(1, 6))
        minimum = draw(st.none() | st.integers(fixed + 1, size))
        selector = {"pool": draw(st.sampled_from(("a", "b")))} if draw(st.booleans()) else {}
        tolerations = (TOLERATION,) if draw(st.booleans()) else ()
        result.append(
            Gang(
                f"{prefix}/g{k}",
                draw(st.sampled_from(targets)),
                Resources(request),
                size,
                min_size=minimum,
                priority=draw(st.integers(0, 2)),
                submitted=SubmitStamp(
                    float(draw(st.integers(0, 5))), draw(st.integers(0, 3)), f"g{k}"
                ),
                one_pod_per_node=draw(st.booleans()),
                node_selector=selector,
                tolerations=tolerations,
                elastic_after=draw(st.sampled_from((0.0, 5.0, 100.0))),
                preemptions=draw(st.integers(0, 3)),
                # Against admitted gangs' limits and plan times (0 to 200 s): some gangs
                # backfill onto reserved nodes, some are too long, some have no limit.
                runtime_limit=draw(st.sampled_from((None, 5.0, 50.0, 300.0))),
                others=others,
                set_name="main" if others else "",
            )
        )
    return result


@st.composite
def snapshots(
    draw: st.DrawFn,
    strict: bool | None = None,
    size_ratio: bool = True,
    with_admitted: bool = True,
    with_pods: bool | None = None,
    unknown_queues: bool = True,
) -> Snapshot:
    """A cluster, queues, gangs admitted by an earlier plan (some running), pending gangs."""
    cluster = draw(nodes(with_pods=with_pods))
    tree = draw(queue_trees(strict=strict, size_ratio=size_ratio))
    now = float(draw(st.sampled_from((0, 10, 200))))
    admitted: list[AdmittedGang] = []
    if with_admitted and draw(st.booleans()):
        earlier = draw(gangs(tree, "old", max_gangs=6, unknown_queues=False))
        by_id = {gang.id: gang for gang in earlier}
        first = plan(Snapshot(cluster, tree, [], earlier, now))
        for admission in first.admitted:
            admitted.append(
                AdmittedGang(
                    by_id[admission.gang_id],
                    admission.size,
                    dict(admission.placement),
                    admitted_at=now,
                    running=draw(st.booleans()),
                    other_placements=admission.other_placements,
                )
            )
    pending = draw(gangs(tree, "new", unknown_queues=unknown_queues))
    return Snapshot(cluster, tree, admitted, pending, now)


def without_size_ratio(snapshot: Snapshot) -> Snapshot:
    tree = QueueTree.build(dataclasses.replace(q, size_ratio=None) for q in snapshot.queues)
    return dataclasses.replace(snapshot, queues=tree)


@st.composite
def contended_snapshots(draw: st.DrawFn) -> Snapshot:
    """A full cluster shared by one cohort: gangs of random queues admitted earlier fill the
    nodes, and new gangs wait. Where reservations and preemption happen (the general
    `snapshots` rarely fill a cluster)."""
    count = draw(st.integers(2, 4))
    cluster = [
        Node(f"node-{i}", Resources({"cpu": 4_000, "memory": 16 * GIB})) for i in range(count)
    ]
    leaves = draw(st.integers(2, 3))
    ratio = draw(st.sampled_from((None, SizeRatio(0.3))))
    queues = [Queue("org", size_ratio=None)]
    for k in range(leaves):
        queues.append(
            Queue(
                f"q{k}",
                parent="org",
                weight=draw(st.sampled_from((0.5, 1.0, 2.0))),
                nominal=draw(st.none() | st.just(Resources({"cpu": 4_000}))),
                size_ratio=ratio,
                preemption=draw(preemptions()),
            )
        )
    tree = QueueTree.build(queues)
    now = float(draw(st.sampled_from((0, 100, 2_000))))

    def batch(prefix: str, low: int, high: int, t: float) -> list[Gang]:
        return [
            Gang(
                f"{prefix}/g{k}",
                f"q{draw(st.integers(0, leaves - 1))}",
                Resources({"cpu": draw(st.sampled_from((1_000, 2_000, 4_000)))}),
                draw(st.integers(1, 3)),
                priority=draw(st.integers(0, 2)),
                submitted=SubmitStamp(t + k, 0, f"{prefix}{k}"),
                one_pod_per_node=draw(st.booleans()),
                preemptions=draw(st.integers(0, 3)),
            )
            for k in range(draw(st.integers(low, high)))
        ]

    earlier = batch("old", 3, 10, 0.0)
    by_id = {gang.id: gang for gang in earlier}
    first = plan(Snapshot(cluster, tree, [], earlier, 0.0))
    admitted = [
        AdmittedGang(by_id[a.gang_id], a.size, dict(a.placement), admitted_at=0.0, running=True)
        for a in first.admitted
    ]
    return Snapshot(cluster, tree, admitted, batch("new", 1, 6, 50.0), now)


def any_snapshots() -> st.SearchStrategy[Snapshot]:
    """General snapshots and full, contended ones."""
    return st.one_of(snapshots(), contended_snapshots())


def absurd_numbers() -> st.SearchStrategy[str]:
    """Texts users may write where muster reads a number or a duration: plausible spellings,
    numbers of any digit count (90 digits and an `h`, issue 28), signs, exponents, units,
    spaces, and any text at all."""
    digits = st.text("0123456789", min_size=1, max_size=120)
    unit = st.sampled_from(["", "ms", "s", "m", "h", "d", "e9", "e400", "Gi", "Ei", "k", "m"])
    sign = st.sampled_from(["", "-", "+", " "])
    spelled = st.builds(lambda s, d, u: f"{s}{d}{u}", sign, digits, unit)
    parts = st.lists(st.builds(lambda d, u: d + u, digits, unit), min_size=1, max_size=4).map(
        "".join
    )
    return st.one_of(spelled, parts, st.text(max_size=30), st.sampled_from(["nan", "inf", "1e999"]))


LEVELS = Topology.parse(["block", "rack"])
"""The topology levels of `topology_snapshots`."""


@st.composite
def topology_snapshots(draw: st.DrawFn) -> Snapshot:
    """`any_snapshots` on a cluster of blocks and racks (a node may lack the labels: it is in
    no domain), with gangs requiring or preferring a block, a rack or a level the cluster does
    not have, and the others asking nothing."""
    snapshot = draw(any_snapshots())
    nodes = []
    for node in snapshot.nodes:
        labels = dict(node.labels)
        if draw(st.integers(0, 9)):
            # Few domains, so that one holds several nodes and gangs fit or just miss.
            labels["block"] = draw(st.sampled_from(("b0", "b0", "b1")))
            labels["rack"] = draw(st.sampled_from(("r0", "r1")))
        nodes.append(dataclasses.replace(node, labels=labels))
    requests = st.sampled_from(
        (
            None,
            TopologyRequest("rack", True),
            TopologyRequest("rack", True),
            TopologyRequest("block", True),
            TopologyRequest("rack", False),
            TopologyRequest("block", False),
            TopologyRequest("row", True),
        )
    )
    pending = [dataclasses.replace(gang, topology=draw(requests)) for gang in snapshot.pending]
    return dataclasses.replace(snapshot, nodes=nodes, pending=pending, topology=LEVELS)


PACKINGS = st.sampled_from(
    (
        Packing(),
        Packing("best-fit"),
        Packing("worst-fit"),
        Packing("weighted"),
        Packing("weighted", 0.5),
    )
)
"""Every packing strategy (`policies.packing`), the weighted one with two GPU weights."""


@st.composite
def packing_snapshots(draw: st.DrawFn, one_shape: bool) -> Snapshot:
    """Partly used nodes (all of one allocatable shape, or of several, some with GPUs) and one
    pending gang of fixed size in a queue without quota or size ratio: it is admitted wherever
    its pods fit, so strategies differ only in where."""
    count = draw(st.integers(1, 8))
    shapes = [
        Resources({"cpu": cpu, "memory": mem * GIB, **({GPU: gpus} if gpus else {})})
        for cpu, mem, gpus in draw(
            st.lists(
                st.tuples(
                    st.sampled_from((2_000, 4_000, 8_000)),
                    st.sampled_from((4, 8, 16)),
                    st.sampled_from((0, 0, 4, 8)),
                ),
                min_size=1,
                max_size=1 if one_shape else 3,
            )
        )
    ]
    cluster = []
    for i in range(count):
        shape = draw(st.sampled_from(shapes))
        used: dict[str, int] = {}
        if draw(st.booleans()):
            used["cpu"] = draw(st.integers(0, 4)) * shape["cpu"] // 4
            used["memory"] = draw(st.integers(0, 4)) * shape["memory"] // 4
            if shape[GPU]:
                used[GPU] = draw(st.integers(0, shape[GPU]))
        cluster.append(Node(f"node-{i}", shape, used=Resources(used)))
    request = {
        "cpu": draw(st.sampled_from((250, 500, 1_000, 2_000))),
        "memory": draw(st.sampled_from((0, GIB, 2 * GIB))),
    }
    if draw(st.booleans()):
        request[GPU] = draw(st.integers(1, 2))
    gang = Gang(
        "g",
        "q",
        Resources(request),
        draw(st.integers(1, 12)),
        one_pod_per_node=draw(st.booleans()),
    )
    tree = QueueTree.build([Queue("q", size_ratio=None)])
    return Snapshot(cluster, tree, [], [gang], 0.0, packing=draw(PACKINGS))
