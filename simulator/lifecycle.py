"""The in-process engine's gang lifecycle: every change of a gang's state in one run (submit,
admit, pods bound and running, finish, deadline, clog, evict, preempt, reject, requeue), and
what each change does to the cluster, the metrics, the planner's feed and the clock.

The rules are the controller's: whether a gang is clogged, what an eviction does (backoff,
failure, and the message) and when a rejected gang fails are `policies.lifecycle`'s. Where an
admitted gang's pods go is its placement's (`simulator.placement`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Protocol

from policies import QueueTree, Reason
from policies.lifecycle import (
    SIMULATED_REJECTED_GRACE,
    EvictReason,
    Progress,
    check_clog,
    evict,
    fails_rejected,
    rejected_message,
)
from simulator.domainmodel import DomainModel
from simulator.events import (
    CLOG_CHECK,
    DEADLINE,
    FINISH,
    PODS_RUNNING,
    REQUEUE,
    EventQueue,
)
from simulator.placement import PinnedPods, PodPlacement, ScheduledPods
from simulator.planfeed import PlanFeed
from simulator.podscheduler import ClusterModel
from simulator.records import (
    ADMITTED,
    BACKING_OFF,
    FAILED,
    FINISHED,
    PENDING,
    RUNNING,
    STUCK,
    GangRecord,
    GangState,
    Incident,
    IncidentKind,
)
from simulator.sampling import Meter


class GangWatch(Protocol):
    """What a caller sees of the gangs as a run goes (`muster bench estimate` learns runtimes
    from it)."""

    def submitted(self, record: GangRecord) -> None:
        """``record`` was just submitted."""

    def ended(self, record: GangRecord) -> None:
        """``record`` just ended after running: finished, or failed by its deadline."""


class GangLifecycle:
    """The state of every gang of one run, and the rules that change it. Without a plan feed
    (``none`` admission) nobody admits: a gang starts to hold nodes with its first bound pod
    and nobody evicts it."""

    def __init__(
        self,
        gangs: Sequence[GangRecord],
        cluster: ClusterModel,
        meter: Meter,
        clock: EventQueue,
        feed: PlanFeed | None,
        tree: QueueTree,
        queue_names: Sequence[str],
        start_delay: float,
        watch: GangWatch | None = None,
    ) -> None:
        self.gangs = gangs
        self.cluster = cluster
        self.meter = meter
        self.clock = clock
        self.feed = feed
        self.tree = tree
        self.queue_names = queue_names
        self.start_delay = start_delay
        self.watch = watch
        self.pods = _placement(cluster, meter, clock, feed, start_delay)
        self.done = 0
        self.last_progress = 0.0  # last instant something changed state
        self.incidents: list[Incident] = []
        # A trace with topology levels: gangs spread over domains run slower (the engine's).
        self.domains: DomainModel | None = None

    def _push(
        self, at: float, kind: int, record: GangRecord, pods: int = 0, set_index: int = 0
    ) -> None:
        self.clock.push(at, kind, record.index, record.attempt, pods, set_index)

    def set_state(self, record: GangRecord, state: GangState) -> None:
        counts = self.meter.state_count[record.queue]
        counts[record.state] -= 1
        counts[state] += 1
        if state in (FINISHED, FAILED):
            self.done += 1
            record.ended = self.clock.now
        record.state = state
        self.meter.dirty = True
        if state != STUCK:
            self.last_progress = self.clock.now

    def _incident(self, kind: IncidentKind, record: GangRecord) -> None:
        self.incidents.append(
            Incident(self.clock.now, kind, record.gang.id, self.queue_names[record.queue])
        )

    # ------------------------------------------------------------------ waiting

    def submit(self, record: GangRecord) -> None:
        self.set_state(record, PENDING)
        self.meter.set_waiting(record, record.gang.size)
        if self.feed is not None:
            self.feed.enqueue(record)
        else:
            self.cluster.create_pods(math.floor(record.submitted), record, record.gang.size)
            # Not suspended: the Job's deadline counts from its creation.
            if record.gang.runtime_limit is not None:
                self._push(self.clock.now + record.gang.runtime_limit, DEADLINE, record)
        if self.watch is not None:
            self.watch.submitted(record)

    def requeue(self, record: GangRecord) -> None:
        """Its backoff is over: pending again."""
        if record.state != BACKING_OFF:
            return
        assert self.feed is not None
        self.set_state(record, PENDING)
        self.meter.set_waiting(record, record.gang.size)
        self.feed.enqueue(record)

    def reject(self, record: GangRecord, reason: Reason) -> None:
        """The planner can never admit it: failed from this cycle on, by the lifecycle's rule
        with the simulator's grace."""
        now = self.clock.now
        if record.state == PENDING and fails_rejected(now, now, SIMULATED_REJECTED_GRACE):
            assert self.feed is not None
            self.feed.taken(record)
            self.meter.set_waiting(record, 0)
            self.set_state(record, FAILED)
            record.reason = rejected_message(reason)
            self._incident("fail", record)

    # ------------------------------------------------------------------ admitted

    def admit(
        self,
        record: GangRecord,
        size: int,
        placement: Mapping[str, int],
        other_placements: Sequence[Mapping[str, int]] = (),
    ) -> None:
        """The planner admitted ``record`` at ``size`` pods (every pod set's) on ``placement``
        (node name -> pods of its main pod set) and ``other_placements`` (its other sets')."""
        assert self.feed is not None and self.pods is not None
        self.feed.taken(record)
        now = self.clock.now
        record.admitted_size = size
        record.admitted_at = now
        if record.first_admitted is None:
            record.first_admitted = now
        record.waiting_for = None
        self.set_state(record, ADMITTED)
        self.meter.set_waiting(record, size)
        self.pods.place(record, size, placement, other_placements)
        self._push(now + record.clog_timeout, CLOG_CHECK, record)
        if record.gang.runtime_limit is not None:
            # Resuming a suspended Job starts its activeDeadlineSeconds clock.
            self._push(now + record.gang.runtime_limit, DEADLINE, record)

    def reservation_end(self, record: GangRecord) -> None:
        if self.pods is not None:
            self.pods.reservation_end(record)

    def schedule_pods(self) -> None:
        """One pass of the pod-level scheduler (`ClusterModel.schedule`); bound pods start
        running after the pod start delay."""
        gangs = self.gangs
        now = self.clock.now
        bound_now = self.cluster.schedule(gangs, self._pod_bound)
        placement = self.pods
        told: set[int] = set()
        for (index, set_index), pods in bound_now.items():
            self._push(now + self.start_delay, PODS_RUNNING, gangs[index], pods, set_index)
            if placement is not None and index not in told:
                told.add(index)
                placement.bound(gangs[index])

    def _pod_bound(self, record: GangRecord, node: int, set_index: int) -> None:
        """The scheduler bound one pod of ``record`` (of its pod set ``set_index``) to
        ``node``."""
        now = self.clock.now
        self.last_progress = now
        if record.sets:
            part = record.sets[set_index]
            self.meter.hold(record, 1, part)
            self.meter.set_waiting_in(record, part, part.waiting_pods - 1)
        else:
            self.meter.hold(record, 1)
            self.meter.set_waiting(record, record.waiting_pods - 1)
        if record.state == PENDING:
            # Without gang admission, the first bound pod is where the gang starts to hold
            # capacity; the clog clock starts here.
            self.set_state(record, ADMITTED)
            self._push(now + record.clog_timeout, CLOG_CHECK, record)
        if (
            self.feed is None
            and record.first_admitted is None
            and (record.bound_toward_min >= record.gang.min)
        ):
            record.first_admitted = record.admitted_at = now
            record.admitted_size = record.bound_pods

    # ------------------------------------------------------------------ running and after

    def pods_running(self, record: GangRecord, pods: int, set_index: int = 0) -> None:
        """``pods`` more pods of ``record`` (of its pod set ``set_index``) run; with its
        minimum running (`GangRecord.ready_pods`), the gang runs."""
        record.running_pods += pods
        if record.sets:
            record.sets[set_index].running_pods += pods
        if record.state == ADMITTED and record.ready_pods >= record.gang.min:
            now = self.clock.now
            self.set_state(record, RUNNING)
            record.started = record.started if record.started is not None else now
            self.meter.run(record, 1)
            # Pods still without a node are not needed now that the gang runs.
            self.meter.set_waiting(record, 0)
            self.cluster.drop_queued_pods(record)
            domains = self.domains
            runtime = record.runtime if domains is None else domains.runtime(record)
            self._push(now + runtime, FINISH, record)
            if self.pods is not None:
                self.pods.started(record)

    def finish(self, record: GangRecord) -> None:
        if record.state != RUNNING:
            return
        record.finished = self.clock.now
        self._release(record)
        self.set_state(record, FINISHED)
        record.attempt += 1  # invalidates this attempt's queued pods and events
        if self.watch is not None:
            self.watch.ended(record)

    def deadline(self, record: GangRecord) -> None:
        """Kubernetes fails a Job still active ``activeDeadlineSeconds`` after it started (for a
        suspended Job: after it was resumed, i.e. admitted) and deletes its pods."""
        if record.state not in (PENDING, ADMITTED, RUNNING):
            return
        limit = record.gang.runtime_limit
        record.finished = self.clock.now  # it ended (failed) here: the makespan counts it
        self._release(record)
        self.set_state(record, FAILED)
        record.attempt += 1  # invalidates this attempt's queued pods and events
        record.reason = (
            f"DeadlineExceeded: still active after its runtime limit "
            f"(activeDeadlineSeconds) of {limit:g}s; raise runtimeLimit above the runtime"
        )
        self._incident("fail", record)
        if self.watch is not None:
            self.watch.ended(record)

    def clog_check(self, record: GangRecord) -> None:
        """One clog timeout after the gang began to hold capacity (its admission; without gang
        admission, its first bound pod)."""
        if record.state != ADMITTED:
            return
        if self.feed is None:
            # Without gang admission nobody notices; the gang keeps its nodes.
            record.clogs += 1
            self._incident("clog", record)
            return
        # The controller's rule (policies.lifecycle): in the engine a running gang never falls
        # below its minimum again, so the clock runs from the admission.
        now = self.clock.now
        check = check_clog(
            Progress(),
            admitted_at=record.admitted_at if record.admitted_at is not None else now,
            ready=record.ready_pods,
            minimum=record.gang.min,
            timeout=record.clog_timeout,
            now=now,
        )
        if check.evict is None:
            return  # not clogged yet (the event is pushed at admitted_at + clog_timeout)
        record.clogs += 1
        self._incident("clog", record)
        self._evict(record, check.evict, check.why)

    def _evict(self, record: GangRecord, reason: EvictReason, why: str) -> None:
        """Pods deleted, capacity released, requeued after the backoff, or failed past its
        limit, by `policies.lifecycle.evict` (without the controller's jitter) and with the
        controller's message."""
        self._release(record)
        eviction = evict(record.evictions, self.tree[record.gang.queue].backoff)
        record.evictions = eviction.evictions
        record.attempt += 1
        if eviction.failed:
            self.set_state(record, FAILED)
            record.reason = eviction.message(reason, why)
            self._incident("fail", record)
            return
        self._incident("evict", record)
        self.set_state(record, BACKING_OFF)
        self._push(self.clock.now + eviction.delay, REQUEUE, record)

    def preempt(self, record: GangRecord) -> None:
        """Preempted: pods deleted, capacity released, back to pending at once at its
        original submission stamp; no backoff, and it does not count toward the limit."""
        assert self.feed is not None
        self._release(record)
        record.attempt += 1
        record.preemptions += 1
        record.gang = dataclasses.replace(record.gang, preemptions=record.preemptions)
        self._incident("preempt", record)
        self.set_state(record, PENDING)
        self.meter.set_waiting(record, record.gang.size)
        self.feed.enqueue(record)

    def _release(self, record: GangRecord) -> None:
        """Every pod of ``record`` leaves its node and the scheduler queue."""
        self.meter.hold_none(record)
        if record.state == RUNNING:
            self.meter.run(record, -1)
        self.cluster.release(record)
        record.running_pods = 0
        for part in record.sets:
            part.running_pods = 0
        self.meter.set_waiting(record, 0)
        if self.feed is not None:
            self.feed.released(record)


def _placement(
    cluster: ClusterModel, meter: Meter, clock: EventQueue, feed: PlanFeed | None, delay: float
) -> PodPlacement | None:
    """Where admitted pods go; None without gang admission (nobody admits)."""
    if feed is None:
        return None
    if not cluster.unpinned:
        return PinnedPods(cluster, meter, clock, feed, delay)
    # The controller's cache keeps a young gang's plan this long.
    from admission.reservations import RESERVATION_TTL

    return ScheduledPods(cluster, clock, feed, RESERVATION_TTL)
