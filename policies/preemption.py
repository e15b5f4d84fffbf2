"""Preemption: after a plan's admissions, a queue's first waiting gang may evict admitted gangs
to be admitted in the same plan (the queue's ``spec.preemption``; see `policies.model.Preemption`).

For each leaf queue whose preemption is enabled, its first gang the plan left waiting is a
*preemptor*; preemptors are tried in the policy's order. For one preemptor:

1. Candidates: admitted gangs (not admitted by this plan, not chosen as victims already) that
   its queue's rules allow: same queue and lower priority (``withinQueue: LowerPriority``);
   another queue of its cohort tree that uses more than its nominal quota
   (``reclaimWithinCohort``: ``Any``, or ``LowerPriority``) or more than its weighted fair
   share (``fairShare: Reclaim``). Across queues, never a queue whose weighted share (over the
   preemptor's resources) is not above the preemptor queue's share with the preemptor. A gang
   protected by its own queue (preempted ``protectAfter`` times, admitted less than
   ``protectFor`` ago) is never a candidate.
2. Order: lowest priority, then youngest (latest submission), then most over its queue's
   share.
3. Simulate first: take candidates in that order until the preemptor's quota and nodes suffice
   with their capacity given back; if all of them do not suffice, nothing is preempted. Then
   drop every victim the preemptor does not need (the fewest, latest-chosen first).
4. Admit the preemptor on the freed capacity and preempt its victims, in the same decisions.

Pure, like the planner: works on the plan's quota state (given back at the end of the plan)
and on its own copy of the free capacity of the nodes it touches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from policies import reasons
from policies.decisions import Reason
from policies.durations import DurationError, parse_duration
from policies.fit import FitClass
from policies.model import AdmittedGang, Gang, PolicyError, Preemption, Queue

if TYPE_CHECKING:  # the planner imports this module
    from policies.planner import _Cycle

__all__ = ["parse_preemption", "preempt"]

_FIELDS = ("reclaimWithinCohort", "withinQueue", "fairShare", "protectAfter", "protectFor")


def parse_preemption(spec: object, where: str) -> Preemption:
    """A Queue's ``spec.preemption`` (the CRD's and the trace's one reader); raises
    PolicyError naming the field. None = no preemption."""
    if spec is None:
        return Preemption()
    if not isinstance(spec, Mapping):
        raise PolicyError(f"{where}: must be a mapping with keys {', '.join(_FIELDS)}")
    unknown = sorted(set(spec) - set(_FIELDS))
    if unknown:
        raise PolicyError(
            f"{where}: unknown field {', '.join(map(str, unknown))}; known: {', '.join(_FIELDS)}"
        )
    default = Preemption()
    protect_after = spec.get("protectAfter", default.protect_after)
    if isinstance(protect_after, bool) or not isinstance(protect_after, int):
        raise PolicyError(f"{where}.protectAfter: {protect_after!r} is not a whole number; e.g. 3")
    try:
        protect_for = parse_duration(
            spec.get("protectFor", default.protect_for), field=f"{where}.protectFor"
        )
    except DurationError as error:
        raise PolicyError(str(error)) from None
    preemption = Preemption(
        reclaim_within_cohort=spec.get("reclaimWithinCohort", default.reclaim_within_cohort),
        within_queue=spec.get("withinQueue", default.within_queue),
        fair_share=spec.get("fairShare", default.fair_share),
        protect_after=protect_after,
        protect_for=protect_for,
    )
    Preemption.validate(preemption, where)
    return preemption


_Demand = list[tuple[int, int]]


class _Victim:
    __slots__ = ("admitted", "demand", "leaf", "nodes", "rule")

    def __init__(
        self,
        admitted: AdmittedGang,
        leaf: str,
        demand: _Demand,
        nodes: Sequence[tuple[int, Sequence[int], int]],
        rule: str,
    ) -> None:
        self.admitted = admitted
        self.leaf = leaf
        self.demand = demand  # quota it holds: (resource index, amount)
        self.nodes = nodes  # (node id, per-pod request, pods)
        self.rule = rule


def preempt(
    cycle: _Cycle,
    waiting: Sequence[tuple[Gang, FitClass]],
    admitted_now: set[str],
    admit: Callable[[Gang, FitClass, int, dict[str, int]], None],
) -> dict[str, Reason]:
    """Preemptions for ``waiting`` (each preemption-enabled queue's first waiting gang, in the
    policy's order); ``admit`` records a preemptor's admission in the plan. Returns victim id
    -> reason."""
    state = cycle.state
    queues = cycle.tree.queues
    admitted: Mapping[str, AdmittedGang] = state.admitted
    preempted: dict[str, Reason] = {}
    free: dict[int, list[int]] = {}  # node id -> free capacity now (nodes this phase touched)
    for gang, fit in waiting:
        queue = queues[gang.queue]
        candidates = _candidates(cycle, gang, fit, queue, admitted, admitted_now, preempted)
        if not candidates:
            continue
        floor = cycle.floor(gang)
        chosen: list[_Victim] = []
        fitted: tuple[int, dict[int, int]] | None = None
        for victim in candidates:
            chosen.append(victim)
            fitted = _fits(cycle, gang, fit, queue, chosen, free, floor)
            if fitted is not None:
                break
        if fitted is None:
            continue
        # The fewest victims: drop each one the preemptor does without, latest chosen first.
        for victim in list(reversed(chosen[:-1])):
            rest = [v for v in chosen if v is not victim]
            without = _fits(cycle, gang, fit, queue, rest, free, floor)
            if without is not None:
                chosen, fitted = rest, without
        size, placement = fitted
        for victim in chosen:
            preempted[victim.admitted.gang.id] = reasons.preempted(gang.id, victim.rule)
            cycle.give_back(victim.leaf, victim.demand)
            for n, request, pods in victim.nodes:
                vector = _free(cycle, free, n)
                for i, amount in enumerate(request):
                    vector[i] += amount * pods
        names = cycle.cluster.node_names
        for n, pods in placement.items():
            vector = _free(cycle, free, n)
            for i in fit.nonzero:
                vector[i] -= fit.request[i] * pods
        admit(gang, fit, size, {names[n]: p for n, p in placement.items()})
        admitted_now.add(gang.id)
    return preempted


def _free(cycle: _Cycle, free: dict[int, list[int]], n: int) -> list[int]:
    vector = free.get(n)
    if vector is None:
        cluster = cycle.cluster
        now = cluster.current[n]
        vector = free[n] = list(now if now is not None else cluster.free[n])
    return vector


def _candidates(
    cycle: _Cycle,
    gang: Gang,
    fit: FitClass,
    queue: Queue,
    admitted: Mapping[str, AdmittedGang],
    admitted_now: set[str],
    preempted: Mapping[str, Reason],
) -> list[_Victim]:
    """The gangs ``gang`` may preempt, in preemption order (step 1 and 2)."""
    tree = cycle.tree
    queues = tree.queues
    rules = queue.preemption
    root = tree.root(queue.name)
    mine = cycle.share_of(queue.name, fit, gang.size)
    index = cycle.cluster.index
    ranked: list[tuple[tuple[int, float, float, str], _Victim]] = []
    shares: dict[str, float] = {}
    for victim in admitted.values():
        other = victim.gang
        if other.id in admitted_now or other.id in preempted or other.id == gang.id:
            continue
        leaf = other.queue
        owner = queues.get(leaf)
        if owner is None or tree.root(leaf) != root:
            continue
        guard = owner.preemption
        if (
            other.preemptions >= guard.protect_after
            and cycle.now - victim.admitted_at < guard.protect_for
        ):
            continue
        share = shares.get(leaf)
        if share is None:
            share = shares[leaf] = cycle.share_of(leaf, fit, 0)
        rule = ""
        if leaf == queue.name:
            if rules.within_queue == "LowerPriority" and other.priority < gang.priority:
                rule = "withinQueue: LowerPriority"
        elif share > mine:
            borrowing = cycle.borrowing(leaf)
            lower = other.priority < gang.priority
            if rules.reclaim_within_cohort == "Any" and borrowing:
                rule = f"reclaimWithinCohort: Any, queue {leaf} borrows"
            elif rules.reclaim_within_cohort == "LowerPriority" and borrowing and lower:
                rule = f"reclaimWithinCohort: LowerPriority, queue {leaf} borrows"
            elif rules.fair_share == "Reclaim" and cycle.above_fair_share(leaf, fit):
                rule = f"fairShare: Reclaim, queue {leaf} is above its fair share"
        if not rule:
            continue
        request = cycle.state.vector(other.pod_requests)
        demand = [(i, amount * victim.size) for i, amount in enumerate(request) if amount]
        nodes = [
            (index[name], request, pods) for name, pods in victim.placement.items() if name in index
        ]
        key = (other.priority, -other.submitted.time, -share, other.id)
        ranked.append((key, _Victim(victim, leaf, demand, nodes, rule)))
    ranked.sort(key=lambda item: item[0])
    return [victim for _, victim in ranked]


def _fits(
    cycle: _Cycle,
    gang: Gang,
    fit: FitClass,
    queue: Queue,
    victims: Sequence[_Victim],
    free: dict[int, list[int]],
    floor: int,
) -> tuple[int, dict[int, int]] | None:
    """How many pods of ``gang`` (at least ``floor``, at most its size) go where (node id ->
    pods; no nodes for a node-blind queue, which admits on quota alone) with the victims'
    quota and capacity given back; None if it does not fit."""
    for victim in victims:
        cycle.quota.add(victim.leaf, [(i, -amount) for i, amount in victim.demand])
    try:
        pods = cycle.quota_room(queue.name, fit, gang.size)
    finally:
        for victim in victims:
            cycle.quota.add(victim.leaf, victim.demand)
    if pods < floor:
        return None
    if not queue.node_fit:
        return pods, {}
    released: dict[int, list[int]] = {}
    for victim in victims:
        for n, request, count in victim.nodes:
            vector = released.get(n)
            if vector is None:
                vector = released[n] = list(_free(cycle, free, n))
            for i, amount in enumerate(request):
                vector[i] += amount * count
    member = fit.pool.member
    placement: dict[int, int] = {}
    placed = 0
    # The victims' nodes first (what the preemption frees), then nodes free anyway.
    order = [n for n in released if member[n]]
    order += [n for n in range(len(member)) if member[n] and n not in released]
    current = cycle.cluster.current
    start = cycle.cluster.free
    for n in order:
        now: Sequence[int] = released.get(n) or free.get(n) or current[n] or start[n]
        room = fit.pods_on(now)
        if room > 0:
            take = min(room, pods - placed)
            placement[n] = take
            placed += take
            if placed >= pods:
                break
    return (placed, placement) if placed >= floor else None
