"""Preemption's candidates are found through an index (the admitted gangs of the preemptor's
tree, by queue, skipping a queue whose rules rule all its gangs out) and shares read once per
quota state. Here a plan decides exactly as with the first form of `_candidates`, a scan of
every admitted gang of the cluster for every preemptor, kept below as the reference."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from unittest import mock

from hypothesis import HealthCheck, given, settings

from policies import Decisions, Gang, Queue, Snapshot, plan, preemption
from policies.decisions import Reason
from policies.fit import FitClass
from policies.model import Preemption
from policies.planstate import placed_sets
from policies.shares import Shares
from tests.strategies import any_snapshots, contended_snapshots


def _scan_every_admitted_gang(
    ground: preemption._Ground,
    gang: Gang,
    fit: FitClass,
    queue: Queue,
    admitted_now: set[str],
    preempted: Mapping[str, Reason],
) -> list[preemption._Victim]:
    """The reference: `_candidates` as first written (every admitted gang, every time), with
    the rules issue 33 added (no reclaim while borrowing, the final-share check)."""
    state = ground.state
    shares = ground.shares
    tree = state.tree
    queues = tree.queues
    rules = queue.preemption
    borrows = rules.reclaim_within_cohort != "Never" and not state.quota.within_nominal(
        queue.name, state.catalog.demand(gang, gang.size)
    )
    if borrows and not rules.borrow_within_cohort.enabled:
        rules = dataclasses.replace(rules, reclaim_within_cohort="Never")
        borrows = False
    root = tree.ancestors(queue.name)[-1]
    mine = shares.share_of(queue.name, fit, gang.size)
    index = state.cluster.index
    ranked: list[tuple[tuple[int, float, float, str], preemption._Victim]] = []
    for victim in state.admitted.values():
        other = victim.gang
        if other.id in admitted_now or other.id in preempted or other.id == gang.id:
            continue
        leaf = other.queue
        owner = queues.get(leaf)
        if owner is None or tree.ancestors(leaf)[-1] != root:
            continue
        guard = owner.preemption
        if (
            other.preemptions >= guard.protect_after
            and ground.now - victim.admitted_at < guard.protect_for
        ):
            continue
        share = shares.share_of(leaf, fit, 0)
        rule = _reference_rule(
            shares, rules, borrows, gang, other, leaf, queue.name, share, mine, fit
        )
        if not rule:
            continue
        demand = [(i, amount) for i, amount in state.catalog.demand(other, victim.size) if amount]
        nodes = [
            (index[name], state.catalog.vector(requests), pods)
            for requests, placement in placed_sets(victim)
            for name, pods in placement.items()
            if name in index
        ]
        key = (other.priority, -other.submitted.time, -share, other.id)
        ranked.append((key, preemption._Victim(victim, leaf, demand, nodes, rule)))
    ranked.sort(key=lambda item: item[0])
    before = shares.share_of(queue.name, fit, 0)
    return preemption._final_share(shares, fit, before, [victim for _, victim in ranked])


def _reference_rule(
    shares: Shares,
    rules: Preemption,
    borrows: bool,
    gang: Gang,
    other: Gang,
    leaf: str,
    mine_leaf: str,
    share: float,
    mine: float,
    fit: FitClass,
) -> str:
    if leaf == mine_leaf:
        if rules.within_queue == "LowerPriority" and other.priority < gang.priority:
            return "withinQueue: LowerPriority"
        return ""
    if share <= mine:
        return ""
    borrowing = shares.borrowing(leaf)
    lower = other.priority < gang.priority
    if borrows:  # the preemptor's queue would borrow: borrowWithinCohort's rule, or fairShare
        ceiling = rules.borrow_within_cohort.max_priority_threshold
        if borrowing and lower and (ceiling is None or other.priority <= ceiling):
            return (
                f"reclaimWithinCohort: {rules.reclaim_within_cohort} with borrowWithinCohort: "
                f"LowerPriority, queue {leaf} borrows"
            )
    elif rules.reclaim_within_cohort == "Any" and borrowing:
        return f"reclaimWithinCohort: Any, queue {leaf} borrows"
    elif rules.reclaim_within_cohort == "LowerPriority" and borrowing and lower:
        return f"reclaimWithinCohort: LowerPriority, queue {leaf} borrows"
    if rules.fair_share == "Reclaim" and shares.above_fair_share(leaf, fit):
        return f"fairShare: Reclaim, queue {leaf} is above its fair share"
    return ""


def _decided(decisions: Decisions) -> tuple[object, ...]:
    return (
        [(a.gang_id, a.size, sorted(a.placement.items())) for a in decisions.admitted],
        sorted((k, r.code, r.message) for k, r in decisions.preempted.items()),
        sorted((k, r.code, r.message) for k, r in decisions.pending.items()),
        sorted(decisions.rejected),
    )


def _same_as_the_scan(snapshot: Snapshot) -> None:
    indexed = plan(snapshot)
    with mock.patch.object(preemption, "_candidates", _scan_every_admitted_gang):
        scanned = plan(snapshot)
    assert _decided(indexed) == _decided(scanned)


SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SETTINGS
@given(contended_snapshots())
def test_contended_plans_preempt_as_the_scan_of_every_gang_does(snapshot: Snapshot) -> None:
    _same_as_the_scan(snapshot)


@SETTINGS
@given(any_snapshots())
def test_any_plan_preempts_as_the_scan_of_every_gang_does(snapshot: Snapshot) -> None:
    _same_as_the_scan(snapshot)
