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
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

from admission.gangs import format_admitted, format_time
from admission.kubeapi import ApiError, KubeClient
from policies.vocabulary import (
    ADMITTED,
    EVICTED_REASON,
    EVICTIONS,
    PREEMPTED_BY,
    PREEMPTIONS,
    REQUEUE_AT,
    STATE,
)

log = logging.getLogger("muster.writes")
T = TypeVar("T")

JSON_PATCH: Final = "application/json-patch+json"
RETRYABLE: Final = frozenset({409, 429, 500, 502, 503, 504})
QUEUES: Final = "/apis/muster.dev/v1alpha1/queues"

Outcome = Literal["ok", "gone", "refused", "conflict"]


def job_path(namespace: str, name: str) -> str:
    return f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}"


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


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
        event_backlog: int = 2000,
    ) -> None:
        self.client = client
        self.attempts = attempts
        self.pool = ThreadPoolExecutor(concurrency, thread_name_prefix="muster-write")
        self.on_retry = on_retry or (lambda code: None)
        self.on_event_dropped = on_event_dropped or (lambda: None)
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

    def close(self) -> None:
        for _ in self._event_threads:
            self._events.put(None)
        for thread in self._event_threads:
            thread.join(timeout=5)
        self.pool.shutdown(wait=True)

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

    def admit(self, job: JobRef, when: float, size: int, parallelism: int | None) -> Outcome:
        """Unsuspend with the admitted annotation, only if the Job is still suspended.

        The JSON Patch `test` makes this safe against a stale cache (a restarted or second
        controller): a Job someone already unsuspended is not admitted again.
        """
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/uid", "value": job.uid},
            {"op": "test", "path": "/spec/suspend", "value": True},
            {"op": "replace", "path": "/spec/suspend", "value": False},
            {
                "op": "add",
                "path": f"/metadata/annotations/{_escape(ADMITTED)}",
                "value": format_admitted(when, size),
            },
        ]
        if parallelism is not None:
            ops.append({"op": "replace", "path": "/spec/parallelism", "value": parallelism})
        return self._patch(job, ops, "admit")

    def evict(
        self,
        job: JobRef,
        *,
        evictions: int,
        requeue_at: float,
        reason: str,
        failed: bool,
        parallelism: int | None,
    ) -> Outcome:
        """Suspend again (the Job controller deletes the pods) and record why and until when."""
        annotations: dict[str, Any] = {
            ADMITTED: None,
            EVICTIONS: str(evictions),
            REQUEUE_AT: format_time(requeue_at),
            EVICTED_REASON: reason,
        }
        if failed:
            annotations[STATE] = "Failed"
        spec: dict[str, Any] = {"suspend": True}
        if parallelism is not None:
            spec["parallelism"] = parallelism
        body = {"metadata": {"uid": job.uid, "annotations": annotations}, "spec": spec}
        return self._merge(job, body, "evict")

    def preempt(
        self, job: JobRef, *, preemptions: int, message: str, parallelism: int | None
    ) -> Outcome:
        """Suspend a preemption's victim (the Job controller deletes its pods) and record it.

        Only while it is still admitted and not suspended (JSON Patch `test`s, like `admit`): a
        Job that changed under a stale plan is not touched ("conflict"). No requeue time and
        no eviction counted: the victim is planned again at once at its submission stamp.
        """
        annotations = "/metadata/annotations/{}"
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/uid", "value": job.uid},
            {"op": "test", "path": "/spec/suspend", "value": False},
            {"op": "remove", "path": annotations.format(_escape(ADMITTED))},
            {"op": "replace", "path": "/spec/suspend", "value": True},
            {
                "op": "add",
                "path": annotations.format(_escape(PREEMPTIONS)),
                "value": str(preemptions),
            },
            {"op": "add", "path": annotations.format(_escape(PREEMPTED_BY)), "value": message},
            {
                "op": "add",
                "path": annotations.format(_escape(EVICTED_REASON)),
                "value": "Preempted",
            },
        ]
        if parallelism is not None:
            ops.append({"op": "replace", "path": "/spec/parallelism", "value": parallelism})
        return self._patch(job, ops, "preempt")

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

    def mark_failed(self, job: JobRef) -> Outcome:
        body = {"metadata": {"uid": job.uid, "annotations": {STATE: "Failed"}}}
        return self._merge(job, body, "fail")

    def _merge(self, job: JobRef, body: Mapping[str, Any], what: str) -> Outcome:
        path = job_path(job.namespace, job.name)
        return self._send(job, what, lambda: self.client.patch(path, body), guarded=False)

    def _send(
        self, job: JobRef, what: str, send: Callable[[], dict[str, Any]], *, guarded: bool
    ) -> Outcome:
        """One write to a Job, retried; its outcome. ``guarded``: a JSON Patch whose failed
        `test` (422) means the Job is not what the plan saw ("conflict")."""
        try:
            self._retrying(f"{what} {job.namespace}/{job.name}", send)
        except ApiError as exc:
            if exc.status == 404:
                return "gone"
            if guarded and exc.status == 422:
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
            self._events.put_nowait((f"/api/v1/namespaces/{job.namespace}/events", body))
        except stdqueue.Full:
            self.on_event_dropped()

    def _send_events(self) -> None:
        while True:
            item = self._events.get()
            if item is None:
                return
            path, body = item
            try:
                self.client.create(path, body)
            except (ApiError, OSError) as exc:
                log.debug("event not sent: %s", exc)
