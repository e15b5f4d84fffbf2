"""The in-process engine's feed of the one `policies.Planner` (``muster`` admission), as
`admission.planfeed.PlanFeed` is the controller's: it tells the planner what changed (gangs
entering and leaving each queue's lookahead window, through `PendingQueues`; gangs admitted,
running, released; where their pods are seen), remembers whether anything changed since the
last plan, and says when the next admission cycle is due.

What a decision does to a gang is the lifecycle's (`simulator.lifecycle`), and what the planner
is told of an admitted gang's pods the placement's (`simulator.placement`); this module only
hands it on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from policies import AdmittedGang, Decisions, Node, Planner, QueueTree
from policies.packing import DEFAULT_PACKING, Packing
from policies.topology import NO_TOPOLOGY, Topology
from simulator.admitmodel import PendingQueues
from simulator.records import EngineConfig, GangRecord

WakeFn = Callable[[float], None]
"""wake(at): the engine's loop must stop at ``at`` (an admission cycle or a timer is due)."""


class PlanFeed:
    """The planner, what it has been told, and whether it must be asked again."""

    def __init__(
        self,
        nodes: Sequence[Node],
        tree: QueueTree,
        queue_names: Sequence[str],
        gangs: Sequence[GangRecord],
        config: EngineConfig,
        wake: WakeFn,
        topology: Topology = NO_TOPOLOGY,
        packing: Packing = DEFAULT_PACKING,
    ) -> None:
        self.planner = Planner(nodes, tree, config.policy, topology, packing)
        self.pending = PendingQueues(
            self.planner, nodes, tree, queue_names, gangs, config.policy, config.lookahead
        )
        self.interval = config.admit_interval
        self.check = config.check
        self.wake = wake
        self.dirty = False  # something changed that could let a pending gang be admitted
        self.replan_at: float | None = None

    # ------------------------------------------------------------------ pending gangs

    def enqueue(self, record: GangRecord) -> None:
        """``record`` is pending (again): submitted, requeued after its backoff, preempted."""
        self.pending.enqueue(record)
        self.dirty = True

    def taken(self, record: GangRecord) -> None:
        """``record`` leaves the pending gangs: admitted or rejected."""
        self.pending.taken(record)

    # ------------------------------------------------------------------ admitted gangs

    def admitted(
        self,
        record: GangRecord,
        size: int,
        placement: Mapping[str, int],
        other_placements: tuple[Mapping[str, int], ...],
        now: float,
    ) -> None:
        """``record`` was admitted at ``size`` on the plan's ``placement`` (its main pod
        set's) and ``other_placements`` (its other sets')."""
        self.planner.add_admitted(
            AdmittedGang(
                gang=record.gang,
                size=size,
                placement=placement,
                admitted_at=now,
                other_placements=other_placements,
            )
        )

    def started(self, record: GangRecord) -> None:
        """``record``'s minimum runs: the size-ratio rule stops counting it as admitted but
        not running."""
        previous = self.planner.admitted[record.gang.id]
        self.planner.add_admitted(
            AdmittedGang(
                gang=previous.gang,
                size=previous.size,
                placement=previous.placement,
                admitted_at=previous.admitted_at,
                running=True,
                other_placements=previous.other_placements,
            )
        )
        self.dirty = True

    def pods_seen(
        self,
        record: GangRecord,
        placement: Mapping[str, int],
        other_placements: tuple[Mapping[str, int], ...],
        running: bool,
    ) -> None:
        """The controller's cache reports admitted ``record`` on ``placement`` (node name ->
        pods of its main pod set) and ``other_placements`` (its other sets'), ``running`` or
        not (placement "scheduler"); told again only when it differs."""
        previous = self.planner.admitted[record.gang.id]
        if (
            placement == previous.placement
            and other_placements == previous.other_placements
            and running == previous.running
        ):
            return
        if other_placements != previous.other_placements:
            # `Planner.add_admitted` takes a record with the same gang, size and main placement
            # for the same nodes, whatever its other pod sets' placements: release the old one
            # first, or the planner keeps counting them where they were.
            self.planner.remove_admitted(record.gang.id)
        self.planner.add_admitted(
            AdmittedGang(
                gang=previous.gang,
                size=previous.size,
                placement=placement,
                admitted_at=previous.admitted_at,
                running=running,
                other_placements=other_placements,
            )
        )
        self.dirty = True

    def released(self, record: GangRecord) -> None:
        """``record`` let go of its nodes: finished, failed, evicted or preempted."""
        if record.gang.id in self.planner.admitted:
            self.planner.remove_admitted(record.gang.id)
        self.dirty = True

    # ------------------------------------------------------------------ the cycle

    def due(self, now: float) -> bool:
        """Something changed since the last plan and an admission cycle may run at ``now``
        (every instant, or with an admit interval at its next slot: woken then)."""
        if not self.dirty:
            return False
        interval = self.interval
        if interval <= 0:
            return True
        slot = math.ceil(now / interval - 1e-9) * interval
        if slot <= now + 1e-9:
            return True
        if self.replan_at is None or self.replan_at > slot or self.replan_at <= now:
            self.replan_at = slot
            self.wake(slot)
        return False

    def plan(self, now: float) -> Decisions | None:
        """The planner's decisions at ``now`` (checked against `policies.plan` under
        `EngineConfig.check`), None if no queue has a gang in its window."""
        self.dirty = False
        pending = self.pending
        decisions = pending.plan(now)
        if decisions is None:
            return None
        if self.check:
            pending.check_decisions(decisions, now)
        # Reasons are read only where they matter (elastic timers here, pushed-out and stuck
        # gangs later): the planner builds them on the first read.
        pending.last_decisions = decisions
        return decisions

    def wake_elastic(self, decisions: Decisions, now: float) -> None:
        """Gangs in a window that may start smaller once their elastic timer fires: wake the
        loop then, and plan again, while the planner still says ElasticWaiting."""
        pending = self.pending
        gangs = pending.gangs
        for index in sorted(pending.elastic_members):
            record = gangs[index]
            wake = record.submitted + record.gang.elastic_after
            if wake <= now:
                pending.elastic_members.discard(index)  # elastic now: never ElasticWaiting again
                continue
            waiting = decisions.pending.get(record.gang.id)
            if waiting is not None and waiting.code == "ElasticWaiting":
                self.wake(wake)
                self.dirty = True  # re-plan when the timer fires

    def remember_reason(self, record: GangRecord) -> None:
        """``waiting_for`` = the last plan's reason for ``record``, if that plan saw it."""
        self.pending.remember_reason(record)

    @property
    def plan_calls(self) -> int:
        return self.pending.plan_calls

    @property
    def plan_seconds(self) -> float:
        return self.pending.plan_seconds
