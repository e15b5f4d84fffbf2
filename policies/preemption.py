"""Preemption: after a plan's admissions, a queue's first waiting gang may evict admitted gangs
to be admitted in the same plan (the queue's ``spec.preemption``; see `policies.model.Preemption`).

For each leaf queue whose preemption is enabled, its first gang the plan left waiting is a
*preemptor*; preemptors are tried in the policy's order. For one preemptor:

1. Candidates: admitted gangs (not admitted by this plan, not chosen as victims already) that
   its queue's rules allow: same queue and lower priority (``withinQueue: LowerPriority``);
   another queue of its cohort tree that uses more than its nominal quota
   (``reclaimWithinCohort``: ``Any``, or ``LowerPriority``; only while the preemptor's queue
   stays within its own nominal quota with it, as Kueue, unless ``borrowWithinCohort:
   LowerPriority`` lets it take gangs of lower priority, at most ``maxPriorityThreshold``,
   while it borrows) or more than its weighted fair
   share (``fairShare: Reclaim``). Across queues, never a queue whose weighted share (over the
   preemptor's resources) is not above the preemptor queue's share with the preemptor; by
   ``fairShare: Reclaim`` alone, never a gang whose queue's share would then fall below the
   preemptor queue's share now (with every victim chosen before it gone too). A gang
   protected by its own queue (preempted ``protectAfter`` times, admitted less than
   ``protectFor`` ago) is never a candidate.
2. Order: lowest priority, then youngest (latest submission), then most over its queue's
   share.
3. Simulate first: take candidates in that order until the preemptor's quota and nodes suffice
   with their capacity given back; if all of them do not suffice, nothing is preempted. Then
   drop every victim the preemptor does not need (the fewest, latest-chosen first).
4. Admit the preemptor on the freed capacity and preempt its victims, in the same decisions.

A gang of several pod sets preempts for all of them (each other pod set placed whole, then the
main one at least at its floor), and a victim gives back every pod set's quota and nodes.

Pure, like the planner: works on the plan's quota state through `policies.shares.Shares` (given
back at the end of the plan) and on its own copy of the free capacity of the nodes it touches;
it reads the plan's `PlanState` and never changes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from policies import reasons
from policies.decisions import Reason
from policies.durations import DurationError, parse_duration, shown
from policies.fit import FitClass
from policies.fitcatalog import Demand
from policies.model import (
    AdmittedGang,
    BorrowWithinCohort,
    Gang,
    PolicyError,
    Preemption,
    Queue,
    ReclaimWithinCohort,
)
from policies.planstate import PlanState, placed_sets, smallest_size
from policies.shares import Shares
from policies.vocabulary import MAX_INT32

__all__ = ["parse_preemption", "preempt", "preemption_spec"]

_FIELDS = (
    "reclaimWithinCohort",
    "withinQueue",
    "fairShare",
    "protectAfter",
    "protectFor",
    "borrowWithinCohort",
)
_BORROW_FIELDS = ("policy", "maxPriorityThreshold")


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
    if (
        isinstance(protect_after, bool)
        or not isinstance(protect_after, int)
        or abs(protect_after) > MAX_INT32
    ):
        raise PolicyError(
            f"{where}.protectAfter: {shown(protect_after)} is not a whole number up to "
            f"{MAX_INT32}; e.g. 3"
        )
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
        borrow_within_cohort=_parse_borrow(
            spec.get("borrowWithinCohort"), f"{where}.borrowWithinCohort"
        ),
    )
    Preemption.validate(preemption, where)
    return preemption


def preemption_spec(preemption: Preemption) -> dict[str, object]:
    """``preemption`` as a Queue's ``spec.preemption`` (what `parse_preemption` reads back to
    it): every rule, ``protectFor`` in seconds, ``borrowWithinCohort`` only where set."""
    spec: dict[str, object] = {
        "reclaimWithinCohort": preemption.reclaim_within_cohort,
        "withinQueue": preemption.within_queue,
        "fairShare": preemption.fair_share,
        "protectAfter": preemption.protect_after,
        "protectFor": preemption.protect_for,
    }
    borrow = preemption.borrow_within_cohort
    if borrow != BorrowWithinCohort():
        body: dict[str, object] = {"policy": borrow.policy}
        if borrow.max_priority_threshold is not None:
            body["maxPriorityThreshold"] = borrow.max_priority_threshold
        spec["borrowWithinCohort"] = body
    return spec


def _parse_borrow(spec: object, where: str) -> BorrowWithinCohort:
    """``spec.preemption.borrowWithinCohort`` (Kueue's field names); None = not set."""
    if spec is None:
        return BorrowWithinCohort()
    if not isinstance(spec, Mapping):
        raise PolicyError(
            f"{where}: must be a mapping with keys {', '.join(_BORROW_FIELDS)}, e.g. "
            "{policy: LowerPriority, maxPriorityThreshold: 100}"
        )
    unknown = sorted(set(spec) - set(_BORROW_FIELDS))
    if unknown:
        raise PolicyError(
            f"{where}: unknown field {', '.join(map(str, unknown))}; "
            f"known: {', '.join(_BORROW_FIELDS)}"
        )
    # Its values are checked with the rest of the rules (`Preemption.validate`).
    return BorrowWithinCohort(
        policy=spec.get("policy", BorrowWithinCohort().policy),
        max_priority_threshold=spec.get("maxPriorityThreshold"),
    )


Admit = Callable[[Gang, FitClass, int, dict[str, int], tuple[dict[str, int], ...]], None]
"""Records a preemptor's admission in the plan: gang, fit class of its main pod set, size, main
placement, the other pod sets' placements."""


class _Victim:
    __slots__ = ("admitted", "demand", "leaf", "nodes", "rule")

    def __init__(
        self,
        admitted: AdmittedGang,
        leaf: str,
        demand: Demand,
        nodes: Sequence[tuple[int, Sequence[int], int]],
        rule: str,
    ) -> None:
        self.admitted = admitted
        self.leaf = leaf
        self.demand = demand  # quota it holds: (resource index, amount)
        self.nodes = nodes  # (node id, per-pod request, pods)
        self.rule = rule


class _Ground:
    """What preemption reads and changes of one plan: its state (read only), its quota through
    `Shares`, and its own copy of the free capacity of the nodes it touched."""

    __slots__ = ("_borrowing", "_by_root", "_shares", "free", "now", "off", "shares", "state")

    def __init__(self, state: PlanState, shares: Shares, now: float) -> None:
        self.state = state
        self.shares = shares
        self.now = now
        self.free: dict[int, list[int]] = {}  # node id -> free capacity now (nodes touched)
        # The nodes the preemptor being tried keeps off (the plan's reservation, for a gang it
        # holds back), as a node mask; None: none.
        self.off: bytes | None = None
        self._by_root: dict[str, dict[str, list[AdmittedGang]]] | None = None
        # A queue's share (over a fit class's resources) and whether it borrows, as the quota
        # stands: asked of every queue of a tree for every preemptor, they change only when a
        # preemption is carried out (`changed`).
        self._shares: dict[tuple[str, tuple[int, ...]], float] = {}
        self._borrowing: dict[str, bool] = {}

    def changed(self) -> None:
        """The quota changed (a preemption was carried out): forget the shares read of it."""
        self._shares.clear()
        self._borrowing.clear()

    def share(self, leaf: str, fit: FitClass) -> float:
        """``leaf``'s weighted dominant share over ``fit``'s resources (`Shares.share_of` with
        no pod more), read once per quota state."""
        key = (leaf, fit.nonzero)
        share = self._shares.get(key)
        if share is None:
            share = self._shares[key] = self.shares.share_of(leaf, fit, 0)
        return share

    def borrowing(self, leaf: str) -> bool:
        """`Shares.borrowing`, read once per quota state."""
        borrowing = self._borrowing.get(leaf)
        if borrowing is None:
            borrowing = self._borrowing[leaf] = self.shares.borrowing(leaf)
        return borrowing

    def admitted_in(self, root: str) -> Mapping[str, list[AdmittedGang]]:
        """The admitted gangs of the queues of ``root``'s tree, by leaf queue (built once per
        preemption pass: the plan's admitted gangs do not change during it). A preemptor then
        looks at the queues of its own tree, and at a queue's gangs only where some rule can
        let it preempt them, not at every admitted gang of the cluster."""
        by_root = self._by_root
        if by_root is None:
            by_root = self._by_root = {}
            tree = self.state.tree
            queues = tree.queues
            for admitted in self.state.admitted.values():
                leaf = admitted.gang.queue
                if leaf in queues:
                    by_leaf = by_root.setdefault(tree.root(leaf), {})
                    by_leaf.setdefault(leaf, []).append(admitted)
        return by_root.get(root, {})

    def free_of(self, n: int) -> list[int]:
        vector = self.free.get(n)
        if vector is None:
            now = self.state.overlay.current[n]
            vector = self.free[n] = list(now if now is not None else self.state.cluster.free[n])
        return vector

    def take(self, n: int, request: Sequence[int], pods: int) -> None:
        """``pods`` pods of ``request`` on node ``n`` (negative: given back)."""
        vector = self.free_of(n)
        for i, amount in enumerate(request):
            vector[i] -= amount * pods


def preempt(
    state: PlanState,
    shares: Shares,
    now: float,
    waiting: Sequence[tuple[Gang, FitClass]],
    admitted_now: set[str],
    admit: Admit,
    kept_off: Callable[[Gang], bytes | None] = lambda gang: None,
) -> dict[str, Reason]:
    """Preemptions for ``waiting`` (each preemption-enabled queue's first waiting gang, in the
    policy's order); ``admit`` records a preemptor's admission in the plan; ``kept_off`` gives
    the nodes a preemptor may not land on (the plan's reservation, for a gang it holds back:
    what a preemption frees there is the big gang's). Returns victim id -> reason."""
    ground = _Ground(state, shares, now)
    queues = state.tree.queues
    preempted: dict[str, Reason] = {}
    for gang, fit in waiting:
        queue = queues[gang.queue]
        ground.off = kept_off(gang)
        candidates = _candidates(ground, gang, fit, queue, admitted_now, preempted)
        if not candidates:
            continue
        chosen, fitted = _fewest_first(ground, gang, fit, queue, candidates)
        if fitted is None:
            continue
        # The fewest victims: drop each one the preemptor does without, latest chosen first.
        for victim in list(reversed(chosen[:-1])):
            rest = [v for v in chosen if v is not victim]
            without = _fits(ground, gang, fit, queue, rest)
            if without is not None:
                chosen, fitted = rest, without
        size, placements = fitted
        ground.changed()
        for victim in chosen:
            preempted[victim.admitted.gang.id] = reasons.preempted(gang.id, victim.rule)
            shares.give_back(victim.leaf, victim.demand)
            for n, request, pods in victim.nodes:
                ground.take(n, request, -pods)
        names = state.cluster.node_names
        named: list[dict[str, int]] = []
        for set_fit, placement in placements:
            for n, pods in placement.items():
                ground.take(n, set_fit.request, pods)
            named.append({names[n]: p for n, p in placement.items()})
        admit(gang, fit, size, named[-1], tuple(named[:-1]))
        admitted_now.add(gang.id)
    return preempted


def _fewest_first(
    ground: _Ground, gang: Gang, fit: FitClass, queue: Queue, candidates: Sequence[_Victim]
) -> tuple[list[_Victim], _Fitted | None]:
    """The shortest run of ``candidates`` from the first (at least one) with which ``gang``
    fits, and its fit; ([], None) if all of them do not suffice. Giving back more capacity
    never fits fewer pods (quota room and free node capacity only grow, and the placement
    fills every node it can), so the runs that fit are those from some length on: one try with
    all, then a bisection, rather than one try per length (each try costs one pass over the
    victims: hundreds of one-pod victims made that quadratic, every plan)."""
    fitted = _fits(ground, gang, fit, queue, candidates)
    if fitted is None:
        return [], None
    fails, fits = 0, len(candidates)  # a run of `fails` is assumed not to fit, of `fits` fits
    while fits - fails > 1:
        middle = (fails + fits) // 2
        attempt = _fits(ground, gang, fit, queue, candidates[:middle])
        if attempt is None:
            fails = middle
        else:
            fits, fitted = middle, attempt
    return list(candidates[:fits]), fitted


def _candidates(
    ground: _Ground,
    gang: Gang,
    fit: FitClass,
    queue: Queue,
    admitted_now: set[str],
    preempted: Mapping[str, Reason],
) -> list[_Victim]:
    """The gangs ``gang`` may preempt, in preemption order (step 1 and 2)."""
    state = ground.state
    shares = ground.shares
    tree = state.tree
    queues = tree.queues
    rules = queue.preemption
    reclaim = _Reclaim(rules.reclaim_within_cohort, None, False)
    if reclaim.mode != "Never" and not state.quota.within_nominal(
        queue.name, state.catalog.demand(gang, gang.size)
    ):
        # As Kueue: a queue borrowing with the preemptor reclaims nothing from others, or two
        # queues that both borrow would reclaim from each other in turn (seed 4 of the trace
        # family: a 36-node gang 592 cpu past its queue's nominal quota preempted ~400 tasks
        # of a queue that then preempted it back, three times), unless the queue lets it
        # take lower-priority gangs while it borrows (borrowWithinCohort): strictly lower
        # priority, so two such queues never take gangs from each other in turn.
        borrow = rules.borrow_within_cohort
        if borrow.enabled:
            reclaim = _Reclaim("LowerPriority", borrow.max_priority_threshold, True)
        else:
            reclaim = _Reclaim("Never", None, False)
    root = tree.root(queue.name)
    mine = shares.share_of(queue.name, fit, gang.size)
    index = state.cluster.index
    ranked: list[tuple[tuple[int, float, float, str], _Victim]] = []
    for leaf, admitted in ground.admitted_in(root).items():
        share = ground.share(leaf, fit)
        if not _may_reclaim(ground, rules, reclaim, leaf, queue.name, share, mine, fit):
            continue  # no rule lets this preemptor take any gang of this queue
        guard = queues[leaf].preemption
        for victim in admitted:
            other = victim.gang
            if other.id in admitted_now or other.id in preempted or other.id == gang.id:
                continue
            if (
                other.preemptions >= guard.protect_after
                and ground.now - victim.admitted_at < guard.protect_for
            ):
                continue
            rule = _rule(ground, rules, reclaim, gang, other, leaf, queue.name, share, mine, fit)
            if not rule:
                continue
            demand = [
                (i, amount) for i, amount in state.catalog.demand(other, victim.size) if amount
            ]
            nodes = [
                (index[name], state.catalog.vector(requests), pods)
                for requests, placement in placed_sets(victim)
                for name, pods in placement.items()
                if name in index
            ]
            key = (other.priority, -other.submitted.time, -share, other.id)
            ranked.append((key, _Victim(victim, leaf, demand, nodes, rule)))
    ranked.sort(key=lambda item: item[0])
    before = ground.share(queue.name, fit)
    return _final_share(shares, fit, before, [victim for _, victim in ranked])


def _final_share(
    shares: Shares, fit: FitClass, before: float, ranked: Sequence[_Victim]
) -> list[_Victim]:
    """``ranked`` without the victims that ``fairShare: Reclaim`` alone allows and that would
    leave their queue's weighted share below the preemptor queue's now (``before``, without
    the preemptor): each victim is judged with every victim before it taken too, so any run of
    the list from its first keeps the rule. A preemption then never lowers the lesser of the
    two queues' shares (the victim's queue ends no lower than the preemptor's was), so the two
    cannot take a gang from each other in turn. Without it, a queue below its fair share took a
    gang bigger than its share from a queue above it, which was then below the preemptor's,
    was readmitted as the queue furthest below, and was preempted again: seed 3 of the trace
    family lost a 42-node gang seven times to a queue of small gangs. (Kueue's
    ``LessThanOrEqualToFinalShare`` compares with the preemptor's share after; that would keep a
    queue holding three quarters of the cluster from losing a gang to one holding an eighth.)"""
    inverse = shares.inverse
    weights = shares.tree.queues
    request = fit.request
    removed: dict[str, list[float]] = {}
    kept: list[_Victim] = []
    for victim in ranked:
        gone = removed.get(victim.leaf)
        if victim.rule.startswith("fairShare"):
            usage = shares.usage(victim.leaf)
            after = (
                list(usage) if gone is None else [u - g for u, g in zip(usage, gone, strict=True)]
            )
            for i, amount in victim.demand:
                after[i] -= amount
            final = max((after[i] * inv for i, inv in inverse if request[i]), default=0.0)
            if final / weights[victim.leaf].weight < before:
                continue
        if gone is None:
            gone = removed[victim.leaf] = [0.0] * len(shares.usage(victim.leaf))
        for i, amount in victim.demand:
            gone[i] += amount
        kept.append(victim)
    return kept


class _Reclaim(NamedTuple):
    """How ``reclaimWithinCohort`` applies to one preemptor: its mode (``Never`` while the
    preemptor's queue would borrow, unless ``borrowWithinCohort`` lets it take lower-priority
    gangs then), the highest priority it may take (``maxPriorityThreshold``; None: any), and
    whether it applies by ``borrowWithinCohort``."""

    mode: ReclaimWithinCohort
    ceiling: int | None
    borrowing: bool


def _may_reclaim(
    ground: _Ground,
    rules: Preemption,
    reclaim: _Reclaim,
    leaf: str,
    mine_leaf: str,
    share: float,
    mine: float,
    fit: FitClass,
) -> bool:
    """False if `_rule` gives '' for every gang of queue ``leaf`` (what it reads of the queue
    alone rules them all out); True if it may allow some."""
    if leaf == mine_leaf:
        return rules.within_queue == "LowerPriority"
    if share <= mine:
        return False
    if reclaim.mode != "Never" and ground.borrowing(leaf):
        return True
    return rules.fair_share == "Reclaim" and ground.shares.above_fair_share(leaf, fit)


def _rule(
    ground: _Ground,
    rules: Preemption,
    reclaim: _Reclaim,
    gang: Gang,
    other: Gang,
    leaf: str,
    mine_leaf: str,
    share: float,
    mine: float,
    fit: FitClass,
) -> str:
    """The rule that lets ``gang`` (of queue ``mine_leaf``, at share ``mine``) preempt
    ``other`` (of queue ``leaf``, at ``share``); '' if none does."""
    if leaf == mine_leaf:
        if rules.within_queue == "LowerPriority" and other.priority < gang.priority:
            return "withinQueue: LowerPriority"
        return ""
    if share <= mine:
        return ""
    borrowing = ground.borrowing(leaf)
    lower = other.priority < gang.priority
    if reclaim.borrowing:
        if borrowing and lower and (reclaim.ceiling is None or other.priority <= reclaim.ceiling):
            return (
                f"reclaimWithinCohort: {rules.reclaim_within_cohort} with borrowWithinCohort: "
                f"LowerPriority, queue {leaf} borrows"
            )
    elif reclaim.mode == "Any" and borrowing:
        return f"reclaimWithinCohort: Any, queue {leaf} borrows"
    elif reclaim.mode == "LowerPriority" and borrowing and lower:
        return f"reclaimWithinCohort: LowerPriority, queue {leaf} borrows"
    if rules.fair_share == "Reclaim" and ground.shares.above_fair_share(leaf, fit):
        return f"fairShare: Reclaim, queue {leaf} is above its fair share"
    return ""


_Fitted = tuple[int, list[tuple[FitClass, dict[int, int]]]]
"""The preemptor's size and, per pod set (the other pod sets first, the main one last), its fit
class and placement (node id -> pods)."""


def _fits(
    ground: _Ground,
    gang: Gang,
    fit: FitClass,
    queue: Queue,
    victims: Sequence[_Victim],
) -> _Fitted | None:
    """How many pods of ``gang`` (at least its floor now, at most its size) go where with the
    victims' quota and capacity given back (no nodes for a node-blind queue, which admits on
    quota alone); None if it does not fit."""
    state = ground.state
    quota = state.quota
    fixed = gang.fixed
    floor = smallest_size(gang, ground.now) - fixed
    for victim in victims:
        quota.add(victim.leaf, [(i, -amount) for i, amount in victim.demand])
    try:
        available = ground.shares.available(queue.name)
        if gang.others:
            sets = state.classes[gang.screen_key].sets
            short = ground.shares.demand_reason(
                queue.name, state.catalog.demand(gang, fixed + floor), available
            )
            pods = (
                -1
                if short is not None
                else ground.shares.quota_room(queue.name, fit, gang.size - fixed)
            )
            if short is None:
                left = list(available)
                for set_fit, count in sets:
                    for i in set_fit.nonzero:
                        left[i] -= set_fit.request[i] * count
                pods = _room_in(fit, left, gang.size - fixed)
        else:
            sets = ()
            pods = ground.shares.quota_room(queue.name, fit, gang.size)
    finally:
        for victim in victims:
            quota.add(victim.leaf, victim.demand)
    if pods < floor:
        return None
    if not queue.node_fit:
        return fixed + pods, [*((set_fit, {}) for set_fit, _ in sets), (fit, {})]
    released: dict[int, list[int]] = {}
    for victim in victims:
        for n, request, count in victim.nodes:
            vector = released.get(n)
            if vector is None:
                vector = released[n] = list(ground.free_of(n))
            for i, amount in enumerate(request):
                vector[i] += amount * count
    topology = fit.topology
    if topology is None or not topology.required:
        return _place_sets(ground, fit, sets, released, pods, floor, fixed, None)
    # A required gang preempts for room within one domain of its level, never across.
    for domain in state.cluster.domains.at(topology.level) or ():
        trial = {n: list(vector) for n, vector in released.items()}
        fitted = _place_sets(ground, fit, sets, trial, pods, floor, fixed, domain.member)
        if fitted is not None:
            return fitted
    return None


def _place_sets(
    ground: _Ground,
    fit: FitClass,
    sets: Sequence[tuple[FitClass, int]],
    released: dict[int, list[int]],
    pods: int,
    floor: int,
    fixed: int,
    within: bytes | None,
) -> _Fitted | None:
    """`_fits`'s placement: every other pod set whole, then the main one at least at its
    floor (taken from ``released``), on the nodes of ``within`` only if given."""
    placements: list[tuple[FitClass, dict[int, int]]] = []
    for set_fit, count in sets:
        placement = _place(ground, set_fit, released, count, within)
        if sum(placement.values()) < count:
            return None
        placements.append((set_fit, placement))
    placement = _place(ground, fit, released, pods, within)
    placed = sum(placement.values())
    if placed < floor:
        return None
    placements.append((fit, placement))
    return fixed + placed, placements


def _room_in(fit: FitClass, left: Sequence[float], pods: int) -> int:
    """Pods of ``fit`` (at most ``pods``) that ``left`` quota holds."""
    most = pods
    for i in fit.nonzero:
        if left[i] < fit.request[i] * most:
            most = int(left[i] // fit.request[i]) if left[i] >= 0 else -1
    return most


def _place(
    ground: _Ground,
    fit: FitClass,
    released: dict[int, list[int]],
    pods: int,
    within: bytes | None = None,
) -> dict[int, int]:
    """Up to ``pods`` pods of ``fit`` on the victims' nodes first (what the preemption frees),
    then on nodes free anyway; takes them from ``released`` (the victims' nodes' capacity with
    the victims gone, and nodes this preemptor placed on)."""
    member = fit.pool.member
    if within is not None:
        member = bytes(a & b for a, b in zip(member, within, strict=True))
    if ground.off is not None:
        member = bytes(a & (1 - b) for a, b in zip(member, ground.off, strict=True))
    current = ground.state.overlay.current
    start = ground.state.cluster.free
    free = ground.free
    placement: dict[int, int] = {}
    placed = 0
    order = [n for n in released if member[n]]
    order += [n for n in range(len(member)) if member[n] and n not in released]
    for n in order:
        now = released.get(n) or free.get(n) or current[n] or start[n]
        room = fit.pods_on(now)
        if room > 0:
            take = min(room, pods - placed)
            placement[n] = take
            placed += take
            vector = released.get(n)
            if vector is None:
                vector = released[n] = list(now)
            for i in fit.nonzero:
                vector[i] -= fit.request[i] * take
            if placed >= pods:
                break
    return placement
