"""The runner and the recorder of `muster bench kueue-perf`: for muster what Kueue's own runner
(sigs.k8s.io/kueue `test/performance/scheduler/runner`: its controller and recorder) does for
Kueue, taken from how that runner behaves, not from its code.

Kueue's runner watches Workloads; when it sees one admitted it notes the time, and `runtimeMs`
later writes the Workload's `Finished` condition through the status subresource (an eviction it
sees first drops the pending finish). Its recorder times each workload from its first event to
its (last) admission and to its finish, counts its evictions, and integrates each ClusterQueue's
reported usage over time. Here the workloads are one-pod Jobs: `Runner` follows them with one
list-then-watch, sees an admission when muster's `muster.dev/admitted` annotation lands on an
unsuspended Job, and `runtimeMs` later marks the Job complete through `/status` (the
`SuccessCriteriaMet` and `Complete` conditions, `succeeded: 1`, start and completion times: what
the Job controller would write), so muster sees it end as it would on a cluster. `Recorder`
keeps what was seen and turns it into Kueue's figures (`figures`); it does no I/O.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.client import HTTPException
from typing import Any

from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from kubeport.streamwatch import StreamWatch, list_collection
from policies.kinds.reading import GangParseError, parse_admitted
from policies.percentiles import percentile
from policies.resources import parse_quantity
from policies.vocabulary import ADMITTED
from simulator.kueueperf import PerfQueue, PerfWorkload

Key = tuple[str, str]
"""(namespace, name) of a workload's Job."""


@dataclass(slots=True)
class Seen:
    """What the runner saw of one workload's Job."""

    workload: PerfWorkload
    request_milli: int
    created: float | None = None
    """Its first event: the create returned, or the watch saw it, whichever came first."""
    admission: str | None = None
    """The `muster.dev/admitted` value in force; None while not admitted."""
    admitted_at: float | None = None
    """When the admission in force (or the last one) was seen."""
    decided: float | None = None
    """When muster decided that admission (the time its `muster.dev/admitted` value carries)."""
    patched: float | None = None
    """When the runner's write that finished the Job returned."""
    admissions: int = 0
    evictions: int = 0
    finished: float | None = None
    held_milli_s: float = 0.0
    """cpu (millicores) × seconds of quota held, admission to finish or eviction, as seen."""


@dataclass
class Recorder:
    """Every workload's `Seen`, fed by the creators and the watch (any thread)."""

    workloads: Sequence[PerfWorkload]
    seen: dict[Key, Seen] = field(default_factory=dict)
    # Kept as they change, so a progress look costs nothing however many workloads there are.
    created_count: int = 0
    admitted_now: int = 0
    finished: int = 0
    evictions: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        milli: dict[str, int] = {}
        for w in self.workloads:
            if w.request not in milli:
                milli[w.request] = parse_quantity(w.request, field="request", resource="cpu")
            self.seen[(w.queue, w.name)] = Seen(w, milli[w.request])

    def created(self, key: Key, at: float) -> None:
        with self._lock:
            state = self.seen[key]
            if state.created is None:
                self.created_count += 1
            if state.created is None or at < state.created:
                state.created = at

    def observe(
        self, key: Key, admission: str | None, finished: bool, at: float
    ) -> tuple[str, float] | None:
        """One look at the Job (`admission`: its admitted value if it is admitted and not
        suspended). Returns (admission, when it was seen) for an admission seen for the first
        time, which the runner finishes `runtimeMs` later; else None."""
        with self._lock:
            state = self.seen.get(key)
            if state is None or state.finished is not None:
                return None
            if state.created is None:
                self.created_count += 1
                state.created = at
            if finished:
                self._release(state, at)
                state.finished = at
                self.finished += 1
                return None
            if admission == state.admission:
                return None
            if state.admission is not None:
                # Suspended (preempted, evicted) or admitted anew without a look in between.
                self._release(state, at)
                state.evictions += 1
                self.evictions += 1
            state.admission = admission
            if admission is None:
                return None
            self.admitted_now += 1
            state.admitted_at = at
            state.decided = _decided(admission)
            state.admissions += 1
            return admission, at

    def _release(self, state: Seen, at: float) -> None:
        if state.admission is not None:
            self.admitted_now -= 1
            if state.admitted_at is not None:
                state.held_milli_s += state.request_milli * max(at - state.admitted_at, 0.0)
        state.admission = None

    def patched(self, key: Key, at: float) -> None:
        with self._lock:
            self.seen[key].patched = at

    def holds(self, key: Key, admission: str) -> bool:
        """Whether `admission` is still the one in force (nothing finished or evicted it)."""
        with self._lock:
            state = self.seen[key]
            return state.finished is None and state.admission == admission

    def counts(self) -> tuple[int, int, int]:
        """(created, admitted now, finished) so far."""
        with self._lock:
            return self.created_count, self.admitted_now, self.finished


def figures(
    seen: Iterable[Seen], queues: Sequence[PerfQueue], began: float
) -> dict[str, dict[str, Any]]:
    """Kueue's summary of a run: per workload class (`classes`) the count, the mean time from
    the first event to the last admission and to the finish, and the evictions; per
    ClusterQueue class (`queue_classes`) the usage of nominal quota, as Kueue's checker reads
    it (quota held ÷ (nominal × time) over the class) and the least and mean of its queues'.

    A queue's time runs from `began` (the generator's start, when Kueue's generator makes the
    ClusterQueue) to its last workload's finish (Kueue: its last status update, the usage
    dropping back). Only finished workloads are timed (a complete run finishes them all)."""
    states = list(seen)
    classes: dict[str, dict[str, Any]] = {}
    for name in sorted({s.workload.class_name for s in states}):
        members = [s for s in states if s.workload.class_name == name]
        done = [s for s in members if s.finished is not None and s.created is not None]
        to_admission = [
            s.admitted_at - s.created
            for s in done
            if s.admitted_at is not None and s.created is not None
        ]
        to_finish = [
            s.finished - s.created for s in done if s.finished is not None and s.created is not None
        ]
        classes[name] = {
            "count": len(members),
            "finished": len(done),
            "avg_time_to_admission_s": _mean(to_admission),
            "avg_time_to_finish_s": _mean(to_finish),
            "evictions": sum(s.evictions for s in members),
        }
    by_queue: dict[str, list[Seen]] = {}
    for s in states:
        by_queue.setdefault(s.workload.queue, []).append(s)
    queue_classes: dict[str, dict[str, Any]] = {}
    for name in sorted({q.class_name for q in queues}):
        leaves = [q for q in queues if q.class_name == name]
        used, last, each = 0.0, began, []
        for q in leaves:
            jobs = by_queue.get(q.name, [])
            end = max((s.finished for s in jobs if s.finished is not None), default=began)
            held = sum(s.held_milli_s for s in jobs)
            used += held
            last = max(last, end)
            if end > began:
                each.append(100.0 * held / (q.nominal_milli * (end - began)))
        total = sum(q.nominal_milli for q in leaves) * (last - began)
        queue_classes[name] = {
            "queues": len(leaves),
            "usage_pct": round(100.0 * used / total, 1) if total > 0 else None,
            "min_queue_usage_pct": round(min(each), 1) if each else None,
            "mean_queue_usage_pct": round(sum(each) / len(each), 1) if each else None,
        }
    return {"classes": classes, "queue_classes": queue_classes}


def latencies(seen: Iterable[Seen]) -> dict[str, Any]:
    """Where a finished workload's quota was held beyond its runtime, from the runner's side
    (p50 and p90 over the finished workloads, seconds): `admission_seen` = muster's decision
    (the time its admission carries) to the runner seeing it (muster's PATCH and the watch);
    `finish_written` = the runtime's end to the runner's finishing write returning (its timer
    and the PATCH); `finish_seen` = that write to the watch showing the Job complete."""
    admission_seen, finish_written, finish_seen = [], [], []
    for s in seen:
        if s.finished is None or s.admitted_at is None or s.patched is None:
            continue
        if s.decided is not None:
            admission_seen.append(s.admitted_at - s.decided)
        finish_written.append(s.patched - (s.admitted_at + s.workload.runtime_ms / 1000))
        finish_seen.append(s.finished - s.patched)
    return {
        name: {"p50": _rounded(percentile(values, 50)), "p90": _rounded(percentile(values, 90))}
        for name, values in (
            ("admission_seen_s", admission_seen),
            ("finish_written_s", finish_written),
            ("finish_seen_s", finish_seen),
        )
    }


def _decided(admission: str) -> float | None:
    try:
        return parse_admitted(admission)[0]
    except GangParseError:
        return None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 2) if values else None


def rfc3339(seconds: float) -> str:
    """A Job status time (whole seconds, as the API keeps them)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def complete_status(started: float, now: float) -> dict[str, Any]:
    """The status the Job controller writes when a one-pod Job's pod succeeded: what the
    apiserver asks of a Complete Job (a start and a completion time, SuccessCriteriaMet first)."""
    stamp = rfc3339(now)
    condition = {
        "status": "True",
        "reason": "CompletionsReached",
        "message": "Reached expected number of succeeded pods (bench kueue-perf's runner)",
        "lastProbeTime": stamp,
        "lastTransitionTime": stamp,
    }
    return {
        "status": {
            "startTime": rfc3339(started),
            "completionTime": stamp,
            "succeeded": 1,
            "conditions": [
                {"type": "SuccessCriteriaMet", **condition},
                {"type": "Complete", **condition},
            ],
        }
    }


def job_look(job: Mapping[str, Any]) -> tuple[Key, str | None, bool]:
    """(namespace, name), the admission in force (the `muster.dev/admitted` value of an
    unsuspended Job, else None) and whether it finished, of one Job as the watch brings it."""
    meta = job.get("metadata") or {}
    key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
    admitted = (meta.get("annotations") or {}).get(ADMITTED)
    if (job.get("spec") or {}).get("suspend"):
        admitted = None
    conditions = (job.get("status") or {}).get("conditions") or ()
    finished = any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions
    )
    return key, admitted, finished


class Runner:
    """Follows every Job (one list-then-watch), tells the recorder what it sees, and finishes
    each admitted Job `runtimeMs` after the admission was seen (`patchers` threads write)."""

    def __init__(
        self,
        client: KubeClient,
        recorder: Recorder,
        *,
        patchers: int = 4,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.recorder = recorder
        self.clock = clock
        self.errors: list[str] = []
        self.patches = 0
        self._due: list[tuple[float, int, Key, str, float]] = []
        self._wake = threading.Condition()
        self._seq = 0
        self._stopped = threading.Event()
        self._pool = ThreadPoolExecutor(patchers, thread_name_prefix="kperf-finish")
        self._finisher = threading.Thread(target=self._finish_loop, name="kperf-due", daemon=True)
        self._stream: StreamWatch | None = None
        self._runtime = {(w.queue, w.name): w.runtime_ms / 1000 for w in recorder.workloads}

    def start(self) -> None:
        """List the Jobs, then watch them from there; the finisher waits for work."""
        path = kubeapi.JOBS.path()
        items, version = list_collection(self.client, path)
        self._relist(items, version)
        self._stream = StreamWatch(
            self.client,
            path,
            {},
            apply=self._apply,
            relist=self._relist,
            lister=list_collection,
            name="kperf-jobs",
            timeout_seconds=300,
            on_error=self._error,
        )
        self._stream.start(version)
        self._finisher.start()

    def stop(self) -> None:
        self._stopped.set()
        with self._wake:
            self._wake.notify_all()
        if self._stream is not None:
            self._stream.stop()
        self._finisher.join(timeout=10)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _relist(self, items: list[Any], version: int) -> None:
        for job in items:
            self._apply("ADDED", job)

    def _apply(self, kind: str, job: Mapping[str, Any]) -> None:
        if kind == "DELETED":
            return
        key, admission, finished = job_look(job)
        started = self.recorder.observe(key, admission, finished, self.clock())
        if started is not None:
            admission, at = started
            self._schedule(at + self._runtime[key], key, admission, at)

    def _schedule(self, due: float, key: Key, admission: str, admitted_at: float) -> None:
        with self._wake:
            self._seq += 1
            heapq.heappush(self._due, (due, self._seq, key, admission, admitted_at))
            self._wake.notify()

    def _finish_loop(self) -> None:
        while not self._stopped.is_set():
            with self._wake:
                if not self._due:
                    self._wake.wait(1.0)
                    continue
                due, _, key, admission, admitted_at = self._due[0]
                wait = due - self.clock()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                heapq.heappop(self._due)
            self._pool.submit(self._finish, key, admission, admitted_at)

    def _finish(self, key: Key, admission: str, admitted_at: float) -> None:
        # An eviction seen since drops the finish, as Kueue's runner forgets the admission.
        if not self.recorder.holds(key, admission):
            return
        namespace, name = key
        path = kubeapi.JOBS.path(namespace, name) + "/status"
        try:
            self.client.patch(path, complete_status(admitted_at, self.clock()))
            self.recorder.patched(key, self.clock())
            self.patches += 1
        except ApiError as exc:
            if exc.status == 429 or exc.status >= 500:
                self._schedule(self.clock() + 0.2, key, admission, admitted_at)
            else:
                self._error(f"finish {namespace}/{name}: {exc}")
        except (OSError, HTTPException) as exc:
            self._error(f"finish {namespace}/{name}: {exc}")
            self._schedule(self.clock() + 0.5, key, admission, admitted_at)

    def _error(self, message: str) -> None:
        self.errors.append(message)
        del self.errors[:-20]
