"""What plans start from (steps 1 to 3 of a plan; see `policies.planner`): free node capacity
in fit order, quota usage, the admitted gangs not yet running, and the waiting gangs screened
and in queue order.

`PlanState` is built from a snapshot for one plan, or kept by a `Planner` and changed by its
deltas, never by a plan: a `policies.cycle.Cycle` works on it without changing it.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter

from policies import reasons
from policies.decisions import Reason
from policies.emptyfit import EmptyCluster
from policies.fit import UNLIMITED, Cluster, FitClass, Pool
from policies.fitcatalog import Demand, FitCatalog, vector_of
from policies.model import AdmittedGang, Gang, Node, Queue, QueueTree, ScreenKey, Snapshot
from policies.overlay import PlanOverlay
from policies.packing import DEFAULT_PACKING, Packing
from policies.quota import INF, QuotaState
from policies.resources import Resources
from policies.topology import NO_TOPOLOGY, Topology

__all__ = [
    "Entry",
    "PlanState",
    "QueueLine",
    "ScreenClass",
    "elastic_now",
    "placed_sets",
    "request_keys",
    "smallest_size",
    "verdict_key",
]

# A screened pending gang: its order key (priority, then submission), a sequence number (ties
# keep the order gangs were given in), the gang, its fit class, whether it is above its size
# ratio, and its verdict key (-1: decided gang by gang: elastic, or of several pod sets).
Entry = tuple[tuple[int, float, int, str], int, Gang, FitClass, bool, int]
ORDER = itemgetter(0)
VKEY = itemgetter(5)


class QueueLine:
    """One leaf queue's waiting gangs in queue order (and, for a `Planner`, those it
    rejected, which a snapshot lists before them)."""

    __slots__ = ("bigs", "entries", "leaf", "rejected", "vkeys")

    def __init__(self, leaf: str) -> None:
        self.leaf = leaf
        self.entries: list[Entry] = []
        self.vkeys: list[int] = []  # entries' verdict keys (the scans' C-level skip reads them)
        self.bigs: list[Entry] = []  # entries above the size ratio, in queue order
        self.rejected: dict[str, Gang] = {}

    def insert(self, entry: Entry) -> None:
        entries = self.entries
        at = _bisect(entries, entry)
        entries.insert(at, entry)
        self.vkeys.insert(at, entry[5])
        if entry[4]:
            bigs = self.bigs
            bigs.insert(_bisect(bigs, entry), entry)

    def remove(self, entry: Entry) -> None:
        entries = self.entries
        at = _bisect(entries, entry)
        del entries[at]
        del self.vkeys[at]
        if entry[4]:
            bigs = self.bigs
            del bigs[_bisect(bigs, entry)]


def _bisect(entries: list[Entry], entry: Entry) -> int:
    # (order key, sequence) is unique, so comparing whole entries never reaches the gang (an
    # entry equal up to there is this one, whose items compare equal by identity); no key
    # function, so no tuple per probe.
    return bisect.bisect_left(entries, entry)


class ScreenClass:
    """What screening learns once per (leaf queue, fit class, other pod sets); `Gang.screen_key`
    names it."""

    __slots__ = (
        "append",
        "base",
        "big_above",
        "fit",
        "fixed",
        "keys",
        "line",
        "missing",
        "most",
        "reject",
        "sets",
        "small",
    )

    def __init__(
        self,
        fit: FitClass,
        line: QueueLine | None,
        most: int,
        big_above: float,
        reject: bool,
        missing: Reason | None = None,
        sets: tuple[tuple[FitClass, int], ...] = (),
        fixed: Demand | None = None,
    ) -> None:
        self.fit = fit
        self.line = line
        self.append = line.entries.append if line is not None else _nowhere
        self.most = most  # most pods of the main pod set ever admissible
        self.big_above = big_above  # pods above which a gang is big
        self.reject = reject  # big gangs are rejected (size ratio action Reject)
        # A gang of at most this size is neither big nor never-fits (-1: not a leaf queue, or
        # gangs of several pod sets, which are screened one by one).
        self.small = min(most, big_above) if missing is None and not sets else -1
        self.missing = missing  # QueueNotFound reason when the queue is not a leaf
        self.base = fit.serial << 42  # plus size << 1: a plain gang's verdict key (see vkey)
        self.keys: dict[int, int] = {}  # size -> that key (see PlanState.screen_all)
        self.sets = sets  # the other pod sets: (fit class, pods), in the gang's order
        self.fixed: Demand = fixed or []  # the quota the other pod sets take together


def elastic_now(gang: Gang, now: float) -> bool:
    """True if ``gang`` may be admitted smaller than its size at ``now`` (it is elastic and has
    waited its elastic-after)."""
    return gang.min < gang.size and now - gang.submitted.time >= gang.elastic_after


def smallest_size(gang: Gang, now: float) -> int:
    """The fewest pods ``gang`` may be admitted with at ``now``."""
    return gang.min if elastic_now(gang, now) else gang.size


def verdict_key(fit: FitClass, size: int, big: bool) -> int:
    """A gang's verdict key: its fit class, size and bigness in one int. Within one queue a fit
    class is one screening class, and a gang that is not elastic has at most UNLIMITED (2**40)
    pods."""
    return fit.serial << 42 | size << 1 | big


def _nowhere(entry: Entry) -> None:  # pragma: no cover - gangs of a missing queue wait
    raise AssertionError("a gang of a missing queue was queued")


# The fit class of gangs whose queue is not a leaf (never used).
_NO_POOL = Pool(b"", (), (), ())
_NO_FIT = FitClass(request=(), nonzero=(), one_pod_per_node=False, pool=_NO_POOL, restricted=False)


def request_keys(gang: Gang) -> Iterable[frozenset[tuple[str, int]]]:
    """The per-pod requests of every pod set of ``gang`` (as screen keys hold them), and what
    it takes once (`Gang.shared`)."""
    yield gang.screen_key[1]
    for other in gang.others:
        yield other.screen_key()[0]  # type: ignore[misc]
    if gang.shared is not None:
        yield frozenset(gang.shared.items())


def resource_names(
    nodes: Iterable[Node], tree: QueueTree, requests: Iterable[frozenset[tuple[str, int]]]
) -> list[str]:
    """Every resource nodes offer, gangs request or quotas name, sorted."""
    seen: dict[str, None] = {}
    for allocatable in {node.allocatable for node in nodes}:
        seen.update(dict.fromkeys(allocatable))
    for request in requests:
        seen.update(dict.fromkeys(name for name, _ in request))
    for queue in tree:
        seen.update(dict.fromkeys(queue.nominal or ()))
    return sorted(seen)


class PlanState:
    """What plans start from: free node capacity, quota usage, admitted gangs not yet running,
    and the waiting gangs screened and in queue order. Built from a snapshot for one plan, or
    kept by a `Planner` and changed by its deltas (never by a plan)."""

    def __init__(
        self,
        nodes: Sequence[Node],
        tree: QueueTree,
        names: list[str],
        held: Mapping[str, Sequence[int]] | None = None,
        admitted: Mapping[str, AdmittedGang] | None = None,
        *,
        nodes_known: bool = True,
        topology: Topology = NO_TOPOLOGY,
        packing: Packing = DEFAULT_PACKING,
    ) -> None:
        self.tree = tree
        # False (the webhook before its node watch synced): screen by quota only, as if every
        # queue were node-blind, rather than call every gang too big for no nodes.
        self.nodes_known = nodes_known
        # Every admitted gang by id (a snapshot's, or a Planner's own mapping, live): a plan
        # with a reservation reads when the gangs on the reserved nodes end (backfill), and
        # preemption picks its victims among them.
        self.admitted: Mapping[str, AdmittedGang] = admitted if admitted is not None else {}
        self.nodes = nodes
        self._empty: EmptyCluster | None = None  # the nodes with nothing running (NeverFits)
        self.cluster = Cluster(nodes, names, held, topology, packing)
        self.overlay = PlanOverlay(self.cluster)
        self.catalog = FitCatalog(self.cluster, names)
        self.names = names
        self.index = self.catalog.index
        self.inverse_capacity = self.catalog.inverse_capacity
        self.quota = QuotaState(tree, names)
        self.potential: dict[str, list[float]] = {}
        self.classes: dict[ScreenKey, ScreenClass] = {}
        self.lines: dict[str, QueueLine] = {}  # leaf -> line, in order of the leaf's first gang
        self.missing: dict[str, Reason] = {}  # gangs of a queue that is not a leaf
        self.rejected: dict[str, Reason] = {}  # NeverFits / SizeRatioRejected
        self.not_running: dict[str, AdmittedGang] = {}
        self.seq = 0
        # Fairness over time: per leaf queue with a half-life, the memory of the gangs it
        # released, added to its quota usage for its share (`policies.fairtime`; a Planner's).
        self.memory: dict[str, list[float]] = {}

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot) -> PlanState:
        requests = {key for gang in snapshot.pending for key in request_keys(gang)}
        requests.update(key for a in snapshot.admitted for key in request_keys(a.gang))
        names = resource_names(snapshot.nodes, snapshot.queues, requests)
        width = len(names)
        vectors: dict[Resources, tuple[int, ...]] = {}
        pods = names.index("pods") if "pods" in names else None
        held: dict[str, list[int]] = {}
        for admitted in snapshot.admitted:
            for request, placement in placed_sets(admitted):
                vector = vectors.get(request) or vector_of(vectors, names, pods, request)
                for node, count in placement.items():
                    taken = held.get(node)
                    if taken is None:
                        taken = held[node] = [0] * width
                    for i, amount in enumerate(vector):
                        taken[i] += amount * count
        admitted_by_id = {admitted.gang.id: admitted for admitted in snapshot.admitted}
        state = cls(
            snapshot.nodes,
            snapshot.queues,
            names,
            held,
            admitted_by_id,
            topology=snapshot.topology,
            packing=snapshot.packing,
        )
        state.catalog.vectors = vectors
        tree = state.tree
        for admitted in snapshot.admitted:
            if admitted.gang.queue in tree:
                state.quota.add(
                    admitted.gang.queue, state.catalog.demand(admitted.gang, admitted.size)
                )
            if not admitted.running:
                state.not_running[admitted.gang.id] = admitted
        state.screen_all(snapshot.pending)
        return state

    def screen_class(self, gang: Gang) -> ScreenClass:
        """Screening facts for gangs like ``gang`` in its queue (see `ScreenClass`)."""
        leaf = gang.queue
        line = self.lines.get(leaf)
        if line is None:
            if not self.tree.is_leaf(leaf):
                missing = ScreenClass(_NO_FIT, None, 0, INF, False, self._queue_not_found(leaf))
                self.classes[gang.screen_key] = missing
                return missing
            line = self.lines[leaf] = QueueLine(leaf)
        fit = self.catalog.fit_class(gang)
        queue = self.tree.queues[leaf]
        sets = tuple((self.catalog.set_fit(other), other.count) for other in gang.others)
        fixed: Demand = []
        if sets:
            totals = [0] * len(self.names)
            for set_fit, count in sets:
                for i in set_fit.nonzero:
                    totals[i] += set_fit.request[i] * count
            fixed = [(i, amount) for i, amount in enumerate(totals) if amount]
        most, big_above = self._limits(queue, fit, fixed)
        ratio = queue.size_ratio
        reject = ratio is not None and ratio.action == "Reject"
        info = ScreenClass(fit, line, most, big_above, reject, sets=sets, fixed=fixed)
        self.classes[gang.screen_key] = info
        return info

    def _limits(self, queue: Queue, fit: FitClass, fixed: Demand) -> tuple[int, float]:
        """For gangs of ``fit`` in ``queue``: the most pods of the main pod set the empty
        cluster and the queue's largest possible quota hold (beside ``fixed``, the other pod
        sets' quota), and the size above which a gang of one pod set is big."""
        most = self.cluster.empty_room(fit) if queue.node_fit and self.nodes_known else UNLIMITED
        potential = self.potential.get(queue.name)
        if potential is None:
            potential = self.potential[queue.name] = self.quota.potential(queue.name)
        if fixed:
            potential = list(potential)
            for i, amount in fixed:
                potential[i] -= amount
        for i in fit.nonzero:
            if potential[i] != INF:
                most = min(most, max(int(potential[i] // fit.request[i]), -1))
        big_above = INF
        if queue.size_ratio is not None:
            per_pod = self.catalog.dominant[id(fit)][0]
            if per_pod > 0:
                big_above = queue.size_ratio.ratio / per_pod
        return most, big_above

    def never_fits(self, gang: Gang, info: ScreenClass, minimum: int) -> Reason:
        """Why ``gang`` at ``minimum`` pods can never be admitted (its pod sets never fit the
        empty cluster, or its queue's largest possible quota)."""
        queue = self.tree.queues[gang.queue]
        potential = self.potential[gang.queue]
        if info.sets:
            demand = dict(self.catalog.demand(gang, minimum))
            for i, amount in demand.items():
                if amount > potential[i]:
                    return reasons.never_fits_quota(gang.queue, self.names[i], amount, potential[i])
            if queue.node_fit and self.nodes_known:
                for other, (set_fit, count) in zip(gang.others, info.sets, strict=True):
                    room = self.cluster.empty_room(set_fit)
                    if count > room:
                        return reasons.in_pod_set(
                            other.name,
                            reasons.never_fits_nodes(
                                count,
                                other.requests,
                                set_fit.one_pod_per_node,
                                room,
                                set_fit.restricted,
                            ),
                        )
        fit = info.fit
        main = minimum - gang.fixed
        if (
            info.sets
            and queue.node_fit
            and self.nodes_known
            and main <= self.cluster.empty_room(fit)
            and not self.empty().holds(gang, minimum)
        ):
            return reasons.never_fits_together(
                (pod_set.name, pod_set.count, pod_set.requests)
                for pod_set in (*gang.others, dataclasses.replace(gang.main, count=main))
            )
        if queue.node_fit and self.nodes_known:
            room = self.cluster.empty_room(fit)
            if main > room:
                found = reasons.never_fits_nodes(
                    main, gang.pod_requests, fit.one_pod_per_node, room, fit.restricted
                )
                return reasons.in_pod_set(gang.set_name, found) if info.sets else found
        for i in fit.nonzero:
            if fit.request[i] * main > potential[i]:
                return reasons.never_fits_quota(
                    gang.queue, self.names[i], fit.request[i] * main, potential[i]
                )
        raise AssertionError(f"{gang.id}: never-fits without a limit")  # pragma: no cover

    def never_fits_verdict(self, gang: Gang) -> Reason | None:
        """Step 2's NeverFits screen alone: why ``gang`` (of a leaf queue) can never be admitted,
        or None (`policies.planner.NeverFitsScreen`)."""
        info = self.classes.get(gang.screen_key)
        if info is None:
            info = self.screen_class(gang)
        minimum = gang.min
        if minimum - gang.fixed <= info.most and not (
            info.sets and self._sets_never_fit(gang, info)
        ):
            return None
        return self.never_fits(gang, info, minimum)

    def _queue_not_found(self, name: str) -> Reason:
        tree = self.tree
        if name in tree:
            below = [leaf for leaf in tree.leaves if name in self.quota.path[leaf][1:]]
            return reasons.queue_not_found(name, below, cohort=True)
        return reasons.queue_not_found(name, tree.leaves, cohort=False)

    # --- pending gangs -----------------------------------------------------------------------

    def _screen(self, gang: Gang, info: ScreenClass) -> Entry | None:
        """Step 2 for one gang that is not plain (see screen_all): its entry, or None when it
        was rejected or its queue is missing."""
        if info.missing is not None:
            self.missing[gang.id] = info.missing
            return None
        fit = info.fit
        size = gang.size
        minimum = gang.min_size
        if minimum is None:
            minimum = size
        if minimum - gang.fixed > info.most or (info.sets and self._sets_never_fit(gang, info)):
            self._reject(gang, info, self.never_fits(gang, info, minimum))
            return None
        if info.sets:
            ratio = self.tree.queues[gang.queue].size_ratio
            big = ratio is not None and self.catalog.dominant_share(gang, size) > ratio.ratio
        else:
            big = size > info.big_above
        if big and info.reject:
            self._reject(gang, info, self._size_ratio_rejected(gang, info))
            return None
        # An elastic gang's smallest size depends on how long it has waited, and a gang of
        # several pod sets fits set by set: both are decided gang by gang, in each plan.
        vkey = -1 if minimum < size or info.sets else verdict_key(fit, size, big)
        self.seq += 1
        return (gang.order_key, self.seq, gang, fit, big, vkey)

    def _sets_never_fit(self, gang: Gang, info: ScreenClass) -> bool:
        """True if a gang of several pod sets can never fit: one of its other pod sets does not
        fit the empty cluster, or its queue's largest possible quota cannot hold it at its
        minimum."""
        queue = self.tree.queues[gang.queue]
        potential = self.potential[gang.queue]
        minimum = gang.min
        if any(amount > potential[i] for i, amount in self.catalog.demand(gang, minimum)):
            return True
        return queue.node_fit and self.nodes_known and not self.empty().holds(gang, minimum)

    def empty(self) -> EmptyCluster:
        """The plan's nodes with nothing running (built on first use)."""
        if self._empty is None:
            self._empty = EmptyCluster(self.nodes, self.names, self.catalog.vector)
        return self._empty

    def _size_ratio_rejected(self, gang: Gang, info: ScreenClass) -> Reason:
        leaf = gang.queue
        ratio = self.tree.queues[leaf].size_ratio
        assert ratio is not None
        if info.sets:
            demand = dict(self.catalog.demand(gang, gang.size))
            share, limiting = max(
                ((demand[i] * inv, i) for i, inv in self.inverse_capacity), default=(0.0, 0)
            )
        else:
            per_pod, limiting = self.catalog.dominant[id(info.fit)]
            share = per_pod * gang.size
        return reasons.size_ratio_rejected(leaf, self.names[limiting], share, ratio.ratio)

    def _reject(self, gang: Gang, info: ScreenClass, reason: Reason) -> None:
        self.rejected[gang.id] = reason
        assert info.line is not None
        info.line.rejected[gang.id] = gang

    def screen_all(self, pending: Iterable[Gang]) -> None:
        """Steps 2 and 3 for a whole snapshot: screen in snapshot order, then sort each queue."""
        classes = self.classes
        get = classes.get
        # These lines are sorted once and never searched, so entries need no sequence number
        # (a stable sort keeps the input order of ties); and a plain gang's verdict key comes
        # from a small per-class table: no new int objects per gang in a memory-bound loop.
        for gang in pending:
            info = get(gang.screen_key)
            if info is None:
                info = self.screen_class(gang)
            size = gang.size
            if gang.min_size is None and size <= info.small:  # the common case: nothing to decide
                vkey = info.keys.get(size)
                if vkey is None:
                    vkey = info.keys[size] = info.base | size << 1
                info.append((gang.order_key, 0, gang, info.fit, False, vkey))
                continue
            entry = self._screen(gang, info)
            if entry is not None:
                info.append(entry)
                if entry[4]:
                    assert info.line is not None
                    info.line.bigs.append(entry)
        vkey_of = VKEY
        for line in self.lines.values():
            entries = line.entries
            entries.sort(key=ORDER)  # stable: ties keep the input order
            line.vkeys = list(map(vkey_of, entries))
            line.bigs.sort(key=ORDER)

    def add_pending(self, gang: Gang) -> Entry | None:
        info = self.classes.get(gang.screen_key)
        if info is None:
            info = self.screen_class(gang)
        entry = self._screen(gang, info)
        if entry is not None:
            assert info.line is not None
            info.line.insert(entry)
        return entry

    def remove_pending(self, gang: Gang, entry: Entry | None) -> None:
        if entry is not None:
            self.lines[gang.queue].remove(entry)
        elif self.missing.pop(gang.id, None) is None:
            del self.rejected[gang.id]
            del self.lines[gang.queue].rejected[gang.id]

    # --- admitted gangs ----------------------------------------------------------------------

    def add_admitted(self, admitted: AdmittedGang, sign: int = 1) -> None:
        """Account an admitted gang's placement and quota (``sign`` -1: release them)."""
        gang = admitted.gang
        cluster = self.cluster
        for request, placement in placed_sets(admitted):
            cluster.take_placement(placement, self.catalog.vector(request), sign)
        if gang.queue in self.tree:
            demand = self.catalog.demand(gang, admitted.size)
            if sign < 0:
                demand = [(i, -amount) for i, amount in demand]
            self.quota.add(gang.queue, demand)
        if sign > 0 and not admitted.running:
            self.not_running[gang.id] = admitted
        else:
            self.not_running.pop(gang.id, None)


def placed_sets(admitted: AdmittedGang) -> Iterable[tuple[Resources, Mapping[str, int]]]:
    """(per-pod request, placement) of each pod set of an admitted gang."""
    yield admitted.gang.pod_requests, admitted.placement
    for other, placement in zip(admitted.gang.others, admitted.other_placements, strict=False):
        yield other.requests, placement
