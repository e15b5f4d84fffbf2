"""What one look at a gang's Job means, for each admission of a kwok replay (wall clock → trace
time):

- ``muster`` (`MusterReading`): admitted at the time in the `muster.dev/admitted` annotation
  (the controller's clock at the cycle that admitted it); a rise of `muster.dev/preemptions`
  is a preemption (the run starts over, like an eviction's); a change of
  `muster.dev/evictions` an eviction (a clog when `muster.dev/evicted-reason` says so), at the
  look that saw it;
- ``none`` (`NoneReading`): admitted at the first look with ``minSize`` pods bound; a gang
  holding nodes with fewer than ``minSize`` pods running one clog timeout after its first pod
  was bound is a clog (nobody evicts it);
- ``external`` (`ExternalReading`): admitted at the first look that saw the Job unsuspended
  (its admitted size: the Job's parallelism); suspended again is an eviction; clogs are
  counted as with ``none``.

In every case: started when the gang runner saw ``minSize`` members Running and started the
runtime (the timeline hears of it); finished at the completion time the gang runner wrote
(kwok completes the pods then), once the Job is Complete.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from policies.kinds.reading import parse_admitted
from policies.phase import condition_true, eviction_counts, marked_failed
from policies.vocabulary import ADMITTED as ADMITTED_ANNOTATION
from policies.vocabulary import EVICTED_REASON, PREEMPTIONS
from simulator.kwok_latency import AdmitLatency
from simulator.kwok_records import ReplayClock, ReplayRecords, Seen, count
from simulator.records import (
    ADMITTED,
    BACKING_OFF,
    FAILED,
    FINISHED,
    PENDING,
    RUNNING,
    Admission,
    GangRecord,
    GangState,
)
from simulator.trace import Trace

CLOG_REASONS = frozenset({"Clogged", "Deadlock"})
"""Eviction reasons that mean the gang never got its minimum running (the in-process clog)."""

Job = Mapping[str, Any]


class Reading(ABC):
    """What a look means under one admission; the ends every admission shares."""

    counts_clogs = True
    """A gang holding nodes below its minimum is a clog once its timeout passes (nobody, or
    someone muster cannot see, evicts it); muster's clogs are its evictions."""

    def __init__(
        self, records: ReplayRecords, clock: ReplayClock, latency: AdmitLatency, trace: Trace
    ) -> None:
        self.records = records
        self.clock = clock
        self.latency = latency
        self.trace = trace

    @abstractmethod
    def look(
        self, record: GangRecord, seen: Seen, job: Job | None, wall: float, now: float
    ) -> bool:
        """Read one look at ``record``'s Job (None: not there yet); True if anything changed."""

    def started(self, record: GangRecord, seen: Seen) -> None:
        """The gang runner started ``record``'s run (``record.started`` is set); only without
        gang admission does that say more (when ``minSize`` pods were bound at the latest)."""
        return

    def may_change(self, record: GangRecord, wall: float) -> bool:
        """An admitted ``record`` can still change by itself (the controller may evict it)."""
        return False

    def waiting(self, when: str) -> str:
        """Why a gang still pending at the end is stuck."""
        return f"NoFit: no pod of the gang fits a node ({when})"

    def _ended(self, record: GangRecord, seen: Seen, status: Mapping[str, Any], now: float) -> bool:
        """The Job is Complete (a JobSet Completed: finished when its pods completed) or
        Failed."""
        if condition_true(status, "Complete") or condition_true(status, "Completed"):
            record.finished = self._finish_time(seen, now)
            self.records.set_state(record, FINISHED, record.finished)
            return True
        if condition_true(status, "Failed"):
            record.reason = f"JobFailed: the {record.gang.kind}'s controller marked it Failed"
            self.records.set_state(record, FAILED, now)
            return True
        return False

    def _finish_time(self, seen: Seen, now: float) -> float:
        """When the run's pods completed: the first look that saw them all completed (not
        before the completion time the gang runner wrote), else this look."""
        if seen.run_ends is None:
            return now
        trace_time = self.clock.trace_time
        seen_done = now if seen.completed is None else min(trace_time(seen.completed), now)
        return max(trace_time(seen.run_ends), seen_done)

    def _settle(self, record: GangRecord, state: GangState, now: float) -> bool:
        if state == record.state:
            return False
        self.records.set_state(record, state, now)
        return True

    def _count_clog(self, record: GangRecord, seen: Seen, now: float) -> bool:
        """A gang holding nodes with fewer than minSize pods running one clog timeout after its
        first pod was bound is a clog, counted once, as in the in-process engine (whether
        anyone evicts it or not)."""
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
        self.records.incident(seen.first_bound + record.clog_timeout, "clog", record)
        return True


class MusterReading(Reading):
    """Admission ``muster``: the Job's annotations, which muster's controller writes."""

    counts_clogs = False

    def __init__(
        self,
        records: ReplayRecords,
        clock: ReplayClock,
        latency: AdmitLatency,
        trace: Trace,
        evict_after: Mapping[str, float],
    ) -> None:
        super().__init__(records, clock, latency, trace)
        self.evict_after = evict_after

    def look(
        self, record: GangRecord, seen: Seen, job: Job | None, wall: float, now: float
    ) -> bool:
        if job is None:
            return False  # the MiniCluster's Job is not there yet: still pending
        meta = job.get("metadata") or {}
        annotations: Mapping[str, str] = meta.get("annotations") or {}
        counts = eviction_counts(annotations)
        evictions = counts.evictions
        failed = marked_failed(annotations)
        changed = self._evictions(record, seen, annotations, evictions, failed, now)
        changed |= self._preemptions(record, seen, annotations, now)
        seen.requeue_at = counts.requeue_at
        admitted = annotations.get(ADMITTED_ANNOTATION)
        changed |= self._admitted(record, seen, admitted, wall)
        status = job.get("status") or {}
        self.latency.job_ready(record, seen, admitted, status, wall)
        if failed and not condition_true(status, "Complete"):
            limit = self.trace.queue_specs()[record.gang.queue].backoff.limit
            record.reason = f"BackoffLimitExceeded: evicted {evictions} times, limit {limit}"
            self.records.set_state(record, FAILED, now)
            return True
        if self._ended(record, seen, status, now):
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
        return self._settle(record, state, now) or changed

    def _evictions(
        self,
        record: GangRecord,
        seen: Seen,
        annotations: Mapping[str, str],
        evictions: int,
        failed: bool,
        now: float,
    ) -> bool:
        """A rise of muster.dev/evictions: one incident per eviction (and a clog, a fail)."""
        if evictions <= seen.evictions:
            return False
        reason = annotations.get(EVICTED_REASON, "")
        for number in range(seen.evictions + 1, evictions + 1):
            if reason in CLOG_REASONS:
                record.clogs += 1
                self.records.incident(now, "clog", record)
            final = failed and number == evictions
            self.records.incident(now, "fail" if final else "evict", record)
        seen.evictions = record.evictions = evictions
        seen.run_started = seen.run_ends = None  # a new admission starts a new run
        return True

    def _preemptions(
        self, record: GangRecord, seen: Seen, annotations: Mapping[str, str], now: float
    ) -> bool:
        """A rise of muster.dev/preemptions: one incident each; the run starts over."""
        preemptions = count(annotations.get(PREEMPTIONS))
        if preemptions <= seen.preemptions:
            return False
        for _ in range(seen.preemptions, preemptions):
            self.records.incident(now, "preempt", record)
        seen.preemptions = record.preemptions = preemptions
        seen.run_started = seen.run_ends = None  # preempted: its run starts over
        return True

    def _admitted(self, record: GangRecord, seen: Seen, admitted: str | None, wall: float) -> bool:
        """A new muster.dev/admitted stamp: the gang's admission time and size."""
        changed = False
        if admitted is not None and admitted != seen.admission:
            try:
                at, size = parse_admitted(admitted)
            except ValueError:
                at, size = wall, record.gang.size
            record.admitted_at = self.clock.trace_time(at)
            if record.first_admitted is None:
                record.first_admitted = record.admitted_at
            record.admitted_size = size
            self.latency.admitted(seen, at)
            changed = True
        seen.admission = admitted
        return changed

    def may_change(self, record: GangRecord, wall: float) -> bool:
        """Within its clog timeout the controller would still evict it."""
        admitted = record.admitted_at
        timeout = self.evict_after[record.gang.queue]
        return admitted is None or self.clock.trace_time(wall) < admitted + timeout

    def waiting(self, when: str) -> str:
        return f"Pending: not admitted ({when})"


class NoneReading(Reading):
    """Admission ``none``: the default scheduler alone; the pods say it all."""

    def look(
        self, record: GangRecord, seen: Seen, job: Job | None, wall: float, now: float
    ) -> bool:
        changed = False
        if record.first_admitted is None and seen.bound >= record.gang.min:
            # Without gang admission, "admitted" is when the scheduler had bound minSize pods.
            record.first_admitted = record.admitted_at = now
            record.admitted_size = seen.bound
            changed = True
        if job is not None and self._ended(record, seen, job.get("status") or {}, now):
            return True
        state: GangState
        if seen.run_started is not None:
            state = RUNNING
        elif seen.bound:
            state = ADMITTED
        else:
            state = PENDING
        changed |= self._settle(record, state, now)
        return self._count_clog(record, seen, now) or changed

    def started(self, record: GangRecord, seen: Seen) -> None:
        assert record.started is not None
        if record.first_admitted is None or record.first_admitted > record.started:
            # minSize pods were bound no later than they ran; a look may have come later.
            record.first_admitted = record.admitted_at = record.started
            record.admitted_size = max(seen.bound, record.gang.min)


class ExternalReading(Reading):
    """Admission ``external``: a controller muster does not run admits by unsuspending the Job,
    and evicts by suspending it again (Kueue's waitForPodsReady, preemption)."""

    def look(
        self, record: GangRecord, seen: Seen, job: Job | None, wall: float, now: float
    ) -> bool:
        if job is None:
            return False  # the MiniCluster's Job is not there yet: still pending
        spec = job.get("spec") or {}
        if self._ended(record, seen, job.get("status") or {}, now):
            return True
        changed = False
        suspended = bool(spec.get("suspend"))
        if not suspended and seen.admitted_wall is None:
            # The watch on Jobs can deliver the unsuspend after the gang runner saw the pods
            # run (two streams): the admission came no later than the run's start.
            at = wall if seen.run_started is None else min(wall, seen.run_started)
            record.admitted_at = self.clock.trace_time(at)
            if record.first_admitted is None:
                record.first_admitted = record.admitted_at
            record.admitted_size = count(str(spec.get("parallelism") or record.gang.size))
            self.latency.admitted(seen, at)
            changed = True
        elif suspended and seen.admitted_wall is not None:
            record.evictions += 1
            self.records.incident(now, "evict", record)
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
        changed |= self._settle(record, state, now)
        return self._count_clog(record, seen, now) or changed

    def waiting(self, when: str) -> str:
        return f"Pending: still suspended, the outside controller did not admit it ({when})"


def reading_for(
    admission: Admission,
    records: ReplayRecords,
    clock: ReplayClock,
    latency: AdmitLatency,
    trace: Trace,
    evict_after: Mapping[str, float],
) -> Reading:
    """The reading of ``admission``'s looks."""
    if admission == "muster":
        return MusterReading(records, clock, latency, trace, evict_after)
    if admission == "external":
        return ExternalReading(records, clock, latency, trace)
    return NoneReading(records, clock, latency, trace)
