"""Invariants of the in-process engine, checked after every instant when
`EngineConfig.check` is set (tests): they tie the engine's parts (cluster, scheduler queue,
meter, planner) back to the gang records. They take the parts, not the engine, so the engine
imports them and nothing here imports the engine."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from policies import Planner
from simulator.podscheduler import ClusterModel
from simulator.records import (
    ADMITTED,
    BACKING_OFF,
    FAILED,
    FINISHED,
    PENDING,
    RUNNING,
    GangRecord,
    PodSetRecord,
)
from simulator.sampling import Meter

SetPods = tuple[tuple[tuple[int, int], ...], int, bool, Mapping[int, int], int]
"""One pod set of a gang as the checks see it: (one pod's request, pod class,
one-pod-per-node, node -> pods bound, pods queued)."""


def check_invariants(
    now: float,
    gangs: Sequence[GangRecord],
    cluster: ClusterModel,
    meter: Meter,
    planner: Planner | None,
) -> None:
    """After an instant (`EngineConfig.check`, tests): no node overcommitted, every pod on a
    node its pod set may use, every count agrees with the records, a running gang has its
    minimum with every other pod set whole, and (placement "scheduler") the planner sees the
    pods."""
    for node, vector in enumerate(cluster.free):
        if any(amount < 0 for amount in vector):
            raise AssertionError(f"node {cluster.nodes[node].name} overcommitted at {now}")
    _check_capacity(now, gangs, cluster)
    for record in gangs:
        _check_record(record, cluster)
    live: dict[tuple[int, int], int] = {}
    for _, index, attempt, set_index in cluster.pod_queue:
        record = gangs[index]
        if attempt == record.attempt and record.state in (PENDING, ADMITTED):
            live[index, set_index] = live.get((index, set_index), 0) + 1
    queued = [0] * len(cluster.pod_classes)
    for record in gangs:
        for set_index, (_, class_id, _, _, pods) in enumerate(pod_sets(record)):
            if pods != live.get((record.index, set_index), 0):
                raise AssertionError(f"{record.gang.id}: queued pods out of sync")
            queued[class_id] += pods
    for class_id, pod_class in enumerate(cluster.pod_classes):
        if pod_class.queued != queued[class_id]:
            raise AssertionError(f"pod class {class_id}: queued count out of sync")
    total = sum(sum(counts.values()) for counts in meter.state_count)
    if total != len(gangs):
        raise AssertionError("state counts do not add up")
    if cluster.unpinned and planner is not None:
        _check_planner_sees_pods(gangs, cluster, planner)


def pod_sets(record: GangRecord) -> Iterator[SetPods]:
    """Each pod set of ``record`` (its own record's fields for a gang of one)."""
    if not record.sets:
        gang = record.gang
        yield (
            record.request,
            record.pod_class,
            gang.one_pod_per_node,
            record.bound,
            (record.queued_pods),
        )
        return
    for part in record.sets:
        yield part.request, part.pod_class, part.one_pod_per_node, part.bound, part.queued_pods


def _check_record(record: GangRecord, cluster: ClusterModel) -> None:
    """One gang: its counts agree, its pods sit on nodes their pod set may use, one pod per
    node where asked, nothing held when it should hold nothing, its minimum when running."""
    name = record.gang.id
    if record.bound_pods != sum(record.bound.values()):
        raise AssertionError(f"{name}: bound pods out of sync")
    if record.sets:
        _check_sets_add_up(record, record.sets)
    for _, pod_class, one_per_node, bound, _ in pod_sets(record):
        allowed = set(cluster.pod_classes[pod_class].nodes)
        if not set(bound) <= allowed:
            raise AssertionError(f"{name}: pods on nodes their pod set may not use")
        if one_per_node and any(p > 1 for p in bound.values()):
            raise AssertionError(f"{name}: two pods on one node")
    if record.state in (PENDING, BACKING_OFF, FINISHED, FAILED) and record.bound_pods:
        raise AssertionError(f"{name}: holds pods in state {record.state}")
    if record.state == RUNNING and record.ready_pods < record.gang.min:
        raise AssertionError(f"{name}: runs below its minimum")


def _check_sets_add_up(record: GangRecord, sets: Sequence[PodSetRecord]) -> None:
    """A gang of several pod sets: its record's counts are the sums over its sets."""
    name = record.gang.id
    bound: dict[int, int] = {}
    for part in sets:
        if part.bound_pods != sum(part.bound.values()):
            raise AssertionError(f"{name}: a pod set's bound pods out of sync")
        for node, pods in part.bound.items():
            bound[node] = bound.get(node, 0) + pods
    if bound != record.bound:
        raise AssertionError(f"{name}: bound pods differ from its pod sets'")
    for field in ("running_pods", "waiting_pods", "queued_pods"):
        if getattr(record, field) != sum(getattr(part, field) for part in sets):
            raise AssertionError(f"{name}: {field} differ from its pod sets'")
    if [part.count for part in sets] != list(record.set_sizes(record.gang.size)):
        raise AssertionError(f"{name}: pod set sizes differ from the gang's")


def _check_capacity(now: float, gangs: Sequence[GangRecord], cluster: ClusterModel) -> None:
    """Each node's free capacity is its allocatable less what its bound pods request: the
    overcommit check above trusts the books it reads."""
    used = [[0] * len(cluster.resources) for _ in cluster.nodes]
    for record in gangs:
        for request, _, _, bound, _ in pod_sets(record):
            for node, pods in bound.items():
                for r, amount in request:
                    used[node][r] += amount * pods
    for node, (model, vector) in enumerate(zip(cluster.nodes, cluster.free, strict=True)):
        have = [model.allocatable[r] - model.used[r] for r in cluster.resources]
        if [h - u for h, u in zip(have, used[node], strict=True)] != vector:
            raise AssertionError(f"node {model.name}: free capacity out of sync at {now}")


def _check_planner_sees_pods(
    gangs: Sequence[GangRecord], cluster: ClusterModel, planner: Planner
) -> None:
    """Placement "scheduler": the planner counts every bound pod where it is bound, and
    once a gang no longer holds its plan, nothing else; set by set."""
    admitted = planner.admitted
    names = [node.name for node in cluster.nodes]
    for record in gangs:
        if record.state not in (ADMITTED, RUNNING):
            if record.gang.id in admitted:
                raise AssertionError(f"{record.gang.id}: admitted in the planner, not here")
            continue
        seen = admitted[record.gang.id]
        placements = [seen.placement, *seen.other_placements]
        for (_, _, _, bound_at, _), where in zip(pod_sets(record), placements, strict=True):
            bound = {names[n]: pods for n, pods in bound_at.items()}
            if any(where.get(name, 0) < pods for name, pods in bound.items()):
                raise AssertionError(f"{record.gang.id}: the planner misses bound pods")
            if not record.reserving and dict(where) != bound:
                raise AssertionError(f"{record.gang.id}: the planner still holds its plan")
        if seen.running != (record.state == RUNNING):
            raise AssertionError(f"{record.gang.id}: the planner's running flag is stale")
