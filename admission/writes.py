"""The controller's writes to the API: admit, evict, re-suspend, Events, Queue status.

All go through `admission.kubeapi.KubeClient` (the one API port) on a thread pool, so the event
loop never blocks on the network. Transient failures (409 for a stale view, 429, 5xx, timeouts,
dropped connections) are retried with exponential backoff; what is finally refused is reported
to the caller, which rolls its optimistic cache update back.
"""

from __future__ import annotations

import asyncio
import logging
import queue as stdqueue
import random
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar

from admission import kubeapi
from admission.gangs import format_admitted, format_time
from admission.kubeapi import STRATEGIC_MERGE_PATCH, ApiError, KubeClient
from admission.pinning import (
    HOSTNAME,
    PLACEMENT_GATE,
    Original,
    PinError,
    encode_placement,
    pinned_affinity,
)
from policies import gangstate
from policies.kinds.fields import pointer
from policies.vocabulary import (
    ADMITTED,
    EVICTED_REASON,
    EVICTIONS,
    FAILED_REASON,
    PLACEMENT,
    PREEMPTED_BY,
    PREEMPTIONS,
    REQUEUE_AT,
    RESTORE,
    STATE,
)

log = logging.getLogger("muster.writes")
T = TypeVar("T")

JSON_PATCH: Final = "application/json-patch+json"
RETRYABLE: Final = frozenset({409, 429, 500, 502, 503, 504})
QUEUES: Final = kubeapi.QUEUES.path()

Outcome = Literal["ok", "gone", "refused", "conflict"]


def job_path(namespace: str, name: str) -> str:
    return kubeapi.JOBS.path(namespace, name)


def _annotation(key: str) -> str:
    """The JSON Patch path of an annotation."""
    return pointer("metadata", "annotations", key)


@dataclass(frozen=True)
class Shape:
    """What an admission sets beyond unsuspending: the pin and the elastic size."""

    original: Original
    placement: Mapping[str, int]
    fields: Mapping[str, int]
    started: bool = False
    hostnames: Mapping[str, str | None] = field(default_factory=dict)
    """The planned nodes' `kubernetes.io/hostname` labels (None: the node has none)."""
    gate: bool = True
    """Add muster's scheduling gate (each pod then waits for muster to name its node)."""


@dataclass(frozen=True)
class JobRef:
    namespace: str
    name: str
    uid: str


class Writer:
    """Blocking writes run on a pool; `await writer.call(fn, ...)` from the event loop."""

    def __init__(
        self,
        client: KubeClient,
        *,
        concurrency: int = 32,
        attempts: int = 8,
        on_retry: Callable[[int], None] | None = None,
        on_event_dropped: Callable[[], None] | None = None,
        on_write: Callable[[str], None] | None = None,
        event_backlog: int = 2000,
    ) -> None:
        self.client = client
        self.attempts = attempts
        self.pool = ThreadPoolExecutor(concurrency, thread_name_prefix="muster-write")
        # Pod placements have a pool of their own: a big gang's hundreds of pod PATCHes must
        # not queue the admissions and evictions behind them.
        self.place_pool = ThreadPoolExecutor(
            max(1, concurrency // 2), thread_name_prefix="muster-place"
        )
        self.on_retry = on_retry or (lambda code: None)
        self.on_event_dropped = on_event_dropped or (lambda: None)
        self.on_write = on_write or (lambda kind: None)
        """Told the kind of each write sent (admit, place-pod, evict, ...), retries not counted."""
        self._events: stdqueue.Queue[tuple[str, dict[str, Any]] | None] = stdqueue.Queue(
            event_backlog
        )
        self._event_threads = [
            threading.Thread(target=self._send_events, name=f"muster-events-{i}", daemon=True)
            for i in range(2)
        ]
        for thread in self._event_threads:
            thread.start()

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def call_place(self, ref: str, hostname: str | None) -> Outcome:
        """`place_pod` on the placement pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.place_pool, self.place_pod, ref, hostname)

    def close(self) -> None:
        for _ in self._event_threads:
            self._events.put(None)
        for thread in self._event_threads:
            thread.join(timeout=5)
        self.pool.shutdown(wait=True)
        self.place_pool.shutdown(wait=True)

    # -- retry -------------------------------------------------------------------------

    def _retrying(self, what: str, send: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        delay = 0.05
        for attempt in range(1, self.attempts + 1):
            try:
                return send()
            except ApiError as exc:
                if exc.status not in RETRYABLE or attempt == self.attempts:
                    raise
                self.on_retry(exc.status)
                log.info("%s: HTTP %d, retrying in %.2fs", what, exc.status, delay)
            except (OSError, TimeoutError) as exc:
                if attempt == self.attempts:
                    raise
                self.on_retry(0)
                log.info("%s: %s, retrying in %.2fs", what, exc, delay)
            time.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- gang writes ---------------------------------------------------------------------

    def admit(
        self,
        job: JobRef,
        when: float,
        size: int,
        *,
        shape: Shape | None = None,
    ) -> Outcome:
        """Unsuspend with the admitted annotation, only if the Job is still suspended; with a
        `shape`, pin the pod template to the planned nodes and set the elastic size in the
        same PATCH, saving what it changes (see admission.pinning).

        The JSON Patch `test` makes this safe against a stale cache (a restarted or second
        controller): a Job someone already unsuspended is not admitted again.
        """
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/uid", "value": job.uid},
            {"op": "test", "path": "/spec/suspend", "value": True},
            {"op": "replace", "path": "/spec/suspend", "value": False},
            {"op": "add", "path": _annotation(ADMITTED), "value": format_admitted(when, size)},
        ]
        if shape is not None and (shape.fields or shape.placement):
            if shape.started and shape.placement:
                # A Job that ran before keeps status.startTime, and its template is frozen
                # until that is cleared (an eviction whose restore did not complete).
                outcome = self._clear_start(job)
                if outcome != "ok":
                    return outcome
            ops.append(
                {"op": "add", "path": _annotation(RESTORE), "value": shape.original.encode()}
            )
            for name, value in shape.fields.items():
                ops.append({"op": "add", "path": f"/spec/{name}", "value": value})
            if shape.placement:
                ops.append(
                    {
                        "op": "add",
                        "path": _annotation(PLACEMENT),
                        "value": encode_placement(shape.placement),
                    }
                )
                if shape.gate:
                    ops.append(
                        {
                            "op": "add",
                            "path": "/spec/template/spec/schedulingGates",
                            "value": shape.original.gated(),
                        }
                    )
                ops.append(
                    {
                        "op": "add",
                        "path": "/spec/template/spec/affinity",
                        "value": pinned_affinity(
                            shape.original.affinity,
                            {n: shape.hostnames.get(n, n) for n in shape.placement},
                        ),
                    }
                )
        return self._patch(job, ops, "admit")

    def evict(
        self,
        job: JobRef,
        *,
        evictions: int,
        requeue_at: float,
        reason: str,
        failed: bool,
    ) -> Outcome:
        """Suspend again (the Job controller deletes the pods), record why and until when, and
        put back what admission changed (`unpin`)."""
        annotations: dict[str, Any] = {
            ADMITTED: None,
            EVICTIONS: str(evictions),
            REQUEUE_AT: format_time(requeue_at),
            EVICTED_REASON: reason,
        }
        if failed:
            annotations[STATE] = gangstate.FAILED
        body = {"metadata": {"uid": job.uid, "annotations": annotations}, "spec": {"suspend": True}}
        outcome = self._merge(job, body, "evict")
        if outcome == "ok":
            self._restore(job)
        return outcome

    def preempt(self, job: JobRef, *, preemptions: int, message: str) -> Outcome:
        """Suspend a preemption's victim (the Job controller deletes its pods) and record it.

        Only while it is still admitted and not suspended (JSON Patch `test`s, like `admit`): a
        Job that changed under a stale plan is not touched ("conflict"). No requeue time and
        no eviction counted: the victim is planned again at once at its submission stamp.
        """
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/uid", "value": job.uid},
            {"op": "test", "path": "/spec/suspend", "value": False},
            {"op": "remove", "path": _annotation(ADMITTED)},
            {"op": "replace", "path": "/spec/suspend", "value": True},
            {"op": "add", "path": _annotation(PREEMPTIONS), "value": str(preemptions)},
            {"op": "add", "path": _annotation(PREEMPTED_BY), "value": message},
            {"op": "add", "path": _annotation(EVICTED_REASON), "value": "Preempted"},
        ]
        outcome = self._patch(job, ops, "preempt")
        if outcome == "ok":
            self._restore(job)
        return outcome

    def _restore(self, job: JobRef) -> None:
        """`unpin` after a suspension; its failure is logged, not the suspension's outcome."""
        try:
            outcome = self.unpin(job)
        except (ApiError, OSError) as exc:
            outcome = "refused"
            log.warning("restore %s/%s failed: %s", job.namespace, job.name, exc)
        if outcome not in ("ok", "gone"):
            log.warning(
                "restore %s/%s: %s; the next admission re-pins from muster.dev/restore",
                job.namespace,
                job.name,
                outcome,
            )

    def unpin(self, job: JobRef) -> Outcome:
        """Put a suspended Job back as it was before admission: the fields saved in
        muster.dev/restore (parallelism, completions, the pod template's affinity), and drop
        that and muster.dev/placement. Reads the Job first: the object, not the cache, says
        what admission wrote.

        The template is frozen while status.startTime is set, so that is cleared first; the
        PATCH is guarded by `suspend == true`. If a write fails, the next admission still finds
        muster.dev/restore and pins from the saved fields."""
        body = self.get_job(job.namespace, job.name)
        if body is None:
            return "gone"
        meta = body.get("metadata") or {}
        spec = body.get("spec") or {}
        annotations = meta.get("annotations") or {}
        if meta.get("uid") != job.uid or not spec.get("suspend"):
            return "conflict"
        if RESTORE not in annotations:
            return "ok"
        try:
            original = Original.decode(annotations[RESTORE], f"annotation {RESTORE}")
        except PinError as exc:
            log.warning("restore %s/%s: %s; left as it is", job.namespace, job.name, exc)
            return "refused"
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/uid", "value": job.uid},
            {"op": "test", "path": "/spec/suspend", "value": True},
            {"op": "remove", "path": _annotation(RESTORE)},
        ]
        if PLACEMENT in annotations:
            ops.append({"op": "remove", "path": _annotation(PLACEMENT)})
        for name, value in original.fields(spec.get("completionMode") == "Indexed").items():
            if spec.get(name) != value:
                ops.append({"op": "add", "path": f"/spec/{name}", "value": value})
        pod_spec = (spec.get("template") or {}).get("spec") or {}
        template = {"affinity": original.affinity, "schedulingGates": original.gates}
        changed = {k: v for k, v in template.items() if (pod_spec.get(k) or None) != v}
        if changed and (body.get("status") or {}).get("startTime") is not None:
            outcome = self._clear_start(job)
            if outcome != "ok":
                return outcome
        for key, template_value in changed.items():
            path = f"/spec/template/spec/{key}"
            ops.append({"op": "add", "path": path, "value": template_value})
        return self._patch(job, ops, "restore")

    def place_pod(self, ref: str, hostname: str | None) -> Outcome:
        """Give a gated pod its planned node (a nodeSelector on kubernetes.io/hostname) and
        remove muster's scheduling gate, in one strategic merge PATCH (a gated pod may gain
        a nodeSelector). With no hostname only the gate goes (the template's pin remains)."""
        namespace, name = ref.split("/", 1)
        spec: dict[str, Any] = {
            "schedulingGates": [{"name": PLACEMENT_GATE, "$patch": "delete"}],
        }
        if hostname:
            spec["nodeSelector"] = {HOSTNAME: hostname}
        path = kubeapi.PODS.path(namespace, name)
        pod = JobRef(namespace, name, "")
        return self._send(
            pod,
            "place pod",
            lambda: self.client.patch(path, {"spec": spec}, STRATEGIC_MERGE_PATCH),
            guarded=False,
        )

    def _clear_start(self, job: JobRef) -> Outcome:
        """Unset status.startTime of a suspended Job, so its pod template may change again
        (what the Job controller does itself under MutableSchedulingDirectivesForSuspendedJobs)."""
        path = job_path(job.namespace, job.name) + "/status"
        body = {"metadata": {"uid": job.uid}, "status": {"startTime": None}}
        return self._send(job, "clear start", lambda: self.client.patch(path, body), guarded=False)

    def _patch(self, job: JobRef, ops: list[dict[str, Any]], what: str) -> Outcome:
        """Send a JSON Patch whose `test`s guard it, retried; a failed `test` (422) means the
        Job is not what the plan saw ("conflict"), 404 that it is gone."""
        path = job_path(job.namespace, job.name)
        return self._send(
            job,
            what,
            lambda: self.client.request("PATCH", path, ops, content_type=JSON_PATCH),
            guarded=True,
        )

    def suspend(self, job: JobRef) -> Outcome:
        return self._merge(
            job, {"metadata": {"uid": job.uid}, "spec": {"suspend": True}}, "suspend"
        )

    def mark_failed(self, job: JobRef, reason: str) -> Outcome:
        """Give up on a suspended gang that can never be admitted: `muster.dev/state: Failed`
        and why (`muster.dev/failed-reason`); it stays suspended and counts nowhere."""
        annotations = {STATE: gangstate.FAILED, FAILED_REASON: reason}
        body = {"metadata": {"uid": job.uid, "annotations": annotations}}
        return self._merge(job, body, "fail")

    def _merge(self, job: JobRef, body: Mapping[str, Any], what: str) -> Outcome:
        path = job_path(job.namespace, job.name)
        return self._send(job, what, lambda: self.client.patch(path, body), guarded=False)

    def _send(
        self, job: JobRef, what: str, send: Callable[[], dict[str, Any]], *, guarded: bool
    ) -> Outcome:
        """One write to a Job, retried; its outcome. ``guarded``: a JSON Patch whose failed
        `test` (422) means the Job is not what the plan saw ("conflict")."""
        self.on_write(what.replace(" ", "-"))
        try:
            self._retrying(f"{what} {job.namespace}/{job.name}", send)
        except ApiError as exc:
            if exc.status == 404:
                return "gone"
            if guarded and exc.status == 422:
                log.info("%s %s/%s: not applied: %s", what, job.namespace, job.name, exc.message)
                return "conflict"
            log.warning("%s %s/%s refused: %s", what, job.namespace, job.name, exc)
            return "refused"
        except OSError as exc:
            log.warning("%s %s/%s failed: %s", what, job.namespace, job.name, exc)
            return "refused"
        return "ok"

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._retrying(
                f"get {namespace}/{name}", lambda: self.client.get(job_path(namespace, name))
            )
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def patch_queue_status(self, name: str, status: Mapping[str, Any]) -> None:
        self.on_write("queue-status")
        try:
            self._retrying(
                f"queue {name} status",
                lambda: self.client.patch(f"{QUEUES}/{name}/status", {"status": status}),
            )
        except (ApiError, OSError) as exc:
            log.info("queue %s status not written: %s", name, exc)

    # -- events --------------------------------------------------------------------------

    def event(
        self, job: JobRef, reason: str, message: str, kind: Literal["Normal", "Warning"]
    ) -> None:
        """Queue an Event on the Job; sent by background threads, dropped if the backlog is full."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {
            "metadata": {"generateName": f"{job.name}.", "namespace": job.namespace},
            "involvedObject": {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": job.name,
                "namespace": job.namespace,
                "uid": job.uid,
            },
            "reason": reason,
            "message": message[:1000],
            "type": kind,
            "source": {"component": "muster"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._events.put_nowait((kubeapi.EVENTS.path(job.namespace), body))
        except stdqueue.Full:
            self.on_event_dropped()

    def _send_events(self) -> None:
        while True:
            item = self._events.get()
            if item is None:
                return
            path, body = item
            self.on_write("event")
            try:
                self.client.create(path, body)
            except (ApiError, OSError) as exc:
                log.debug("event not sent: %s", exc)
