"""The planner: which pending gangs to admit now, where their pods go, and why the rest wait.

``plan(snapshot, policy)`` is pure: it reads the snapshot, works on private copies of free node
capacity and quota usage, and returns `Decisions`. One call admits as many gangs as fit.

A plan, top to bottom:

1. Index resources, apply gangs admitted earlier to free node capacity and to quota usage.
2. Screen every pending gang once: its queue exists and is a leaf; it could ever fit the
   cluster and its queue's quota (else NeverFits); it is not above its queue's size ratio
   with ``action: Reject``.
3. Order each leaf queue's gangs by priority, then submission.
4. Size ratio: find the gang a big gang waits behind, if any, and the oldest big gang, which
   holds a reservation so younger gangs do not take the space it needs. Node-blind queues
   (``nodeFit: false``): find the oldest of their admitted gangs that has waited longer than
   `PARTIAL_HOLD_AFTER` without reaching its minimum; while there is one, node-blind queues
   admit nothing (Kueue's ``waitForPodsReady.blockAdmission``, once a gang is seen stuck).
5. Take queue heads from a heap ordered by the policy (DRF: lowest weighted dominant share
   including the head). For each head: size ratio, quota, node fit, elastic sizing; admit it
   and account its quota and placement, or record why not. A head that does not fit is skipped
   or blocks its queue (StrictFIFO) or everything (``strict-fifo``), as the policy says.
6. Every gang still queued gets a reason.

Within a plan, free capacity and quota headroom only shrink, so a gang passed over earlier in
the plan would not fit later in the same plan: every gang is considered exactly once.

Speed (issue 3; same decisions as the straightforward version, pinned by
tests/unit/test_plan_regression.py): screening looks up what it needs once per queue and
`Gang.screen_key` (gangs that differ only in size share a fit class, limits and size ratio
threshold); the common gang (not elastic, not big, not never-fitting) costs one dict lookup and
one tuple. Queue scans decide "quota short" once per (fit class, fewest pods) for as long as the
queue's headroom is unchanged, and reuse the QuotaExhausted reason. Node fit keeps, per fit class,
the last count and where the pods would go, valid while none of those nodes changed.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from operator import itemgetter

from policies import reasons
from policies.decisions import Admission, Decisions, Reason
from policies.fit import UNLIMITED, Cluster, FitClass
from policies.model import Gang, Queue, Snapshot, SubmitStamp
from policies.quota import INF, QuotaState
from policies.resources import Resources
from policies.strategies import AdmissionPolicy, get_policy

__all__ = ["PARTIAL_HOLD_AFTER", "plan"]

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
    return _Plan(snapshot, chosen).run()


class _Class:
    """What screening learns once per (leaf queue, fit class); `Gang.screen_key` names it."""

    __slots__ = ("append", "big_above", "fit", "missing", "most", "reject", "small")

    def __init__(
        self,
        fit: FitClass,
        entries: list[_Entry] | None,
        most: int,
        big_above: float,
        reject: bool,
        missing: Reason | None = None,
    ) -> None:
        self.fit = fit
        # Appends to the queue's screened gangs (shared by the queue's classes).
        self.append = entries.append if entries is not None else _nowhere
        self.most = most  # most pods ever admissible
        self.big_above = big_above  # pods above which a gang is big
        self.reject = reject  # big gangs are rejected (size ratio action Reject)
        # A gang of at most this size is neither big nor never-fits (-1: not a leaf queue).
        self.small = min(most, big_above) if missing is None else -1
        self.missing = missing  # QueueNotFound reason when the queue is not a leaf


_UNKNOWN = Reason("", "")  # not yet in a memo

# The fit class of gangs whose queue is not a leaf (never used).
_NO_FIT = FitClass(request=(), nonzero=(), one_pod_per_node=False, nodes=[], restricted=False)


def _nowhere(entry: _Entry) -> None:  # pragma: no cover - gangs of a missing queue wait
    raise AssertionError("a gang of a missing queue was queued")


# A screened pending gang: its order key (priority, then submission), the gang, its fit class,
# whether it is above its size ratio, the fewest pods it may start with now, and whether the
# plain quota check for that many pods decides when it is short (not for an elastic gang that
# may shrink later: it gets ElasticWaiting from the full check).
_Entry = tuple[tuple[int, float, int, str], Gang, FitClass, bool, int, bool]


class _Plan:
    """The working state of one plan. Not reusable."""

    def __init__(self, snapshot: Snapshot, policy: AdmissionPolicy) -> None:
        self.snapshot = snapshot
        self.policy = policy
        self.tree = snapshot.queues
        self.now = snapshot.now
        self.decisions = Decisions()
        self.admitted = self.decisions.admitted

        # 1. Resources, free node capacity, quota usage.
        self.vectors: dict[Resources, tuple[int, ...]] = {}
        self.names = self._resource_names()
        self.index = {name: i for i, name in enumerate(self.names)}
        held: dict[str, list[int]] = {}
        admitted_usage: list[tuple[str, tuple[int, ...], int]] = []
        for admitted in snapshot.admitted:
            vector = self._vector(admitted.gang.pod_requests)
            admitted_usage.append((admitted.gang.queue, vector, admitted.size))
            for node, pods in admitted.placement.items():
                taken = held.setdefault(node, [0] * len(self.names))
                for i, amount in enumerate(vector):
                    taken[i] += amount * pods
        self.cluster = Cluster(snapshot.nodes, self.names, held)
        self.quota = QuotaState(self.tree, self.names)
        for queue, vector, size in admitted_usage:
            if queue in self.tree:
                self.quota.add(queue, [(i, amount * size) for i, amount in enumerate(vector)])
        capacity = self.cluster.capacity
        self.inverse_capacity = [(i, 1.0 / c) for i, c in enumerate(capacity) if c > 0]

        self.classes: dict[tuple[object, ...], FitClass] = {}
        self.restricted: dict[int, FitClass] = {}  # id(fit class) -> variant minus reserved groups
        self.dominant: dict[int, tuple[float, int]] = {}  # id(fit class) -> (share per pod, i)
        self.potential: dict[str, list[float]] = {}
        # Many waiting gangs of a queue share a message; build each once.
        self.quota_reasons: dict[tuple[str, int, float, float], Reason] = {}
        # Per leaf: quota headroom -> ((fit class, pods) -> QuotaExhausted or None); see _scan.
        self.short_memo: dict[
            str, tuple[list[float], dict[tuple[FitClass, int], Reason | None]]
        ] = {}

        # Size ratio state.
        self.bigs: dict[str, list[_Entry]] = {}  # leaf -> its big gangs (screening order)
        self.blocker: str | None = None  # a big gang admitted and not yet running
        self.holder: Gang | None = None  # the oldest big gang: younger gangs keep off its nodes
        # Set while a node-blind queue's admitted gang is stuck: node-blind queues admit nothing.
        self.blind_hold: Reason | None = None
        self.reserved: frozenset[int] = frozenset()  # node indices

    # --- setup ---------------------------------------------------------------------------

    def _resource_names(self) -> list[str]:
        snapshot = self.snapshot
        seen: dict[str, None] = {}
        for allocatable in {node.allocatable for node in snapshot.nodes}:
            seen.update(dict.fromkeys(allocatable))
        # Per-pod requests as frozensets of (resource, amount) (see Gang.screen_key).
        requests = {gang.screen_key[1] for gang in snapshot.pending}
        requests.update(admitted.gang.screen_key[1] for admitted in snapshot.admitted)
        for request in requests:
            seen.update(dict.fromkeys(name for name, _ in request))
        for queue in self.tree:
            seen.update(dict.fromkeys(queue.nominal or ()))
        names = sorted(seen)
        self._pods = "pods" in seen
        return names

    def _vector(self, request: Resources) -> tuple[int, ...]:
        """Per-pod request over the plan's resources; every pod takes one of a node's pods."""
        vector = self.vectors.get(request)
        if vector is None:
            values = [request[name] for name in self.names]
            if self._pods:
                pods = self.index["pods"]
                values[pods] = max(values[pods], 1)
            vector = self.vectors[request] = tuple(values)
        return vector

    def _fit_class(self, gang: Gang) -> FitClass:
        selector = gang.node_selector
        tolerations = gang.tolerations
        # Per-pod request, one-pod-per-node, node selector, tolerations.
        key = gang.screen_key[1:]
        fit = self.classes.get(key)
        if fit is None:
            request = self._vector(gang.pod_requests)
            fit = FitClass(
                request=request,
                nonzero=tuple(i for i, amount in enumerate(request) if amount > 0),
                one_pod_per_node=gang.one_pod_per_node,
                nodes=self.cluster.eligible(selector, tolerations),
                restricted=bool(selector) or bool(tolerations),
            )
            self.classes[key] = fit
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

    def _restricted(self, fit: FitClass) -> FitClass:
        """``fit`` without the reserved node groups (for gangs younger than the holder)."""
        variant = self.restricted.get(id(fit))
        if variant is None:
            variant = FitClass(
                request=fit.request,
                nonzero=fit.nonzero,
                one_pod_per_node=fit.one_pod_per_node,
                nodes=[n for n in fit.nodes if n not in self.reserved],
                restricted=fit.restricted,
            )
            self.restricted[id(fit)] = variant
        return variant

    # --- the plan ------------------------------------------------------------------------

    def run(self) -> Decisions:
        queued = self._screen()  # 2.
        for entries in queued.values():  # 3.
            entries.sort(key=_order)  # stable: ties keep snapshot order
        self._size_ratio_state(queued)  # 4.
        self._blind_hold_state()
        self._admit(queued)  # 5. and 6.
        return self.decisions

    def _screen(self) -> dict[str, list[_Entry]]:
        """Step 2: reasons for gangs that can never be admitted; the rest grouped by queue."""
        tree = self.tree
        pending = self.decisions.pending
        rejected = self.decisions.rejected
        now = self.now
        queued: dict[str, list[_Entry]] = {}
        classes: dict[tuple[object, ...], _Class] = {}
        get = classes.get
        for gang in self.snapshot.pending:
            info = get(gang.screen_key)
            if info is None:
                info = classes[gang.screen_key] = self._class(gang, queued)
            size = gang.size
            minimum = gang.min_size
            if minimum is None and size <= info.small:  # the common case: nothing to decide
                info.append((gang.order_key, gang, info.fit, False, size, True))
                continue
            if info.missing is not None:
                pending[gang.id] = info.missing
                continue
            fit = info.fit
            if minimum is None:
                minimum = floor = size
                quick = True
            elif now - gang.submitted.time >= gang.elastic_after:
                floor = minimum
                quick = True
            else:
                floor = size
                quick = minimum >= size
            if minimum > info.most:
                rejected[gang.id] = self._never_fits(gang, fit, minimum)
                continue
            big = size > info.big_above
            if big and info.reject:
                leaf = gang.queue
                ratio = tree.queues[leaf].size_ratio
                assert ratio is not None
                per_pod, limiting = self.dominant[id(fit)]
                rejected[gang.id] = reasons.size_ratio_rejected(
                    leaf, self.names[limiting], per_pod * size, ratio.ratio
                )
                continue
            entry = (gang.order_key, gang, fit, big, floor, quick)
            info.append(entry)
            if big:
                self.bigs.setdefault(gang.queue, []).append(entry)
        return {leaf: entries for leaf, entries in queued.items() if entries}

    def _class(self, gang: Gang, queued: dict[str, list[_Entry]]) -> _Class:
        """Screening facts for gangs like ``gang`` in its queue (see `_Class`)."""
        leaf = gang.queue
        entries = queued.get(leaf)
        if entries is None:
            if not self.tree.is_leaf(leaf):
                return _Class(_NO_FIT, None, 0, INF, False, self._queue_not_found(leaf))
            entries = queued[leaf] = []
        fit = self._fit_class(gang)
        queue = self.tree.queues[leaf]
        most, big_above = self._limits(queue, fit)
        ratio = queue.size_ratio
        reject = ratio is not None and ratio.action == "Reject"
        return _Class(fit, entries, most, big_above, reject)

    def _limits(self, queue: Queue, fit: FitClass) -> tuple[int, float]:
        """For gangs of ``fit`` in ``queue``: the most pods the empty cluster and the queue's
        largest possible quota hold, and the size above which a gang is big."""
        most = self.cluster.empty_room(fit) if queue.node_fit else UNLIMITED
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
        if queue.node_fit:
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

    def _size_ratio_state(self, queued: Mapping[str, Sequence[_Entry]]) -> None:
        """Step 4: who big gangs are serialized behind; which big gang holds a reservation."""
        tree = self.tree
        waiting: list[tuple[float, str]] = []
        for admitted in self.snapshot.admitted:
            queue = tree.queues.get(admitted.gang.queue)
            if admitted.running or queue is None or queue.size_ratio is None:
                continue
            request = self._vector(admitted.gang.pod_requests)
            share = max((request[i] * inv for i, inv in self.inverse_capacity), default=0.0)
            if share * admitted.size > queue.size_ratio.ratio:
                waiting.append((admitted.admitted_at, admitted.gang.id))
        if waiting:
            self.blocker = min(waiting)[1]
            return
        oldest: tuple[SubmitStamp, Gang, FitClass] | None = None
        bigs = self.bigs
        for leaf in queued:
            # The queue's big gangs, in queue order (a stable sort, like the queue's).
            for _, gang, fit, _, _, _ in sorted(bigs.get(leaf, ()), key=_order):
                if oldest is None or gang.submitted < oldest[0]:
                    oldest = (gang.submitted, gang, fit)
        if oldest is None:
            return
        _, gang, fit = oldest
        if not tree.queues[gang.queue].node_fit:
            return
        floor = gang.min if self._elastic_now(gang) else gang.size
        if self._quota_room(gang.queue, fit, floor)[0] < floor:
            return  # held back by its queue's quota, not by nodes: reserve nothing
        # Whatever free capacity the holder may use, it needs (it needs at least all of it,
        # or it fits now and must not lose it to younger gangs planned before it).
        self.holder = gang
        self.reserved = frozenset(fit.nodes)

    def _blind_hold_state(self) -> None:
        """Step 4, node-blind queues: the oldest stuck gang they admitted, if any."""
        queues = self.tree.queues
        oldest: tuple[float, str] | None = None
        for admitted in self.snapshot.admitted:
            if admitted.running or self.now - admitted.admitted_at < PARTIAL_HOLD_AFTER:
                continue
            queue = queues.get(admitted.gang.queue)
            if queue is None or queue.node_fit:
                continue
            entry = (admitted.admitted_at, admitted.gang.id)
            if oldest is None or entry < oldest:
                oldest = entry
        if oldest is not None:
            self.blind_hold = reasons.held_behind_partial(oldest[1])

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

    def _admit(self, queued: dict[str, list[_Entry]]) -> None:
        """Steps 5 and 6: progressive filling over queue heads in the policy's order.

        A gang that cannot be admitted now cannot be admitted later in this plan (capacity only
        shrinks), and passing it over changes nothing. So, unless the policy lets one head
        block every queue, each queue's head is the first gang that is admissible when the
        queue is scanned; the gangs passed over on the way get their reasons at once and never
        enter the heap. A head is checked again when it comes off the heap, since admissions
        made in between may have taken what it needed.
        """
        head_key = self.policy.head_key
        queues = self.tree.queues
        if any(self.policy.blocking(queues[leaf]) == "all" for leaf in queued):
            self._admit_eagerly(queued)
            return
        consider = self._consider
        scan = self._scan
        share = self._share
        strict = {leaf: self.policy.blocking(queues[leaf]) == "queue" for leaf in queued}
        position: dict[str, int] = {}
        heap: list[tuple[tuple[float | int | str, ...], str]] = []
        heappush = heapq.heappush

        def push_next(leaf: str, at: int) -> None:
            entries = queued[leaf]
            queue = queues[leaf]
            at = scan(entries, at, queue, strict[leaf])
            if at < len(entries):
                position[leaf] = at
                entry = entries[at]
                gang = entry[1]
                heappush(heap, (head_key(gang, queue, share(leaf, gang, entry[2])), leaf))

        for leaf in queued:
            push_next(leaf, 0)
        pending = self.decisions.pending
        heappop = heapq.heappop
        while heap:
            _, leaf = heappop(heap)
            entries = queued[leaf]
            at = position[leaf]
            _, gang, fit, big, _, _ = entries[at]
            reason = consider(gang, fit, big, queues[leaf], True)
            if reason is not None:
                pending[gang.id] = reason
                if strict[leaf]:
                    self._block(entries, at + 1, gang)
                    continue
            push_next(leaf, at + 1)

    def _scan(self, entries: list[_Entry], at: int, queue: Queue, strict: bool) -> int:
        """The index of the first gang from ``at`` on that could be admitted now; records why
        the ones before it cannot."""
        pending = self.decisions.pending
        consider = self._consider
        leaf = queue.name
        # Nothing is admitted during a scan, so the queue's quota headroom is fixed: most gangs
        # of a queue that used its quota are turned down here without the full check, once per
        # group of gangs that need the same quota (same fit class and smallest size).
        available = self.quota.available(leaf)
        end = len(entries)
        # Per fit class and floor, the QuotaExhausted reason (None: quota suffices) for this
        # headroom, kept while the headroom is unchanged (the same list from available()).
        memo = self.short_memo.get(leaf)
        if memo is None or memo[0] is not available:
            memo = self.short_memo[leaf] = (available, {})
        known = memo[1]
        quota_reason = self._quota_reason
        while at < end:
            _, gang, fit, big, floor, quick = entries[at]
            if quick:
                key = (fit, floor)
                reason = known.get(key, _UNKNOWN)
                if reason is _UNKNOWN:
                    reason = None
                    request = fit.request
                    for i in fit.nonzero:
                        if available[i] < request[i] * floor:
                            reason = quota_reason(leaf, fit, floor, available)
                            break
                    known[key] = reason
                # Short even at its smallest allowed size: no need for the full check.
                if reason is None:
                    reason = consider(gang, fit, big, queue, False)
                    if reason is None:
                        return at
            else:
                reason = consider(gang, fit, big, queue, False)
                if reason is None:
                    return at
            pending[gang.id] = reason
            if strict:
                self._block(entries, at + 1, gang)
                return end
            at += 1
        return end

    def _block(self, entries: list[_Entry], at: int, head: Gang) -> None:
        blocked = reasons.strict_fifo_blocked(head.id)
        pending = self.decisions.pending
        for entry in entries[at:]:
            pending[entry[1].id] = blocked

    def _admit_eagerly(self, queued: dict[str, list[_Entry]]) -> None:
        """Steps 5 and 6 for policies where one head may block every queue: every head takes
        its turn in key order, admissible or not."""
        head_key = self.policy.head_key
        blocking_of = self.policy.blocking
        queues = self.tree.queues
        pending = self.decisions.pending
        share = self._share
        position = dict.fromkeys(queued, 0)
        heap: list[tuple[tuple[float | int | str, ...], str]] = []
        for leaf, entries in queued.items():
            _, gang, fit, _, _, _ = entries[0]
            heap.append((head_key(gang, queues[leaf], share(leaf, gang, fit)), leaf))
        heapq.heapify(heap)
        while heap:
            _, leaf = heapq.heappop(heap)
            entries = queued[leaf]
            at = position[leaf]
            _, gang, fit, big, _, _ = entries[at]
            queue = queues[leaf]
            reason = self._consider(gang, fit, big, queue, True)
            at += 1
            if reason is not None:
                pending[gang.id] = reason
                blocking = blocking_of(queue)
                if blocking == "all":
                    blocked = reasons.strict_fifo_blocked(gang.id)
                    position[leaf] = at
                    for name in sorted(position):
                        for entry in queued[name][position[name] :]:
                            pending[entry[1].id] = blocked
                    return
                if blocking == "queue":
                    self._block(entries, at, gang)
                    at = len(entries)
            if at < len(entries):
                position[leaf] = at
                _, gang, fit, _, _, _ = entries[at]
                heapq.heappush(heap, (head_key(gang, queue, share(leaf, gang, fit)), leaf))
            else:
                del position[leaf]

    def _share(self, leaf: str, gang: Gang, fit: FitClass) -> float:
        """The queue's weighted dominant share if ``gang`` were admitted at full size."""
        usage = self.quota.usage[leaf]
        request = fit.request
        size = gang.size
        best = 0.0
        for i, inverse in self.inverse_capacity:
            share = (usage[i] + request[i] * size) * inverse
            if share > best:
                best = share
        return best / self.tree.queues[leaf].weight

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
        if holder is not None and gang is not holder and holder.submitted < gang.submitted:
            usable = self._restricted(fit)
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
            return reasons.reserved_for_older(holder.id)
        if minimum < size and not elastic_now and room >= minimum:
            return self._elastic_waiting(gang, room)
        return reasons.no_fit(floor, gang.pod_requests, fit.one_pod_per_node, room, fit.restricted)

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
                        leaf, self.names[i], key[2], key[3]
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
        self.quota.add(leaf, [(i, request[i] * size) for i in fit.nonzero])
        self.admitted.append(Admission(gang.id, leaf, size, placement))
        if big:
            self.blocker = gang.id
        if gang is self.holder:
            # Placed: younger gangs may use what is left.
            self.holder = None


_order = itemgetter(0)  # an entry's order key
