"""What the kwok engine saw in the cluster, recorded as the in-process engine's timeline.

The kwok engine polls the replay's Jobs and live Pods and hears from the gang runner when a
gang's run begins; `Timeline.observe` turns each look into gang states, timestamps and
per-queue samples, in *trace* time (wall time since the replay started × the time scale, from
the first submission), and `Timeline.result` packs them into the same `EngineResult` the
in-process engine returns, so `simulator.report` writes the same files.

Where each figure comes from (wall clock → trace time):

- submitted: when the engine sent the create (the webhook's stamp follows within a request);
- admitted: muster: the time in the `muster.dev/admitted` annotation (the controller's clock
  at the cycle that admitted it); none: the first look with `minSize` pods bound; external:
  the first look that saw the Job unsuspended (its admitted size: the Job's parallelism);
- started: when the gang runner saw `minSize` members Running and started the runtime;
- finished: the completion time the gang runner wrote (kwok completes the pods then), once the
  Job is Complete;
- preemptions: a rise of `muster.dev/preemptions` (the run starts over, like an eviction's);
- evictions, clogs: a change of `muster.dev/evictions` (reason `muster.dev/evicted-reason`),
  at the look that saw it; none: a gang holding nodes with fewer than `minSize` pods running
  one clog timeout after its first pod was bound (nobody evicts it); external: an eviction is
  an admitted Job suspended again, a clog counted as with none;
- samples (pending, holding, running, usage, shares): at every look that saw a change.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from admission.gangs import parse_admitted
from policies import Gang
from policies.phase import condition_true, eviction_counts, marked_failed
from policies.vocabulary import ADMITTED as ADMITTED_ANNOTATION
from policies.vocabulary import EVICTED_REASON, GANG, PREEMPTIONS
from simulator.records import (
    ADMITTED,
    BACKING_OFF,
    FAILED,
    FINISHED,
    PENDING,
    RUNNING,
    STUCK,
    WAITING,
    Admission,
    EngineResult,
    GangRecord,
    GangState,
    Incident,
    Sample,
)
from simulator.sampling import figures
from simulator.trace import SubmittedGang, Trace

CLOG_REASONS = frozenset({"Clogged", "Deadlock"})
"""Eviction reasons that mean the gang never got its minimum running (the in-process clog)."""


@dataclass(slots=True)
class _Seen:
    """What the engine last saw of one gang in the cluster (wall clock)."""

    bound: int = 0  # live pods with a node
    running: int = 0  # live pods Running
    first_bound: float | None = None  # trace time of the first look with a pod bound
    run_started: float | None = None  # wall: the current run began (gang runner)
    run_ends: float | None = None  # wall: when the current run's pods are due to complete
    completed: float | None = None  # wall: first look with the run's pods all completed
    admission: str | None = None  # the muster.dev/admitted value in force
    requeue_at: float = 0.0  # wall
    evictions: int = 0
    preemptions: int = 0
    # Latency of the current admission (wall): when admitted, when all its pods existed, when
    # all were bound. With run_started they show where the control plane spends its time.
    admitted_wall: float | None = None
    created_wall: float | None = None
    bound_wall: float | None = None
    running_wall: float | None = None
    job_ready_seen: bool = False  # the Job's status.ready reached minSize (what muster reads)


class Timeline:
    """Gang records and samples of one kwok replay (one admission)."""

    def __init__(
        self,
        trace: Trace,
        arrivals: Sequence[SubmittedGang],
        admission: Admission,
        scale: float,
        namespaces: Mapping[str, str],
        seed: int = 0,
        min_clog_timeout: float = 0.0,
    ) -> None:
        self.trace = trace
        self.admission = admission
        self.muster = admission == "muster"
        self.external = admission == "external"
        self.none = admission == "none"
        self.scale = scale
        self.seed = seed
        tree = trace.queue_tree()
        self.queue_names: tuple[str, ...] = tree.leaves
        q_index = {name: i for i, name in enumerate(self.queue_names)}
        self.weights = [tree[name].weight for name in self.queue_names]
        nodes = trace.nodes()
        names: list[str] = []
        for node in nodes:
            names.extend(r for r in node.allocatable if r not in names)
        for group in trace.jobs:
            names.extend(r for r in group.pod_requests if r not in names)
        self.resources = tuple(names)
        r_index = {name: i for i, name in enumerate(names)}
        self.capacity = [sum(max(n.allocatable[r] - n.used[r], 0) for n in nodes) for r in names]
        cpu = r_index.get("cpu")
        self.util_r = cpu if cpu is not None and self.capacity[cpu] else 0
        self.util_scale = 1000.0 if names and names[self.util_r] == "cpu" else 1.0
        counts_pods = "pods" in r_index and any(n.allocatable["pods"] for n in nodes)
        self.origin = arrivals[0].gang.submitted.time if arrivals else 0.0
        # The clog timeout muster applies on kwok (trace seconds): never below the wall floor.
        self.evict_after = {
            name: max(tree[name].clog_timeout, min_clog_timeout * scale)
            for name in self.queue_names
        }
        self.t0 = 0.0
        self.gangs: list[GangRecord] = []
        self.seen: list[_Seen] = []
        self.by_job: dict[tuple[str, str], int] = {}
        for index, arrival in enumerate(arrivals):
            gang = arrival.gang
            vector = [gang.pod_requests[r] for r in names]
            if counts_pods:
                vector[r_index["pods"]] = max(vector[r_index["pods"]], 1)
            self.gangs.append(
                GangRecord(
                    index=index,
                    gang=gang,
                    queue=q_index[gang.queue],
                    runtime=arrival.runtime,
                    group=arrival.group,
                    request=tuple((i, a) for i, a in enumerate(vector) if a),
                    clog_timeout=tree[gang.queue].clog_timeout,
                )
            )
            self.seen.append(_Seen())
            namespace = gang.id.split("/", 1)[0]
            self.by_job[(namespaces[namespace], gang.submitted.name)] = index
        self.samples: list[Sample] = []
        self.incidents: list[Incident] = []
        self.events = 0
        self.last_change = 0.0  # trace time of the last change of any gang
        self.lags: list[float] = []  # trace seconds each create was sent behind its trace time
        self.latencies: dict[str, list[float]] = defaultdict(list)  # wall seconds, per gang
        self.done = 0
        self._lock = threading.Lock()
        self._submitted: list[tuple[int, float]] = []
        self._runs: list[tuple[tuple[str, str], float, float]] = []
        self._last_sample: tuple[object, ...] | None = None

    # ------------------------------------------------------------------ clock

    def start(self, wall: float) -> None:
        """The wall time at which trace time `origin` (the first submission) is replayed."""
        self.t0 = wall

    def trace_time(self, wall: float) -> float:
        return self.origin + (wall - self.t0) * self.scale

    def wall_time(self, trace_seconds: float) -> float:
        return self.t0 + (trace_seconds - self.origin) / self.scale

    # ------------------------------------------------------------------ inputs (any thread)

    def submitted(self, index: int, wall: float) -> None:
        """The create of gang `index` was sent at `wall` (called from submitter threads)."""
        with self._lock:
            self._submitted.append((index, wall))

    def run_started(self, key: tuple[str, str], started: float, ends: float) -> None:
        """The gang runner started a run of gang `key` (namespace, gang label)."""
        with self._lock:
            self._runs.append((key, started, ends))

    # ------------------------------------------------------------------ observation

    def observe(
        self, wall: float, jobs: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
    ) -> bool:
        """One look at the cluster; returns True if anything changed."""
        now = self.trace_time(wall)
        with self._lock:
            submitted, self._submitted = self._submitted, []
            runs, self._runs = self._runs, []
        changed = self._take_submissions(submitted)
        self._take_runs(runs)
        created, bound, running = self._pod_counts(pods)
        by_index: dict[int, Mapping[str, Any]] = {}
        for job in jobs:
            meta = job.get("metadata") or {}
            gang = self.by_job.get((meta.get("namespace") or "", meta.get("name") or ""))
            if gang is not None:
                by_index[gang] = job
        for record in self.gangs:
            if record.state in (WAITING, FINISHED, FAILED):
                continue
            seen = self.seen[record.index]
            pods_bound, pods_running = bound.get(record.index, 0), running.get(record.index, 0)
            if (pods_bound, pods_running) != (seen.bound, seen.running):
                seen.bound, seen.running = pods_bound, pods_running
                record.bound_pods, record.running_pods = pods_bound, pods_running
                changed = True
            self._note_pods(record, seen, created.get(record.index, 0), wall)
            found_job = by_index.get(record.index)
            if self.muster:
                changed |= self._observe_muster(record, seen, found_job, wall, now)
            elif self.external:
                changed |= self._observe_external(record, seen, found_job, wall, now)
            else:
                changed |= self._observe_none(record, seen, found_job, wall, now)
        if changed:
            self.events += 1
            self._sample(now)
        return changed

    def _take_submissions(self, submitted: Sequence[tuple[int, float]]) -> bool:
        """Gangs whose create was sent: pending from then (their trace time is when it was)."""
        changed = False
        for index, sent in submitted:
            record = self.gangs[index]
            planned = record.gang.submitted.time
            at = self.trace_time(sent)
            self.lags.append(at - planned)
            record.gang = _with_submit_time(record.gang, at)
            self._set_state(record, PENDING, at)
            changed = True
        return changed

    def _take_runs(self, runs: Sequence[tuple[tuple[str, str], float, float]]) -> None:
        """Runs the gang runner started: the gang's start, and its latencies since admission."""
        for key, started, ends in runs:
            found = self.by_job.get(key)
            if found is None:
                continue
            seen = self.seen[found]
            seen.run_started, seen.run_ends, seen.completed = started, ends, None
            admitted_wall = seen.admitted_wall
            if admitted_wall is not None:
                self.latencies["admitted_to_started"].append(started - admitted_wall)
                for name, mark in (
                    ("created", seen.created_wall),
                    ("bound", seen.bound_wall),
                    ("running", seen.running_wall),
                ):
                    if mark is not None:
                        self.latencies[f"admitted_to_{name}"].append(mark - admitted_wall)
            record = self.gangs[found]
            if record.started is None:
                record.started = self.trace_time(started)
            if self.admission == "none" and (
                record.first_admitted is None or record.first_admitted > record.started
            ):
                # minSize pods were bound no later than they ran; a look may have come later.
                record.first_admitted = record.admitted_at = record.started
                record.admitted_size = max(seen.bound, record.gang.min)

    def _pod_counts(
        self, pods: Iterable[Mapping[str, Any]]
    ) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
        """(created, bound, running) live pods per gang index."""
        bound: dict[int, int] = defaultdict(int)
        running: dict[int, int] = defaultdict(int)
        created: dict[int, int] = defaultdict(int)
        for pod in pods:
            meta = pod.get("metadata") or {}
            label = (meta.get("labels") or {}).get(GANG)
            owner = self.by_job.get((meta.get("namespace") or "", label or ""))
            if owner is None:
                continue
            created[owner] += 1
            if not (pod.get("spec") or {}).get("nodeName"):
                continue
            bound[owner] += 1
            if (pod.get("status") or {}).get("phase") == "Running":
                running[owner] += 1
        return created, bound, running

    def _note_pods(self, record: GangRecord, seen: _Seen, created: int, wall: float) -> None:
        """When the run's pods were all gone (completed), and the admitted gang's pod marks."""
        if (
            seen.run_ends is not None
            and seen.completed is None
            and wall >= seen.run_ends
            and not created
        ):
            # kwok completed every pod of the run (none is live any more): the gang is done
            # now, which may be later than the runtime said when kwok is behind.
            seen.completed = wall
        if seen.admitted_wall is not None and seen.run_started is None:
            target = record.admitted_size or record.gang.size
            if seen.created_wall is None and created >= target:
                seen.created_wall = wall
            if seen.bound_wall is None and seen.bound >= target:
                seen.bound_wall = wall
            if seen.running_wall is None and seen.running >= record.gang.min:
                seen.running_wall = wall

    def _observe_muster(
        self,
        record: GangRecord,
        seen: _Seen,
        job: Mapping[str, Any] | None,
        wall: float,
        now: float,
    ) -> bool:
        if job is None:
            return False  # the MiniCluster's Job is not there yet: still pending
        meta = job.get("metadata") or {}
        annotations: Mapping[str, str] = meta.get("annotations") or {}
        counts = eviction_counts(annotations)
        evictions = counts.evictions
        failed = marked_failed(annotations)
        changed = self._observe_evictions(record, seen, annotations, evictions, failed, now)
        changed |= self._observe_preemptions(record, seen, annotations, now)
        seen.requeue_at = counts.requeue_at
        admitted = annotations.get(ADMITTED_ANNOTATION)
        changed |= self._observe_admitted(record, seen, admitted, wall)
        status = job.get("status") or {}
        self._note_job_ready(record, seen, admitted, status, wall)
        if condition_true(status, "Complete"):
            record.finished = self._finish_time(seen, now)
            self._set_state(record, FINISHED, record.finished)
            return True
        if failed or condition_true(status, "Failed"):
            limit = self.trace.queue_specs()[record.gang.queue].backoff.limit
            record.reason = (
                f"BackoffLimitExceeded: evicted {evictions} times, limit {limit}"
                if failed
                else "JobFailed: the Job controller marked the Job Failed"
            )
            self._set_state(record, FAILED, now)
            return True
        state: GangState
        if seen.run_started is not None:
            state = RUNNING
        elif admitted is not None:
            state = ADMITTED
        elif seen.requeue_at > wall:
            state = BACKING_OFF
        else:
            state = PENDING
        if state != record.state:
            self._set_state(record, state, now)
            changed = True
        return changed

    def _observe_evictions(
        self,
        record: GangRecord,
        seen: _Seen,
        annotations: Mapping[str, str],
        evictions: int,
        failed: bool,
        now: float,
    ) -> bool:
        """A rise of muster.dev/evictions: one incident per eviction (and a clog, a fail)."""
        if evictions <= seen.evictions:
            return False
        reason = annotations.get(EVICTED_REASON, "")
        queue = self.queue_names[record.queue]
        for count in range(seen.evictions + 1, evictions + 1):
            if reason in CLOG_REASONS:
                record.clogs += 1
                self.incidents.append(Incident(now, "clog", record.gang.id, queue))
            final = failed and count == evictions
            self.incidents.append(
                Incident(now, "fail" if final else "evict", record.gang.id, queue)
            )
        seen.evictions = record.evictions = evictions
        seen.run_started = seen.run_ends = None  # a new admission starts a new run
        return True

    def _observe_preemptions(
        self, record: GangRecord, seen: _Seen, annotations: Mapping[str, str], now: float
    ) -> bool:
        """A rise of muster.dev/preemptions: one incident each; the run starts over."""
        preemptions = _int(annotations.get(PREEMPTIONS))
        if preemptions <= seen.preemptions:
            return False
        queue = self.queue_names[record.queue]
        for _ in range(seen.preemptions, preemptions):
            self.incidents.append(Incident(now, "preempt", record.gang.id, queue))
        seen.preemptions = record.preemptions = preemptions
        seen.run_started = seen.run_ends = None  # preempted: its run starts over
        return True

    def _observe_admitted(
        self, record: GangRecord, seen: _Seen, admitted: str | None, wall: float
    ) -> bool:
        """A new muster.dev/admitted stamp: the gang's admission time and size."""
        changed = False
        if admitted is not None and admitted != seen.admission:
            try:
                at, size = parse_admitted(admitted)
            except ValueError:
                at, size = wall, record.gang.size
            record.admitted_at = self.trace_time(at)
            if record.first_admitted is None:
                record.first_admitted = record.admitted_at
            record.admitted_size = size
            seen.admitted_wall = at
            seen.created_wall = seen.bound_wall = seen.running_wall = None
            changed = True
        seen.admission = admitted
        return changed

    def _note_job_ready(
        self,
        record: GangRecord,
        seen: _Seen,
        admitted: str | None,
        status: Mapping[str, Any],
        wall: float,
    ) -> None:
        """The admitted_to_job_ready latency: when the Job first counted minSize ready pods."""
        if admitted is None:
            seen.job_ready_seen = False
        elif not seen.job_ready_seen and seen.admitted_wall is not None:
            ready = _int(str(status.get("ready") or 0)) + _int(str(status.get("succeeded") or 0))
            if ready >= record.gang.min:
                seen.job_ready_seen = True
                self.latencies["admitted_to_job_ready"].append(wall - seen.admitted_wall)

    def _observe_none(
        self,
        record: GangRecord,
        seen: _Seen,
        job: Mapping[str, Any] | None,
        wall: float,
        now: float,
    ) -> bool:
        changed = False
        if record.first_admitted is None and seen.bound >= record.gang.min:
            # Without gang admission, "admitted" is when the scheduler had bound minSize pods.
            record.first_admitted = record.admitted_at = now
            record.admitted_size = seen.bound
            changed = True
        status = (job or {}).get("status") or {}
        if job is not None and condition_true(status, "Complete"):
            record.finished = self._finish_time(seen, now)
            self._set_state(record, FINISHED, record.finished)
            return True
        if job is not None and condition_true(status, "Failed"):
            record.reason = "JobFailed: the Job controller marked the Job Failed"
            self._set_state(record, FAILED, now)
            return True
        state: GangState
        if seen.run_started is not None:
            state = RUNNING
        elif seen.bound:
            state = ADMITTED
        else:
            state = PENDING
        if state != record.state:
            self._set_state(record, state, now)
            changed = True
        return self._count_clog(record, seen, now) or changed

    def _count_clog(self, record: GangRecord, seen: _Seen, now: float) -> bool:
        """Without muster (none, external): a gang holding nodes with fewer than minSize pods
        running one clog timeout after its first pod was bound is a clog, counted once, as
        in the in-process engine (whether anyone evicts it or not)."""
        if seen.bound and seen.first_bound is None:
            seen.first_bound = now
        if (
            record.state != ADMITTED
            or record.clogs
            or seen.first_bound is None
            or now < seen.first_bound + record.clog_timeout
        ):
            return False
        record.clogs = 1
        self.incidents.append(
            Incident(
                seen.first_bound + record.clog_timeout,
                "clog",
                record.gang.id,
                self.queue_names[record.queue],
            )
        )
        return True

    def _observe_external(
        self,
        record: GangRecord,
        seen: _Seen,
        job: Mapping[str, Any] | None,
        wall: float,
        now: float,
    ) -> bool:
        """A controller muster does not run admits by unsuspending the Job, and evicts by
        suspending it again (Kueue's waitForPodsReady, preemption)."""
        if job is None:
            return False  # the MiniCluster's Job is not there yet: still pending
        spec, status = job.get("spec") or {}, job.get("status") or {}
        if condition_true(status, "Complete"):
            record.finished = self._finish_time(seen, now)
            self._set_state(record, FINISHED, record.finished)
            return True
        if condition_true(status, "Failed"):
            record.reason = "JobFailed: the Job controller marked the Job Failed"
            self._set_state(record, FAILED, now)
            return True
        changed = False
        suspended = bool(spec.get("suspend"))
        if not suspended and seen.admitted_wall is None:
            # The watch on Jobs can deliver the unsuspend after the gang runner saw the pods
            # run (two streams): the admission came no later than the run's start.
            at = wall if seen.run_started is None else min(wall, seen.run_started)
            record.admitted_at = self.trace_time(at)
            if record.first_admitted is None:
                record.first_admitted = record.admitted_at
            record.admitted_size = _int(str(spec.get("parallelism") or record.gang.size))
            seen.admitted_wall = at
            seen.created_wall = seen.bound_wall = seen.running_wall = None
            changed = True
        elif suspended and seen.admitted_wall is not None:
            record.evictions += 1
            self.incidents.append(
                Incident(now, "evict", record.gang.id, self.queue_names[record.queue])
            )
            seen.admitted_wall = seen.first_bound = None
            seen.run_started = seen.run_ends = None  # a new admission starts a new run
            changed = True
        state: GangState
        if seen.run_started is not None:
            state = RUNNING
        elif seen.admitted_wall is not None:
            state = ADMITTED
        else:
            state = PENDING
        if state != record.state:
            self._set_state(record, state, now)
            changed = True
        return self._count_clog(record, seen, now) or changed

    def _finish_time(self, seen: _Seen, now: float) -> float:
        """When the run's pods completed: the first look that saw them all completed (not
        before the completion time the gang runner wrote), else this look."""
        if seen.run_ends is None:
            return now
        seen_done = now if seen.completed is None else min(self.trace_time(seen.completed), now)
        return max(self.trace_time(seen.run_ends), seen_done)

    def _set_state(self, record: GangRecord, state: GangState, at: float) -> None:
        if state in (FINISHED, FAILED) and record.state not in (FINISHED, FAILED):
            self.done += 1
        record.state = state
        self.last_change = max(self.last_change, at)

    # ------------------------------------------------------------------ queries

    def finished(self) -> bool:
        return self.done == len(self.gangs)

    def quiet(self, wall: float) -> bool:
        """Nothing can change any more without something else happening first: every gang is
        submitted, none runs, none waits out a backoff, and (muster) no admitted gang is still
        within its clog timeout (the controller would evict it). Used with a stall time."""
        for record in self.gangs:
            state = record.state
            if state in (WAITING, RUNNING, BACKING_OFF):
                return False
            if self.muster and state == ADMITTED:
                admitted = record.admitted_at
                timeout = self.evict_after[record.gang.queue]
                if admitted is None or self.trace_time(wall) < admitted + timeout:
                    return False
        return True

    def counts(self) -> tuple[int, int, int]:
        """(gangs done, gangs running, pods bound) for progress."""
        running = sum(1 for r in self.gangs if r.state == RUNNING)
        return self.done, running, sum(s.bound for s in self.seen)

    def latency_figures(self) -> dict[str, dict[str, float]]:
        """Wall seconds from admission to all pods created / bound / minSize Running (as this
        engine's looks saw them) / the gang started by the gang runner / the Job's status.ready
        reaching minSize (what muster's controller reads as "running"), as p50, p95 and max over
        admissions: the control plane's share of every wait on kwok."""
        out: dict[str, dict[str, float]] = {}
        for name in (
            "admitted_to_created",
            "admitted_to_bound",
            "admitted_to_running",
            "admitted_to_started",
            "admitted_to_job_ready",
        ):
            values = sorted(self.latencies.get(name, []))
            if values:
                out[name] = {
                    "p50": round(values[len(values) // 2], 3),
                    "p95": round(values[min(len(values) - 1, int(len(values) * 0.95))], 3),
                    "max": round(values[-1], 3),
                    "n": len(values),
                }
        return out

    def pending(self) -> list[GangRecord]:
        return [r for r in self.gangs if r.state in (PENDING, BACKING_OFF)]

    # ------------------------------------------------------------------ samples and result

    def _sample(self, now: float) -> None:
        nq = len(self.queue_names)
        nr = len(self.resources)
        held = [[0] * nr for _ in range(nq)]
        running_use = [[0] * nr for _ in range(nq)]
        waiting = [[0] * nr for _ in range(nq)]
        pending = [0] * nq
        holding = [0] * nq
        running = [0] * nq
        for record in self.gangs:
            q, state, seen = record.queue, record.state, self.seen[record.index]
            if state in (WAITING, FINISHED, FAILED, STUCK):
                continue
            if state in (PENDING, BACKING_OFF):
                pending[q] += 1
                need = record.gang.size
            elif state == ADMITTED:
                holding[q] += 1
                target = record.admitted_size if not self.none else record.gang.size
                need = max((target or record.gang.size) - seen.bound, 0)
            else:
                running[q] += 1
                need = 0
            for r, amount in record.request:
                held[q][r] += amount * seen.bound
                waiting[q][r] += amount * need
                if state == RUNNING:
                    running_use[q][r] += amount * seen.bound
        cap = self.capacity
        ur = self.util_r
        got = figures(running_use, held, waiting, cap, ur, self.weights)
        util, alloc, error = got.utilization, got.allocation, got.fairness_error
        sample = Sample(
            time=now,
            utilization=util,
            allocation=alloc,
            fairness_error=error,
            pending=tuple(pending),
            holding=tuple(holding),
            running=tuple(running),
            usage=tuple(v[ur] / self.util_scale for v in held) if cap else (0.0,) * nq,
            share=got.shares,
            fair_share=got.fair,
        )
        if self.samples and self.samples[-1].time >= now:
            self.samples[-1] = dataclasses.replace(sample, time=self.samples[-1].time)
        else:
            self.samples.append(sample)

    def result(
        self,
        *,
        stuck_reasons: Mapping[int, str],
        horizon_reached: bool,
        end_wall: float,
        wall_seconds: float,
        plan_calls: int = 0,
        plan_seconds: float = 0.0,
    ) -> EngineResult:
        """Mark what is unfinished stuck (or failed, when muster rejected it) and pack up."""
        unfinished = [r for r in self.gangs if r.state not in (FINISHED, FAILED)]
        for record in unfinished:
            reason = stuck_reasons.get(record.index)
            if reason is not None and reason.startswith("rejected:"):
                # The planner can never admit it (NeverFits, SizeRatioRejected): the in-process
                # engine fails such gangs at once; the controller leaves them pending.
                record.reason = reason.removeprefix("rejected:").strip()
                self._set_state(record, FAILED, record.submitted)
                self.incidents.append(
                    Incident(
                        record.submitted, "fail", record.gang.id, self.queue_names[record.queue]
                    )
                )
                continue
            record.reason = reason or self._stuck_reason(record, horizon_reached)
            seen = self.seen[record.index]
            if (
                not self.muster
                and not horizon_reached
                and record.state == ADMITTED
                and not record.clogs
                and seen.first_bound is not None
            ):
                # Nothing can change any more, so this gang still holds its nodes when its clog
                # timeout passes (the replay stopped watching before that): the clog the
                # in-process engine's clog check counts at that time.
                at = seen.first_bound + record.clog_timeout
                record.clogs = 1
                self.incidents.append(
                    Incident(at, "clog", record.gang.id, self.queue_names[record.queue])
                )
                self.last_change = max(self.last_change, at)
            record.state = STUCK
        first_submit = min((r.submitted for r in self.gangs), default=self.origin)
        stuck = any(r.state == STUCK for r in self.gangs)
        if stuck:
            end = self.trace_time(end_wall) if horizon_reached else self.last_change
        else:
            ends = [r.finished for r in self.gangs if r.finished is not None]
            ends.extend(r.admitted_at or r.submitted for r in self.gangs if r.state == FAILED)
            end = max(ends, default=first_submit)
        end = max(end, first_submit)
        self.incidents.sort(key=lambda i: i.time)
        util, alloc, fair = self._means(first_submit, end)
        return EngineResult(
            admission=self.admission,
            trace=self.trace.name,
            seed=self.seed,
            queues=self.queue_names,
            gangs=self.gangs,
            samples=self.samples,
            incidents=self.incidents,
            utilization_resource=self.resources[self.util_r] if self.resources else "cpu",
            first_submit=first_submit,
            end=end,
            utilization_mean=util,
            allocation_mean=alloc,
            fairness_error=fair,
            events=self.events,
            plan_calls=plan_calls,
            plan_seconds=plan_seconds,
            placement_misses=0,
            wall_seconds=wall_seconds,
            horizon_reached=horizon_reached,
        )

    def _means(self, start: float, end: float) -> tuple[float, float, float]:
        """Time means over [start, end] of the step functions the samples describe."""
        span = end - start
        if span <= 0:
            return 0.0, 0.0, 0.0
        totals = [0.0, 0.0, 0.0]
        samples = self.samples
        for i, sample in enumerate(samples):
            left = max(sample.time, start)
            right = min(samples[i + 1].time if i + 1 < len(samples) else end, end)
            if right <= left:
                continue
            values = (sample.utilization, sample.allocation, sample.fairness_error)
            for k in range(3):
                totals[k] += values[k] * (right - left)
        return totals[0] / span, totals[1] / span, totals[2] / span

    def _stuck_reason(self, record: GangRecord, horizon_reached: bool) -> str:
        when = "at the horizon" if horizon_reached else "with nothing left to change"
        seen = self.seen[record.index]
        if record.state == WAITING:
            return "NotSubmitted: submission time is past the horizon"
        if record.state == ADMITTED:
            return (
                f"Clogged: {seen.bound} of min {record.gang.min} pods bound, "
                f"{seen.running} running, {when}"
            )
        if record.state == BACKING_OFF:
            return f"BackingOff: evicted {record.evictions} times ({when})"
        if self.muster:
            return f"Pending: not admitted ({when})"
        if self.external:
            return f"Pending: still suspended, the outside controller did not admit it ({when})"
        return f"NoFit: no pod of the gang fits a node ({when})"


def _with_submit_time(gang: Gang, at: float) -> Gang:
    return dataclasses.replace(gang, submitted=dataclasses.replace(gang.submitted, time=at))


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0
