"""The planner: which pending gangs to admit now, where their pods go, and why the rest wait.

Two doors to one algorithm:

- ``plan(snapshot, policy)`` is pure: it builds the plan's starting state from the snapshot,
  plans, and returns `Decisions`.
- `Planner` keeps that starting state between plans (free node capacity in fit order, quota
  usage, the waiting gangs screened and in queue order) and is told what changed (gangs that
  became pending, were admitted, started, finished or were evicted; nodes). A plan then costs
  what changed plus what the plan does, not the size of the cluster or of the backlog.
  ``Planner.plan(now)`` returns exactly what ``plan(planner.snapshot(now), policy)`` returns
  (tests/property/test_incremental_planner.py checks this on random sequences of changes).

A plan, top to bottom:

1. Index resources, apply gangs admitted earlier to free node capacity and to quota usage
   (`_State`; kept by a `Planner`).
2. Screen every pending gang once: its queue exists and is a leaf; it could ever fit the
   cluster and its queue's quota (else NeverFits); it is not above its queue's size ratio
   with ``action: Reject``. (`_State`, when the gang is added.)
3. Order each leaf queue's gangs by priority, then submission (a `_Line`, kept sorted).
4. Size ratio: find the gang a big gang waits behind, if any (one big gang admitted and not
   running at a time). If none, and the oldest big gang has waited `STARVATION_AFTER`, it
   holds the plan's reservation against every younger gang except those of queues below their
   weighted fair share and those it waits behind in a strict order (no starvation; see
   `_Cycle._starving`). Node-blind queues
   (``nodeFit: false``): find the oldest of their admitted gangs that has waited longer than
   `PARTIAL_HOLD_AFTER` without reaching its minimum; while there is one, node-blind queues
   admit nothing (Kueue's ``waitForPodsReady.blockAdmission``, once a gang is seen stuck).
5. Take queue heads from a heap ordered by the policy (DRF: lowest weighted dominant share
   including the head, over the resources the head asks for). For each head: size ratio,
   quota, node fit, elastic sizing; admit it and account its quota and placement, or record
   why not. A head that does not fit is skipped or blocks its queue (StrictFIFO) or everything
   (``strict-fifo``), as the policy says.
   Reservation in policy order: the first big gang whose turn comes and that waits for nodes
   only (its quota suffices) holds the plan's one reservation: the nodes with the most free
   capacity, as many as it needs (`Cluster.reserve`). Gangs whose turn comes after it (later
   heads of the heap, so queues at a higher weighted share, and the rest of its own queue) keep
   off those nodes; gangs before it, such as a queue below its share, never wait for it. A big
   gang that waits for nodes is therefore a queue head even when it cannot be admitted.
   Backfill by deadline: a gang after the holder may still use the reserved nodes when its
   runtime limit (``Gang.runtime_limit``, a Job's activeDeadlineSeconds) ends no later than the
   holder's earliest start, the latest end by runtime limit of the admitted gangs that may hold
   room on those nodes (`_Cycle._holder_start`, computed once per plan and only when asked).
6. Every gang still queued gets a reason.

Steps 4-6 are a `_Cycle`: it works on the state without changing it (quota it takes is given
back at the end; node placements live in the cluster's per-plan overlay).

Within a plan, free capacity and quota headroom only shrink, so a gang passed over earlier in
the plan would not fit later in the same plan: every gang is considered exactly once.

Speed. Queue scans: while nothing is admitted, whether a gang can be admitted and why not
depends only on its fit class, size and bigness (for gangs that are not elastic, and while no
big gang holds a reservation, as backfill then depends on each gang's runtime limit; a big gang
waiting for nodes ends a scan, as it may take one);
each such *verdict key* is a small int, a scan decides each key once and skips the gangs of
keys already turned down with a C-level search. Reasons are not formatted per gang: the
decisions carry, per scanned stretch of a queue, the verdict per key, and `PendingReasons`
writes the gang -> reason mapping only when someone reads it. Node fit works per bucket of
nodes with equal free capacity (policies/fit.py). The decisions are the same as the
straightforward version's, pinned by tests/unit/test_plan_regression.py.
"""

from __future__ import annotations

import bisect
import gc
import heapq
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import lru_cache, partial
from itertools import islice
from operator import attrgetter, indexOf, itemgetter
from typing import TypeVar

from policies import reasons
from policies.decisions import Admission, Decisions, PendingReasons, Reason
from policies.fit import UNLIMITED, Cluster, FitClass, Pool, unique_names
from policies.model import (
    AdmittedGang,
    Gang,
    Node,
    PolicyError,
    Queue,
    QueueTree,
    ScreenKey,
    Snapshot,
    SubmitStamp,
)
from policies.preemption import preempt
from policies.quota import INF, QuotaState
from policies.resources import Resources
from policies.strategies import AdmissionPolicy, get_policy

__all__ = ["PARTIAL_HOLD_AFTER", "STARVATION_AFTER", "NeverFitsScreen", "Planner", "plan"]

STARVATION_AFTER = 120.0
"""Seconds a big gang waits before it holds a reservation against younger gangs whatever the
policy's order (see `_Cycle._starving`). On ../shared/traces/mixed-queues.yaml any value from
60 s to 180 s gives the same result (docs/benchmarks.md); 0 is the old behaviour (makespan
+6%), 240 s and more let queues below the big gang's starve it."""

PARTIAL_HOLD_AFTER = 10.0
"""Seconds an admitted gang of a node-blind queue may wait for its pods before node-blind
queues stop admitting. Node-blind admission over-commits nodes; the gangs it admits into room
that the stuck gang needs would take that room first (new pods reach the scheduler before the
stuck gang's pods come out of backoff), so without the hold the clog detector's evictions never
let the oldest gang finish. Gangs in node-aware queues are placed before they are admitted and
are not held."""


def plan(snapshot: Snapshot, policy: str | AdmissionPolicy = "drf") -> Decisions:
    """Decide which pending gangs of ``snapshot`` to admit now; see the module docstring."""
    chosen = get_policy(policy) if isinstance(policy, str) else policy
    with collector_paused():
        return _Cycle(_State.from_snapshot(snapshot), chosen, snapshot.now, keep=False).run()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Keep CPython's cyclic garbage collector out of a plan (and out of other work that
    allocates many long-lived containers without cycles: the simulator's trace and records).

    A plan allocates a container per waiting gang (its queue entry), and every 700 allocations
    the collector runs; at 100k waiting gangs a plan set off ~150 young and ~14 middle
    collections and one full one, which walks every object of the caller's heap (the snapshot,
    a controller's cache): about 40% of ``plan`` (docs/benchmarks.md, *Planner*). A plan makes
    no reference cycles, so what it frees, reference counting frees; the collector runs again
    as soon as the plan returns. Process-wide, like the collector itself: another thread
    allocating meanwhile is not collected either, for the length of one plan.
    """
    if not gc.isenabled():  # the caller's choice, or another plan in progress
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


# A screened pending gang: its order key (priority, then submission), a sequence number (ties
# keep the order gangs were given in), the gang, its fit class, whether it is above its size
# ratio, and its verdict key (-1: elastic, decided gang by gang).
_Entry = tuple[tuple[int, float, int, str], int, Gang, FitClass, bool, int]
_T = TypeVar("_T")
_ORDER = itemgetter(0)
_GANG = itemgetter(2)
_VKEY = itemgetter(5)
_ID = attrgetter("id")


class _Line:
    """One leaf queue's waiting gangs in queue order (and, for a `Planner`, those it
    rejected, which a snapshot lists before them)."""

    __slots__ = ("bigs", "entries", "leaf", "rejected", "vkeys")

    def __init__(self, leaf: str) -> None:
        self.leaf = leaf
        self.entries: list[_Entry] = []
        self.vkeys: list[int] = []  # entries' verdict keys (the scans' C-level skip reads them)
        self.bigs: list[_Entry] = []  # entries above the size ratio, in queue order
        self.rejected: dict[str, Gang] = {}

    def insert(self, entry: _Entry) -> None:
        entries = self.entries
        at = _bisect(entries, entry)
        entries.insert(at, entry)
        self.vkeys.insert(at, entry[5])
        if entry[4]:
            bigs = self.bigs
            bigs.insert(_bisect(bigs, entry), entry)

    def remove(self, entry: _Entry) -> None:
        entries = self.entries
        at = _bisect(entries, entry)
        del entries[at]
        del self.vkeys[at]
        if entry[4]:
            bigs = self.bigs
            del bigs[_bisect(bigs, entry)]


def _bisect(entries: list[_Entry], entry: _Entry) -> int:
    # (order key, sequence) is unique, so comparing whole entries never reaches the gang (an
    # entry equal up to there is this one, whose items compare equal by identity); no key
    # function, so no tuple per probe.
    return bisect.bisect_left(entries, entry)


class _Class:
    """What screening learns once per (leaf queue, fit class); `Gang.screen_key` names it."""

    __slots__ = (
        "append",
        "base",
        "big_above",
        "fit",
        "keys",
        "line",
        "missing",
        "most",
        "reject",
        "small",
    )

    def __init__(
        self,
        fit: FitClass,
        line: _Line | None,
        most: int,
        big_above: float,
        reject: bool,
        missing: Reason | None = None,
    ) -> None:
        self.fit = fit
        self.line = line
        self.append = line.entries.append if line is not None else _nowhere
        self.most = most  # most pods ever admissible
        self.big_above = big_above  # pods above which a gang is big
        self.reject = reject  # big gangs are rejected (size ratio action Reject)
        # A gang of at most this size is neither big nor never-fits (-1: not a leaf queue).
        self.small = min(most, big_above) if missing is None else -1
        self.missing = missing  # QueueNotFound reason when the queue is not a leaf
        self.base = fit.serial << 42  # plus size << 1: a plain gang's verdict key (see _vkey)
        self.keys: dict[int, int] = {}  # size -> that key (see _State.screen_all)


def _vkey(fit: FitClass, size: int, big: bool) -> int:
    """A gang's verdict key: its fit class, size and bigness in one int. Within one queue a fit
    class is one screening class, and a gang that is not elastic has at most UNLIMITED (2**40)
    pods."""
    return fit.serial << 42 | size << 1 | big


def _nowhere(entry: _Entry) -> None:  # pragma: no cover - gangs of a missing queue wait
    raise AssertionError("a gang of a missing queue was queued")


# The fit class of gangs whose queue is not a leaf (never used).
_NO_POOL = Pool(b"", (), (), ())
_NO_FIT = FitClass(request=(), nonzero=(), one_pod_per_node=False, pool=_NO_POOL, restricted=False)

# Plans format the same few node-fit messages over and over.
_no_fit = lru_cache(maxsize=4096)(reasons.no_fit)


def _resource_names(
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


class _State:
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
    ) -> None:
        self.tree = tree
        # False (the webhook before its node watch synced): screen by quota only, as if every
        # queue were node-blind, rather than call every gang too big for no nodes.
        self.nodes_known = nodes_known
        # Every admitted gang by id (a snapshot's, or a Planner's own mapping, live): a plan
        # with a reservation reads when the gangs on the reserved nodes end (backfill), and
        # preemption picks its victims among them.
        self.admitted: Mapping[str, AdmittedGang] = admitted if admitted is not None else {}
        self.names = names
        self.index = {name: i for i, name in enumerate(names)}
        self.pods = "pods" in self.index
        self.vectors: dict[Resources, tuple[int, ...]] = {}
        self.cluster = Cluster(nodes, names, held)
        self.quota = QuotaState(tree, names)
        capacity = self.cluster.capacity
        self.inverse_capacity = [(i, 1.0 / c) for i, c in enumerate(capacity) if c > 0]
        self.fits: dict[tuple[object, ...], FitClass] = {}  # screen_key[1:] -> fit class
        self.dominant: dict[int, tuple[float, int]] = {}  # id(fit class) -> (share per pod, i)
        self.potential: dict[str, list[float]] = {}
        self.classes: dict[ScreenKey, _Class] = {}
        # Fit classes minus the nodes reserved for a big gang: (id(fit), id(pool)) -> variant.
        self.variants: dict[tuple[int, int], FitClass] = {}
        # Verdict keys: (fit class, size, big) of gangs that are not elastic -> small int.
        self.lines: dict[str, _Line] = {}  # leaf -> line, in order of the leaf's first gang
        self.missing: dict[str, Reason] = {}  # gangs of a queue that is not a leaf
        self.rejected: dict[str, Reason] = {}  # NeverFits / SizeRatioRejected
        self.not_running: dict[str, AdmittedGang] = {}
        self.seq = 0

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot) -> _State:
        requests = {gang.screen_key[1] for gang in snapshot.pending}
        requests.update(admitted.gang.screen_key[1] for admitted in snapshot.admitted)
        names = _resource_names(snapshot.nodes, snapshot.queues, requests)
        width = len(names)
        vectors: dict[Resources, tuple[int, ...]] = {}
        index = {name: i for i, name in enumerate(names)}
        pods = index.get("pods")
        held: dict[str, list[int]] = {}
        for admitted in snapshot.admitted:
            vector = _vector(vectors, names, pods, admitted.gang.pod_requests)
            for node, count in admitted.placement.items():
                taken = held.get(node)
                if taken is None:
                    taken = held[node] = [0] * width
                for i, amount in enumerate(vector):
                    taken[i] += amount * count
        admitted_by_id = {admitted.gang.id: admitted for admitted in snapshot.admitted}
        state = cls(snapshot.nodes, snapshot.queues, names, held, admitted_by_id)
        state.vectors = vectors
        tree = state.tree
        for admitted in snapshot.admitted:
            queue = admitted.gang.queue
            if queue in tree:
                vector = state.vector(admitted.gang.pod_requests)
                state.quota.add(
                    queue, [(i, amount * admitted.size) for i, amount in enumerate(vector)]
                )
            if not admitted.running:
                state.not_running[admitted.gang.id] = admitted
        state.screen_all(snapshot.pending)
        return state

    # --- vectors and classes -------------------------------------------------------------

    def vector(self, request: Resources) -> tuple[int, ...]:
        """Per-pod request over the plan's resources; every pod takes one of a node's pods."""
        vector = self.vectors.get(request)
        if vector is None:
            vector = _vector(self.vectors, self.names, self.index.get("pods"), request)
        return vector

    def fit_class(self, gang: Gang) -> FitClass:
        # Per-pod request, one-pod-per-node, node selector, tolerations.
        key = gang.screen_key[1:]
        fit = self.fits.get(key)
        if fit is None:
            selector = gang.node_selector
            tolerations = gang.tolerations
            request = self.vector(gang.pod_requests)
            fit = FitClass(
                request=request,
                nonzero=tuple(i for i, amount in enumerate(request) if amount > 0),
                one_pod_per_node=gang.one_pod_per_node,
                pool=self.cluster.eligible(selector, tolerations, gang.node_terms),
                restricted=bool(selector) or bool(tolerations) or bool(gang.node_terms),
                serial=len(self.fits) + 1,
            )
            self.fits[key] = fit
            best, limiting = 0.0, 0
            for i, inverse in self.inverse_capacity:
                share = request[i] * inverse
                if share > best:
                    best, limiting = share, i
            for i in fit.nonzero:
                if self.cluster.capacity[i] == 0:
                    best, limiting = INF, i
            self.dominant[id(fit)] = (best, limiting)
        return fit

    def reserve(self, fit: FitClass, pods: int) -> Pool:
        """Set nodes aside for a big gang (see `Cluster.reserve`); variants of fit classes
        without an earlier reservation's nodes are forgotten with it."""
        reserved = self.cluster.reserve(fit, pods)
        if self.variants and next(iter(self.variants))[1] != id(reserved):
            self.variants.clear()
        return reserved

    def restricted(self, fit: FitClass, reserved: Pool) -> FitClass:
        """``fit`` without the reserved nodes (for gangs after the holder in policy order)."""
        key = (id(fit), id(reserved))
        variant = self.variants.get(key)
        if variant is None:
            variant = FitClass(
                request=fit.request,
                nonzero=fit.nonzero,
                one_pod_per_node=fit.one_pod_per_node,
                pool=self.cluster.without(fit.pool, reserved),
                restricted=fit.restricted,
            )
            self.variants[key] = variant
        return variant

    def _class(self, gang: Gang) -> _Class:
        """Screening facts for gangs like ``gang`` in its queue (see `_Class`)."""
        leaf = gang.queue
        line = self.lines.get(leaf)
        if line is None:
            if not self.tree.is_leaf(leaf):
                missing = _Class(_NO_FIT, None, 0, INF, False, self._queue_not_found(leaf))
                self.classes[gang.screen_key] = missing
                return missing
            line = self.lines[leaf] = _Line(leaf)
        fit = self.fit_class(gang)
        queue = self.tree.queues[leaf]
        most, big_above = self._limits(queue, fit)
        ratio = queue.size_ratio
        reject = ratio is not None and ratio.action == "Reject"
        info = _Class(fit, line, most, big_above, reject)
        self.classes[gang.screen_key] = info
        return info

    def _limits(self, queue: Queue, fit: FitClass) -> tuple[int, float]:
        """For gangs of ``fit`` in ``queue``: the most pods the empty cluster and the queue's
        largest possible quota hold, and the size above which a gang is big."""
        most = self.cluster.empty_room(fit) if queue.node_fit and self.nodes_known else UNLIMITED
        potential = self.potential.get(queue.name)
        if potential is None:
            potential = self.potential[queue.name] = self.quota.potential(queue.name)
        for i in fit.nonzero:
            if potential[i] != INF:
                most = min(most, int(potential[i] // fit.request[i]))
        big_above = INF
        if queue.size_ratio is not None:
            per_pod = self.dominant[id(fit)][0]
            if per_pod > 0:
                big_above = queue.size_ratio.ratio / per_pod
        return most, big_above

    def _never_fits(self, gang: Gang, fit: FitClass, minimum: int) -> Reason:
        queue = self.tree.queues[gang.queue]
        if queue.node_fit and self.nodes_known:
            room = self.cluster.empty_room(fit)
            if minimum > room:
                return reasons.never_fits_nodes(
                    minimum, gang.pod_requests, fit.one_pod_per_node, room, fit.restricted
                )
        potential = self.potential[gang.queue]
        for i in fit.nonzero:
            if fit.request[i] * minimum > potential[i]:
                return reasons.never_fits_quota(
                    gang.queue, self.names[i], fit.request[i] * minimum, potential[i]
                )
        raise AssertionError(f"{gang.id}: never-fits without a limit")  # pragma: no cover

    def _queue_not_found(self, name: str) -> Reason:
        tree = self.tree
        if name in tree:
            below = [leaf for leaf in tree.leaves if name in self.quota.path[leaf][1:]]
            return reasons.queue_not_found(name, below, cohort=True)
        return reasons.queue_not_found(name, tree.leaves, cohort=False)

    # --- pending gangs -----------------------------------------------------------------------

    def _screen(self, gang: Gang, info: _Class) -> _Entry | None:
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
        if minimum > info.most:
            self._reject(gang, info, self._never_fits(gang, fit, minimum))
            return None
        big = size > info.big_above
        if big and info.reject:
            leaf = gang.queue
            ratio = self.tree.queues[leaf].size_ratio
            assert ratio is not None
            per_pod, limiting = self.dominant[id(fit)]
            self._reject(
                gang,
                info,
                reasons.size_ratio_rejected(
                    leaf, self.names[limiting], per_pod * size, ratio.ratio
                ),
            )
            return None
        # An elastic gang's smallest size depends on how long it has waited: decided per plan.
        vkey = -1 if minimum < size else _vkey(fit, size, big)
        self.seq += 1
        return (gang.order_key, self.seq, gang, fit, big, vkey)

    def _reject(self, gang: Gang, info: _Class, reason: Reason) -> None:
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
                info = self._class(gang)
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
        vkey_of = _VKEY
        for line in self.lines.values():
            entries = line.entries
            entries.sort(key=_ORDER)  # stable: ties keep the input order
            line.vkeys = list(map(vkey_of, entries))
            line.bigs.sort(key=_ORDER)

    def add_pending(self, gang: Gang) -> _Entry | None:
        info = self.classes.get(gang.screen_key)
        if info is None:
            info = self._class(gang)
        entry = self._screen(gang, info)
        if entry is not None:
            assert info.line is not None
            info.line.insert(entry)
        return entry

    def remove_pending(self, gang: Gang, entry: _Entry | None) -> None:
        if entry is not None:
            self.lines[gang.queue].remove(entry)
        elif self.missing.pop(gang.id, None) is None:
            del self.rejected[gang.id]
            del self.lines[gang.queue].rejected[gang.id]

    # --- admitted gangs ----------------------------------------------------------------------

    def add_admitted(self, admitted: AdmittedGang, sign: int = 1) -> None:
        """Account an admitted gang's placement and quota (``sign`` -1: release them)."""
        gang = admitted.gang
        vector = self.vector(gang.pod_requests)
        self.cluster.take_placement(admitted.placement, vector, sign)
        if gang.queue in self.tree:
            size = sign * admitted.size
            self.quota.add(gang.queue, [(i, amount * size) for i, amount in enumerate(vector)])
        if sign > 0 and not admitted.running:
            self.not_running[gang.id] = admitted
        else:
            self.not_running.pop(gang.id, None)


def _vector(
    cache: dict[Resources, tuple[int, ...]],
    names: Sequence[str],
    pods: int | None,
    request: Resources,
) -> tuple[int, ...]:
    values = [request[name] for name in names]
    if pods is not None:
        values[pods] = max(values[pods], 1)
    vector = cache[request] = tuple(values)
    return vector


def _fill_scan(
    entries: list[_Entry],
    vkeys: list[int],
    start: int,
    stop: int,
    known: dict[int, Reason],
    extras: dict[str, Reason] | None,
    out: dict[str, Reason],
) -> None:
    """Reasons for a stretch of a queue one scan passed over (see _Cycle._scan): by verdict
    key, then the gangs decided one by one (updating a key keeps its place in the dict)."""
    ids = map(_ID, map(_GANG, islice(_from(entries, start), stop - start)))
    out.update(zip(ids, map(known.get, _from(vkeys, start)), strict=False))  # type: ignore[arg-type]
    if extras:
        out.update(extras)


def _from(items: list[_T], start: int) -> Iterator[_T]:
    """An iterator over ``items[start:]`` in O(1) (islice would step over the first ``start``)."""
    iterator = iter(items)
    iterator.__setstate__(start)  # type: ignore[attr-defined]
    return iterator


def _fill_same(entries: list[_Entry], start: int, reason: Reason, out: dict[str, Reason]) -> None:
    out.update(dict.fromkeys(map(_ID, map(_GANG, _from(entries, start))), reason))


def _fill_one(gang_id: str, reason: Reason, out: dict[str, Reason]) -> None:
    out[gang_id] = reason


def _forget(gang_ids: Sequence[str], out: dict[str, Reason]) -> None:
    """Preemptors were admitted after their reasons were decided."""
    for gang_id in gang_ids:
        out.pop(gang_id, None)


def _reblock(heads: Sequence[str], views: Sequence[_View], out: dict[str, Reason]) -> None:
    """Preemptors that were StrictFIFO heads were admitted after the gangs behind them were
    marked blocked by them: the first of those gangs heads the line now, the rest are blocked
    by it. A preemptor that held the plan's reservation holds none now: the gangs kept off its
    nodes say so."""
    for head in heads:
        named = f"big gang {head},"
        for gang_id, reason in list(out.items()):
            if reason.code == "Reserved" and named in reason.message:
                out[gang_id] = reasons.reservation_preempted_in(head)
        blocked = reasons.strict_fifo_blocked(head)
        behind = sorted(
            (entry[0], entry[2].id)
            for view in views
            for entry in view[1]
            if out.get(entry[2].id) == blocked
        )
        if not behind:
            continue
        first = behind[0][1]
        out[first] = reasons.head_preempted_in(head)
        now_blocked = reasons.strict_fifo_blocked(first)
        for _, gang_id in behind[1:]:
            out[gang_id] = now_blocked


def _holds_reservation(holder: str, out: dict[str, Reason]) -> None:
    # Whatever it waits for by the time its turn comes (nodes, or quota or the size-ratio slot
    # that gangs before it in the order took): it still holds the reservation.
    reason = out.get(holder)
    if reason is not None and "holds a reservation" not in reason.message:
        out[holder] = reasons.no_fit_reserving(reason)


def _fill_all(reasons: Mapping[str, Reason], out: dict[str, Reason]) -> None:
    out.update(reasons)


# A queue as one plan sees it: leaf, entries, verdict keys, big entries.
_View = tuple[str, list[_Entry], list[int], list[_Entry]]


class _Cycle:
    """Steps 4-6 of one plan over a `_State`. Not reusable. With ``keep`` the state outlives
    the plan: quota taken is given back and reasons refer to copies of the queues."""

    def __init__(self, state: _State, policy: AdmissionPolicy, now: float, keep: bool) -> None:
        self.state = state
        self.policy = policy
        self.tree = state.tree
        self.cluster = state.cluster
        self.quota = state.quota
        self.now = now
        self.keep = keep
        self.admitted: list[Admission] = []
        self.taken: list[tuple[str, list[tuple[int, int]]]] = []  # quota to give back
        # Reasons, in the order the plan decided them (see PendingReasons).
        self.parts: list[Callable[[dict[str, Reason]], None]] = []
        self.count = 0
        # Many waiting gangs of a queue share a message; build each once.
        self.quota_reasons: dict[tuple[str, int, float, float], Reason] = {}
        # Size ratio state.
        self.blocker: str | None = None  # a big gang admitted and not yet running
        # The first big gang in policy order that waits for nodes: gangs after it keep off
        # the nodes it needs (see _admit).
        self.holder: Gang | None = None
        self.reserved: Pool | None = None
        # With an aged holder: leaves below their fair share at the start of the plan (they
        # are not held back by it).
        self.below: frozenset[str] = frozenset()
        self.aged = False  # the holder waited STARVATION_AFTER: it holds against younger gangs
        # An aged holder in a queue the policy keeps strict (StrictFIFO): the gangs before it
        # in its queue are never held back by it, as it waits behind them.
        self.holder_strict = False
        self.preempted: dict[str, Reason] = {}
        # The holder's earliest possible start (see _holder_start); None until a gang that
        # could backfill asks.
        self.holder_start: float | None = None
        self.admitted_gangs: list[Gang] = []  # the gangs of self.admitted, in step
        # Set while a node-blind queue's admitted gang is stuck: node-blind queues admit nothing.
        self.blind_hold: Reason | None = None

    def run(self) -> Decisions:
        state = self.state
        self.cluster.begin()
        views: list[_View] = []
        for line in state.lines.values():
            if line.entries:
                if self.keep:  # the lines change after this plan; its reasons must not
                    views.append((line.leaf, list(line.entries), list(line.vkeys), line.bigs))
                else:
                    views.append((line.leaf, line.entries, line.vkeys, line.bigs))
        missing = dict(state.missing) if self.keep else state.missing
        if missing:
            self.parts.append(partial(_fill_all, missing))
            self.count += len(missing)
        try:
            self._size_ratio_state(views)  # 4.
            self._blind_hold_state()
            self._admit(views)  # 5. and 6.
            if any(self.tree.queues[view[0]].preemption.enabled for view in views):
                self._preempt(views)  # 7.
            if self.aged and self.holder is not None:
                # The aged holder took the reservation before the plan's order reached it:
                # its own reason says so too.
                self.parts.append(partial(_holds_reservation, self.holder.id))
        finally:
            for leaf, demand in reversed(self.taken):
                self.quota.add(leaf, [(i, -amount) for i, amount in demand])
        if self.keep:
            # A Planner's snapshot lists each queue's rejected gangs with the queue.
            rejected = {
                gang_id: state.rejected[gang_id]
                for line in state.lines.values()
                for gang_id in line.rejected
            }
        else:
            rejected = state.rejected
        return Decisions(
            self.admitted, PendingReasons(self.parts, self.count), rejected, self.preempted
        )

    # --- step 4 --------------------------------------------------------------------------

    def _size_ratio_state(self, views: Sequence[_View]) -> None:
        """Who big gangs are serialized behind: the big gang admitted longest ago that does
        not run yet. (Which big gang holds a reservation is decided in policy order, in
        `_admit`.)"""
        state = self.state
        tree = self.tree
        waiting: list[tuple[float, str]] = []
        for admitted in state.not_running.values():
            queue = tree.queues.get(admitted.gang.queue)
            if queue is None or queue.size_ratio is None:
                continue
            request = state.vector(admitted.gang.pod_requests)
            share = max((request[i] * inv for i, inv in state.inverse_capacity), default=0.0)
            if share * admitted.size > queue.size_ratio.ratio:
                waiting.append((admitted.admitted_at, admitted.gang.id))
        if waiting:
            self.blocker = min(waiting)[1]
            return
        self._starving(views)

    def _starving(self, views: Sequence[_View]) -> None:
        """No starvation: the oldest big gang that has waited `STARVATION_AFTER` holds the
        plan's reservation against every younger gang, whatever the policy's order, except
        gangs of other queues below their weighted fair share. (Otherwise a big gang of a queue
        above its share would wait for as long as queues below it have demand.)"""
        oldest: tuple[SubmitStamp, Gang, FitClass] | None = None
        for _, _, _, bigs in views:
            for entry in bigs:  # the queue's big gangs, in queue order
                gang = entry[2]
                if oldest is None or gang.submitted < oldest[0]:
                    oldest = (gang.submitted, gang, entry[3])
        if oldest is None:
            return
        _, gang, fit = oldest
        if self.now - gang.submitted.time < STARVATION_AFTER:
            return
        queue = self.tree.queues[gang.queue]
        if not queue.node_fit:
            return
        if any(self.policy.blocking(self.tree.queues[view[0]]) == "all" for view in views):
            # A head that does not fit blocks every queue: no younger gang passes the big gang
            # but those before it in the policy's order, and holding one of those back would
            # block the big gang itself, for ever.
            return
        floor = self.floor(gang)
        if self._quota_room(gang.queue, fit, floor)[0] < floor:
            return  # held back by its queue's quota, not by nodes: reserve nothing
        self.holder = gang
        self.aged = True
        self.holder_strict = self.policy.blocking(queue) == "queue"
        self.reserved = self.state.reserve(fit, floor)
        self.below = self._below_fair_share()

    def _blind_hold_state(self) -> None:
        """Node-blind queues: the oldest stuck gang they admitted, if any."""
        queues = self.tree.queues
        oldest: tuple[float, str] | None = None
        for admitted in self.state.not_running.values():
            if self.now - admitted.admitted_at < PARTIAL_HOLD_AFTER:
                continue
            queue = queues.get(admitted.gang.queue)
            if queue is None or queue.node_fit:
                continue
            entry = (admitted.admitted_at, admitted.gang.id)
            if oldest is None or entry < oldest:
                oldest = entry
        if oldest is not None:
            self.blind_hold = reasons.held_behind_partial(oldest[1])

    def floor(self, gang: Gang) -> int:
        """The fewest pods ``gang`` may be admitted with now."""
        return gang.min if self._elastic_now(gang) else gang.size

    def _may_reserve(self, reason: Reason, queue: Queue) -> bool:
        """A big gang that waits for nodes only (its quota suffices) takes the plan's one
        reservation, if nobody holds it yet."""
        return self.holder is None and reason.code == "NoFit" and queue.node_fit

    # --- step 7: preemption (policies/preemption.py) ------------------------------------

    def _preempt(self, views: Sequence[_View]) -> None:
        """Each preemption-enabled queue's first waiting gang, in the policy's order, may
        preempt admitted gangs to be admitted now."""
        queues = self.tree.queues
        admitted_now = {admission.gang_id for admission in self.admitted}
        # A policy whose head blocks every queue (strict-fifo): only the first waiting gang of
        # all may preempt, or a later gang would be admitted before it.
        global_head = any(self.policy.blocking(queues[view[0]]) == "all" for view in views)
        heads: list[tuple[tuple[object, ...], Gang, FitClass]] = []
        for leaf, entries, _, _ in views:
            queue = queues[leaf]
            if not queue.preemption.enabled and not global_head:
                continue
            for entry in entries:
                gang = entry[2]
                if gang.id not in admitted_now:
                    share = self._share(leaf, gang, entry[3])
                    key = (*self.policy.head_key(gang, queue, share), leaf)
                    heads.append((key, gang, entry[3]))
                    break
        heads.sort(key=itemgetter(0))
        if global_head:
            heads = heads[:1]
        heads = [head for head in heads if queues[head[1].queue].preemption.enabled]
        preemptors: list[str] = []

        def admit(gang: Gang, fit: FitClass, size: int, placement: dict[str, int]) -> None:
            self._record(gang, fit, False, gang.queue, size, placement)
            preemptors.append(gang.id)

        self.preempted = preempt(self, [(g, f) for _, g, f in heads], admitted_now, admit)
        if preemptors:
            self.parts.append(partial(_forget, preemptors))
            self.count -= len(preemptors)
            self.parts.append(partial(_reblock, preemptors, views))

    def share_of(self, leaf: str, fit: FitClass, pods: int) -> float:
        """``leaf``'s weighted dominant share over the resources of ``fit`` with ``pods`` more
        pods of it (the share `_share` orders heads by)."""
        usage = self.quota.usage[leaf]
        request = fit.request
        best = 0.0
        for i, inverse in self.state.inverse_capacity:
            if request[i]:
                share = (usage[i] + request[i] * pods) * inverse
                if share > best:
                    best = share
        return best / self.tree.queues[leaf].weight

    def borrowing(self, leaf: str) -> bool:
        """True if ``leaf`` uses more than its nominal quota of some resource (a queue with no
        nominal quota borrows whatever it uses)."""
        usage = self.quota.usage[leaf]
        queue = self.tree.queues[leaf]
        if queue.nominal is None:
            return any(usage)
        index = self.state.index
        names = self.state.names
        for i, used in enumerate(usage):
            if used > 0 and used > queue.nominal[names[i]]:
                return True
        return bool(queue.quota_names) and any(
            usage[index[name]] > 0 and queue.nominal[name] == 0
            for name in queue.quota_names
            if name in index
        )

    def above_fair_share(self, leaf: str, fit: FitClass) -> bool:
        """True if ``leaf`` holds more than its weighted fair share (its weight's part of the
        weights of the queues of its tree that hold or wait for something), over the
        resources of ``fit``."""
        tree = self.tree
        root = tree.root(leaf)
        lines = self.state.lines
        usage = self.quota.usage
        total = 0.0
        for other in tree.leaves:
            if tree.root(other) != root:
                continue
            line = lines.get(other)
            if any(usage[other]) or (line is not None and line.entries):
                total += tree.queues[other].weight
        if total <= 0:
            return False
        fair = tree.queues[leaf].weight / total
        return self.share_of(leaf, fit, 0) * tree.queues[leaf].weight > fair

    def _below_fair_share(self) -> frozenset[str]:
        """The leaf queues whose dominant share is below their weighted fair share of the
        cluster: their weight's part of the weights of the leaves that hold or wait for
        something (all trees: they share the nodes)."""
        queues = self.tree.queues
        lines = self.state.lines
        usage = self.quota.usage
        inverse = self.state.inverse_capacity
        active = [
            leaf
            for leaf in self.tree.leaves
            if any(usage[leaf]) or (leaf in lines and lines[leaf].entries)
        ]
        total = sum(queues[leaf].weight for leaf in active)
        below = set()
        for leaf in active:
            mine = usage[leaf]
            share = max((mine[i] * inv for i, inv in inverse), default=0.0)
            if share < queues[leaf].weight / total:
                below.add(leaf)
        return frozenset(below)

    def quota_room(self, leaf: str, fit: FitClass, pods: int) -> int:
        """Pods of ``fit`` (at most ``pods``) ``leaf``'s quota admits now."""
        return self._quota_room(leaf, fit, pods)[0]

    def give_back(self, leaf: str, demand: Sequence[tuple[int, int]]) -> None:
        """A preempted gang's quota goes back (and returns to the state after the plan)."""
        back = [(i, -amount) for i, amount in demand]
        self.quota.add(leaf, back)
        if self.keep:
            self.taken.append((leaf, back))

    def _elastic_now(self, gang: Gang) -> bool:
        return gang.min < gang.size and self.now - gang.submitted.time >= gang.elastic_after

    def _quota_room(self, leaf: str, fit: FitClass, pods: int) -> tuple[int, int, list[float]]:
        """(pods of ``fit`` the queue's quota admits, capped at ``pods``; limiting resource;
        available quota)."""
        available = self.quota.available(leaf)
        request = fit.request
        most = pods
        limiting = -1
        for i in fit.nonzero:
            left = available[i]
            if left != INF:
                count = int(left // request[i])
                if count < most:
                    most, limiting = count, i
        return most, limiting, available

    # --- steps 5 and 6 -------------------------------------------------------------------

    def _admit(self, views: list[_View]) -> None:
        """Progressive filling over queue heads in the policy's order.

        A gang that cannot be admitted now cannot be admitted later in this plan (capacity only
        shrinks), and passing it over changes nothing. So, unless the policy lets one head
        block every queue, each queue's head is the first gang that is admissible when the
        queue is scanned; the gangs passed over on the way get their reasons at once and never
        enter the heap. A head is checked again when it comes off the heap, since admissions
        made in between may have taken what it needed.
        """
        head_key = self.policy.head_key
        queues = self.tree.queues
        if any(self.policy.blocking(queues[view[0]]) == "all" for view in views):
            self._admit_eagerly(views)
            return
        consider = self._consider
        scan = self._scan
        share = self._share
        strict = {view[0]: self.policy.blocking(queues[view[0]]) == "queue" for view in views}
        by_leaf = {view[0]: view for view in views}
        position: dict[str, int] = {}
        heap: list[tuple[tuple[float | int | str, ...], str]] = []
        heappush = heapq.heappush

        def push_next(view: _View, at: int) -> None:
            leaf, entries, _, _ = view
            queue = queues[leaf]
            at = scan(view, at, queue, strict[leaf])
            if at < len(entries):
                position[leaf] = at
                entry = entries[at]
                gang = entry[2]
                heappush(heap, (head_key(gang, queue, share(leaf, gang, entry[3])), leaf))

        for view in views:
            push_next(view, 0)
        heappop = heapq.heappop
        while heap:
            _, leaf = heappop(heap)
            view = by_leaf[leaf]
            entries = view[1]
            at = position[leaf]
            _, _, gang, fit, big, _ = entries[at]
            reason = consider(gang, fit, big, queues[leaf], True)
            if reason is not None:
                if big and self._may_reserve(reason, queues[leaf]):
                    self.holder = gang
                    self.reserved = self.state.reserve(fit, self.floor(gang))
                    reason = reasons.no_fit_reserving(reason)
                self._one(gang.id, reason)
                if strict[leaf]:
                    self._block(entries, at + 1, gang)
                    continue
            push_next(view, at + 1)

    def _scan(self, view: _View, at: int, queue: Queue, strict: bool) -> int:
        """The index of the first gang from ``at`` on that could be admitted now; records why
        the ones before it cannot.

        Nothing is admitted during a scan, so quota headroom and free capacity are fixed: the
        verdict on a gang that is not elastic depends only on its verdict key (fit class, size,
        bigness), unless a big gang holds a reservation (then being younger than it matters,
        and gangs are decided one by one). Gangs whose key was turned down are skipped by a
        C-level search; their reasons are written when read.
        """
        _, entries, vkeys, _ = view
        end = len(entries)
        if at >= end:
            return end
        leaf = queue.name
        available = self.quota.available(leaf)
        consider = self._consider
        quota_reason = self._quota_reason
        one_by_one = self.holder is not None
        known: dict[int, Reason] = {}  # verdict key -> why its gangs wait (stays empty one by one)
        shrunk: dict[int, Reason] = {}  # the same for elastic gangs that may shrink now
        extras: dict[str, Reason] | None = None  # gangs decided one by one
        start = at
        while at < end:
            vkey = vkeys[at]
            if vkey in known:
                at += 1
                if at < end and vkeys[at] in known:
                    # A run of gangs turned down already: find where it ends in C.
                    try:
                        at += indexOf(map(known.__contains__, _from(vkeys, at)), False)
                    except ValueError:
                        at = end
                continue
            _, _, gang, fit, big, _ = entries[at]
            if vkey >= 0 and not one_by_one:
                # verdict(gang, ..., floor=size, quick=True), the quota part inline.
                reason: Reason | None
                size = gang.size
                request = fit.request
                for i in fit.nonzero:
                    if available[i] < request[i] * size:
                        reason = quota_reason(leaf, fit, size, available)
                        break
                else:
                    reason = consider(gang, fit, big, queue, False)
                    if reason is None or (big and self._may_reserve(reason, queue)):
                        break
                known[vkey] = reason
            else:
                kept = None if one_by_one else shrunk
                reason = self._alone(gang, fit, big, queue, available, kept)
                if reason is None:
                    break
                if extras is None:
                    extras = {}
                extras[gang.id] = reason
            at += 1
            if strict:
                self._stretch(entries, vkeys, start, at, known, extras)
                self._block(entries, at, gang)
                return end
        self._stretch(entries, vkeys, start, at, known, extras)
        return at

    def _alone(
        self,
        gang: Gang,
        fit: FitClass,
        big: bool,
        queue: Queue,
        available: Sequence[float],
        shrunk: dict[int, Reason] | None,
    ) -> Reason | None:
        """Why a gang decided on its own in a scan waits; None if the scan stops at it (it
        could be admitted now, or it is big and takes the reservation). ``shrunk``: the scan's
        verdicts on elastic gangs that may shrink now (None: one by one, not kept)."""
        minimum = gang.min_size
        if minimum is None:
            floor, quick = gang.size, True
        elif self.now - gang.submitted.time >= gang.elastic_after:
            floor, quick = minimum, True
        else:
            floor, quick = gang.size, minimum >= gang.size
        key = -1
        if quick and shrunk is not None:
            # An elastic gang that may shrink now is turned down, and why, by its fit class,
            # floor and bigness alone, as a plain gang by its verdict key (its size only caps
            # how many pods are counted).
            key = fit.serial << 42 | floor << 1 | big
            known = shrunk.get(key)
            if known is not None:
                return known
        reason = self._verdict(gang, fit, big, queue, available, floor, quick)
        if reason is None or (big and self._may_reserve(reason, queue)):
            return None
        if key >= 0:
            assert shrunk is not None
            shrunk[key] = reason
        return reason

    def _verdict(
        self,
        gang: Gang,
        fit: FitClass,
        big: bool,
        queue: Queue,
        available: Sequence[float],
        floor: int,
        quick: bool,
    ) -> Reason | None:
        """None if ``gang`` could be admitted now; else why not. ``quick``: a queue short of
        quota for ``floor`` pods is the reason, whatever else holds the gang back."""
        if quick:
            request = fit.request
            for i in fit.nonzero:
                if available[i] < request[i] * floor:
                    return self._quota_reason(queue.name, fit, floor, available)
        return self._consider(gang, fit, big, queue, False)

    def _stretch(
        self,
        entries: list[_Entry],
        vkeys: list[int],
        start: int,
        stop: int,
        known: dict[int, Reason],
        extras: dict[str, Reason] | None,
    ) -> None:
        if stop > start:
            self.parts.append(partial(_fill_scan, entries, vkeys, start, stop, known, extras))
            self.count += stop - start

    def _block(self, entries: list[_Entry], at: int, head: Gang) -> None:
        if at < len(entries):
            reason = reasons.strict_fifo_blocked(head.id)
            self.parts.append(partial(_fill_same, entries, at, reason))
            self.count += len(entries) - at

    def _one(self, gang_id: str, reason: Reason) -> None:
        self.parts.append(partial(_fill_one, gang_id, reason))
        self.count += 1

    def _admit_eagerly(self, views: list[_View]) -> None:
        """Steps 5 and 6 for policies where one head may block every queue: every head takes
        its turn in key order, admissible or not."""
        head_key = self.policy.head_key
        blocking_of = self.policy.blocking
        queues = self.tree.queues
        share = self._share
        by_leaf = {view[0]: view for view in views}
        position = dict.fromkeys(by_leaf, 0)
        heap: list[tuple[tuple[float | int | str, ...], str]] = []
        for leaf, entries, _, _ in views:
            _, _, gang, fit, _, _ = entries[0]
            heap.append((head_key(gang, queues[leaf], share(leaf, gang, fit)), leaf))
        heapq.heapify(heap)
        while heap:
            _, leaf = heapq.heappop(heap)
            entries = by_leaf[leaf][1]
            at = position[leaf]
            _, _, gang, fit, big, _ = entries[at]
            queue = queues[leaf]
            reason = self._consider(gang, fit, big, queue, True)
            at += 1
            if reason is not None:
                self._one(gang.id, reason)
                blocking = blocking_of(queue)
                if blocking == "all":
                    blocked = reasons.strict_fifo_blocked(gang.id)
                    position[leaf] = at
                    for name in sorted(position):
                        rest = by_leaf[name][1]
                        if position[name] < len(rest):
                            self.parts.append(partial(_fill_same, rest, position[name], blocked))
                            self.count += len(rest) - position[name]
                    return
                if blocking == "queue":
                    self._block(entries, at, gang)
                    at = len(entries)
            if at < len(entries):
                position[leaf] = at
                _, _, gang, fit, _, _ = entries[at]
                heapq.heappush(heap, (head_key(gang, queue, share(leaf, gang, fit)), leaf))
            else:
                del position[leaf]

    def _share(self, leaf: str, gang: Gang, fit: FitClass) -> float:
        """The queue's weighted dominant share if ``gang`` were admitted at full size, over the
        resources ``gang`` asks for: a queue that holds every GPU is not pushed back when its
        head asks for CPU only (admitting it takes no GPU), so it competes for CPU by its CPU
        share. Over all resources, a queue with a saturated resource would go first for every
        other resource for as long as it has demand."""
        usage = self.quota.usage[leaf]
        request = fit.request
        size = gang.size
        best = 0.0
        for i, inverse in self.state.inverse_capacity:
            if request[i] == 0:
                continue
            share = (usage[i] + request[i] * size) * inverse
            if share > best:
                best = share
        return best / self.tree.queues[leaf].weight

    def _held_back(self, gang: Gang, holder: Gang, leaf: str) -> bool:
        """Whether ``gang`` (of queue ``leaf``) is kept off the nodes reserved for ``holder``."""
        if gang is holder:
            return False
        if self.aged and not (
            holder.submitted < gang.submitted
            and (leaf == holder.queue or leaf not in self.below)
            and not (
                # Before the holder in its StrictFIFO queue: held back, it would block the
                # holder (the two would wait for each other for ever).
                self.holder_strict and leaf == holder.queue and gang.order_key < holder.order_key
            )
        ):
            return False
        return not self._backfills(gang)

    def _consider(
        self, gang: Gang, fit: FitClass, big: bool, queue: Queue, admit: bool
    ) -> Reason | None:
        """None if ``gang`` can be admitted now (and, if ``admit``, admit it); else why not."""
        if big and self.blocker is not None:
            return reasons.size_ratio_serialized(self.blocker)
        if self.blind_hold is not None and not queue.node_fit:
            return self.blind_hold
        leaf = queue.name
        size = gang.size
        minimum = gang.min_size
        if minimum is None:
            minimum = floor = size
            elastic_now = False
        else:
            elastic_now = minimum < size and self.now - gang.submitted.time >= gang.elastic_after
            floor = minimum if elastic_now else size

        # Quota: how many pods the queue may still take.
        available = self.quota.available(leaf)
        request = fit.request
        most = size
        for i in fit.nonzero:
            left = available[i]
            if left < request[i] * most:
                most = int(left // request[i])
        if most < floor:
            if minimum < size and not elastic_now and most >= minimum:
                fits = min(most, self.cluster.room(fit)) if queue.node_fit else most
                if fits >= minimum:
                    return self._elastic_waiting(gang, fits)
            return self._quota_reason(leaf, fit, floor, available)

        # Nodes: place the pods, at least ``floor`` of them.
        if not queue.node_fit:
            if admit:
                self._record(gang, fit, big, leaf, most, {})
            return None
        usable = fit
        holder = self.holder
        if holder is not None and self._held_back(gang, holder, leaf):
            assert self.reserved is not None
            usable = self.state.restricted(fit, self.reserved)
        cluster = self.cluster
        if admit:
            placed = cluster.place(usable, most, floor)
            if placed is not None:
                placement = placed[0]
                self._record(gang, fit, big, leaf, sum(placement.values()), placement)
                return None
        elif cluster.fits(usable, floor, most):
            return None
        room = cluster.room(usable)
        if usable is not fit and cluster.room(fit) >= floor:
            assert holder is not None
            if gang.runtime_limit is not None and self.holder_start is not None:
                return reasons.reserved_for_too_long(
                    holder.id, gang.runtime_limit, self.holder_start - self.now
                )
            waited = self.now - holder.submitted.time if self.aged else None
            return reasons.reserved_for(holder.id, waited)
        if minimum < size and not elastic_now and room >= minimum:
            return self._elastic_waiting(gang, room)
        return _no_fit(floor, gang.pod_requests, fit.one_pod_per_node, room, fit.restricted)

    def _backfills(self, gang: Gang) -> bool:
        """Conservative backfill: a gang after the holder may use the reserved nodes when it is
        certain to end (Kubernetes ends it at its runtime limit) before the holder could start,
        so it never delays the holder. Not around an aged holder: it has waited its
        starvation bound already, and gangs end before their limits, so backfill would keep it
        waiting past the bound (docs/benchmarks.md, *What backfill buys*)."""
        limit = gang.runtime_limit
        if limit is None or self.aged:
            return False
        start = self.holder_start
        if start is None:
            start = self.holder_start = self._holder_start()
        # Infinite: a gang on the reserved nodes may run for ever, so when the holder starts
        # is unknown, not never; nothing is certain to end before it.
        return start != INF and self.now + limit <= start

    def _holder_start(self) -> float:
        """The holder's earliest possible start: when the last admitted gang that may hold
        room on the reserved nodes ends at the latest (infinite, unknown, if one has no limit;
        ``now`` if there is none). Such a gang has pods on a reserved node, or is not running
        yet and has pods without a node (they may still land there). Gangs this plan admitted
        count too (admitted now); the gangs it backfills end by this time, so they move it
        not."""
        reserved = self.reserved
        assert reserved is not None
        member = reserved.member
        index = self.cluster.index
        start = self.now
        occupants: list[tuple[Gang, float]] = []
        for admitted in self.state.admitted.values():
            if _may_occupy(admitted.placement, admitted.size, admitted.running, member, index):
                occupants.append((admitted.gang, admitted.admitted_at))
        for gang, admission in zip(self.admitted_gangs, self.admitted, strict=True):
            if _may_occupy(admission.placement, admission.size, False, member, index):
                occupants.append((gang, self.now))
        for gang, admitted_at in occupants:
            limit = gang.runtime_limit
            if limit is None:
                return INF
            start = max(start, admitted_at + limit)
        return start

    def _quota_reason(
        self, leaf: str, fit: FitClass, pods: int, available: Sequence[float]
    ) -> Reason:
        """QuotaExhausted for the first resource the queue lacks for ``pods`` pods of ``fit``."""
        request = fit.request
        for i in fit.nonzero:
            if available[i] < request[i] * pods:
                key = (leaf, i, request[i] * pods, available[i])
                reason = self.quota_reasons.get(key)
                if reason is None:
                    reason = self.quota_reasons[key] = reasons.quota_exhausted(
                        leaf, self.state.names[i], key[2], key[3]
                    )
                return reason
        raise AssertionError(f"queue {leaf}: quota suffices for {pods} pods")  # pragma: no cover

    def _elastic_waiting(self, gang: Gang, fits: int) -> Reason:
        waited = self.now - gang.submitted.time
        return reasons.elastic_waiting(
            gang.size, fits, gang.min, gang.elastic_after, gang.elastic_after - waited
        )

    def _record(
        self, gang: Gang, fit: FitClass, big: bool, leaf: str, size: int, placement: dict[str, int]
    ) -> None:
        request = fit.request
        demand = [(i, request[i] * size) for i in fit.nonzero]
        self.quota.add(leaf, demand)
        if self.keep:
            self.taken.append((leaf, demand))
        self.admitted.append(Admission(gang.id, leaf, size, placement))
        self.admitted_gangs.append(gang)
        if big:
            self.blocker = gang.id
        if gang is self.holder:
            # An aged holder placed: gangs after it may use what is left.
            self.holder = None


def _may_occupy(
    placement: Mapping[str, int], size: int, running: bool, member: bytes, index: Mapping[str, int]
) -> bool:
    """True if an admitted gang may hold room on the nodes of ``member`` (see _holder_start)."""
    placed = 0
    for node, pods in placement.items():
        n = index.get(node)
        if n is not None and member[n] and pods > 0:
            return True
        placed += pods
    return not running and placed < size


class NeverFitsScreen:
    """Step 2's NeverFits screen for one gang at a time, outside any plan: the webhook asks it
    whether a gang being created could ever be admitted (`webhook.neverfits`).

    The same `_State` a plan starts from, with nothing admitted: the same resource index, node
    shapes (`Cluster.empty_room`), queue potentials (`QuotaState.potential`) and reason
    builders, so the webhook and the planner cannot disagree. ``nodes`` None: the node rule is
    skipped (the caller has not seen the nodes yet). Kept while the nodes and queues are the
    same; not thread-safe (one caller at a time)."""

    def __init__(self, tree: QueueTree, nodes: Sequence[Node] | None) -> None:
        self.tree = tree
        self.nodes = list(nodes) if nodes is not None else None
        self._states: dict[tuple[str, ...], _State] = {}
        # The resources nodes offer and quotas name; a gang may add its own (as in a plan).
        self._names = tuple(_resource_names(self.nodes or [], tree, []))
        self._known = frozenset(self._names)

    def verdict(self, gang: Gang) -> Reason | None:
        """The NeverFits reason the planner would give ``gang`` (at its minimum size), or None
        when it could fit, or when its queue is not a leaf (the planner says QueueNotFound)."""
        if not self.tree.is_leaf(gang.queue):
            return None
        nodes = self.nodes or []
        names = self._names
        request = gang.screen_key[1]
        if any(name not in self._known for name, _ in request):
            names = tuple(sorted(self._known.union(name for name, _ in request)))
        state = self._states.get(names)
        if state is None:
            if len(self._states) > 16:  # gangs asking for ever new resource names
                self._states.clear()
            state = self._states[names] = _State(
                nodes, self.tree, list(names), nodes_known=self.nodes is not None
            )
        info = state.classes.get(gang.screen_key)
        if info is None:
            info = state._class(gang)
        minimum = gang.size if gang.min_size is None else gang.min_size
        if minimum <= info.most:
            return None
        return state._never_fits(gang, info.fit, minimum)


class Planner:
    """An incremental planner: the state plans start from, kept up to date by the caller.

    Tell it what changes: gangs that become pending (`add_pending`) or stop being pending
    (`remove_pending`: admitted, deleted, failed), gangs admitted or started (`add_admitted`,
    which replaces an earlier record of the same gang) and gangs that finished or were evicted
    (`remove_admitted`), nodes (`set_nodes`) and queues (`set_queues`). ``plan(now)`` never
    changes the state: admitting what it decided is the caller's report, as it would be for a
    controller whose admission can still fail.

    ``plan(now)`` returns the same `Decisions` as ``policies.plan(self.snapshot(now), policy)``.
    A change costs O(its nodes and resources); a plan costs what it admits and the queues it
    scans (see the module docstring), not a rebuild of the cluster or of the backlog. A change
    of the set of resource names, of the nodes' shapes or labels, or of the queues rebuilds
    the state at the next plan.

    Example::

        planner = Planner(nodes, tree)
        for gang in pending:
            planner.add_pending(gang)
        decisions = planner.plan(now)
        for admission in decisions.admitted:
            gang = planner.remove_pending(admission.gang_id)
            planner.add_admitted(AdmittedGang(gang, admission.size, admission.placement, now))
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        queues: QueueTree,
        policy: str | AdmissionPolicy = "drf",
    ) -> None:
        self._policy = get_policy(policy) if isinstance(policy, str) else policy
        unique_names(nodes)
        self._nodes: tuple[Node, ...] = tuple(nodes)
        self._tree = queues
        self._pending: dict[str, Gang] = {}
        self._entries: dict[str, _Entry | None] = {}  # gang id -> its entry in the state
        self._admitted: dict[str, AdmittedGang] = {}
        self._static_names = self._fixed_names()
        # Resources pending/admitted gangs request that no node offers and no quota names.
        self._requested: Counter[str] = Counter()
        self._fixed_requests: set[frozenset[tuple[str, int]]] = set()  # requests of known names
        self._state: _State | None = None  # None: rebuild at the next plan

    # --- what the planner holds ----------------------------------------------------------

    @property
    def nodes(self) -> tuple[Node, ...]:
        return self._nodes

    @property
    def queues(self) -> QueueTree:
        return self._tree

    @property
    def pending(self) -> Mapping[str, Gang]:
        return self._pending

    @property
    def admitted(self) -> Mapping[str, AdmittedGang]:
        return self._admitted

    # --- changes -------------------------------------------------------------------------

    def add_pending(self, gang: Gang) -> None:
        """``gang`` waits for admission."""
        if gang.id in self._pending:
            raise PolicyError(f"gang {gang.id}: already pending; remove it first")
        self._pending[gang.id] = gang
        self._count(gang, 1)
        state = self._state
        self._entries[gang.id] = state.add_pending(gang) if state is not None else None

    def remove_pending(self, gang_id: str) -> Gang:
        """``gang_id`` no longer waits (admitted, deleted or failed); returns the gang."""
        gang = self._pending.pop(gang_id, None)
        if gang is None:
            raise PolicyError(f"gang {gang_id}: not pending")
        entry = self._entries.pop(gang_id)
        self._count(gang, -1)
        state = self._state
        if state is not None:
            state.remove_pending(gang, entry)
        return gang

    def add_admitted(self, admitted: AdmittedGang) -> None:
        """``admitted.gang`` holds its quota and placement (replacing an earlier record of the
        same gang: e.g. ``running=True`` once it reached its minimum)."""
        gang_id = admitted.gang.id
        old = self._admitted.get(gang_id)
        if old is admitted:
            return  # the caller's unchanged record (`admission.cache.Cache.admitted_gangs`)
        if old is not None:
            if (
                (old.gang is admitted.gang or old.gang == admitted.gang)
                and old.size == admitted.size
                and old.placement == admitted.placement
            ):
                self._admitted[gang_id] = admitted
                state = self._state
                if state is not None:
                    state.not_running.pop(gang_id, None)
                    if not admitted.running:
                        state.not_running[gang_id] = admitted
                return
            self.remove_admitted(gang_id)
        self._admitted[gang_id] = admitted
        self._count(admitted.gang, 1)
        if self._state is not None:
            self._state.add_admitted(admitted)

    def remove_admitted(self, gang_id: str) -> AdmittedGang:
        """``gang_id`` released its quota and nodes (finished, evicted, deleted)."""
        admitted = self._admitted.pop(gang_id, None)
        if admitted is None:
            raise PolicyError(f"gang {gang_id}: not admitted")
        self._count(admitted.gang, -1)
        if self._state is not None:
            self._state.add_admitted(admitted, -1)
        return admitted

    def set_nodes(self, nodes: Sequence[Node]) -> None:
        """The cluster's nodes now. Cheap when only nodes' ``used`` changed."""
        unique_names(nodes)
        nodes = tuple(nodes)
        old = self._nodes
        self._nodes = nodes
        state = self._state
        if (
            state is not None
            and len(old) == len(nodes)
            and all(
                a is b
                or (
                    a.name == b.name
                    and a.allocatable == b.allocatable
                    and a.labels == b.labels
                    and a.taints == b.taints
                )
                for a, b in zip(old, nodes, strict=True)
            )
        ):
            cluster = state.cluster
            names = state.names
            for a, b in zip(old, nodes, strict=True):
                if a is not b and a.used != b.used:
                    before, after = a.used, b.used
                    change = [after[name] - before[name] for name in names]
                    cluster.take(cluster.index[b.name], change, 1)
            return
        self._refix()

    def set_queues(self, queues: QueueTree) -> None:
        """The queue tree now (the state is rebuilt at the next plan)."""
        self._tree = queues
        self._refix()

    # --- planning ------------------------------------------------------------------------

    def plan(self, now: float) -> Decisions:
        """Decide which pending gangs to admit at ``now``; the state is left as it was."""
        with collector_paused():
            return _Cycle(self._ready(), self._policy, now, keep=True).run()

    def snapshot(self, now: float) -> Snapshot:
        """The snapshot ``plan(now)`` decides on: pending gangs of missing queues first, then
        per leaf queue (in the order the planner met them) its rejected gangs, then the rest in
        queue order."""
        state = self._ready()
        pending = [self._pending[gang_id] for gang_id in state.missing]
        for line in state.lines.values():
            pending.extend(line.rejected.values())
            pending.extend(map(_GANG, line.entries))
        return Snapshot(self._nodes, self._tree, list(self._admitted.values()), pending, now)

    # --- internals -----------------------------------------------------------------------

    def _fixed_names(self) -> frozenset[str]:
        names: set[str] = set()
        for node in self._nodes:
            names.update(node.allocatable)
        for queue in self._tree:
            names.update(queue.nominal or ())
        return frozenset(names)

    def _refix(self) -> None:
        """Nodes or queues changed: resource names they fix, and the requested names beyond
        those, are counted again; the state is rebuilt at the next plan."""
        self._static_names = self._fixed_names()
        self._fixed_requests.clear()
        self._requested.clear()
        for gang in self._pending.values():
            self._count(gang, 1)
        for admitted in self._admitted.values():
            self._count(admitted.gang, 1)
        self._state = None

    def _count(self, gang: Gang, delta: int) -> None:
        """Track requested resource names; a name appearing or vanishing changes every vector,
        so the state is rebuilt. (Requests whose names nodes or quotas name anyway, the usual
        case, are not counted.)"""
        request = gang.screen_key[1]
        fixed = self._fixed_requests
        if request in fixed:
            return
        extra = [name for name, _ in request if name not in self._static_names]
        if not extra:
            if len(fixed) >= 4096:
                fixed.clear()
            fixed.add(request)
            return
        requested = self._requested
        for name in extra:
            count = requested[name] + delta
            if count:
                requested[name] = count
            else:
                del requested[name]
            if count == 0 or count == delta:
                self._state = None

    def _ready(self) -> _State:
        state = self._state
        if state is None:
            names = sorted(self._static_names | self._requested.keys())
            state = _State(self._nodes, self._tree, names, admitted=self._admitted)
            for admitted in self._admitted.values():
                state.add_admitted(admitted)
            entries = self._entries
            for gang_id, gang in self._pending.items():
                entries[gang_id] = state.add_pending(gang)
            self._state = state
        return state
