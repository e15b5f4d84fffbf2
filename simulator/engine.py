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

`EngineConfig.placement` says where admitted gangs' pods go (`simulator.placement`).
``pinned`` (the default) is the above: on the plan's nodes, as the controller pins them.
``scheduler`` models a cluster whose controller does not pin: the pod-level scheduler binds
each admitted pod to the feasible node kube-scheduler's default scoring ranks first
(NodeResourcesFit LeastAllocated, the most free share of cpu and memory, i.e. spreading, plus
BalancedAllocation), not the planner's first fit, and the planner sees what the controller's
cache sees; under ``none`` the scheduler scores nodes the same way.

Events live in a heap keyed (time, kind order, sequence), so ties are broken deterministically,
and time never goes back. Events at one instant are coalesced into one decision.

This module is the coordinator: it owns the loop over instants (events, then submissions,
then one decision, then the metrics) and packs the result. Its parts: the clock
(`simulator.events`), the gang lifecycle (`simulator.lifecycle`: every change of a gang's
state, by `policies.lifecycle`'s rules as in the controller), where admitted pods go
(`simulator.placement`), the cluster and pod-level scheduler (`simulator.podscheduler`), the
planner's feed (`simulator.planfeed`, with each queue's pending gangs in
`simulator.admitmodel`), the metrics (`simulator.sampling.Meter`), the records it keeps
(`simulator.records`) and, for tests, the invariants that tie them together
(`simulator.enginecheck`).
"""

from __future__ import annotations

import gc
import math
import time as wallclock
from typing import Protocol

from policies import Node, Planner, QueueTree
from policies.lifecycle import clog_timeout
from policies.planner import collector_paused
from policies.topology import NO_TOPOLOGY
from simulator.domainmodel import DomainModel
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
from simulator.lifecycle import GangLifecycle, GangWatch
from simulator.planfeed import PlanFeed
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
    Incident,
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
    "RunWatch",
    "Sample",
    "node_score",
    "simulate",
]


class RunWatch(GangWatch, Protocol):
    """What a caller sees of a run as it goes, besides the gangs (`GangWatch`): each admission
    cycle before it decides, and each instant once it is sampled (`muster bench estimate` asks
    the estimator there, on the engine's state)."""

    def deciding(self, engine: Engine, now: float) -> None:
        """An admission cycle is about to plan at ``now``."""

    def sampled(self, engine: Engine, now: float) -> None:
        """The instant ``now`` is over: its events, decisions and sample are done."""


class Engine:
    """One simulation run. Build it, call `run()` once."""

    def __init__(
        self,
        trace: Trace,
        config: EngineConfig,
        progress: ProgressFn | None = None,
        watch: RunWatch | None = None,
    ) -> None:
        _check_config(config)
        self.trace = trace
        self.config = config
        self.progress = progress
        self.watch = watch
        self.tree: QueueTree = trace.queue_tree()
        horizon = config.horizon if config.horizon is not None else trace.horizon
        self.horizon = horizon if horizon is not None else trace.default_horizon()
        # Placement "scheduler": the pod-level scheduler scores nodes, admitted gangs are not
        # pinned (`simulator.placement` keeps everything it adds off the pinned path).
        self.cluster = ClusterModel(
            trace.nodes(),
            (pod_set.requests for group in trace.jobs for pod_set in group.pod_sets),
            config.placement == "scheduler",
        )
        self.nodes: tuple[Node, ...] = self.cluster.nodes
        self.queue_names: tuple[str, ...] = self.tree.leaves
        self.gangs: list[GangRecord] = []
        self.by_id: dict[str, GangRecord] = {}
        self.arrivals = self._record_gangs(trace, config.seed)
        self.clock = EventQueue()
        self.events = 0
        self.feed = (
            PlanFeed(
                self.nodes,
                self.tree,
                self.queue_names,
                self.gangs,
                config,
                self.clock.wake,
                NO_TOPOLOGY if config.topology_blind else trace.topology,
                config.packing or trace.packing,
            )
            if config.admission == "muster"
            else None
        )
        self.meter = self._meter()
        self.life = GangLifecycle(
            self.gangs,
            self.cluster,
            self.meter,
            self.clock,
            self.feed,
            self.tree,
            self.queue_names,
            trace.pod_start_delay,
            watch,
        )
        self.domains = DomainModel(trace, self.cluster) if trace.topology.levels else None
        self.life.domains = self.domains

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
                sets=self.cluster.pod_sets(gang),
            )
            self.gangs.append(record)
            self.by_id[gang.id] = record

    def _meter(self) -> Meter:
        """The run's metrics, every gang counted as waiting for its submission."""
        cluster = self.cluster
        meter = Meter(
            len(self.queue_names),
            cluster.resources,
            cluster.capacity,
            cluster.util_r,
            cluster.util_scale,
            [self.tree[name].weight for name in self.queue_names],
            self.config.record,
        )
        for record in self.gangs:
            meter.state_count[record.queue][WAITING] += 1
        return meter

    @property
    def planner(self) -> Planner | None:
        """The planner (``muster`` admission), None without gang admission."""
        return self.feed.planner if self.feed is not None else None

    @property
    def now(self) -> float:
        return self.clock.now

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
        clock, life, feed, watch = self.clock, self.life, self.feed, self.watch
        heap = clock.heap
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
            clock.now = now
            # 1. Everything that happens at this instant, capacity-freeing events first.
            while heap and heap[0][0] == now:
                _, kind, _, gang_index, attempt, pods, pod_set = clock.pop()
                self.events += 1
                self._handle(kind, self.gangs[gang_index], attempt, pods, pod_set)
            while next_arrival < n_arrivals and arrivals[next_arrival].gang.submitted.time == now:
                life.submit(self.gangs[next_arrival])
                next_arrival += 1
                self.events += 1
            # 2. One decision for the instant, then the pods it leaves to the scheduler.
            if feed is not None and feed.due(now):
                if watch is not None:
                    watch.deciding(self, now)
                self._admit_cycle(feed, now)
            if self.cluster.pod_queue_dirty:
                life.schedule_pods()
            # 3. Metrics for the instant.
            self.meter.sample(now, life.last_progress)
            if self.domains is not None:
                self.domains.sample(now)
            if watch is not None:
                watch.sampled(self, now)
            if self.config.check:
                check_invariants(now, self.gangs, self.cluster, self.meter, self.planner)
            if self.progress is not None and self.events >= check_every:
                check_every = self.events + 2048
                self.progress(now, self.events, life.done)
        return self._result(started, first_submit, horizon_reached)

    def _handle(self, kind: int, record: GangRecord, attempt: int, pods: int, pod_set: int) -> None:
        """One event, handed to the lifecycle."""
        if kind == REPLAN:
            return  # only wakes the loop; the feed decides whether a cycle is due
        if attempt != record.attempt:
            return  # the attempt this event belonged to was evicted
        life = self.life
        if kind == FINISH:
            life.finish(record)
        elif kind == DEADLINE:
            life.deadline(record)
        elif kind == PODS_RUNNING:
            life.pods_running(record, pods, pod_set)
        elif kind == CLOG_CHECK:
            life.clog_check(record)
        elif kind == REQUEUE:
            life.requeue(record)
        elif kind == RESERVATION_END:
            life.reservation_end(record)

    def _admit_cycle(self, feed: PlanFeed, now: float) -> None:
        """One admission cycle, the controller's steps: 1. plan on what the feed told the
        planner; 2. preempt first (the preemptors need the capacity); 3. admit; 4. fail the
        gangs the planner rejects; 5. wake the loop for elastic timers."""
        decisions = feed.plan(now)
        if decisions is None:
            return
        life, by_id = self.life, self.by_id
        for gang_id in decisions.preempted:
            life.preempt(by_id[gang_id])
        for admission in decisions.admitted:
            life.admit(
                by_id[admission.gang_id],
                admission.size,
                admission.placement,
                admission.other_placements,
            )
        for gang_id, reason in decisions.rejected.items():
            life.reject(by_id[gang_id], reason)
        feed.wake_elastic(decisions, now)

    # ------------------------------------------------------------------ result

    def _result(self, started: float, first_submit: float, horizon_reached: bool) -> EngineResult:
        # A run ends when the last gang finishes; with stuck gangs, when the engine stopped (no
        # event left, or the horizon): means then cover the time the cluster sat clogged.
        meter, life = self.meter, self.life
        unfinished = [r for r in self.gangs if r.state not in (FINISHED, FAILED)]
        end = life.last_progress
        integrals, over = meter.integrals_at_progress, meter.over_at_progress
        if unfinished:
            end = self.horizon if horizon_reached else self.now
            meter.sample(end, life.last_progress, final=True)
            integrals, over = meter.integrals(), meter.fairness.over_fair_share()
        integral_util, integral_alloc, (fairness, dominant), use = integrals
        for record in unfinished:
            if record.state == PENDING and self.feed is not None:
                self.feed.remember_reason(record)
            record.reason = _stuck_reason(record, horizon_reached)
            life.set_state(record, STUCK)
        if self.progress is not None:
            self.progress(self.now, self.events, life.done)
        span = max(end - first_submit, 0.0)
        feed = self.feed
        return EngineResult(
            admission=self.config.admission,
            trace=self.trace.name,
            seed=self.config.seed,
            queues=self.queue_names,
            gangs=self.gangs,
            samples=meter.samples,
            incidents=life.incidents,
            utilization_resource=self.cluster.resources[self.cluster.util_r],
            first_submit=first_submit,
            end=end,
            utilization_mean=integral_util / span if span else 0.0,
            allocation_mean=integral_alloc / span if span else 0.0,
            fairness_error=fairness / span if span else 0.0,
            fairness_dominant=dominant / span if span else 0.0,
            over_fair_share=over,
            utilization_by_resource={
                name: (use[r] / span if span and r < len(use) else 0.0)
                for r, name in enumerate(self.cluster.resources)
                if self.cluster.capacity[r] > 0 and name != "pods"
            },
            curve=meter.curve,
            resources=tuple(self.cluster.resources),
            events=self.events,
            plan_calls=feed.plan_calls if feed is not None else 0,
            plan_seconds=feed.plan_seconds if feed is not None else 0.0,
            placement_misses=self.cluster.placement_misses,
            wall_seconds=wallclock.perf_counter() - started,
            horizon_reached=horizon_reached,
            placement=self.config.placement,
            topology=self.domains.figures(self.gangs, span) if self.domains else None,
        )


def _check_config(config: EngineConfig) -> None:
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
