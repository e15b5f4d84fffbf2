"""The in-process discrete-event engine: replays a trace against an in-memory cluster.

Two admission models share one cluster and one pod-level scheduler model:

- ``muster``: at each decision point the engine asks the real planner for decisions: a
  `policies.Planner` that it tells what changed (gangs entering and leaving the lookahead
  window, admitted, started, finished, evicted), which decides exactly as `policies.plan` on the
  snapshot of that moment; admitted gangs' pods are bound as the plan placed them (the scheduler
  finds the same nodes), start after the pod start delay, and the gang runs once ``min`` pods
  run.
  An admitted gang with fewer than ``min`` running pods after its queue's clog timeout is
  evicted and requeued with the queue's backoff; past the backoff limit it fails.
- ``none``: no gang admission. Every submitted gang's pods enter one scheduler queue in arrival
  order (pods of gangs created in the same second interleave, as creation timestamps have 1 s
  resolution) and each pod is bound to the first node it fits. Partially placed gangs hold their
  nodes; when nothing runs and nothing fits the remaining gangs are stuck.

`EngineConfig.placement` says where admitted gangs' pods go. ``pinned`` (the default) is the
above: on the plan's nodes, as the controller pins them. ``scheduler`` models a cluster whose
controller does not pin: an admitted gang's pods enter the scheduler queue (pods of gangs
admitted in the same cycle interleave as the Job controller creates them) and the pod-level
scheduler binds each to the feasible node kube-scheduler's default scoring ranks first
(NodeResourcesFit LeastAllocated, the most free share of cpu and memory, i.e. spreading,
plus BalancedAllocation), not the planner's first fit; under ``none`` it scores nodes the same
way. The planner then sees what the controller's cache sees: where the pods are bound, plus
the plan while the gang is young. Partial gangs hold their nodes until the clog timeout evicts
them.

Events live in a heap keyed (time, kind order, sequence), so ties are broken deterministically,
and time never goes back. Events at one instant are coalesced into one decision.

This module is the coordinator and owns the gang lifecycle (submit, admit, pods running,
finish, deadline, clog, evict, preempt; the clog, eviction and rejection rules, and the
failure messages, are `policies.lifecycle`'s, as in the controller). Its parts: the clock
(`simulator.events`), the cluster and pod-level scheduler (`simulator.podscheduler`), the
pending queues and planner (`simulator.admitmodel`), the metrics (`simulator.sampling.Meter`),
the records it keeps (`simulator.records`) and, for tests, the invariants that tie them
together (`simulator.enginecheck`).
"""

from __future__ import annotations

import dataclasses
import gc
import heapq
import math
import time as wallclock
from collections.abc import Mapping

from policies import AdmittedGang, Node, Planner, QueueTree
from policies.lifecycle import (
    SIMULATED_REJECTED_GRACE,
    EvictReason,
    Progress,
    check_clog,
    clog_timeout,
    evict,
    fails_rejected,
    rejected_message,
)
from policies.planner import collector_paused
from simulator.admitmodel import PendingQueues
from simulator.enginecheck import check_invariants
from simulator.events import (
    CLOG_CHECK,
    DEADLINE,
    FINISH,
    PODS_RUNNING,
    REPLAN,
    REQUEUE,
    RESERVATION_END,
    EventQueue,
)
from simulator.podscheduler import ClusterModel, node_score
from simulator.records import (
    ADMITTED,
    BACKING_OFF,
    FAILED,
    FINISHED,
    IN_PROCESS_ADMISSIONS,
    PENDING,
    PLACEMENTS,
    RUNNING,
    STUCK,
    WAITING,
    Admission,
    EngineConfig,
    EngineResult,
    GangRecord,
    GangState,
    Incident,
    IncidentKind,
    Placement,
    ProgressFn,
    Sample,
)
from simulator.sampling import Meter
from simulator.trace import SubmittedGang, Trace, expand

# Names importers of the engine use (the records, the state vocabulary, the scheduler's score).
__all__ = [
    "ADMITTED",
    "BACKING_OFF",
    "FAILED",
    "FINISHED",
    "PENDING",
    "RUNNING",
    "STUCK",
    "WAITING",
    "Admission",
    "Engine",
    "EngineConfig",
    "EngineResult",
    "GangRecord",
    "Incident",
    "Placement",
    "ProgressFn",
    "Sample",
    "node_score",
    "simulate",
]


class Engine:
    """One simulation run. Build it, call `run()` once."""

    def __init__(
        self, trace: Trace, config: EngineConfig, progress: ProgressFn | None = None
    ) -> None:
        if config.admission not in IN_PROCESS_ADMISSIONS:
            raise ValueError(
                f"admission {config.admission!r} is not one of: "
                f"{', '.join(IN_PROCESS_ADMISSIONS)} (an outside controller runs on a cluster: "
                "--engine kwok --admission external)"
            )
        if config.placement not in PLACEMENTS:
            raise ValueError(
                f"placement {config.placement!r} is not one of: {', '.join(PLACEMENTS)} "
                "(pinned = pods on the planned nodes; scheduler = the pod-level scheduler "
                "places them by its own scoring)"
            )
        self.trace = trace
        self.config = config
        self.progress = progress
        self.muster = config.admission == "muster"
        # Placement "scheduler": the pod-level scheduler scores nodes, admitted gangs are not
        # pinned. Everything it adds stays off the pinned path.
        self.unpinned = config.placement == "scheduler"
        self.tree: QueueTree = trace.queue_tree()
        self.start_delay = trace.pod_start_delay
        horizon = config.horizon if config.horizon is not None else trace.horizon
        self.horizon = horizon if horizon is not None else trace.default_horizon()
        self.cluster = ClusterModel(
            trace.nodes(), (group.pod_requests for group in trace.jobs), self.unpinned
        )
        self.nodes: tuple[Node, ...] = self.cluster.nodes
        # Placement "scheduler": how long the controller's cache keeps a young gang's plan.
        self.reservation_ttl = 0.0
        if self.unpinned:
            from admission.cache import RESERVATION_TTL

            self.reservation_ttl = RESERVATION_TTL

        self.queue_names: tuple[str, ...] = self.tree.leaves
        self.gangs: list[GangRecord] = []
        self.by_id: dict[str, GangRecord] = {}
        self.arrivals = self._record_gangs(trace, config.seed)

        self.clock = EventQueue()
        self.now = 0.0
        self.dirty = False  # something changed that could let a pending gang be admitted
        self.replan_at: float | None = None
        self.events = 0
        self.done = 0
        self.last_progress = 0.0  # last instant something changed state
        self.queues = (
            PendingQueues(
                self.nodes,
                self.tree,
                self.queue_names,
                self.gangs,
                config.policy,
                config.lookahead,
            )
            if self.muster
            else None
        )
        cluster = self.cluster
        self.meter = Meter(
            len(self.queue_names),
            len(cluster.resources),
            cluster.capacity,
            cluster.util_r,
            cluster.util_scale,
            [self.tree[name].weight for name in self.queue_names],
            config.record,
        )
        for record in self.gangs:
            self.meter.state_count[record.queue][WAITING] += 1
        self.incidents: list[Incident] = []

    def _record_gangs(self, trace: Trace, seed: int) -> list[SubmittedGang]:
        """The trace's gangs in arrival order, and a record of each (``gangs``, ``by_id``)."""
        # A gang, a record and a few containers per arrival, all kept for the run: with the
        # cyclic collector on, each full collection on the way walked the growing heap again
        # (a third of building a million). Nothing here makes a cycle to collect.
        with collector_paused():
            arrivals = expand(trace, seed=seed)
            self._record(arrivals)
        return arrivals

    def _record(self, arrivals: list[SubmittedGang]) -> None:
        q_index = {name: i for i, name in enumerate(self.queue_names)}
        for index, arrival in enumerate(arrivals):
            gang = arrival.gang
            request, pod_class = self.cluster.classify(gang)
            record = GangRecord(
                index=index,
                gang=gang,
                queue=q_index[gang.queue],
                runtime=arrival.runtime,
                group=arrival.group,
                request=request,
                clog_timeout=clog_timeout(None, self.tree[gang.queue]),
                pod_class=pod_class,
            )
            self.gangs.append(record)
            self.by_id[gang.id] = record

    @property
    def planner(self) -> Planner | None:
        """The planner (``muster`` admission), None without gang admission."""
        return self.queues.planner if self.queues is not None else None

    # ------------------------------------------------------------------ main loop

    def run(self) -> EngineResult:
        # The trace, the gangs and their records live for the whole run: keep CPython's cyclic
        # collector from walking them again at every full collection (at a million gangs, most
        # of the collector's work). Objects made during the run are collected as before. A
        # caller that froze objects itself keeps its choice (unfreeze would undo it).
        if gc.get_freeze_count():
            return self._run()
        gc.freeze()
        try:
            return self._run()
        finally:
            gc.unfreeze()

    def _run(self) -> EngineResult:
        started = wallclock.perf_counter()
        arrivals = self.arrivals
        n_arrivals = len(arrivals)
        next_arrival = 0
        heap = self.clock.heap
        horizon_reached = False
        first_submit = arrivals[0].gang.submitted.time if arrivals else 0.0
        check_every = 2048
        while True:
            t_event = heap[0][0] if heap else math.inf
            t_arrival = (
                arrivals[next_arrival].gang.submitted.time
                if next_arrival < n_arrivals
                else math.inf
            )
            now = t_event if t_event < t_arrival else t_arrival
            if now == math.inf:
                break
            if now > self.horizon:
                horizon_reached = True
                break
            self.now = now
            # 1. Everything that happens at this instant, capacity-freeing events first.
            while heap and heap[0][0] == now:
                _, kind, _, gang_index, attempt, pods = heapq.heappop(heap)
                self.events += 1
                self._handle(kind, self.gangs[gang_index], attempt, pods)
            while next_arrival < n_arrivals and arrivals[next_arrival].gang.submitted.time == now:
                self._submit(self.gangs[next_arrival])
                next_arrival += 1
                self.events += 1
            # 2. One decision for the instant.
            if self.muster and self.dirty and self._cycle_due(now):
                self._admit_cycle(now)
            if self.cluster.pod_queue_dirty:
                self._schedule_pods(now)
            # 3. Metrics for the instant.
            self._sample(now)
            if self.config.check:
                self._check_invariants()
            if self.progress is not None and self.events >= check_every:
                check_every = self.events + 2048
                self.progress(now, self.events, self.done)
        return self._result(started, first_submit, horizon_reached)

    def _result(self, started: float, first_submit: float, horizon_reached: bool) -> EngineResult:
        # A run ends when the last gang finishes; with stuck gangs, when the engine stopped (no
        # event left, or the horizon): means then cover the time the cluster sat clogged.
        meter = self.meter
        unfinished = [r for r in self.gangs if r.state not in (FINISHED, FAILED)]
        end = self.last_progress
        integral_util, integral_alloc, integral_fair = meter.integrals_at_progress
        if unfinished:
            end = self.horizon if horizon_reached else self.now
            self._sample(end, final=True)
            integral_util, integral_alloc, integral_fair = (
                meter.integral_util,
                meter.integral_alloc,
                meter.integral_fair,
            )
        for record in unfinished:
            if record.state == PENDING and self.queues is not None:
                self.queues.remember_reason(record)
            record.reason = _stuck_reason(record, horizon_reached)
            self._set_state(record, STUCK)
        if self.progress is not None:
            self.progress(self.now, self.events, self.done)
        span = max(end - first_submit, 0.0)
        return EngineResult(
            admission=self.config.admission,
            trace=self.trace.name,
            seed=self.config.seed,
            queues=self.queue_names,
            gangs=self.gangs,
            samples=meter.samples,
            incidents=self.incidents,
            utilization_resource=self.cluster.resources[self.cluster.util_r],
            first_submit=first_submit,
            end=end,
            utilization_mean=integral_util / span if span else 0.0,
            allocation_mean=integral_alloc / span if span else 0.0,
            fairness_error=integral_fair / span if span else 0.0,
            events=self.events,
            plan_calls=self.queues.plan_calls if self.queues is not None else 0,
            plan_seconds=self.queues.plan_seconds if self.queues is not None else 0.0,
            placement_misses=self.cluster.placement_misses,
            wall_seconds=wallclock.perf_counter() - started,
            horizon_reached=horizon_reached,
            placement=self.config.placement,
        )

    def _push(self, at: float, kind: int, record: GangRecord, pods: int = 0) -> None:
        self.clock.push(at, kind, record.index, record.attempt, pods)

    def _wake(self, at: float) -> None:
        self.clock.wake(at)

    def _handle(self, kind: int, record: GangRecord, attempt: int, pods: int) -> None:
        if kind == REPLAN:
            return  # only wakes the loop; _cycle_due decides
        if attempt != record.attempt:
            return  # the attempt this event belonged to was evicted
        if kind == FINISH:
            self._finish(record)
        elif kind == DEADLINE:
            self._deadline(record)
        elif kind == PODS_RUNNING:
            self._pods_running(record, pods)
        elif kind == CLOG_CHECK:
            self._clog_check(record)
        elif kind == REQUEUE and record.state == BACKING_OFF:
            self._set_state(record, PENDING)
            self.meter.set_waiting(record, record.gang.size)
            self._enqueue_pending(record)
            self.dirty = True
        elif kind == RESERVATION_END and record.state == ADMITTED and record.reserving:
            record.reserving = False
            self._track_pods(record)

    # ------------------------------------------------------------------ gang lifecycle

    def _set_state(self, record: GangRecord, state: GangState) -> None:
        counts = self.meter.state_count[record.queue]
        counts[record.state] -= 1
        counts[state] += 1
        if state in (FINISHED, FAILED):
            self.done += 1
        record.state = state
        self.meter.dirty = True
        if state != STUCK:
            self.last_progress = self.now

    def _submit(self, record: GangRecord) -> None:
        self._set_state(record, PENDING)
        self.meter.set_waiting(record, record.gang.size)
        if self.muster:
            self._enqueue_pending(record)
            self.dirty = True
        else:
            self.cluster.create_pods(math.floor(record.submitted), record, record.gang.size)
            # Not suspended: the Job's deadline counts from its creation.
            if record.gang.runtime_limit is not None:
                self._push(self.now + record.gang.runtime_limit, DEADLINE, record)

    def _enqueue_pending(self, record: GangRecord) -> None:
        assert self.queues is not None
        self.queues.enqueue(record)

    def _release(self, record: GangRecord) -> None:
        self.meter.hold(record, -record.bound_pods)
        if record.state == RUNNING:
            self.meter.run(record, -1)
        self.cluster.release(record)
        record.running_pods = 0
        self.meter.set_waiting(record, 0)
        planner = self.planner
        if planner is not None:
            if record.gang.id in planner.admitted:
                planner.remove_admitted(record.gang.id)
            self.dirty = True

    def _pods_running(self, record: GangRecord, pods: int) -> None:
        record.running_pods += pods
        if record.state == ADMITTED and record.running_pods >= record.gang.min:
            self._set_state(record, RUNNING)
            record.started = record.started if record.started is not None else self.now
            self.meter.run(record, 1)
            # Pods still without a node are not needed now that the gang runs.
            self.meter.set_waiting(record, 0)
            self.cluster.drop_queued_pods(record)
            self._push(self.now + record.runtime, FINISH, record)
            planner = self.planner
            if planner is not None and self.unpinned:
                record.reserving = False  # its minimum is ready: the cache drops the plan
                self._track_pods(record)
            elif planner is not None:
                previous = planner.admitted[record.gang.id]
                planner.add_admitted(
                    AdmittedGang(
                        gang=previous.gang,
                        size=previous.size,
                        placement=previous.placement,
                        admitted_at=previous.admitted_at,
                        running=True,
                    )
                )
                self.dirty = True  # the size-ratio rule looks at admitted-but-not-running gangs

    def _finish(self, record: GangRecord) -> None:
        if record.state != RUNNING:
            return
        record.finished = self.now
        self._release(record)
        self._set_state(record, FINISHED)
        record.attempt += 1  # invalidates this attempt's queued pods and events

    def _deadline(self, record: GangRecord) -> None:
        """Kubernetes fails a Job still active ``activeDeadlineSeconds`` after it started (for a
        suspended Job: after it was resumed, i.e. admitted) and deletes its pods."""
        if record.state not in (PENDING, ADMITTED, RUNNING):
            return
        limit = record.gang.runtime_limit
        record.finished = self.now  # it ended (failed) here: the makespan counts it
        self._release(record)
        self._set_state(record, FAILED)
        record.attempt += 1  # invalidates this attempt's queued pods and events
        record.reason = (
            f"DeadlineExceeded: still active after its runtime limit "
            f"(activeDeadlineSeconds) of {limit:g}s; raise runtimeLimit above the runtime"
        )
        self._incident("fail", record)

    def _incident(self, kind: IncidentKind, record: GangRecord) -> None:
        self.incidents.append(
            Incident(self.now, kind, record.gang.id, self.queue_names[record.queue])
        )

    def _clog_check(self, record: GangRecord) -> None:
        """One clog timeout after the gang began to hold capacity (its admission; without gang
        admission, its first bound pod)."""
        if record.state != ADMITTED:
            return
        if not self.muster:
            # Without gang admission nobody notices; the gang keeps its nodes.
            record.clogs += 1
            self._incident("clog", record)
            return
        # The controller's rule (policies.lifecycle): in the engine a running gang never falls
        # below its minimum again, so the clock runs from the admission.
        check = check_clog(
            Progress(),
            admitted_at=record.admitted_at if record.admitted_at is not None else self.now,
            ready=record.running_pods,
            minimum=record.gang.min,
            timeout=record.clog_timeout,
            now=self.now,
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
            self._set_state(record, FAILED)
            record.reason = eviction.message(reason, why)
            self._incident("fail", record)
            return
        self._incident("evict", record)
        self._set_state(record, BACKING_OFF)
        self._push(self.now + eviction.delay, REQUEUE, record)

    # ------------------------------------------------------------------ muster admission

    def _cycle_due(self, now: float) -> bool:
        interval = self.config.admit_interval
        if interval <= 0:
            return True
        slot = math.ceil(now / interval - 1e-9) * interval
        if slot <= now + 1e-9:
            return True
        if self.replan_at is None or self.replan_at > slot or self.replan_at <= now:
            self.replan_at = slot
            self._wake(slot)
        return False

    def _admit_cycle(self, now: float) -> None:
        self.dirty = False
        queues = self.queues
        assert queues is not None
        decisions = queues.plan(now)
        if decisions is None:
            return
        if self.config.check:
            queues.check_decisions(decisions, now)
        # Reasons are read only where they matter (elastic timers here, pushed-out and stuck
        # gangs later): the planner builds them on the first read.
        queues.last_decisions = decisions
        for gang_id in decisions.preempted:  # first: the preemptors need their capacity
            self._preempt(self.by_id[gang_id])
        for admission in decisions.admitted:
            record = self.by_id[admission.gang_id]
            queues.taken(record)
            self._admit(record, admission.size, admission.placement)
        for gang_id, reason in decisions.rejected.items():
            record = self.by_id[gang_id]
            # Rejected from this cycle on: the lifecycle's rule, with the simulator's grace.
            if record.state == PENDING and fails_rejected(now, now, SIMULATED_REJECTED_GRACE):
                queues.taken(record)
                self.meter.set_waiting(record, 0)
                self._set_state(record, FAILED)
                record.reason = rejected_message(reason)
                self._incident("fail", record)
        for index in sorted(queues.elastic_members):
            record = self.gangs[index]
            wake = record.submitted + record.gang.elastic_after
            if wake <= now:
                queues.elastic_members.discard(index)  # elastic now: never ElasticWaiting again
                continue
            waiting = decisions.pending.get(record.gang.id)
            if waiting is not None and waiting.code == "ElasticWaiting":
                self._wake(wake)
                self.dirty = True  # re-plan when the timer fires

    def _preempt(self, record: GangRecord) -> None:
        """Preempted: pods deleted, capacity released, back to pending at once at its
        original submission stamp; no backoff, and it does not count toward the limit."""
        self._release(record)
        record.attempt += 1
        record.preemptions += 1
        record.gang = dataclasses.replace(record.gang, preemptions=record.preemptions)
        self._incident("preempt", record)
        self._set_state(record, PENDING)
        self.meter.set_waiting(record, record.gang.size)
        self._enqueue_pending(record)
        self.dirty = True

    def _admit(self, record: GangRecord, size: int, placement: Mapping[str, int]) -> None:
        now = self.now
        record.admitted_size = size
        record.admitted_at = now
        if record.first_admitted is None:
            record.first_admitted = now
        record.waiting_for = None
        self._set_state(record, ADMITTED)
        self.meter.set_waiting(record, size)
        if self.unpinned:
            self._admit_unpinned(record, size, placement)
            return
        cluster = self.cluster
        placed = cluster.bind_plan(record, placement)
        if placed:
            self.meter.hold(record, placed)
            self.last_progress = now
        if placed < size:
            if placement:
                cluster.placement_misses += size - placed
            # The plan's placement no longer fits (or the queue admits on quota only): the
            # scheduler places the rest pod by pod, wherever they fit.
            cluster.queue_pods(record, size - placed)
        self.meter.set_waiting(record, size - placed)
        planner = self.planner
        assert planner is not None
        planner.add_admitted(
            AdmittedGang(gang=record.gang, size=size, placement=placement, admitted_at=now)
        )
        if placed:
            self._push(now + self.start_delay, PODS_RUNNING, record, placed)
        self._push(now + record.clog_timeout, CLOG_CHECK, record)
        if record.gang.runtime_limit is not None:
            # Resuming a suspended Job starts its activeDeadlineSeconds clock.
            self._push(now + record.gang.runtime_limit, DEADLINE, record)

    def _admit_unpinned(self, record: GangRecord, size: int, placement: Mapping[str, int]) -> None:
        """Placement "scheduler": the Job controller creates the admitted pods now and the
        pod-level scheduler places them by its own scoring, interleaved with the pods of other
        gangs admitted in the same cycle; the planner holds the plan until the cache sees
        where the pods went."""
        now = self.now
        node_index = self.cluster.node_index
        # A queue that admits on quota alone plans no nodes: nothing its pods do is off plan.
        record.plan = {node_index[name]: pods for name, pods in placement.items()} or None
        record.reserving = True
        self.cluster.create_pods(math.floor(now), record, size)
        planner = self.planner
        assert planner is not None
        planner.add_admitted(
            AdmittedGang(gang=record.gang, size=size, placement=placement, admitted_at=now)
        )
        self._push(now + record.clog_timeout, CLOG_CHECK, record)
        if self.reservation_ttl < record.clog_timeout:
            self._push(now + self.reservation_ttl, RESERVATION_END, record)
        if record.gang.runtime_limit is not None:
            self._push(now + record.gang.runtime_limit, DEADLINE, record)

    def _track_pods(self, record: GangRecord) -> None:
        """Placement "scheduler": the planner's record of an admitted gang is what the
        controller's cache reports (admission/cache.py, ``Cache.placement``): the nodes its
        pods are bound to, and while the gang is young (fewer than ``min`` pods running,
        admitted less than the reservation TTL ago) also its planned nodes, the larger count
        per node (a pod bound off plan is then counted twice: the cache's slack)."""
        planner = self.planner
        assert planner is not None
        nodes = self.nodes
        view = {nodes[n].name: pods for n, pods in record.bound.items()}
        if record.reserving and record.plan:
            for n, pods in record.plan.items():
                name = nodes[n].name
                if view.get(name, 0) < pods:
                    view[name] = pods
        previous = planner.admitted[record.gang.id]
        running = record.state == RUNNING
        if view == previous.placement and running == previous.running:
            return
        planner.add_admitted(
            AdmittedGang(
                gang=previous.gang,
                size=previous.size,
                placement=view,
                admitted_at=previous.admitted_at,
                running=running,
            )
        )
        self.dirty = True

    # ------------------------------------------------------------------ pod-level scheduler

    def _schedule_pods(self, now: float) -> None:
        """One pass of the pod-level scheduler (`ClusterModel.schedule`); bound pods start
        running after the pod start delay."""
        gangs = self.gangs
        bound_now = self.cluster.schedule(gangs, self._pod_bound)
        for index, pods in bound_now.items():
            self._push(now + self.start_delay, PODS_RUNNING, gangs[index], pods)
            if self.unpinned and self.muster:
                self._track_pods(gangs[index])

    def _pod_bound(self, record: GangRecord, node: int) -> None:
        """The scheduler bound one pod of ``record`` to ``node``."""
        now = self.now
        self.meter.hold(record, 1)
        self.last_progress = now
        self.meter.set_waiting(record, record.waiting_pods - 1)
        if record.state == PENDING:
            # Without gang admission, the first bound pod is where the gang starts to hold
            # capacity; the clog clock starts here.
            self._set_state(record, ADMITTED)
            self._push(now + record.clog_timeout, CLOG_CHECK, record)
        if (
            not self.muster
            and record.first_admitted is None
            and (record.bound_pods >= record.gang.min)
        ):
            record.first_admitted = record.admitted_at = now
            record.admitted_size = record.bound_pods

    # ------------------------------------------------------------------ checks (tests)

    def _check_invariants(self) -> None:
        check_invariants(self)

    # ------------------------------------------------------------------ metrics

    def _sample(self, now: float, *, final: bool = False) -> None:
        self.meter.sample(now, self.last_progress, final=final)


def _stuck_reason(record: GangRecord, horizon_reached: bool) -> str:
    when = "at the horizon" if horizon_reached else "with no event left"
    if record.state == ADMITTED:
        return (
            f"Clogged: {record.bound_pods} of min {record.gang.min} pods bound, "
            f"{record.running_pods} running, {when}"
        )
    if record.state == WAITING:
        return "NotSubmitted: submission time is past the horizon"
    if record.waiting_for is not None:
        return f"{record.waiting_for.code}: {record.waiting_for.message} ({when})"
    return f"NoFit: no pod of the gang fits a node ({when})"


def simulate(
    trace: Trace, config: EngineConfig, progress: ProgressFn | None = None
) -> EngineResult:
    """Run one engine over a trace."""
    return Engine(trace, config, progress).run()
