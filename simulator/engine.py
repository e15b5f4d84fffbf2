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
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import math
import time as wallclock
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from policies import (
    AdmittedGang,
    Decisions,
    Gang,
    Node,
    Planner,
    QueueTree,
    Reason,
    Snapshot,
    plan,
)
from policies.lifecycle import clog_timeout, evict
from policies.model import placeable
from simulator.sampling import figures
from simulator.trace import SubmittedGang, Trace, expand

Admission = Literal["muster", "none"]
Placement = Literal["pinned", "scheduler"]
PLACEMENTS: tuple[Placement, ...] = ("pinned", "scheduler")

# Gang states.
WAITING = 0  # not submitted yet
PENDING = 1  # submitted, waiting for admission (muster) or for its first pod to be bound (none)
BACKOFF = 2  # evicted, waiting out the requeue backoff (muster)
HOLDING = 3  # admitted (muster) / some pods bound (none), fewer than min running
RUNNING = 4  # min pods running: the gang is doing its work
FINISHED = 5
FAILED = 6  # rejected by the planner or evicted past the backoff limit
STUCK = 7  # unfinished when the simulation ended
STATE_NAMES = ("waiting", "pending", "backoff", "holding", "running", "finished", "failed", "stuck")

# Event kinds; the value is also the order among events of one instant: capacity is freed before
# anything else happens at that instant.
_FINISH = 0
_DEADLINE = 1  # the gang's runtime limit (activeDeadlineSeconds) passed: Kubernetes ends it
_PODS_RUNNING = 2
_CLOG_CHECK = 3
_REQUEUE = 4
_REPLAN = 5
_RESERVATION_END = 6  # placement "scheduler": the controller's cache drops a young gang's plan

MAX_NODE_SCORE = 100  # kube-scheduler's framework.MaxNodeScore


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How to run one engine over a trace."""

    admission: Admission = "muster"
    seed: int = 0
    policy: str = "drf"
    lookahead: int = 1000
    """Pending gangs per queue handed to the planner each cycle (queue order); 0 = all."""
    admit_interval: float = 0.0
    """Seconds between admission cycles; 0 = plan at every decision point."""
    horizon: float | None = None
    """Stop at this simulated time; None = the trace's horizon or its default."""
    record: bool = True
    """Keep per-instant time series (for queues.csv and plots)."""
    check: bool = False
    """Verify invariants after every instant (tests): no node overcommitted, counts agree."""
    placement: Placement = "pinned"
    """Where admitted gangs' pods go. ``pinned``: on the nodes the plan chose (the controller
    pins them, issue 18). ``scheduler``: unpinned, as on a cluster whose controller does not
    pin: the pod-level scheduler places every pod on the feasible node it scores best
    (kube-scheduler's default scores, LeastAllocated and BalancedAllocation: spreading), pods
    of gangs admitted in the same cycle interleave, and the planner sees where the pods are,
    not the plan. Under ``none`` admission there is nothing to pin: ``scheduler`` only makes
    its pod-level scheduler score nodes instead of taking the first fit."""


@dataclass(slots=True)
class GangRecord:
    """The simulator's mutable view of one gang across its whole life."""

    index: int
    gang: Gang
    queue: int
    runtime: float
    group: str
    request: tuple[tuple[int, int], ...]  # (resource index, amount) of one pod, non-zero only
    clog_timeout: float
    state: int = WAITING
    attempt: int = 0
    first_admitted: float | None = None
    admitted_at: float | None = None
    started: float | None = None
    finished: float | None = None
    evictions: int = 0
    preemptions: int = 0
    clogs: int = 0
    admitted_size: int = 0
    bound: dict[int, int] = field(default_factory=dict)  # node index -> pods bound
    plan: dict[int, int] | None = None  # placement "scheduler": node index -> pods planned
    reserving: bool = False  # placement "scheduler": the planner still counts the plan
    bound_pods: int = 0
    running_pods: int = 0
    waiting_pods: int = 0  # pods that still need a node (counted in the queue's demand)
    in_pending_list: bool = False
    pod_class: int = 0
    queued_pods: int = 0  # live entries of this gang in the scheduler queue
    reason: str = ""  # why it failed or is stuck
    waiting_for: Reason | None = None  # the planner's last reason for not admitting it

    @property
    def submitted(self) -> float:
        return self.gang.submitted.time


@dataclass(slots=True)
class PodClass:
    """Pods the scheduler treats alike: same request, same eligible nodes."""

    request: tuple[tuple[int, int], ...]
    nodes: list[int]  # eligible node indices, ascending (the first-fit order)
    cursor: int = 0  # nodes[:cursor] had no room for one pod of this class when last looked at
    queued: int = 0  # live entries of this class in the scheduler queue
    scores: dict[tuple[int, ...], int] = field(default_factory=dict)
    """Placement "scheduler": node score by (node shape, free amounts of the scored resources)."""


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster at one instant (after that instant's events and decisions)."""

    time: float
    utilization: float  # share of the utilization resource held by running gangs
    allocation: float  # share held by any bound pod (running or not)
    fairness_error: float
    pending: tuple[int, ...]  # per queue
    holding: tuple[int, ...]
    running: tuple[int, ...]
    usage: tuple[float, ...]  # per queue, utilization resource held (display units, e.g. cores)
    share: tuple[float, ...]  # per queue, dominant share held by running gangs
    fair_share: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Incident:
    """A clog or an eviction, for the timeline plot."""

    time: float
    kind: Literal["clog", "evict", "fail", "preempt"]
    gang: str
    queue: str


@dataclass(slots=True)
class EngineResult:
    """Everything one engine run produced."""

    admission: Admission
    trace: str
    seed: int
    queues: tuple[str, ...]
    gangs: list[GangRecord]
    samples: list[Sample]
    incidents: list[Incident]
    utilization_resource: str
    first_submit: float
    end: float
    utilization_mean: float
    allocation_mean: float
    fairness_error: float
    events: int
    plan_calls: int
    plan_seconds: float
    placement_misses: int
    """Admitted pods not bound where the plan put them."""
    wall_seconds: float
    horizon_reached: bool
    placement: Placement | None = None
    """The in-process engine's placement model; None: not modelled (the kwok engine)."""


ProgressFn = Callable[[float, int, int], None]
"""progress(simulated time, events so far, gangs done so far)."""


class Engine:
    """One simulation run. Build it, call `run()` once."""

    def __init__(
        self, trace: Trace, config: EngineConfig, progress: ProgressFn | None = None
    ) -> None:
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
        self.nodes: tuple[Node, ...] = tuple(trace.nodes())
        self.node_index = {node.name: i for i, node in enumerate(self.nodes)}
        self.start_delay = trace.pod_start_delay
        horizon = config.horizon if config.horizon is not None else trace.horizon
        self.horizon = horizon if horizon is not None else trace.default_horizon()

        arrivals = expand(trace, seed=config.seed)
        # Resources the cluster model tracks: everything nodes offer or pods ask for. "pods" is
        # one per pod when nodes declare it, as in Kubernetes.
        names: list[str] = []
        for node in self.nodes:
            names.extend(r for r in node.allocatable if r not in names)
        for group in trace.jobs:
            names.extend(r for r in group.pod_requests if r not in names)
        self.resources = tuple(names)
        r_index = {name: i for i, name in enumerate(names)}
        self.capacity = [0] * len(names)
        self.free: list[list[int]] = []
        for node in self.nodes:
            vector = [node.allocatable[r] - node.used[r] for r in names]
            self.free.append(vector)
            for i, amount in enumerate(vector):
                self.capacity[i] += max(amount, 0)
        self.util_r = r_index["cpu"] if "cpu" in r_index and self.capacity[r_index["cpu"]] else 0
        self.util_scale = 1000.0 if names[self.util_r] == "cpu" else 1.0
        counts_pods = "pods" in r_index and any(n.allocatable["pods"] for n in self.nodes)
        # Placement "scheduler": what the pod-level scheduler scores (kube-scheduler's default
        # NodeResourcesFit: cpu and memory, weight 1 each; other resources if a cluster has
        # neither) and each node's allocatable of them (its shape); how long the controller's
        # cache keeps a young gang's plan.
        self.scored: tuple[int, ...] = ()
        self.shape: list[int] = []  # node index -> its shape: index of its allocatable in shapes
        self.shapes: list[tuple[int, ...]] = []  # allocatable of the scored resources
        self.reservation_ttl = 0.0
        if self.unpinned:
            from admission.cache import RESERVATION_TTL

            scored = [r_index[r] for r in ("cpu", "memory") if r in r_index]
            self.scored = tuple(scored) or tuple(
                i for i, name in enumerate(names) if name != "pods"
            )
            shape_of: dict[tuple[int, ...], int] = {}
            for node in self.nodes:
                shape = tuple(node.allocatable[names[r]] for r in self.scored)
                self.shape.append(shape_of.setdefault(shape, len(shape_of)))
            self.shapes = list(shape_of)
            self.reservation_ttl = RESERVATION_TTL

        self.queue_names: tuple[str, ...] = self.tree.leaves
        q_index = {name: i for i, name in enumerate(self.queue_names)}
        self.weights = [self.tree[name].weight for name in self.queue_names]
        request_cache: dict[tuple[int, ...], tuple[tuple[int, int], ...]] = {}
        self.pod_classes: list[PodClass] = []
        class_index: dict[tuple[object, ...], int] = {}
        eligible_cache: dict[tuple[object, ...], list[int]] = {}
        self.gangs: list[GangRecord] = []
        self.by_id: dict[str, GangRecord] = {}
        for index, arrival in enumerate(arrivals):
            gang = arrival.gang
            vector = [gang.pod_requests[r] for r in names]
            if counts_pods:
                vector[r_index["pods"]] = max(vector[r_index["pods"]], 1)
            key = tuple(vector)
            request = request_cache.setdefault(key, tuple((i, a) for i, a in enumerate(key) if a))
            placement_key = (
                tuple(sorted(gang.node_selector.items())),
                gang.tolerations,
                gang.node_terms,
            )
            class_key = (request, placement_key)
            pod_class = class_index.get(class_key)
            if pod_class is None:
                nodes = eligible_cache.get(placement_key)
                if nodes is None:
                    nodes = eligible_cache[placement_key] = self._eligible(gang)
                pod_class = class_index[class_key] = len(self.pod_classes)
                self.pod_classes.append(PodClass(request=request, nodes=nodes))
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
        self.arrivals: list[SubmittedGang] = arrivals
        self.freed_floor = 0  # lowest node index whose capacity grew since the last pass

        # Event heap and cycle state.
        self.heap: list[tuple[float, int, int, int, int, int]] = []
        self.seq = 0
        self.now = 0.0
        self.dirty = False  # something changed that could let a pending gang be admitted
        self.replan_at: float | None = None
        self.events = 0
        self.plan_calls = 0
        self.plan_seconds = 0.0
        self.placement_misses = 0  # admitted pods not bound where the plan put them
        self.done = 0

        # Muster: per-queue pending lists in queue order (lazy deletion: ``stale`` counts the
        # entries of gangs no longer pending), and the planner, which holds the admitted gangs
        # and each queue's lookahead window: the first ``lookahead`` pending gangs in queue order.
        self.pending_lists: list[list[tuple[tuple[int, float, int, str], int]]] = [
            [] for _ in self.queue_names
        ]
        self.pending_count = [0] * len(self.queue_names)
        self.stale = [0] * len(self.queue_names)
        self.planner = Planner(self.nodes, self.tree, config.policy) if self.muster else None
        # Window members (gang indices), the entry of the last one taken (every pending entry
        # up to it is a member), and whether an entry was inserted before it since the last
        # cycle (then the window is taken again from the start of the list).
        self.window: list[set[int]] = [set() for _ in self.queue_names]
        self.window_last: list[tuple[tuple[int, float, int, str], int] | None] = [
            None for _ in self.queue_names
        ]
        self.window_moved = [False] * len(self.queue_names)
        self.elastic_members: set[int] = set()  # window members that may be ElasticWaiting
        self.last_decisions: Decisions | None = None
        # Scheduler queue of unbound pods: (order key, gang index, attempt), one entry per pod.
        self.pod_queue: list[tuple[int, int, int]] = []
        # Gangs whose pods were created since the last scheduler pass: (creation second, gang
        # index, pods); submitted (none) or admitted unpinned (placement "scheduler").
        self.new_gangs: list[tuple[int, int, int]] = []
        self.pod_queue_dirty = False

        # Aggregates kept incrementally for metrics.
        nq = len(self.queue_names)
        nr = len(names)
        self.state_count = [[0] * 8 for _ in range(nq)]
        for record in self.gangs:
            self.state_count[record.queue][WAITING] += 1
        self.held = [[0] * nr for _ in range(nq)]  # bound pods' requests
        self.running_use = [[0] * nr for _ in range(nq)]  # requests of running gangs' pods
        self.waiting = [[0] * nr for _ in range(nq)]  # requests of pods still needing a node
        self.metrics_dirty = True
        self.samples: list[Sample] = []
        self.incidents: list[Incident] = []
        self._integral_util = 0.0
        self._integral_alloc = 0.0
        self._integral_fair = 0.0
        self._last_sample_time: float | None = None
        self._last_values = (0.0, 0.0, 0.0)
        self._integrals_at_progress = (0.0, 0.0, 0.0)
        self.last_progress = 0.0  # last instant something changed state

    # ------------------------------------------------------------------ main loop

    def run(self) -> EngineResult:
        started = wallclock.perf_counter()
        arrivals = self.arrivals
        n_arrivals = len(arrivals)
        next_arrival = 0
        heap = self.heap
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
            if self.pod_queue_dirty:
                self._schedule_pods(now)
            # 3. Metrics for the instant.
            self._sample(now)
            if self.config.check:
                self._check_invariants()
            if self.progress is not None and self.events >= check_every:
                check_every = self.events + 2048
                self.progress(now, self.events, self.done)
        # A run ends when the last gang finishes; with stuck gangs, when the engine stopped (no
        # event left, or the horizon): means then cover the time the cluster sat clogged.
        unfinished = [r for r in self.gangs if r.state not in (FINISHED, FAILED)]
        end = self.last_progress
        integral_util, integral_alloc, integral_fair = self._integrals_at_progress
        if unfinished:
            end = self.horizon if horizon_reached else self.now
            self._sample(end, final=True)
            integral_util, integral_alloc, integral_fair = (
                self._integral_util,
                self._integral_alloc,
                self._integral_fair,
            )
        for record in unfinished:
            if record.state == PENDING:
                self._remember_reason(record)
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
            samples=self.samples,
            incidents=self.incidents,
            utilization_resource=self.resources[self.util_r],
            first_submit=first_submit,
            end=end,
            utilization_mean=integral_util / span if span else 0.0,
            allocation_mean=integral_alloc / span if span else 0.0,
            fairness_error=integral_fair / span if span else 0.0,
            events=self.events,
            plan_calls=self.plan_calls,
            plan_seconds=self.plan_seconds,
            placement_misses=self.placement_misses,
            wall_seconds=wallclock.perf_counter() - started,
            horizon_reached=horizon_reached,
            placement=self.config.placement,
        )

    def _push(self, at: float, kind: int, record: GangRecord, pods: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (at, kind, self.seq, record.index, record.attempt, pods))

    def _wake(self, at: float) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (at, _REPLAN, self.seq, 0, 0, 0))

    def _handle(self, kind: int, record: GangRecord, attempt: int, pods: int) -> None:
        if kind == _REPLAN:
            return  # only wakes the loop; _cycle_due decides
        if attempt != record.attempt:
            return  # the attempt this event belonged to was evicted
        if kind == _FINISH:
            self._finish(record)
        elif kind == _DEADLINE:
            self._deadline(record)
        elif kind == _PODS_RUNNING:
            self._pods_running(record, pods)
        elif kind == _CLOG_CHECK:
            self._clog_check(record)
        elif kind == _REQUEUE and record.state == BACKOFF:
            self._set_state(record, PENDING)
            self._set_waiting(record, record.gang.size)
            self._enqueue_pending(record)
            self.dirty = True
        elif kind == _RESERVATION_END and record.state == HOLDING and record.reserving:
            record.reserving = False
            self._track_pods(record)

    # ------------------------------------------------------------------ gang lifecycle

    def _set_state(self, record: GangRecord, state: int) -> None:
        counts = self.state_count[record.queue]
        counts[record.state] -= 1
        counts[state] += 1
        if state in (FINISHED, FAILED):
            self.done += 1
        record.state = state
        self.metrics_dirty = True
        if state != STUCK:
            self.last_progress = self.now

    def _set_waiting(self, record: GangRecord, pods: int) -> None:
        delta = pods - record.waiting_pods
        if delta:
            vector = self.waiting[record.queue]
            for r, amount in record.request:
                vector[r] += amount * delta
            record.waiting_pods = pods

    def _submit(self, record: GangRecord) -> None:
        self._set_state(record, PENDING)
        self._set_waiting(record, record.gang.size)
        if self.muster:
            self._enqueue_pending(record)
            self.dirty = True
        else:
            self.new_gangs.append((math.floor(record.submitted), record.index, record.gang.size))
            self.pod_queue_dirty = True
            # Not suspended: the Job's deadline counts from its creation.
            if record.gang.runtime_limit is not None:
                self._push(self.now + record.gang.runtime_limit, _DEADLINE, record)

    def _enqueue_pending(self, record: GangRecord) -> None:
        q = record.queue
        self.pending_count[q] += 1
        entry = (record.gang.order_key, record.index)
        if not record.in_pending_list:
            record.in_pending_list = True
            entries = self.pending_lists[q]
            if not entries or entries[-1] < entry:
                entries.append(entry)
            else:
                bisect.insort(entries, entry)
        else:
            self.stale[q] -= 1  # its old entry is live again
        last = self.window_last[q]
        if last is not None and entry <= last:
            # It goes before (or is) a gang the window took: the window is taken again.
            self.window_moved[q] = True

    def _bind(self, record: GangRecord, node: int, pods: int) -> None:
        vector = self.free[node]
        held = self.held[record.queue]
        for r, amount in record.request:
            vector[r] -= amount * pods
            held[r] += amount * pods
        record.bound[node] = record.bound.get(node, 0) + pods
        record.bound_pods += pods
        self.metrics_dirty = True
        self.last_progress = self.now

    def _release(self, record: GangRecord) -> None:
        held = self.held[record.queue]
        self._drop_queued_pods(record)
        for node, pods in record.bound.items():
            if node < self.freed_floor:
                self.freed_floor = node
            vector = self.free[node]
            for r, amount in record.request:
                vector[r] += amount * pods
                held[r] -= amount * pods
        if record.state == RUNNING:
            running = self.running_use[record.queue]
            for r, amount in record.request:
                running[r] -= amount * record.bound_pods
        record.bound = {}
        record.bound_pods = 0
        record.running_pods = 0
        self._set_waiting(record, 0)
        self.metrics_dirty = True
        if self.planner is not None:
            if record.gang.id in self.planner.admitted:
                self.planner.remove_admitted(record.gang.id)
            self.dirty = True
        if self.pod_queue:
            self.pod_queue_dirty = True

    def _drop_queued_pods(self, record: GangRecord) -> None:
        # Its entries stay in the queue list and are skipped (stale attempt or state) there.
        if record.queued_pods:
            self.pod_classes[record.pod_class].queued -= record.queued_pods
            record.queued_pods = 0

    def _queue_pods(self, record: GangRecord, entries: list[tuple[int, int, int]]) -> None:
        self.pod_queue.extend(entries)
        record.queued_pods += len(entries)
        self.pod_classes[record.pod_class].queued += len(entries)
        self.pod_queue_dirty = True

    def _pods_running(self, record: GangRecord, pods: int) -> None:
        record.running_pods += pods
        if record.state == HOLDING and record.running_pods >= record.gang.min:
            self._set_state(record, RUNNING)
            record.started = record.started if record.started is not None else self.now
            running = self.running_use[record.queue]
            for r, amount in record.request:
                running[r] += amount * record.bound_pods
            # Pods still without a node are not needed now that the gang runs.
            self._set_waiting(record, 0)
            self._drop_queued_pods(record)
            self._push(self.now + record.runtime, _FINISH, record)
            if self.planner is not None and self.unpinned:
                record.reserving = False  # its minimum is ready: the cache drops the plan
                self._track_pods(record)
            elif self.planner is not None:
                previous = self.planner.admitted[record.gang.id]
                self.planner.add_admitted(
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
        if record.state not in (PENDING, HOLDING, RUNNING):
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
        self.incidents.append(
            Incident(self.now, "fail", record.gang.id, self.queue_names[record.queue])
        )

    def _clog_check(self, record: GangRecord) -> None:
        if record.state != HOLDING:
            return
        record.clogs += 1
        self.incidents.append(
            Incident(self.now, "clog", record.gang.id, self.queue_names[record.queue])
        )
        if not self.muster:
            return  # without gang admission nobody notices; the gang keeps its nodes
        # Evict: pods deleted, capacity released, requeue after backoff or fail.
        self._release(record)
        backoff = self.tree[record.gang.queue].backoff
        eviction = evict(record.evictions, backoff)  # the controller's rule, without jitter
        record.evictions = eviction.evictions
        record.attempt += 1
        if eviction.failed:
            self._set_state(record, FAILED)
            record.reason = (
                f"BackoffLimitExceeded: evicted {record.evictions} times, limit {backoff.limit}"
            )
            self.incidents.append(
                Incident(self.now, "fail", record.gang.id, self.queue_names[record.queue])
            )
            return
        self.incidents.append(
            Incident(self.now, "evict", record.gang.id, self.queue_names[record.queue])
        )
        self._set_state(record, BACKOFF)
        self._push(self.now + eviction.delay, _REQUEUE, record)

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

    def _refresh_windows(self) -> int:
        """Bring each queue's window up to date in the planner: the first ``lookahead``
        pending gangs of the queue, in queue order (what a snapshot of this instant would list).
        Returns how many gangs the windows hold."""
        window = self.config.lookahead
        total = 0
        for q, entries in enumerate(self.pending_lists):
            if self.stale[q] > 64 and self.stale[q] > len(entries) // 2:
                self._compact(q)
            members = self.window[q]
            if self.window_moved[q]:
                self._retake_window(q)
            elif not window or len(members) < window:
                gangs = self.gangs
                last = self.window_last[q]
                at = bisect.bisect_right(entries, last) if last is not None else 0
                for k in range(at, len(entries)):
                    entry = entries[k]
                    record = gangs[entry[1]]
                    if record.state != PENDING:
                        continue
                    self._enter_window(record)
                    self.window_last[q] = entry
                    if window and len(members) >= window:
                        break
            total += len(members)
        return total

    def _retake_window(self, q: int) -> None:
        """Take queue ``q``'s window again from the start (a gang went before its members)."""
        self.window_moved[q] = False
        window = self.config.lookahead
        gangs = self.gangs
        chosen: list[int] = []
        last = None
        for entry in self.pending_lists[q]:
            if gangs[entry[1]].state == PENDING:
                chosen.append(entry[1])
                last = entry
                if window and len(chosen) >= window:
                    break
        members = self.window[q]
        keep = set(chosen)
        for index in sorted(members - keep):
            # Pushed out while still pending: its reason stays the one of the last plan that
            # saw it, as if every plan's reasons had been copied to every gang.
            record = gangs[index]
            self._leave_window(record)
            self._remember_reason(record)
        for index in chosen:
            if index not in members:
                self._enter_window(gangs[index])
        self.window_last[q] = last

    def _compact(self, q: int) -> None:
        gangs = self.gangs
        live = []
        for entry in self.pending_lists[q]:
            record = gangs[entry[1]]
            if record.state == PENDING:
                live.append(entry)
            else:
                record.in_pending_list = False
        self.pending_lists[q] = live
        self.stale[q] = 0

    def _enter_window(self, record: GangRecord) -> None:
        assert self.planner is not None
        self.planner.add_pending(record.gang)
        self.window[record.queue].add(record.index)
        gang = record.gang
        if gang.min < gang.size and gang.elastic_after > 0:
            self.elastic_members.add(record.index)

    def _leave_window(self, record: GangRecord) -> None:
        """``record`` leaves the window: admitted, rejected or pushed out."""
        assert self.planner is not None
        self.planner.remove_pending(record.gang.id)
        self.window[record.queue].discard(record.index)
        self.elastic_members.discard(record.index)

    def _remember_reason(self, record: GangRecord) -> None:
        """``waiting_for`` = the last plan's reason for ``record``, if that plan saw it."""
        if self.last_decisions is not None:
            reason = self.last_decisions.pending.get(record.gang.id)
            if reason is not None:
                record.waiting_for = reason

    def _admit_cycle(self, now: float) -> None:
        self.dirty = False
        if not self._refresh_windows():
            return
        planner = self.planner
        assert planner is not None
        began = wallclock.perf_counter()
        decisions = planner.plan(now)
        self.plan_seconds += wallclock.perf_counter() - began
        self.plan_calls += 1
        if self.config.check:
            self._check_decisions(decisions, now)
        # Reasons are read only where they matter (elastic timers here, pushed-out and stuck
        # gangs later): the planner builds them on the first read.
        self.last_decisions = decisions
        for gang_id in decisions.preempted:  # first: the preemptors need their capacity
            self._preempt(self.by_id[gang_id])
        for admission in decisions.admitted:
            record = self.by_id[admission.gang_id]
            self._leave_window(record)
            self.stale[record.queue] += 1
            self._admit(record, admission.size, admission.placement)
        for gang_id, reason in decisions.rejected.items():
            record = self.by_id[gang_id]
            if record.state == PENDING:
                self._leave_window(record)
                self.stale[record.queue] += 1
                self.pending_count[record.queue] -= 1
                self._set_waiting(record, 0)
                self._set_state(record, FAILED)
                record.reason = f"{reason.code}: {reason.message}"
                self.incidents.append(
                    Incident(now, "fail", gang_id, self.queue_names[record.queue])
                )
        for index in sorted(self.elastic_members):
            record = self.gangs[index]
            wake = record.submitted + record.gang.elastic_after
            if wake <= now:
                self.elastic_members.discard(index)  # elastic now: never ElasticWaiting again
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
        self.incidents.append(
            Incident(self.now, "preempt", record.gang.id, self.queue_names[record.queue])
        )
        self._set_state(record, PENDING)
        self._set_waiting(record, record.gang.size)
        self._enqueue_pending(record)
        self.dirty = True

    def _admit(self, record: GangRecord, size: int, placement: Mapping[str, int]) -> None:
        now = self.now
        self.pending_count[record.queue] -= 1
        record.admitted_size = size
        record.admitted_at = now
        if record.first_admitted is None:
            record.first_admitted = now
        record.waiting_for = None
        self._set_state(record, HOLDING)
        self._set_waiting(record, size)
        if self.unpinned:
            self._admit_unpinned(record, size, placement)
            return
        placed = 0
        node_index = self.node_index
        for node_name, pods in placement.items():
            node = node_index[node_name]
            if self._fits(record, node, pods):
                self._bind(record, node, pods)
                placed += pods
        if placed < size:
            if placement:
                self.placement_misses += size - placed
            # The plan's placement no longer fits (or the queue admits on quota only): the
            # scheduler places the rest pod by pod, wherever they fit.
            self._queue_pods(record, [(0, record.index, record.attempt)] * (size - placed))
        self._set_waiting(record, size - placed)
        assert self.planner is not None
        self.planner.add_admitted(
            AdmittedGang(gang=record.gang, size=size, placement=placement, admitted_at=now)
        )
        if placed:
            self._push(now + self.start_delay, _PODS_RUNNING, record, placed)
        self._push(now + record.clog_timeout, _CLOG_CHECK, record)
        if record.gang.runtime_limit is not None:
            # Resuming a suspended Job starts its activeDeadlineSeconds clock.
            self._push(now + record.gang.runtime_limit, _DEADLINE, record)

    def _admit_unpinned(self, record: GangRecord, size: int, placement: Mapping[str, int]) -> None:
        """Placement "scheduler": the Job controller creates the admitted pods now and the
        pod-level scheduler places them by its own scoring, interleaved with the pods of other
        gangs admitted in the same cycle; the planner holds the plan until the cache sees
        where the pods went."""
        now = self.now
        node_index = self.node_index
        # A queue that admits on quota alone plans no nodes: nothing its pods do is off plan.
        record.plan = {node_index[name]: pods for name, pods in placement.items()} or None
        record.reserving = True
        self.new_gangs.append((math.floor(now), record.index, size))
        self.pod_queue_dirty = True
        assert self.planner is not None
        self.planner.add_admitted(
            AdmittedGang(gang=record.gang, size=size, placement=placement, admitted_at=now)
        )
        self._push(now + record.clog_timeout, _CLOG_CHECK, record)
        if self.reservation_ttl < record.clog_timeout:
            self._push(now + self.reservation_ttl, _RESERVATION_END, record)
        if record.gang.runtime_limit is not None:
            self._push(now + record.gang.runtime_limit, _DEADLINE, record)

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

    def _fits(self, record: GangRecord, node: int, pods: int) -> bool:
        if record.gang.one_pod_per_node and (pods > 1 or node in record.bound):
            return False
        vector = self.free[node]
        return all(vector[r] >= amount * pods for r, amount in record.request)

    def _eligible(self, gang: Gang) -> list[int]:
        return [i for i, node in enumerate(self.nodes) if placeable(node.labels, node.taints, gang)]

    def _schedule_pods(self, now: float) -> None:
        """One scheduler pass: bind queued pods, in queue order, to the first node that fits
        (placement "scheduler": to the node that fits and scores best).

        Work is bounded by two facts: within a pass free capacity only shrinks, so once a pod
        of a class fits no node, no later pod of that class will (the class is blocked); and
        between passes capacity grows only on released nodes, so each class keeps a cursor
        past the leading nodes that had no room for it, rewound to the lowest released node.
        """
        self.pod_queue_dirty = False
        if self.new_gangs:
            for _, index, pods in self.new_gangs:
                record = self.gangs[index]
                record.queued_pods += pods
                self.pod_classes[record.pod_class].queued += pods
            self.pod_queue.extend(self._create_pods(self.new_gangs))
            self.new_gangs = []
            self.pod_queue.sort(key=_creation_second)
        classes = self.pod_classes
        floor = self.freed_floor
        self.freed_floor = len(self.nodes)
        live = 0
        for pod_class in classes:
            if pod_class.cursor and floor < len(self.nodes):
                pod_class.cursor = min(pod_class.cursor, bisect.bisect_left(pod_class.nodes, floor))
            if pod_class.queued:
                live += 1
        gangs = self.gangs
        queue = self.pod_queue
        remaining: list[tuple[int, int, int]] = []
        blocked_classes: set[int] = set()
        blocked_gangs: set[int] = set()
        bound_now: dict[int, int] = {}
        place = self._best_fit if self.unpinned else self._first_fit
        for position, entry in enumerate(queue):
            if not live:
                remaining.extend(queue[position:])
                break
            _, index, attempt = entry
            record = gangs[index]
            if attempt != record.attempt or record.state not in (PENDING, HOLDING):
                continue  # its gang runs already, finished, or was evicted: pod not needed
            class_id = record.pod_class
            if class_id in blocked_classes or index in blocked_gangs:
                remaining.append(entry)
                continue
            pod_class = classes[class_id]
            node = place(record, pod_class)
            if node is None:
                remaining.append(entry)
                if pod_class.cursor >= len(pod_class.nodes):
                    blocked_classes.add(class_id)  # no node has room for one such pod
                    live -= 1
                else:
                    blocked_gangs.add(index)  # only nodes this gang already uses have room
                continue
            self._bind(record, node, 1)
            plan = record.plan
            if plan is not None and record.bound[node] > plan.get(node, 0):
                self.placement_misses += 1  # placement "scheduler": it landed off plan
            self._set_waiting(record, record.waiting_pods - 1)
            record.queued_pods -= 1
            pod_class.queued -= 1
            if not pod_class.queued:
                live -= 1
            bound_now[index] = bound_now.get(index, 0) + 1
            if record.state == PENDING:
                # Without gang admission, the first bound pod is where the gang starts to hold
                # capacity; the clog clock starts here.
                self._set_state(record, HOLDING)
                self._push(now + record.clog_timeout, _CLOG_CHECK, record)
            if (
                not self.muster
                and record.first_admitted is None
                and (record.bound_pods >= record.gang.min)
            ):
                record.first_admitted = record.admitted_at = now
                record.admitted_size = record.bound_pods
        self.pod_queue = remaining
        for index, pods in bound_now.items():
            self._push(now + self.start_delay, _PODS_RUNNING, gangs[index], pods)
            if self.unpinned and self.muster:
                self._track_pods(gangs[index])

    def _create_pods(self, created: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
        """Scheduler queue entries for new gangs' pods, in the order they would be created;
        ``created`` = (creation second, gang index, pods) in the order the gangs were created
        (submitted, or unsuspended when admitted).

        The Job controller creates a Job's pods in slow-start batches (1, 2, 4, ...) and syncs
        Jobs in parallel, so pods of gangs created in the same second interleave: round-robin,
        one batch per gang per round, gangs in arrival order (same-instant ties already seeded).
        """
        entries: list[tuple[int, int, int]] = []
        by_second: dict[int, list[int]] = {}
        left_of: dict[int, int] = {}
        for second, index, pods in created:
            by_second.setdefault(second, []).append(index)
            left_of[index] = pods
        for second, group in by_second.items():
            left = {index: left_of[index] for index in group}
            batch = 1
            while left:
                for index in group:
                    pods = left.get(index, 0)
                    if not pods:
                        continue
                    take = min(batch, pods)
                    entries.extend([(second, index, self.gangs[index].attempt)] * take)
                    if take == pods:
                        del left[index]
                    else:
                        left[index] = pods - take
                batch *= 2
        return entries

    def _first_fit(self, record: GangRecord, pod_class: PodClass) -> int | None:
        """The first eligible node with room for one pod of the gang; advances the class cursor
        past leading nodes without room (not past nodes skipped for one-pod-per-node)."""
        free = self.free
        request = pod_class.request
        nodes = pod_class.nodes
        one_per_node = record.gang.one_pod_per_node
        bound = record.bound
        position = pod_class.cursor
        leading = True
        while position < len(nodes):
            node = nodes[position]
            vector = free[node]
            for r, amount in request:
                if vector[r] < amount:
                    break
            else:
                if not (one_per_node and node in bound):
                    return node
                leading = False
                position += 1
                continue
            position += 1
            if leading:
                pod_class.cursor = position
        return None

    def _best_fit(self, record: GangRecord, pod_class: PodClass) -> int | None:
        """The eligible node with room for one pod of the gang that kube-scheduler's default
        profile scores highest (`node_score`); ties go to the first node (kube-scheduler picks
        one of them at random). Advances the class cursor as `_first_fit` does."""
        free = self.free
        request = pod_class.request
        nodes = pod_class.nodes
        one_per_node = record.gang.one_pod_per_node
        bound = record.bound
        scored = self.scored
        wanted = dict(request)
        asks = tuple(wanted.get(r, 0) for r in scored)
        shape = self.shape
        shapes = self.shapes
        scores = pod_class.scores  # the same few (shape, free) pairs recur on many nodes
        position = pod_class.cursor
        leading = True
        best: int | None = None
        best_score = -1
        while position < len(nodes):
            node = nodes[position]
            vector = free[node]
            for r, amount in request:
                if vector[r] < amount:
                    break
            else:
                leading = False
                if not (one_per_node and node in bound):
                    key = (shape[node], *map(vector.__getitem__, scored))
                    score = scores.get(key)
                    if score is None:
                        score = scores[key] = node_score(key[1:], asks, shapes[key[0]])
                    if score > best_score:
                        best, best_score = node, score
                position += 1
                continue
            position += 1
            if leading:
                pod_class.cursor = position
        return best

    def _check_decisions(self, decisions: Decisions, now: float) -> None:
        """The planner saw what a snapshot of this instant shows (each queue's first
        ``lookahead`` pending gangs, the admitted gangs) and decided as `policies.plan` does."""
        window = self.config.lookahead
        pending: list[Gang] = []
        for q, entries in enumerate(self.pending_lists):
            taken = [i for _, i in entries if self.gangs[i].state == PENDING]
            taken = taken[:window] if window else taken
            if set(taken) != self.window[q]:
                raise AssertionError(f"queue {self.queue_names[q]}: window out of sync at {now}")
            pending.extend(self.gangs[i].gang for i in taken)
        assert self.planner is not None
        admitted = list(self.planner.admitted.values())
        expected = plan(Snapshot(self.nodes, self.tree, admitted, pending, now), self.config.policy)
        if (
            [(a.gang_id, a.size, dict(a.placement)) for a in decisions.admitted]
            != [(a.gang_id, a.size, dict(a.placement)) for a in expected.admitted]
            or dict(decisions.pending.items()) != dict(expected.pending.items())
            or decisions.rejected != expected.rejected
        ):
            raise AssertionError(f"planner decisions differ from policies.plan at {now}")

    def _check_invariants(self) -> None:
        for node, vector in enumerate(self.free):
            if any(amount < 0 for amount in vector):
                raise AssertionError(f"node {self.nodes[node].name} overcommitted at {self.now}")
        for record in self.gangs:
            if record.bound_pods != sum(record.bound.values()):
                raise AssertionError(f"{record.gang.id}: bound pods out of sync")
            if record.gang.one_pod_per_node and any(p > 1 for p in record.bound.values()):
                raise AssertionError(f"{record.gang.id}: two pods on one node")
            if record.state in (PENDING, BACKOFF, FINISHED, FAILED) and record.bound_pods:
                raise AssertionError(f"{record.gang.id}: holds pods in state {record.state}")
        live: dict[int, int] = {}
        for _, index, attempt in self.pod_queue:
            record = self.gangs[index]
            if attempt == record.attempt and record.state in (PENDING, HOLDING):
                live[index] = live.get(index, 0) + 1
        for record in self.gangs:
            if record.queued_pods != live.get(record.index, 0):
                raise AssertionError(f"{record.gang.id}: queued pods out of sync")
        for class_id, pod_class in enumerate(self.pod_classes):
            expected = sum(r.queued_pods for r in self.gangs if r.pod_class == class_id)
            if pod_class.queued != expected:
                raise AssertionError(f"pod class {class_id}: queued count out of sync")
        total = sum(sum(counts) for counts in self.state_count)
        if total != len(self.gangs):
            raise AssertionError("state counts do not add up")
        if self.unpinned and self.planner is not None:
            self._check_planner_sees_pods()

    def _check_planner_sees_pods(self) -> None:
        """Placement "scheduler": the planner counts every bound pod where it is bound, and
        once a gang no longer holds its plan, nothing else."""
        assert self.planner is not None
        admitted = self.planner.admitted
        for record in self.gangs:
            if record.state not in (HOLDING, RUNNING):
                if record.gang.id in admitted:
                    raise AssertionError(f"{record.gang.id}: admitted in the planner, not here")
                continue
            seen = admitted[record.gang.id]
            bound = {self.nodes[n].name: pods for n, pods in record.bound.items()}
            if any(seen.placement.get(name, 0) < pods for name, pods in bound.items()):
                raise AssertionError(f"{record.gang.id}: the planner misses bound pods")
            if not record.reserving and dict(seen.placement) != bound:
                raise AssertionError(f"{record.gang.id}: the planner still holds its plan")
            if seen.running != (record.state == RUNNING):
                raise AssertionError(f"{record.gang.id}: the planner's running flag is stale")

    # ------------------------------------------------------------------ metrics

    def _sample(self, now: float, *, final: bool = False) -> None:
        last = self._last_sample_time
        if last is not None and now > last:
            u, a, f = self._last_values
            dt = now - last
            self._integral_util += u * dt
            self._integral_alloc += a * dt
            self._integral_fair += f * dt
        self._last_sample_time = now
        if now == self.last_progress:
            # Means are taken up to the last change of state (a stuck cluster ends there).
            self._integrals_at_progress = (
                self._integral_util,
                self._integral_alloc,
                self._integral_fair,
            )
        if not self.metrics_dirty and not final:
            return
        self.metrics_dirty = False
        ur = self.util_r
        got = figures(self.running_use, self.held, self.waiting, self.capacity, ur, self.weights)
        util, alloc, error = got.utilization, got.allocation, got.fairness_error
        self._last_values = (util, alloc, error)
        if not self.config.record:
            return
        counts = self.state_count
        sample = Sample(
            time=now,
            utilization=util,
            allocation=alloc,
            fairness_error=error,
            pending=tuple(c[PENDING] + c[BACKOFF] for c in counts),
            holding=tuple(c[HOLDING] for c in counts),
            running=tuple(c[RUNNING] for c in counts),
            usage=tuple(v[ur] / self.util_scale for v in self.held),
            share=got.shares,
            fair_share=got.fair,
        )
        if self.samples and self.samples[-1].time == now:
            self.samples[-1] = sample
        else:
            self.samples.append(sample)


def _stuck_reason(record: GangRecord, horizon_reached: bool) -> str:
    when = "at the horizon" if horizon_reached else "with no event left"
    if record.state == HOLDING:
        return (
            f"Clogged: {record.bound_pods} of min {record.gang.min} pods bound, "
            f"{record.running_pods} running, {when}"
        )
    if record.state == WAITING:
        return "NotSubmitted: submission time is past the horizon"
    if record.waiting_for is not None:
        return f"{record.waiting_for.code}: {record.waiting_for.message} ({when})"
    return f"NoFit: no pod of the gang fits a node ({when})"


def _creation_second(entry: tuple[int, int, int]) -> int:
    return entry[0]


def node_score(free: Sequence[int], ask: Sequence[int], allocatable: Sequence[int]) -> int:
    """What kube-scheduler's default profile scores a node for one pod, over the scored
    resources (cpu and memory): NodeResourcesFit with LeastAllocated (the mean share left free
    once the pod is there: spreading) plus NodeResourcesBalancedAllocation (how even the
    resources' used shares are), each 0..100 and weight 1, in the scheduler's integer steps.
    ``free`` is the node's free amount of each scored resource before the pod, ``ask`` the pod's
    request. The default profile's other scores are equal on every node here (no preferred
    affinities, taints or topology spread for Job pods), so they decide nothing."""
    least = weights = 0
    fractions: list[float] = []
    for left, wanted, capacity in zip(free, ask, allocatable, strict=True):
        if capacity <= 0:
            continue
        requested = capacity - left + wanted
        least += (capacity - requested) * MAX_NODE_SCORE // capacity if requested <= capacity else 0
        weights += 1
        fractions.append(min(requested / capacity, 1.0))
    least = least // weights if weights else 0
    spread = 0.0
    if len(fractions) == 2:
        spread = abs(fractions[0] - fractions[1]) / 2
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        spread = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
    return least + int((1 - spread) * MAX_NODE_SCORE)


def simulate(
    trace: Trace, config: EngineConfig, progress: ProgressFn | None = None
) -> EngineResult:
    """Run one engine over a trace."""
    return Engine(trace, config, progress).run()
