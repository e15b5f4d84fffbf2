"""Where an admitted gang's pods go (`EngineConfig.placement`), and what the planner is told of
them (``muster`` admission; without it nobody admits and the pod-level scheduler alone places
pods):

- ``pinned`` (`PinnedPods`): on the nodes the plan chose, as the controller pins them; pods
  whose planned node no longer has room wait for the pod-level scheduler. The planner counts
  the plan.
- ``scheduler`` (`ScheduledPods`): a cluster whose controller does not pin. The Job controller
  creates the admitted pods at once (pods of gangs admitted in the same cycle interleave) and
  the pod-level scheduler binds each to the feasible node kube-scheduler's default scoring
  ranks first (spreading), not the planner's first fit. The planner sees what the controller's
  cache sees: where the pods are bound, plus the plan while the gang is young. Partial gangs
  hold their nodes until the clog timeout evicts them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Protocol

from simulator.events import PODS_RUNNING, RESERVATION_END, EventQueue
from simulator.planfeed import PlanFeed
from simulator.podscheduler import ClusterModel
from simulator.records import ADMITTED, RUNNING, GangRecord
from simulator.sampling import Meter


class PodPlacement(Protocol):
    """How one placement model places an admitted gang's pods and tells the planner."""

    def place(
        self,
        record: GangRecord,
        size: int,
        placement: Mapping[str, int],
        other_placements: Sequence[Mapping[str, int]],
    ) -> None:
        """``record`` was just admitted at ``size`` pods on the plan's ``placement`` (its main
        pod set's) and ``other_placements`` (its other sets', in order)."""

    def started(self, record: GangRecord) -> None:
        """``record``'s minimum runs."""

    def bound(self, record: GangRecord) -> None:
        """The pod-level scheduler just bound pods of ``record``."""

    def reservation_end(self, record: GangRecord) -> None:
        """The controller's cache would drop ``record``'s plan now."""


class PinnedPods:
    """Placement ``pinned``: pods bound where the plan put them."""

    def __init__(
        self,
        cluster: ClusterModel,
        meter: Meter,
        clock: EventQueue,
        feed: PlanFeed,
        start_delay: float,
    ) -> None:
        self.cluster = cluster
        self.meter = meter
        self.clock = clock
        self.feed = feed
        self.start_delay = start_delay

    def place(
        self,
        record: GangRecord,
        size: int,
        placement: Mapping[str, int],
        other_placements: Sequence[Mapping[str, int]],
    ) -> None:
        if record.sets:
            self._place_sets(record, size, placement, other_placements)
            return
        now = self.clock.now
        cluster = self.cluster
        placed = cluster.bind_plan(record, placement)
        if placed:
            self.meter.hold(record, placed)
        if placed < size:
            if placement:
                cluster.placement_misses += size - placed
            # The plan's placement no longer fits (or the queue admits on quota only): the
            # scheduler places the rest pod by pod, wherever they fit.
            cluster.queue_pods(record, size - placed)
        self.meter.set_waiting(record, size - placed)
        self.feed.admitted(record, size, placement, (), now)
        if placed:
            self.clock.push(
                now + self.start_delay, PODS_RUNNING, record.index, record.attempt, placed
            )

    def _place_sets(
        self,
        record: GangRecord,
        size: int,
        placement: Mapping[str, int],
        other_placements: Sequence[Mapping[str, int]],
    ) -> None:
        """`place` for a gang of several pod sets: each set's pods where the plan put that set
        (a node-blind queue's plan places none: the scheduler places them all)."""
        now = self.clock.now
        cluster, meter = self.cluster, self.meter
        planned = [placement, *other_placements]
        planned += [{}] * (len(record.sets) - len(planned))
        for set_index, (part, where, wanted) in enumerate(
            zip(record.sets, planned, record.set_sizes(size), strict=True)
        ):
            placed = cluster.bind_plan(record, where, part)
            if placed:
                meter.hold(record, placed, part)
                self.clock.push(
                    now + self.start_delay,
                    PODS_RUNNING,
                    record.index,
                    record.attempt,
                    placed,
                    set_index,
                )
            if placed < wanted:
                if where:
                    cluster.placement_misses += wanted - placed
                cluster.queue_pods(record, wanted - placed, set_index)
            meter.set_waiting_in(record, part, wanted - placed)
        self.feed.admitted(record, size, placement, tuple(other_placements), now)

    def started(self, record: GangRecord) -> None:
        self.feed.started(record)

    def bound(self, record: GangRecord) -> None:
        """The planner counts the plan, wherever the scheduler put the pods that missed it."""

    def reservation_end(self, record: GangRecord) -> None:
        """Never due: a pinned gang's plan is where its pods are."""


class ScheduledPods:
    """Placement ``scheduler``: pods placed by the pod-level scheduler's scoring; the planner
    sees them where they land."""

    def __init__(
        self, cluster: ClusterModel, clock: EventQueue, feed: PlanFeed, reservation_ttl: float
    ) -> None:
        self.cluster = cluster
        self.clock = clock
        self.feed = feed
        self.reservation_ttl = reservation_ttl

    def place(
        self,
        record: GangRecord,
        size: int,
        placement: Mapping[str, int],
        other_placements: Sequence[Mapping[str, int]],
    ) -> None:
        """The Job controller creates the admitted pods now, interleaved with the pods of other
        gangs admitted in the same cycle; the planner holds the plan until the cache sees where
        the pods went."""
        now = self.clock.now
        node_index = self.cluster.node_index
        # A queue that admits on quota alone plans no nodes: nothing its pods do is off plan.
        if not record.sets:
            record.plan = {node_index[name]: pods for name, pods in placement.items()} or None
        for part, where in zip(record.sets, (placement, *other_placements), strict=False):
            part.plan = {node_index[name]: pods for name, pods in where.items()} or None
        record.reserving = True
        self.cluster.create_pods(math.floor(now), record, size)
        self.feed.admitted(record, size, placement, tuple(other_placements), now)
        if self.reservation_ttl < record.clog_timeout:
            self.clock.push(
                now + self.reservation_ttl, RESERVATION_END, record.index, record.attempt
            )

    def started(self, record: GangRecord) -> None:
        record.reserving = False  # its minimum is ready: the cache drops the plan
        self.bound(record)

    def bound(self, record: GangRecord) -> None:
        """The planner's record of an admitted gang is what the controller's cache reports
        (admission/cache.py, ``Cache.placement``): the nodes its pods are bound to, and while
        the gang is young (fewer than ``min`` pods running, admitted less than the reservation
        TTL ago) also its planned nodes, the larger count per node (a pod bound off plan is then
        counted twice: the cache's slack); for a gang of several pod sets, set by set."""
        if not record.sets:
            view = self._view(record.bound, record.plan, record.reserving)
            self.feed.pods_seen(record, view, (), record.state == RUNNING)
            return
        main, *others = (
            self._view(part.bound, part.plan, record.reserving) for part in record.sets
        )
        self.feed.pods_seen(record, main, tuple(others), record.state == RUNNING)

    def _view(
        self, bound: Mapping[int, int], plan: Mapping[int, int] | None, reserving: bool
    ) -> dict[str, int]:
        """What the cache reports of one pod set: where its pods are bound, with its plan while
        the gang is young."""
        nodes = self.cluster.nodes
        view = {nodes[n].name: pods for n, pods in bound.items()}
        if reserving and plan:
            for n, pods in plan.items():
                name = nodes[n].name
                if view.get(name, 0) < pods:
                    view[name] = pods
        return view

    def reservation_end(self, record: GangRecord) -> None:
        if record.state == ADMITTED and record.reserving:
            record.reserving = False
            self.bound(record)
