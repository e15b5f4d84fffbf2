"""Properties of policies.plan with topology domains (issue 31): a gang that requires a level
is never split across its domains, whatever admits it (a queue head, a reservation's holder, a
backfill, a preemption); quota, node capacity, sizes and determinism hold as without topology.
"""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given

from policies import Node, Snapshot, plan
from tests.property import test_plan_properties as general
from tests.property.test_plan_properties import POLICIES, SETTINGS
from tests.strategies import topology_snapshots


def _domain(node: Node, depth: int) -> tuple[str, ...] | None:
    path = [node.labels.get(level) for level in ("block", "rack")[:depth]]
    return None if None in path else tuple(str(value) for value in path)


@SETTINGS
@given(topology_snapshots(), POLICIES)
def test_a_required_gang_is_never_split(snapshot: Snapshot, policy: str) -> None:
    decisions = plan(snapshot, policy)
    by_name = {node.name: node for node in snapshot.nodes}
    gangs = {gang.id: gang for gang in snapshot.pending}
    queues = snapshot.queues
    for admission in decisions.admitted:
        gang = gangs[admission.gang_id]
        request = gang.topology
        if request is None or not request.required or not queues[gang.queue].node_fit:
            continue
        depth = snapshot.topology.depth(request.level)
        assert depth, admission  # a level the cluster lacks: never admitted
        placements: list[Mapping[str, int]] = [admission.placement, *admission.other_placements]
        domains = {_domain(by_name[name], depth) for where in placements for name in where}
        assert len(domains) == 1 and None not in domains, (admission, domains)


@SETTINGS
@given(topology_snapshots(), POLICIES)
def test_quota_holds_with_topology(snapshot: Snapshot, policy: str) -> None:
    general.test_no_queue_exceeds_its_quota.hypothesis.inner_test(snapshot, policy)  # type: ignore[attr-defined]


@SETTINGS
@given(topology_snapshots(), POLICIES)
def test_no_node_is_overcommitted_with_topology(snapshot: Snapshot, policy: str) -> None:
    general.test_no_node_is_overcommitted.hypothesis.inner_test(snapshot, policy)  # type: ignore[attr-defined]
    general.test_admitted_sizes_respect_min_and_size.hypothesis.inner_test(snapshot, policy)  # type: ignore[attr-defined]


@SETTINGS
@given(topology_snapshots(), POLICIES)
def test_plans_stay_deterministic_with_topology(snapshot: Snapshot, policy: str) -> None:
    general.test_same_input_same_decisions.hypothesis.inner_test(snapshot, policy)  # type: ignore[attr-defined]
