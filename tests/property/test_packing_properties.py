"""Properties of the packing strategies (issue 31, `policies.packing`), checked independently of
the planner's internals: each strategy keeps the promise its docstring makes, and quota,
capacity, sizes and determinism hold under every strategy as under the default.

- best fit leaves the most whole nodes free: on nodes of one shape, a gang takes a whole node
  only when the partly used ones hold no more of its pods, so no placement (and no other
  strategy) leaves more whole nodes on the same snapshot;
- every scoring strategy takes nodes in its score's order: no node a gang leaves unused, with
  room for one of its pods, scores better than a node it uses (worst fit: emptiest first).
"""

from __future__ import annotations

import dataclasses
import math

from hypothesis import given

from policies import Node, Resources, Snapshot, plan
from policies.packing import Packing
from tests.property import test_plan_properties as general
from tests.property.test_plan_properties import POLICIES, SETTINGS
from tests.strategies import PACKINGS, any_snapshots, packing_snapshots

STRATEGIES = (
    Packing(),
    Packing("best-fit"),
    Packing("worst-fit"),
    Packing("weighted"),
    Packing("weighted", 0.5),
)


def _pods_on(free: Resources, request: Resources, one_pod_per_node: bool) -> int:
    """Pods of ``request`` a node with ``free`` capacity holds."""
    most = min((free[name] // amount for name, amount in request.items() if amount), default=0)
    most = max(most, 0)
    return min(most, 1) if one_pod_per_node else most


def _free(node: Node) -> Resources:
    return Resources({name: node.allocatable[name] - node.used[name] for name in node.allocatable})


def _whole_left(snapshot: Snapshot, placement: dict[str, int]) -> int:
    return sum(
        1 for node in snapshot.nodes if not any(node.used.values()) and node.name not in placement
    )


def _placement(snapshot: Snapshot) -> dict[str, int] | None:
    decisions = plan(snapshot)
    if not decisions.admitted:
        return None
    return dict(decisions.admitted[0].placement)


@SETTINGS
@given(packing_snapshots(one_shape=True))
def test_best_fit_leaves_the_most_whole_nodes(snapshot: Snapshot) -> None:
    gang = snapshot.pending[0]
    best = _placement(dataclasses.replace(snapshot, packing=Packing("best-fit")))
    if best is None:  # no room: no strategy admits it
        for packing in STRATEGIES:
            assert _placement(dataclasses.replace(snapshot, packing=packing)) is None
        return
    # The least whole nodes any placement needs: the partly used ones first, full.
    partial_room = sum(
        _pods_on(_free(node), gang.pod_requests, gang.one_pod_per_node)
        for node in snapshot.nodes
        if any(node.used.values())
    )
    per_whole = _pods_on(snapshot.nodes[0].allocatable, gang.pod_requests, gang.one_pod_per_node)
    needed = math.ceil(max(0, gang.size - partial_room) / per_whole) if per_whole else 0
    whole = _whole_left(snapshot, {})
    assert _whole_left(snapshot, best) == whole - needed
    for packing in STRATEGIES:
        other = _placement(dataclasses.replace(snapshot, packing=packing))
        assert other is not None, packing
        assert _whole_left(snapshot, other) <= _whole_left(snapshot, best), packing


def _score(snapshot: Snapshot, node: Node) -> float:
    """The packing's score of a node's free capacity (`policies.packing`), lower first."""
    packing = snapshot.packing
    free = _free(node)
    total = 0.0
    for name in ("cpu", "memory", "nvidia.com/gpu"):
        largest = max(other.allocatable[name] for other in snapshot.nodes)
        if largest:
            weight = packing.gpu_weight if packing.strategy == "weighted" and "gpu" in name else 1
            total += weight * free[name] / largest
    return -total if packing.strategy == "worst-fit" else total


@SETTINGS
@given(packing_snapshots(one_shape=False))
def test_gangs_take_nodes_in_their_strategys_order(snapshot: Snapshot) -> None:
    if snapshot.packing.strategy == "lexicographic":
        return
    placement = _placement(snapshot)
    if placement is None:
        return
    gang = snapshot.pending[0]
    used = [node for node in snapshot.nodes if node.name in placement]
    unused = [
        node
        for node in snapshot.nodes
        if node.name not in placement
        and _pods_on(_free(node), gang.pod_requests, gang.one_pod_per_node) > 0
    ]
    worst_used = max(_score(snapshot, node) for node in used)
    for node in unused:
        assert _score(snapshot, node) >= worst_used - 1e-9, (node, placement)


@SETTINGS
@given(any_snapshots(), POLICIES, PACKINGS)
def test_quota_and_capacity_hold_under_every_packing(
    snapshot: Snapshot, policy: str, packing: Packing
) -> None:
    packed = dataclasses.replace(snapshot, packing=packing)
    general.test_no_queue_exceeds_its_quota.hypothesis.inner_test(packed, policy)  # type: ignore[attr-defined]
    general.test_no_node_is_overcommitted.hypothesis.inner_test(packed, policy)  # type: ignore[attr-defined]
    general.test_admitted_sizes_respect_min_and_size.hypothesis.inner_test(packed, policy)  # type: ignore[attr-defined]
    general.test_same_input_same_decisions.hypothesis.inner_test(packed, policy)  # type: ignore[attr-defined]
