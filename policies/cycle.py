"""Steps 4 to 7 of one plan (see `policies.planner`), over a `PlanState` it never changes:

4. who big gangs wait behind and which holds the reservation (`policies.reservation`);
5. queue heads in the policy's order, each admitted or passed over (`Cycle._admit`; a scan of a
   queue decides each verdict key once, `Cycle._scan`), one gang at a time by
   `policies.admitter.Admitter`;
6. a reason for every gang left waiting (`policies.planreasons`);
7. preemption for queues that enable it (`policies.preemption`).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from operator import indexOf, itemgetter

from policies import reasons
from policies.admitter import Admitter
from policies.decisions import Admission, Decisions, PendingReasons, Reason
from policies.fit import FitClass
from policies.model import Gang, Queue
from policies.ordering import aging_bound, ordered_line
from policies.planreasons import ReasonLog, View, from_index
from policies.planstate import Entry, PlanState
from policies.preemption import preempt
from policies.reservation import STARVATION_AFTER, Reservation
from policies.shares import Shares
from policies.strategies import AdmissionPolicy

__all__ = ["Cycle"]


class Cycle:
    """Steps 4-7 of one plan over a `PlanState`. Not reusable. With ``keep`` the state outlives
    the plan: quota taken is given back and reasons refer to copies of the queues."""

    def __init__(self, state: PlanState, policy: AdmissionPolicy, now: float, keep: bool) -> None:
        self.state = state
        self.policy = policy
        self.tree = state.tree
        self.now = now
        self.keep = keep
        self.admitted: list[Admission] = []
        self.admitted_gangs: list[Gang] = []  # the gangs of self.admitted, in step
        self.log = ReasonLog()
        self.shares = Shares(state, keep)
        self.reservation = Reservation(
            state, self.shares, policy, now, self.admitted, self.admitted_gangs
        )
        self.admitter = Admitter(
            state, self.shares, self.reservation, now, self.admitted, self.admitted_gangs
        )
        self.preempted: dict[str, Reason] = {}

    def run(self) -> Decisions:
        state = self.state
        state.overlay.begin()
        views: list[View] = []
        queues = self.tree.queues
        for line in state.lines.values():
            if line.entries:
                queue = queues[line.leaf]
                if queue.ordering.smallest_first:  # a copy in this plan's order
                    bound = aging_bound(queue, STARVATION_AFTER)
                    entries, vkeys = ordered_line(
                        line.entries, line.vkeys, self.now, bound, self._share
                    )
                    views.append((line.leaf, entries, vkeys, line.bigs))
                elif self.keep:  # the lines change after this plan; its reasons must not
                    views.append((line.leaf, list(line.entries), list(line.vkeys), line.bigs))
                else:
                    views.append((line.leaf, line.entries, line.vkeys, line.bigs))
        self.log.all(dict(state.missing) if self.keep else state.missing)
        try:
            self.reservation.find_blocker(views)  # 4.
            self.reservation.find_blind_hold()
            self._admit(views)  # 5. and 6.
            if any(self.tree.queues[view[0]].preemption.enabled for view in views):
                self._preempt(views)  # 7.
            quota_holder = self.shares.holds.holder
            if quota_holder is not None:  # (not admitted: an admission releases the hold)
                self.log.holds_quota(quota_holder.id)
            holder = self.reservation.holder
            if self.reservation.aged and holder is not None:
                # The aged holder took the reservation before the plan's order reached it:
                # its own reason says so too.
                self.log.holds_reservation(holder.id)
        finally:
            self.shares.restore()
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
            self.admitted, PendingReasons(self.log.parts, self.log.count), rejected, self.preempted
        )

    def _share(self, entry: Entry) -> float:
        """An entry's dominant share of the cluster at its gang's size (SmallestFirst)."""
        gang = entry[2]
        return self.state.catalog.dominant_share(gang, gang.size)

    # --- steps 5 and 6 -------------------------------------------------------------------

    def _admit(self, views: list[View]) -> None:
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
        consider = self.admitter.consider
        scan = self._scan
        share = self.shares.head_share
        reservation = self.reservation
        strict = {view[0]: self.policy.blocking(queues[view[0]]) == "queue" for view in views}
        by_leaf = {view[0]: view for view in views}
        position: dict[str, int] = {}
        heap: list[tuple[tuple[float | int | str, ...], str]] = []
        heappush = heapq.heappush

        def push_next(view: View, at: int) -> None:
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
                if big and reservation.may_reserve(reason, queues[leaf]):
                    reservation.take(gang, fit)
                    reason = reasons.no_fit_reserving(reason)
                self.log.one(gang.id, reason)
                if strict[leaf]:
                    self.log.block(entries, at + 1, gang.id)
                    continue
            push_next(view, at + 1)

    def _scan(self, view: View, at: int, queue: Queue, strict: bool) -> int:
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
        available = self.shares.available(leaf)
        consider = self.admitter.consider
        quota_reason = self.shares.quota_reason
        may_reserve = self.reservation.may_reserve
        one_by_one = self.reservation.holder is not None
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
                        at += indexOf(map(known.__contains__, from_index(vkeys, at)), False)
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
                    if reason is None or (big and may_reserve(reason, queue)):
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
                self.log.stretch(entries, vkeys, start, at, known, extras)
                self.log.block(entries, at, gang.id)
                return end
        self.log.stretch(entries, vkeys, start, at, known, extras)
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
        if quick and shrunk is not None and not gang.others:
            # An elastic gang that may shrink now is turned down, and why, by its fit class,
            # floor and bigness alone, as a plain gang by its verdict key (its size only caps
            # how many pods are counted).
            key = fit.serial << 42 | floor << 1 | big
            known = shrunk.get(key)
            if known is not None:
                return known
        reason: Reason | None
        if quick and not gang.others and self._short(fit, available, floor):
            reason = self.shares.quota_reason(queue.name, fit, floor, available)
        else:
            reason = self.admitter.consider(gang, fit, big, queue, False)
        if reason is None or (big and self.reservation.may_reserve(reason, queue)):
            return None
        if key >= 0:
            assert shrunk is not None
            shrunk[key] = reason
        return reason

    @staticmethod
    def _short(fit: FitClass, available: Sequence[float], pods: int) -> bool:
        """True if a queue with ``available`` quota cannot take ``pods`` pods of ``fit``."""
        request = fit.request
        return any(available[i] < request[i] * pods for i in fit.nonzero)

    def _admit_eagerly(self, views: list[View]) -> None:
        """Steps 5 and 6 for policies where one head may block every queue: every head takes
        its turn in key order, admissible or not."""
        head_key = self.policy.head_key
        blocking_of = self.policy.blocking
        queues = self.tree.queues
        share = self.shares.head_share
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
            reason = self.admitter.consider(gang, fit, big, queue, True)
            at += 1
            if reason is not None:
                self.log.one(gang.id, reason)
                blocking = blocking_of(queue)
                if blocking == "all":
                    blocked = reasons.strict_fifo_blocked(gang.id)
                    position[leaf] = at
                    for name in sorted(position):
                        rest = by_leaf[name][1]
                        if position[name] < len(rest):
                            self.log.same(rest, position[name], blocked)
                    return
                if blocking == "queue":
                    self.log.block(entries, at, gang.id)
                    at = len(entries)
            if at < len(entries):
                position[leaf] = at
                _, _, gang, fit, _, _ = entries[at]
                heapq.heappush(heap, (head_key(gang, queue, share(leaf, gang, fit)), leaf))
            else:
                del position[leaf]

    # --- step 7: preemption (policies/preemption.py) ------------------------------------

    def _preempt(self, views: Sequence[View]) -> None:
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
                    share = self.shares.head_share(leaf, gang, entry[3])
                    key = (*self.policy.head_key(gang, queue, share), leaf)
                    heads.append((key, gang, entry[3]))
                    break
        heads.sort(key=itemgetter(0))
        if global_head:
            heads = heads[:1]
        heads = [head for head in heads if queues[head[1].queue].preemption.enabled]
        preemptors: list[str] = []
        record = self.admitter.record

        def admit(
            gang: Gang,
            fit: FitClass,
            size: int,
            placement: dict[str, int],
            others: tuple[dict[str, int], ...],
        ) -> None:
            record(gang, fit, False, gang.queue, size, placement, others)
            preemptors.append(gang.id)

        reservation = self.reservation

        def kept_off(gang: Gang) -> bytes | None:
            if reservation.holder is None or not reservation.held_back(gang, gang.queue):
                return None
            assert reservation.reserved is not None
            return reservation.reserved.member

        self.preempted = preempt(
            self.state,
            self.shares,
            self.now,
            [(g, f) for _, g, f in heads],
            admitted_now,
            admit,
            kept_off,
        )
        if preemptors:
            self.log.admitted_after_all(preemptors, views)
