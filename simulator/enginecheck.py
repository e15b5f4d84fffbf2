"""Invariants of the in-process engine, checked after every instant when
`EngineConfig.check` is set (tests): they tie the engine's parts (cluster, scheduler queue,
meter, planner) back to the gang records."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.records import ADMITTED, BACKING_OFF, FAILED, FINISHED, PENDING, RUNNING

if TYPE_CHECKING:
    from simulator.engine import Engine


def check_invariants(engine: Engine) -> None:
    """After an instant (`EngineConfig.check`, tests): no node overcommitted, every count
    agrees with the records, and (placement "scheduler") the planner sees the pods."""
    cluster = engine.cluster
    for node, vector in enumerate(cluster.free):
        if any(amount < 0 for amount in vector):
            raise AssertionError(f"node {engine.nodes[node].name} overcommitted at {engine.now}")
    for record in engine.gangs:
        if record.bound_pods != sum(record.bound.values()):
            raise AssertionError(f"{record.gang.id}: bound pods out of sync")
        if record.gang.one_pod_per_node and any(p > 1 for p in record.bound.values()):
            raise AssertionError(f"{record.gang.id}: two pods on one node")
        if record.state in (PENDING, BACKING_OFF, FINISHED, FAILED) and record.bound_pods:
            raise AssertionError(f"{record.gang.id}: holds pods in state {record.state}")
    live: dict[int, int] = {}
    for _, index, attempt in cluster.pod_queue:
        record = engine.gangs[index]
        if attempt == record.attempt and record.state in (PENDING, ADMITTED):
            live[index] = live.get(index, 0) + 1
    for record in engine.gangs:
        if record.queued_pods != live.get(record.index, 0):
            raise AssertionError(f"{record.gang.id}: queued pods out of sync")
    for class_id, pod_class in enumerate(cluster.pod_classes):
        expected = sum(r.queued_pods for r in engine.gangs if r.pod_class == class_id)
        if pod_class.queued != expected:
            raise AssertionError(f"pod class {class_id}: queued count out of sync")
    total = sum(sum(counts.values()) for counts in engine.meter.state_count)
    if total != len(engine.gangs):
        raise AssertionError("state counts do not add up")
    if engine.unpinned and engine.planner is not None:
        _check_planner_sees_pods(engine)


def _check_planner_sees_pods(engine: Engine) -> None:
    """Placement "scheduler": the planner counts every bound pod where it is bound, and
    once a gang no longer holds its plan, nothing else."""
    assert engine.planner is not None
    admitted = engine.planner.admitted
    for record in engine.gangs:
        if record.state not in (ADMITTED, RUNNING):
            if record.gang.id in admitted:
                raise AssertionError(f"{record.gang.id}: admitted in the planner, not here")
            continue
        seen = admitted[record.gang.id]
        bound = {engine.nodes[n].name: pods for n, pods in record.bound.items()}
        if any(seen.placement.get(name, 0) < pods for name, pods in bound.items()):
            raise AssertionError(f"{record.gang.id}: the planner misses bound pods")
        if not record.reserving and dict(seen.placement) != bound:
            raise AssertionError(f"{record.gang.id}: the planner still holds its plan")
        if seen.running != (record.state == RUNNING):
            raise AssertionError(f"{record.gang.id}: the planner's running flag is stale")
