"""What the kwok engine saw in the cluster, recorded as the in-process engine's timeline.

The kwok engine polls the replay's Jobs and live Pods and hears from the gang runner when a
gang's run begins; `Timeline.observe` turns each look into gang states, timestamps and
per-queue samples, in *trace* time (wall time since the replay started × the time scale, from
the first submission), and `Timeline.result` packs them into the same `EngineResult` the
in-process engine returns, so `simulator.report` writes the same files.

Its parts: the records and what was last seen of each gang, with the replay's clock
(`simulator.kwok_records`); what a look at a gang's Job means under the replay's admission
(`simulator.kwok_reading`, which says where each figure comes from); the latency from each
admission to the run (`simulator.kwok_latency`); the samples and their means
(`simulator.kwok_samples`). Submitted is when the engine sent the create (the webhook's stamp
follows within a request); samples are taken at every look that saw a change.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from policies import Gang
from policies.kinds.registry import kind_named, pod_gang
from policies.vocabulary import GANG, GANG_RECORD
from simulator.kwok_latency import AdmitLatency
from simulator.kwok_reading import reading_for
from simulator.kwok_records import ReplayClock, ReplayRecords, Seen
from simulator.kwok_samples import ReplaySamples
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
)
from simulator.trace import SubmittedGang, Trace

Counts = tuple[dict[int, int], dict[int, int], dict[int, int]]
"""(created, bound, running) live pods per gang index."""


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
        self.seed = seed
        self.clock = ReplayClock(arrivals[0].gang.submitted.time if arrivals else 0.0, scale)
        self.samples = ReplaySamples(trace, none=admission == "none")
        self.records = ReplayRecords(trace, arrivals, namespaces, self.samples.request)
        self.gangs: list[GangRecord] = self.records.gangs
        self.seen: list[Seen] = self.records.seen
        self.incidents = self.records.incidents
        self.latency = AdmitLatency()
        tree = trace.queue_tree()
        # The clog timeout muster applies on kwok (trace seconds): never below the wall floor.
        evict_after = {
            name: max(tree[name].clog_timeout, min_clog_timeout * scale) for name in tree.leaves
        }
        self.reading = reading_for(
            admission, self.records, self.clock, self.latency, trace, evict_after
        )
        self.events = 0
        self.lags: list[float] = []  # trace seconds each create was sent behind its trace time
        self._lock = threading.Lock()
        self._submitted: list[tuple[int, float]] = []
        self._runs: list[tuple[tuple[str, str], float, float]] = []

    # ------------------------------------------------------------------ clock

    @property
    def origin(self) -> float:
        """The trace time of the first submission."""
        return self.clock.origin

    def start(self, wall: float) -> None:
        """The wall time at which trace time `origin` (the first submission) is replayed."""
        self.clock.t0 = wall

    def trace_time(self, wall: float) -> float:
        return self.clock.trace_time(wall)

    def wall_time(self, trace_seconds: float) -> float:
        return self.clock.wall_time(trace_seconds)

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
        now = self.clock.trace_time(wall)
        with self._lock:
            submitted, self._submitted = self._submitted, []
            runs, self._runs = self._runs, []
        changed = self._take_submissions(submitted)
        self._take_runs(runs)
        created, bound, running = self._pod_counts(pods)
        by_index: dict[int, Mapping[str, Any]] = {}
        for job in jobs:
            meta = job.get("metadata") or {}
            labels = meta.get("labels") or {}
            # A gang record (muster's, of a pod group) is its gang's: named by its gang label.
            name = labels.get(GANG) if GANG_RECORD in labels else meta.get("name")
            gang = self.records.by_job.get((meta.get("namespace") or "", name or ""))
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
            pods_created = created.get(record.index, 0)
            _note_completed(seen, pods_created, wall)
            self.latency.pods(record, seen, pods_created, wall)
            found = by_index.get(record.index)
            if pod_gang(kind_named(record.gang.kind)) is not None:
                found = _pod_group_object(found, seen)
            changed |= self.reading.look(record, seen, found, wall, now)
        if changed:
            self.events += 1
            self.samples.sample(now, self.gangs, self.seen, len(self.records.queue_names))
        return changed

    def _take_submissions(self, submitted: Sequence[tuple[int, float]]) -> bool:
        """Gangs whose create was sent: pending from then (their trace time is when it was)."""
        changed = False
        for index, sent in submitted:
            record = self.gangs[index]
            planned = record.gang.submitted.time
            at = self.clock.trace_time(sent)
            self.lags.append(at - planned)
            record.gang = _with_submit_time(record.gang, at)
            self.records.set_state(record, PENDING, at)
            changed = True
        return changed

    def _take_runs(self, runs: Sequence[tuple[tuple[str, str], float, float]]) -> None:
        """Runs the gang runner started: the gang's start, and its latencies since admission."""
        for key, started, ends in runs:
            found = self.records.by_job.get(key)
            if found is None:
                continue
            seen = self.seen[found]
            seen.run_started, seen.run_ends, seen.completed = started, ends, None
            self.latency.run_started(seen, started)
            record = self.gangs[found]
            if record.started is None:
                record.started = self.clock.trace_time(started)
            self.reading.started(record, seen)

    def _pod_counts(self, pods: Iterable[Mapping[str, Any]]) -> Counts:
        """(created, bound, running) live pods per gang index."""
        bound: dict[int, int] = defaultdict(int)
        running: dict[int, int] = defaultdict(int)
        created: dict[int, int] = defaultdict(int)
        by_job = self.records.by_job
        for pod in pods:
            meta = pod.get("metadata") or {}
            label = (meta.get("labels") or {}).get(GANG)
            owner = by_job.get((meta.get("namespace") or "", label or ""))
            if owner is None:
                continue
            created[owner] += 1
            if not (pod.get("spec") or {}).get("nodeName"):
                continue
            bound[owner] += 1
            if (pod.get("status") or {}).get("phase") == "Running":
                running[owner] += 1
        return created, bound, running

    # ------------------------------------------------------------------ queries

    def finished(self) -> bool:
        return self.records.done == len(self.gangs)

    def quiet(self, wall: float) -> bool:
        """Nothing can change any more without something else happening first: every gang is
        submitted, none runs, none waits out a backoff, and (muster) no admitted gang is still
        within its clog timeout (the controller would evict it). Used with a stall time."""
        for record in self.gangs:
            state = record.state
            if state in (WAITING, RUNNING, BACKING_OFF):
                return False
            if state == ADMITTED and self.reading.may_change(record, wall):
                return False
        return True

    def counts(self) -> tuple[int, int, int]:
        """(gangs done, gangs running, pods bound) for progress."""
        running = sum(1 for r in self.gangs if r.state == RUNNING)
        return self.records.done, running, sum(s.bound for s in self.seen)

    def latency_figures(self) -> dict[str, dict[str, float]]:
        """Wall seconds from admission to the run, as p50, p95 and max over admissions
        (`simulator.kwok_latency`): the control plane's share of every wait on kwok."""
        return self.latency.figures()

    def pending(self) -> list[GangRecord]:
        return [r for r in self.gangs if r.state in (PENDING, BACKING_OFF)]

    # ------------------------------------------------------------------ result

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
        self._settle_unfinished(stuck_reasons, horizon_reached)
        gangs = self.gangs
        first_submit = min((r.submitted for r in gangs), default=self.origin)
        if any(r.state == STUCK for r in gangs):
            end = self.clock.trace_time(end_wall) if horizon_reached else self.records.last_change
        else:
            ends = [r.finished for r in gangs if r.finished is not None]
            ends.extend(r.admitted_at or r.submitted for r in gangs if r.state == FAILED)
            end = max(ends, default=first_submit)
        end = max(end, first_submit)
        self.incidents.sort(key=lambda i: i.time)
        means = self.samples.means(first_submit, end)
        return EngineResult(
            admission=self.admission,
            trace=self.trace.name,
            seed=self.seed,
            queues=self.records.queue_names,
            gangs=gangs,
            samples=self.samples.samples,
            incidents=self.incidents,
            utilization_resource=self.samples.utilization_resource,
            first_submit=first_submit,
            end=end,
            utilization_mean=means.utilization,
            allocation_mean=means.allocation,
            fairness_error=means.fairness_error,
            fairness_dominant=means.fairness_dominant,
            over_fair_share=means.over_fair_share,
            resources=self.samples.resources,
            events=self.events,
            plan_calls=plan_calls,
            plan_seconds=plan_seconds,
            placement_misses=0,
            wall_seconds=wall_seconds,
            horizon_reached=horizon_reached,
        )

    def _settle_unfinished(self, stuck_reasons: Mapping[int, str], horizon_reached: bool) -> None:
        """Every unfinished gang is stuck, with a reason; one muster rejected fails."""
        records = self.records
        for record in [r for r in self.gangs if r.state not in (FINISHED, FAILED)]:
            reason = stuck_reasons.get(record.index)
            if reason is not None and reason.startswith("rejected:"):
                # The planner can never admit it (NeverFits, SizeRatioRejected): the in-process
                # engine fails such gangs at once; the controller leaves them pending.
                record.reason = reason.removeprefix("rejected:").strip()
                records.set_state(record, FAILED, record.submitted)
                records.incident(record.submitted, "fail", record)
                continue
            record.reason = reason or self._stuck_reason(record, horizon_reached)
            seen = self.seen[record.index]
            if (
                self.reading.counts_clogs
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
                records.incident(at, "clog", record)
                records.last_change = max(records.last_change, at)
            record.state = STUCK

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
        return self.reading.waiting(when)


def _note_completed(seen: Seen, created: int, wall: float) -> None:
    """kwok completed every pod of the run (none is live any more): the gang is done now,
    which may be later than the runtime said when kwok is behind."""
    if (
        seen.run_ends is not None
        and seen.completed is None
        and wall >= seen.run_ends
        and not created
    ):
        seen.completed = wall


def _pod_group_object(record: Mapping[str, Any] | None, seen: Seen) -> Mapping[str, Any]:
    """What a look at a pod group means as a gang object: what muster's record of it says
    (admitted, evicted, preempted, failed), and Complete once its run's pods all completed
    (a pod group has no object whose status says so)."""
    meta = (record or {}).get("metadata") or {}
    done = seen.completed is not None
    conditions = [{"type": "Complete", "status": "True"}] if done else []
    return {"metadata": meta, "status": {"conditions": conditions}}


def _with_submit_time(gang: Gang, at: float) -> Gang:
    return dataclasses.replace(gang, submitted=dataclasses.replace(gang.submitted, time=at))
