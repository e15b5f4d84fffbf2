"""Step 4 of a plan (see `policies.planner`): who big gangs wait behind, which big gang holds the
plan's one reservation of nodes, which gangs keep off those nodes and which may backfill them,
and the hold of node-blind queues behind a stuck gang.

- **Size ratio**: one big gang admitted and not running at a time; other big gangs are
  serialized behind it (the *blocker*).
- **Reservation**: the first big gang in policy order that waits for nodes only, or a big gang
  once it has waited `STARVATION_AFTER` (*aged*: that of the queue lowest in share), holds the
  nodes it will fit on soonest; gangs after it keep off them, unless they certainly end before
  it could start (*backfill* by runtime limit). An aged one within its queue's nominal quota
  also holds that quota against borrowers (`policies.quotahold`).
- **Node-blind hold**: while an admitted gang of a node-blind queue has waited
  `PARTIAL_HOLD_AFTER` for its pods, node-blind queues admit nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policies import reasons
from policies.decisions import Admission, Reason
from policies.fit import FitClass, Pool
from policies.model import Gang, Queue, SubmitStamp
from policies.ordering import aging_bound
from policies.planreasons import View
from policies.planstate import PlanState, smallest_size
from policies.quota import INF
from policies.shares import Shares
from policies.strategies import AdmissionPolicy

__all__ = ["PARTIAL_HOLD_AFTER", "STARVATION_AFTER", "Reservation"]

STARVATION_AFTER = 120.0
"""Seconds a big gang waits before it holds a reservation against younger gangs whatever the
policy's order (see `Reservation.find_starving`). On ../shared/traces/mixed-queues.yaml any value
from 60 s to 180 s gives the same result (docs/benchmarks.md); 0 is the old behaviour (makespan
+6%), 240 s and more let queues below the big gang's starve it."""

PARTIAL_HOLD_AFTER = 10.0
"""Seconds an admitted gang of a node-blind queue may wait for its pods before node-blind
queues stop admitting. Node-blind admission over-commits nodes; the gangs it admits into room
that the stuck gang needs would take that room first (new pods reach the scheduler before the
stuck gang's pods come out of backoff), so without the hold the clog detector's evictions never
let the oldest gang finish. Gangs in node-aware queues are placed before they are admitted and
are not held."""


class Reservation:
    """The size-ratio slot, the plan's reservation and the node-blind hold, for one plan."""

    __slots__ = (
        "admitted",
        "admitted_gangs",
        "aged",
        "below",
        "blind_hold",
        "blocker",
        "holder",
        "holder_start",
        "holder_strict",
        "now",
        "policy",
        "reserved",
        "shares",
        "state",
    )

    def __init__(
        self,
        state: PlanState,
        shares: Shares,
        policy: AdmissionPolicy,
        now: float,
        admitted: Sequence[Admission],
        admitted_gangs: Sequence[Gang],
    ) -> None:
        self.state = state
        self.shares = shares
        self.policy = policy
        self.now = now
        # The plan's admissions so far, and their gangs, in step (the plan's `Admitter` writes).
        self.admitted = admitted
        self.admitted_gangs = admitted_gangs
        self.blocker: str | None = None  # a big gang admitted and not yet running
        # The first big gang in policy order that waits for nodes: gangs after it keep off
        # the nodes it needs.
        self.holder: Gang | None = None
        self.reserved: Pool | None = None
        # With an aged holder: leaves below their fair share at the start of the plan (they
        # are not held back by it).
        self.below: frozenset[str] = frozenset()
        self.aged = False  # the holder waited STARVATION_AFTER: it holds against younger gangs
        # An aged holder in a queue the policy keeps strict (StrictFIFO): the gangs before it
        # in its queue are never held back by it, as it waits behind them.
        self.holder_strict = False
        # The holder's earliest possible start (see _holder_start); None until a gang that
        # could backfill asks.
        self.holder_start: float | None = None
        # Set while a node-blind queue's admitted gang is stuck: node-blind queues admit nothing.
        self.blind_hold: Reason | None = None

    # --- at the start of the plan --------------------------------------------------------

    def find_blocker(self, views: Sequence[View]) -> None:
        """Who big gangs are serialized behind: the big gang admitted longest ago that does not
        run yet; if none, an aged big gang may take the reservation (`find_starving`)."""
        state = self.state
        queues = state.tree.queues
        waiting: list[tuple[float, str]] = []
        for admitted in state.not_running.values():
            queue = queues.get(admitted.gang.queue)
            if queue is None or queue.size_ratio is None:
                continue
            if state.catalog.dominant_share(admitted.gang, admitted.size) > queue.size_ratio.ratio:
                waiting.append((admitted.admitted_at, admitted.gang.id))
        if waiting:
            self.blocker = min(waiting)[1]
            return
        self.find_starving(views)

    def find_starving(self, views: Sequence[View]) -> None:
        """No starvation: of the big gangs that have waited `STARVATION_AFTER` (their queue's
        aging bound if the queue orders SmallestFirst: `policies.ordering`), the one of the
        queue lowest in weighted share (over the gang's resources; the oldest of that queue's)
        holds the plan's reservation against every younger gang, whatever the policy's order,
        except gangs of other queues below their weighted fair share and, weighted, not above
        the big gang's queue. Otherwise a big gang of a queue above its share would wait for as
        long as queues below it have demand. The oldest big gang of any queue would let a queue
        above its share, whose big gangs came first, keep one below it waiting; and exempting
        every queue below its share let queues holding more than the big gang's queue keep the
        reserved nodes busy while that queue held nothing. Within its queue's nominal quota it
        also holds that quota against borrowers (`policies.quotahold`)."""
        queues = self.state.tree.queues
        now = self.now
        share_of = self.shares.share_of
        chosen: tuple[float, SubmitStamp, Gang, FitClass] | None = None
        for leaf, _, _, bigs in views:
            # Its queue's bound: STARVATION_AFTER, or a SmallestFirst queue's aging bound.
            bound = aging_bound(queues[leaf], STARVATION_AFTER)
            for entry in bigs:  # the queue's big gangs, in queue order
                gang = entry[2]
                if now - gang.submitted.time < bound:
                    continue
                key = (share_of(leaf, entry[3], 0), gang.submitted, gang, entry[3])
                if chosen is None or key[:2] < chosen[:2]:
                    chosen = key
        if chosen is None:
            return
        _, _, gang, fit = chosen
        queue = queues[gang.queue]
        if not queue.node_fit:
            return
        if any(self.policy.blocking(queues[view[0]]) == "all" for view in views):
            # A head that does not fit blocks every queue: no younger gang passes the big gang
            # but those before it in the policy's order, and holding one of those back would
            # block the big gang itself, for ever.
            return
        floor = smallest_size(gang, self.now) - gang.fixed
        holds = self.shares.holds
        demand = self.state.catalog.demand(gang, floor + gang.fixed)
        if holds.entitled(gang.queue, demand):
            # Its queue's nominal quota, which others borrow, is held for it.
            holds.hold(gang, demand)
        if self.shares.quota_room(gang.queue, fit, floor) < floor:
            # Held back by quota, not by nodes: reserve no nodes yet (they would stand idle
            # until the quota comes back; simulator/traces/ml-platform.yaml).
            return
        self.holder = gang
        self.aged = True
        self.holder_strict = self.policy.blocking(queue) == "queue"
        self.reserved = self.state.catalog.reserve(fit, floor)
        self.below = self.shares.below_fair_share(gang.queue)

    def find_blind_hold(self) -> None:
        """Node-blind queues: the oldest stuck gang they admitted, if any."""
        queues = self.state.tree.queues
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

    # --- during the plan -----------------------------------------------------------------

    def may_reserve(self, reason: Reason, queue: Queue) -> bool:
        """A big gang that waits for nodes only (its quota suffices) takes the plan's one
        reservation, if nobody holds it yet."""
        return self.holder is None and reason.code == "NoFit" and queue.node_fit

    def take(self, gang: Gang, fit: FitClass) -> None:
        """``gang`` holds the plan's reservation (see `may_reserve`)."""
        self.holder = gang
        self.reserved = self.state.catalog.reserve(fit, smallest_size(gang, self.now) - gang.fixed)

    def note_admitted(self, gang: Gang, big: bool) -> None:
        """The plan admitted ``gang``: a big one takes the size-ratio slot; the holder placed,
        gangs after it may use what is left."""
        if big:
            self.blocker = gang.id
        if gang is self.holder:
            self.holder = None

    def held_back(self, gang: Gang, leaf: str) -> bool:
        """Whether ``gang`` (of queue ``leaf``) is kept off the reserved nodes."""
        holder = self.holder
        if holder is None or gang is holder:
            return False
        if self.aged and not (
            # Younger, or preempted since: requeued at its submission stamp, it keeps its place
            # in its queue, but it ran while the holder waited (seed 30 of the trace family:
            # gangs preempted again and again came back as "older" onto the reserved nodes,
            # which never drained, and the big gang waited 7,000 s).
            (holder.submitted < gang.submitted or gang.preemptions > 0)
            and (leaf == holder.queue or leaf not in self.below)
            and not (
                # Before the holder in its StrictFIFO queue: held back, it would block the
                # holder (the two would wait for each other for ever).
                self.holder_strict and leaf == holder.queue and gang.order_key < holder.order_key
            )
        ):
            return False
        return not self._backfills(gang)

    def reserved_reason(self, gang: Gang) -> Reason:
        """Why ``gang``, kept off the reserved nodes, waits though the whole pool has room."""
        holder = self.holder
        assert holder is not None
        if gang.runtime_limit is not None and self.holder_start is not None:
            return reasons.reserved_for_too_long(
                holder.id, gang.runtime_limit, self.holder_start - self.now
            )
        waited = self.now - holder.submitted.time if self.aged else None
        return reasons.reserved_for(holder.id, waited)

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
        index = self.state.cluster.index
        start = self.now
        occupants: list[tuple[Gang, float]] = []
        for admitted in self.state.admitted.values():
            if _may_occupy(
                (admitted.placement, *admitted.other_placements),
                admitted.size,
                admitted.running,
                member,
                index,
            ):
                occupants.append((admitted.gang, admitted.admitted_at))
        for gang, admission in zip(self.admitted_gangs, self.admitted, strict=True):
            if _may_occupy(
                (admission.placement, *admission.other_placements),
                admission.size,
                False,
                member,
                index,
            ):
                occupants.append((gang, self.now))
        for gang, admitted_at in occupants:
            limit = gang.runtime_limit
            if limit is None:
                return INF
            start = max(start, admitted_at + limit)
        return start


def _may_occupy(
    placements: Sequence[Mapping[str, int]],
    size: int,
    running: bool,
    member: bytes,
    index: Mapping[str, int],
) -> bool:
    """True if an admitted gang may hold room on the nodes of ``member`` (see _holder_start)."""
    placed = 0
    for placement in placements:
        for node, pods in placement.items():
            n = index.get(node)
            if n is not None and member[n] and pods > 0:
                return True
            placed += pods
    return not running and placed < size
