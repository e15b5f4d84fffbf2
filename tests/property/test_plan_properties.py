"""Properties of policies.plan over random clusters, queue trees and gangs (issue 3).

The checks here are written independently of the planner's internals: usage is summed from
the snapshot and the decisions, limits are read from the queue specs.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence, Set

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import (
    Decisions,
    Gang,
    PodSet,
    Preemption,
    Queue,
    QueueTree,
    Resources,
    Snapshot,
    plan,
)
from tests.strategies import any_snapshots, contended_snapshots, snapshots, without_size_ratio
from tests.unit.test_policies import load_doc_example

# The safety properties hold for every policy, the custom one from docs/policies.md included
# (registered as "smallest-first" by running the example): a policy only orders, the planner
# enforces quota, node fit and sizes.
load_doc_example()
POLICIES = st.sampled_from(("drf", "fifo", "strict-fifo", "smallest-first"))

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _pods_counted(snapshot: Snapshot) -> bool:
    """Every pod counts one "pods" when a node or a quota mentions pods (as documented)."""
    gangs = [*snapshot.pending, *(a.gang for a in snapshot.admitted)]
    return (
        any("pods" in node.allocatable for node in snapshot.nodes)
        or any("pods" in (queue.nominal or ()) for queue in snapshot.queues)
        or any("pods" in pod_set.requests for gang in gangs for pod_set in gang.pod_sets)
    )


def _per_pod(requests: Resources, pods_counted: bool) -> dict[str, int]:
    request = dict(requests)
    if pods_counted:
        request["pods"] = max(request.get("pods", 0), 1)
    return request


def _sets_at(gang: Gang, size: int) -> list[PodSet]:
    """The gang's pod sets as admitted at ``size`` pods (the main one shrunk, the others whole)."""
    return [dataclasses.replace(gang.main, count=size - gang.fixed), *gang.others]


def _gangs(snapshot: Snapshot) -> dict[str, Gang]:
    gangs = {gang.id: gang for gang in snapshot.pending}
    gangs.update({a.gang.id: a.gang for a in snapshot.admitted})
    return gangs


def _leaf_usage(snapshot: Snapshot, decisions: Decisions) -> dict[str, dict[str, int]]:
    counted = _pods_counted(snapshot)
    gangs = _gangs(snapshot)
    usage: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    held = [(a.gang.id, a.size) for a in snapshot.admitted if a.gang.id not in decisions.preempted]
    held += [(a.gang_id, a.size) for a in decisions.admitted]
    for gang_id, size in held:
        gang = gangs[gang_id]
        for pod_set in _sets_at(gang, size):
            for resource, amount in _per_pod(pod_set.requests, counted).items():
                usage[gang.queue][resource] += amount * pod_set.count
    return usage


def _nominal(queue: Queue, resource: str) -> int:
    return queue.nominal[resource] if queue.nominal is not None else 0


def _subtree(tree: QueueTree, name: str) -> list[str]:
    result = [name]
    for child in tree.children(name):
        result += _subtree(tree, child)
    return result


@SETTINGS
@given(any_snapshots(), POLICIES)
def test_no_queue_exceeds_its_quota(snapshot: Snapshot, policy: str) -> None:
    decisions = plan(snapshot, policy)
    tree = snapshot.queues
    usage = _leaf_usage(snapshot, decisions)
    roots = [q.name for q in tree if q.parent is None]
    for root in roots:
        members = _subtree(tree, root)
        governed = {r for name in members for r in (tree[name].nominal or ())}
        for resource in governed:
            total_nominal = sum(_nominal(tree[name], resource) for name in members)
            total_usage = sum(usage[name][resource] for name in members)
            # The tree never holds more than all its nominal quota.
            assert total_usage <= total_nominal, (root, resource)
            for name in members:
                queue = tree[name]
                nominal = _nominal(queue, resource)
                below = sum(usage[n][resource] for n in _subtree(tree, name))
                # Nominal plus borrowing limit (a queue without a parent cannot borrow).
                limit = queue.borrowing_limit
                if queue.parent is not None and limit is not None and resource in limit:
                    most = sum(_nominal(tree[n], resource) for n in _subtree(tree, name))
                    assert below <= most + limit[resource], (name, resource)
                # Lending: what a leaf keeps (nominal - lendingLimit) is not used by others.
                lending = queue.lending_limit
                if lending is not None and resource in lending and not tree.children(name):
                    kept = max(0, nominal - lending[resource])
                    others = total_usage - usage[name][resource]
                    assert others <= total_nominal - kept, (name, resource)


@SETTINGS
@given(any_snapshots(), POLICIES)
def test_no_node_is_overcommitted(snapshot: Snapshot, policy: str) -> None:
    decisions = plan(snapshot, policy)
    counted = _pods_counted(snapshot)
    gangs = _gangs(snapshot)
    by_name = {node.name: node for node in snapshot.nodes}
    load: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    placements = [
        (a.gang.id, (a.placement, *a.other_placements))
        for a in snapshot.admitted
        if a.gang.id not in decisions.preempted
    ]
    placements += [(a.gang_id, (a.placement, *a.other_placements)) for a in decisions.admitted]
    for gang_id, by_set in placements:
        for pod_set, placement in zip(gangs[gang_id].pod_sets, by_set, strict=False):
            for name, pods in placement.items():
                for resource, amount in _per_pod(pod_set.requests, counted).items():
                    load[name][resource] += amount * pods
    for admission in decisions.admitted:
        gang = gangs[admission.gang_id]
        queue = snapshot.queues[admission.queue]
        sets = _sets_at(gang, admission.size)
        by_set = (admission.placement, *admission.other_placements)
        if not queue.node_fit:
            assert all(placement == {} for placement in by_set)
            continue
        # Every pod set is placed, each whole but the main one, which has the rest.
        assert len(by_set) == len(sets)
        for pod_set, placement in zip(sets, by_set, strict=True):
            assert sum(placement.values()) == pod_set.count, (admission, pod_set)
            for node_name, pods in placement.items():
                assert pods >= 1
                node = by_name[node_name]
                if pod_set.one_pod_per_node:
                    assert pods == 1, admission
                assert all(node.labels.get(k) == v for k, v in pod_set.node_selector.items())
                for taint in node.taints:
                    assert any(t.tolerates(taint) for t in pod_set.tolerations), (node, gang)
        for node_name in {name for placement in by_set for name in placement}:
            node = by_name[node_name]
            for resource, amount in load[node_name].items():
                if resource == "pods" and "pods" not in node.allocatable:
                    continue  # a node without a pod limit
                limit = node.allocatable[resource] - node.used[resource]
                assert amount <= limit, (node_name, resource, amount, limit)


@SETTINGS
@given(any_snapshots(), POLICIES)
def test_admitted_sizes_respect_min_and_size(snapshot: Snapshot, policy: str) -> None:
    decisions = plan(snapshot, policy)
    gangs = _gangs(snapshot)
    for admission in decisions.admitted:
        gang = gangs[admission.gang_id]
        assert gang.min <= admission.size <= gang.size
        if admission.size < gang.size:  # shrunk: only once the gang has waited long enough
            assert snapshot.now - gang.submitted.time >= gang.elastic_after
    # Every pending gang is decided exactly once.
    decided = [a.gang_id for a in decisions.admitted]
    decided += list(decisions.pending) + list(decisions.rejected)
    assert sorted(decided) == sorted(gang.id for gang in snapshot.pending)


@SETTINGS
@given(any_snapshots(), POLICIES)
def test_same_input_same_decisions(snapshot: Snapshot, policy: str) -> None:
    first = plan(snapshot, policy)
    again = plan(snapshot, policy)
    assert first == again
    assert list(first.pending.items()) == list(again.pending.items())
    # The order of nodes in the snapshot does not matter either.
    reordered = dataclasses.replace(snapshot, nodes=list(reversed(snapshot.nodes)))
    assert plan(reordered, policy) == first


@SETTINGS
@given(snapshots(strict=False, size_ratio=False, with_admitted=False, with_pods=False))
def test_drf_admits_the_lowest_share_first(snapshot: Snapshot) -> None:
    snapshot = without_size_ratio(snapshot)
    decisions = plan(snapshot, "drf")
    if not decisions.admitted:
        return
    capacity: dict[str, int] = defaultdict(int)
    for node in snapshot.nodes:
        for resource, amount in node.allocatable.items():
            capacity[resource] += amount
    tree = snapshot.queues
    candidates = []
    for leaf in tree.leaves:
        queue = tree[leaf]
        ordered = sorted(
            (g for g in snapshot.pending if g.queue == leaf), key=lambda g: g.order_key
        )
        for gang in ordered:
            # The queue's first gang that would be admitted on its own.
            if plan(dataclasses.replace(snapshot, pending=[gang])).admitted:
                demand = gang.demand(gang.size)
                share = max(
                    (demand[r] * (1.0 / capacity[r]) for r in sorted(capacity) if capacity[r] > 0),
                    default=0.0,
                )
                candidates.append(((share / queue.weight, *gang.order_key, leaf), gang.id))
                break
    assert decisions.admitted[0].gang_id == min(candidates)[1]


def _order_of_screened(snapshot: Snapshot, decisions: Decisions) -> dict[str, list[Gang]]:
    """Per leaf queue, the gangs that were not rejected, in queue order."""
    by_queue: dict[str, list[Gang]] = defaultdict(list)
    for gang in sorted(snapshot.pending, key=lambda g: g.order_key):
        if gang.id in decisions.rejected or not snapshot.queues.is_leaf(gang.queue):
            continue
        by_queue[gang.queue].append(gang)
    return by_queue


@SETTINGS
@given(snapshots(strict=True), st.sampled_from(("drf", "fifo")))
def test_strict_fifo_never_admits_past_a_blocked_head(snapshot: Snapshot, policy: str) -> None:
    decisions = plan(snapshot, policy)
    admitted = {a.gang_id for a in decisions.admitted}
    for leaf, ordered in _order_of_screened(snapshot, decisions).items():
        blocked_at = next((i for i, g in enumerate(ordered) if g.id not in admitted), None)
        if blocked_at is None:
            continue
        head = ordered[blocked_at]
        for later in ordered[blocked_at + 1 :]:
            assert later.id not in admitted, (leaf, head.id, later.id)
            assert decisions.pending[later.id].code == "StrictFIFOBlocked"
            # An aged big gang blocked here may hold the plan's reservation all the same (against
            # younger gangs of other queues); its reason then says that too.
            blocked = decisions.pending[later.id].message.split("; holds a reservation", 1)[0]
            assert blocked == f"blocked by StrictFIFO head {head.id}"


@SETTINGS
@given(any_snapshots())
def test_global_strict_fifo_admits_a_prefix(snapshot: Snapshot) -> None:
    decisions = plan(snapshot, "strict-fifo")
    admitted = {a.gang_id for a in decisions.admitted}
    everyone = [g for gangs in _order_of_screened(snapshot, decisions).values() for g in gangs]
    everyone.sort(key=lambda g: g.order_key)
    first_waiting = next((i for i, g in enumerate(everyone) if g.id not in admitted), None)
    if first_waiting is not None:
        assert not admitted & {g.id for g in everyone[first_waiting:]}
    # Admissions happen in order.
    order = {g.id: i for i, g in enumerate(everyone)}
    positions = [order[a.gang_id] for a in decisions.admitted]
    assert positions == sorted(positions)


@SETTINGS
@given(any_snapshots(), POLICIES)
def test_at_most_one_reservation_and_every_wait_for_it_names_it(
    snapshot: Snapshot, policy: str
) -> None:
    """Reservations cannot pile up: one per plan at most, held by a waiting big gang whose
    reason says so (it does not fit nodes or, an aged holder, no longer its quota or the
    size-ratio slot), and every gang kept off its nodes names that gang."""
    decisions = plan(snapshot, policy)
    holders = [
        gang_id
        for gang_id, reason in decisions.pending.items()
        if "holds a reservation" in reason.message
    ]
    assert len(holders) <= 1
    admitted = {a.gang_id for a in decisions.admitted}
    for reason in decisions.pending.values():
        if reason.code != "Reserved":
            continue
        named = reason.message.split("big gang ", 1)[1].split(" ", 1)[0].rstrip(",")
        if named in admitted:
            # The holder was admitted later in the same plan (on the room the reservation kept,
            # or by the preemption phase): it holds no reservation any more.
            continue
        assert holders
        assert f"big gang {holders[0]}," in reason.message


@SETTINGS
@given(contended_snapshots(), POLICIES)
def test_a_reservation_never_holds_back_what_comes_before_it(
    snapshot: Snapshot, policy: str
) -> None:
    """A gang admitted by the plan came before the holder in the policy's order or fit beside
    it: taking away the holder admits the same gangs before it (the plan's order is the
    order of admission), so nothing before the holder waited for it. A holder that has waited
    STARVATION_AFTER holds against younger gangs whatever the order: only younger ones wait.

    Without runtime limits: a gang that backfills onto the reserved nodes may be admitted only
    because gangs without a limit were kept off them (tests/unit/test_planner.py covers
    backfill)."""
    snapshot = dataclasses.replace(
        snapshot, pending=[dataclasses.replace(g, runtime_limit=None) for g in snapshot.pending]
    )
    tree = QueueTree.build(dataclasses.replace(q, preemption=Preemption()) for q in snapshot.queues)
    snapshot = dataclasses.replace(snapshot, queues=tree)
    decisions = plan(snapshot, policy)
    holders = {
        gang_id
        for gang_id, reason in decisions.pending.items()
        if "holds a reservation" in reason.message
    }
    if not holders:
        return
    held = [gang_id for gang_id, r in decisions.pending.items() if r.code == "Reserved"]
    if any("older and waiting" in decisions.pending[gang_id].message for gang_id in held):
        # A holder that has waited STARVATION_AFTER holds against younger gangs whatever the
        # policy's order (docs/policies.md, *No starvation*): gangs before it in the order may
        # wait for it, but only younger ones, or ones preempted since (requeued at their old
        # stamp, they ran while the holder waited: policies.reservation.held_back).
        (holder,) = holders
        gangs = _gangs(snapshot)
        assert all(
            gangs[holder].submitted < gangs[gang_id].submitted or gangs[gang_id].preemptions > 0
            for gang_id in held
        )
        return
    without = dataclasses.replace(
        snapshot, pending=[g for g in snapshot.pending if g.id not in holders]
    )
    decisions_without = plan(without, policy)
    if any("holds a reservation" in r.message for r in decisions_without.pending.values()):
        # Another big gang holds the reservation instead and keeps off gangs the first one
        # let through (one reservation per plan): the two plans hold back different gangs.
        return
    before = [a.gang_id for a in decisions_without.admitted]
    admitted = [a.gang_id for a in decisions.admitted]
    # Every gang admitted with the reservation in place is admitted without it too, in the
    # same order up to the first gang the reservation changed.
    assert before[: len(admitted)] == admitted or set(admitted) <= set(before)


def _share_over(
    snapshot: Snapshot,
    queue: str,
    resources: set[str],
    extra: Gang | None,
    plan_admitted: Sequence[tuple[Gang, int]] = (),
    gone: Set[str] = frozenset(),
) -> float:
    """A queue's weighted share over ``resources`` of the cluster's capacity: its usage before
    the plan without the gangs ``gone`` (preempted by an earlier preemptor of the plan), plus
    what the plan admitted before (``plan_admitted``: preemption comes after the plan's
    admissions, which count), plus ``extra`` at full size; computed here from the snapshot and
    the decisions alone."""
    counted = _pods_counted(snapshot)
    capacity: dict[str, int] = defaultdict(int)
    for node in snapshot.nodes:
        for resource, amount in node.allocatable.items():
            capacity[resource] += amount
    usage: dict[str, int] = defaultdict(int)
    held = [
        (a.gang, a.size)
        for a in snapshot.admitted
        if a.gang.queue == queue and a.gang.id not in gone
    ]
    held += [(gang, size) for gang, size in plan_admitted if gang.queue == queue]
    if extra is not None:
        held.append((extra, extra.size))
    for gang, size in held:
        for pod_set in _sets_at(gang, size):
            for resource, amount in _per_pod(pod_set.requests, counted).items():
                usage[resource] += amount * pod_set.count
    best = max(
        (usage[r] / capacity[r] for r in resources if capacity.get(r)),
        default=0.0,
    )
    return best / snapshot.queues[queue].weight


@SETTINGS
@given(any_snapshots(), POLICIES)
def test_preemption_only_for_a_preemptor_admitted_now_and_a_lower_share(
    snapshot: Snapshot, policy: str
) -> None:
    """Every preempted gang was admitted before, names its preemptor, and that preemptor is
    admitted by the same plan; across queues the preemptor's queue (with it) has a lower
    weighted share than the victim's queue, over the preemptor's resources.

    Preemptors preempt one after the other, in admission order: the shares a preemptor sees
    are those after the plan's admissions before it and without the gangs that earlier
    preemptors took (tests/unit/test_preemption.py has the smallest such world)."""
    decisions = plan(snapshot, policy)
    admitted_before = {a.gang.id: a.gang for a in snapshot.admitted}
    position = {a.gang_id: i for i, a in enumerate(decisions.admitted)}
    pending = {g.id: g for g in snapshot.pending}
    counted = _pods_counted(snapshot)
    preemptor_of = {
        victim_id: reason.message.split("preempted by ", 1)[1].split(" ", 1)[0]
        for victim_id, reason in decisions.preempted.items()
    }
    for victim_id, reason in decisions.preempted.items():
        assert victim_id in admitted_before
        assert reason.code == "Preempted"
        preemptor_id = preemptor_of[victim_id]
        assert preemptor_id in position
        assert preemptor_id not in decisions.pending
        preemptor = pending[preemptor_id]
        victim = admitted_before[victim_id]
        assert snapshot.queues[preemptor.queue].preemption.enabled
        if victim.queue == preemptor.queue:
            assert victim.priority < preemptor.priority
            continue
        # Over the resources of the preemptor's main pod set, as the planner's shares count.
        per_pod = _per_pod(preemptor.pod_requests, counted)
        resources = {r for r, amount in per_pod.items() if amount}
        at = position[preemptor_id]
        before = [(pending[a.gang_id], a.size) for a in decisions.admitted[:at]]
        gone = {v for v, p in preemptor_of.items() if position.get(p, at) < at}
        mine = _share_over(snapshot, preemptor.queue, resources, preemptor, before, gone)
        theirs = _share_over(snapshot, victim.queue, resources, None, before, gone)
        assert mine < theirs + 1e-9, (mine, theirs)
