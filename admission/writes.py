"""The controller's writes to the API: admit, evict, re-suspend, Events, Queue status.

All go through `kubeport.kubeapi.KubeClient` (the one API port) on a thread pool, so the event
loop never blocks on the network. Transient failures (409 for a stale view, 429, 5xx, timeouts,
dropped connections) are retried with exponential backoff; what is finally refused is reported
to the caller, which rolls its optimistic cache update back.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

from admission.eventsender import EventSender
from kubeport import kubeapi
from kubeport.kubeapi import APPLY_PATCH, STRATEGIC_MERGE_PATCH, ApiError, KubeClient
from kubeport.streamwatch import list_collection
from policies import gangstate
from policies.kinds import JOB, Kind, members
from policies.kinds.kind import ApiKind
from policies.kinds.nativegroups import min_count_of
from policies.kinds.pinning import HOSTNAME, PLACEMENT_GATE, Original, PinError
from policies.kinds.registry import owner_of, pod_gang
from policies.kinds.release import (
    Write,
    evict_writes,
    leave_writes,
    preempt_writes,
    requeue_writes,
    restore_writes,
)
from policies.kinds.writes import Target
from policies.vocabulary import FAILED_REASON, GANG, STATE

if TYPE_CHECKING:
    from admission.gangs import JobRecord

log = logging.getLogger("muster.writes")
T = TypeVar("T")

JSON_PATCH: Final = "application/json-patch+json"
RETRYABLE: Final = frozenset({409, 429, 500, 502, 503, 504})
QUEUES: Final = kubeapi.QUEUES.path()
APPLY_PARAMS: Final = {"fieldManager": "muster", "force": "true"}

Outcome = Literal["ok", "gone", "refused", "conflict", "later"]
"""later: a restore that must wait until the object's pods are gone (`restore_writes`)."""

Spawn = Callable[[Coroutine[Any, Any, object]], None]
"""Starts a write's coroutine as a task the controller holds until it is done (a task nobody
holds may be collected while it runs), and awaits at stop (`Controller.inflight`)."""


def owner_of_gang(body: Mapping[str, Any]) -> tuple[Kind, str] | None:
    """The owner a gang object's writes may go to (see `JobRecord.owner`)."""
    owner = owner_of(body.get("metadata") or {})
    return owner if owner is not None and not owner[0].holds_itself else None


def resource_of(kind: Kind) -> kubeapi.Resource:
    """Where the API serves a gang object kind's objects."""
    return resource_at(kind.api)


def resource_at(api: ApiKind) -> kubeapi.Resource:
    """Where the API serves a kind's objects (a gang object's, a PodGroup's, a GangRecord's)."""
    return kubeapi.Resource(api.group, api.version, api.plural)


RECORDS: Final = resource_at(members.RECORDS)
"""Gang records: what muster decided about a gang whose gang object is a set of pods."""


@dataclass(frozen=True)
class JobRef:
    """A gang object to write to: a write fails if its uid changed."""

    namespace: str
    name: str
    uid: str
    kind: Kind = JOB
    """The object's kind (a MiniCluster's gang object is its Job)."""
    owner: tuple[Kind, str] | None = None
    """The object that made it, of a kind muster admits (a MiniCluster), by kind and name."""
    version: str = ""
    """The resourceVersion it was read at (a pod gang's: its record's; guarded writes test it)."""

    @classmethod
    def of(cls, record: JobRecord) -> JobRef:
        """The gang object a record was read from."""
        return cls(
            record.namespace,
            record.name,
            record.uid,
            record.object_kind,
            record.owner,
            record.resource_version,
        )

    @property
    def path(self) -> str:
        return resource_of(self.kind).path(self.namespace, self.name)

    @property
    def owner_path(self) -> str | None:
        if self.owner is None:
            return None
        kind, name = self.owner
        return resource_of(kind).path(self.namespace, name)


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
        self.refusals: dict[str, str] = {}
        """The apiserver's last answer to a refused write, by the object's path (`refusal`)."""
        self.event_sender = EventSender(
            client,
            backlog=event_backlog,
            on_write=self.on_write,
            on_dropped=self.on_event_dropped,
        )

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def call_place(self, ref: str, hostname: str | None) -> Outcome:
        """`place_pod` on the placement pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.place_pool, self.place_pod, ref, hostname)

    def close(self) -> None:
        self.event_sender.close()
        self.pool.shutdown(wait=True)
        self.place_pool.shutdown(wait=True)

    # -- retry -------------------------------------------------------------------------

    def _retrying(
        self,
        what: str,
        send: Callable[[], dict[str, Any]],
        retry: frozenset[int] = RETRYABLE,
    ) -> dict[str, Any]:
        delay = 0.05
        for attempt in range(1, self.attempts + 1):
            try:
                return send()
            except ApiError as exc:
                if exc.status not in retry or attempt == self.attempts:
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

    def admit(self, ref: JobRef, writes: Sequence[Write]) -> Outcome:
        """Release a gang: the kind's writes (`policies.kinds.release.release_writes`), in
        order; the first that is not ok is the outcome. Its guarded JSON Patch `test`s make
        this safe against a stale cache (a restarted or second controller): an object someone
        already released is not admitted again ("conflict")."""
        return self.send(ref, writes)

    def evict(
        self,
        ref: JobRef,
        *,
        evictions: int,
        requeue_at: float,
        reason: str,
        failed: bool,
        restore: Original | None = None,
    ) -> Outcome:
        """Suspend again (the kind's controller deletes the pods), record why and until when,
        and put back what admission changed (`unpin`; to ``restore`` when given:
        `policies.kinds.release.as_changed`)."""
        gang = pod_gang(ref.kind)
        if gang is not None:  # its record says why; its released pods are deleted
            return self.send(
                ref,
                members.evict_writes(
                    gang,
                    ref.name,
                    evictions=evictions,
                    requeue_at=requeue_at,
                    reason=reason,
                    failed=failed,
                ),
            )
        writes = evict_writes(
            ref.uid,
            evictions=evictions,
            requeue_at=requeue_at,
            reason=reason,
            failed=failed,
            restore=restore,
        )
        outcome = self.send(ref, writes)
        if outcome == "ok":
            self._restore(ref)
        return outcome

    def requeue(self, ref: JobRef, *, reason: str, restore: Original | None) -> Outcome:
        """Give up the admission of a gang found suspended while admitted, only while it is
        still suspended, and put back what admission changed (to ``restore`` when given)."""
        outcome = self.send(ref, requeue_writes(ref.uid, reason=reason, restore=restore))
        if outcome == "ok":
            self._restore(ref)
        return outcome

    def leave(self, ref: JobRef, *, reason: str, admitted: bool) -> Outcome:
        """A gang object that left muster: suspended with its admission given up if it held
        one, then put back as it was before its release."""
        outcome = self.send(ref, leave_writes(ref.uid, reason=reason)) if admitted else "ok"
        if outcome == "ok":
            self._restore(ref)
        return outcome

    def preempt(self, ref: JobRef, *, preemptions: int, message: str) -> Outcome:
        """Suspend a preemption's victim (its pods go) and record it, only while it is still
        admitted and not suspended: an object that changed under a stale plan is not touched
        ("conflict"). No requeue time and no eviction counted: the victim is planned again at
        once at its submission stamp."""
        gang = pod_gang(ref.kind)
        if gang is not None:
            writes = members.preempt_writes(
                gang, ref.name, ref.version, preemptions=preemptions, message=message
            )
            return self.send(ref, writes)
        outcome = self.send(ref, preempt_writes(ref.uid, preemptions=preemptions, message=message))
        if outcome == "ok":
            self._restore(ref)
        return outcome

    def _restore(self, ref: JobRef) -> None:
        """`unpin` after a suspension; its failure is logged, not the suspension's outcome."""
        try:
            outcome = self.unpin(ref)
        except (ApiError, OSError) as exc:
            outcome = "refused"
            log.warning("restore %s/%s failed: %s", ref.namespace, ref.name, exc)
        if outcome == "later":
            log.info("restore %s/%s: after its pods are gone", ref.namespace, ref.name)
        elif outcome not in ("ok", "gone"):
            log.warning(
                "restore %s/%s: %s; the next admission re-pins from muster.dev/restore",
                ref.namespace,
                ref.name,
                outcome,
            )

    def unpin(self, ref: JobRef) -> Outcome:
        """Put a suspended gang object back as it was before admission: what
        `muster.dev/restore` saved (the kind's own fields, its pod templates' affinity and
        gates), and drop that and muster.dev/placement. Reads the object first: the object, not
        the cache, says what admission wrote. If a write fails, the next admission still finds
        muster.dev/restore and pins from the saved fields."""
        body = self.get_object(ref)
        if body is None:
            return "gone"
        ref = replace(ref, owner=owner_of_gang(body))
        meta = body.get("metadata") or {}
        if meta.get("uid") != ref.uid or not (body.get("spec") or {}).get("suspend"):
            return "conflict"
        try:
            writes = restore_writes(ref.kind, body)
        except PinError as exc:
            log.warning("restore %s/%s: %s; left as it is", ref.namespace, ref.name, exc)
            return "refused"
        if writes is None:
            return "later"
        return self.send(ref, writes)

    def send(self, ref: JobRef, writes: Sequence[Write]) -> Outcome:
        """Send a gang object's writes in order; the first outcome that is not ok ends it."""
        for write in writes:
            outcome = self._write(ref, write)
            if outcome != "ok":
                return outcome
        return "ok"

    def _write(self, ref: JobRef, write: Write) -> Outcome:
        if write.members:
            return delete_members(self, ref, write.members)
        if write.record:
            return write_record(self, ref, write)
        if write.target is not None:
            return self._apply(ref, write.target, write)
        base = ref.owner_path if write.owner else ref.path
        if base is None:
            log.warning("%s %s/%s: no owner to write to", write.what, ref.namespace, ref.name)
            return "refused"
        path = base + (f"/{write.subresource}" if write.subresource else "")
        if write.ops is not None:
            ops = write.ops
            return self._send(
                ref,
                write.what,
                lambda: self.client.request("PATCH", path, ops, content_type=JSON_PATCH),
                guarded=True,
            )
        body = write.body or {}
        return self._send(ref, write.what, lambda: self.client.patch(path, body), guarded=False)

    def _apply(self, ref: JobRef, target: Target, write: Write) -> Outcome:
        """Server-side apply of another object of the gang's namespace (a PodGroup): created
        if missing, else the fields muster owns set; muster is their one manager (force)."""
        path = resource_at(target.api).path(ref.namespace, target.name)
        body = write.body or {}
        outcome = self._send(
            replace(ref, name=target.name),
            write.what,
            lambda: self.client.request(
                "PATCH", path, body, content_type=APPLY_PATCH, params=APPLY_PARAMS
            ),
            guarded=False,
        )
        # Not found: the API is not served (any more); the gang is not released.
        return "refused" if outcome == "gone" else outcome

    def pod_group_counts(self) -> dict[tuple[str, str], int | None]:
        """The PodGroups muster made (labelled with their gang), by (namespace, name), and each
        one's gang minimum: one LIST, for the repair after a start
        (`admission.nativegangs.NativeGangs.repair`)."""
        items, _version = list_collection(
            self.client, kubeapi.POD_GROUPS.path(), {"labelSelector": GANG}
        )
        return {
            (str(meta.get("namespace") or ""), str(meta.get("name") or "")): min_count_of(item)
            for item in items
            if (meta := item.get("metadata") or {})
        }

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

    def suspend(self, job: JobRef) -> Outcome:
        return self._merge(
            job, {"metadata": {"uid": job.uid}, "spec": {"suspend": True}}, "suspend"
        )

    def mark_failed(self, job: JobRef, reason: str) -> Outcome:
        """Give up on a suspended gang that can never be admitted: `muster.dev/state: Failed`
        and why (`muster.dev/failed-reason`); it stays suspended and counts nowhere."""
        gang = pod_gang(job.kind)
        if gang is not None:  # on its record, made if it has none; its pods stay gated
            return self.send(job, members.fail_writes(gang, job.namespace, job.name, reason))
        annotations = {STATE: gangstate.FAILED, FAILED_REASON: reason}
        body = {"metadata": {"uid": job.uid, "annotations": annotations}}
        return self._merge(job, body, "fail")

    def _merge(self, job: JobRef, body: Mapping[str, Any], what: str) -> Outcome:
        path = job.path
        return self._send(job, what, lambda: self.client.patch(path, body), guarded=False)

    def _send(
        self,
        job: JobRef,
        what: str,
        send: Callable[[], dict[str, Any]],
        *,
        guarded: bool,
        precondition: bool = False,
    ) -> Outcome:
        """One write to a Job, retried; its outcome. ``guarded``: a JSON Patch whose failed
        `test` (422) means the object is not what the plan saw ("conflict"), not retried.
        ``precondition``: a write whose precondition failed (409: a resourceVersion, a uid, an
        object that exists already) is such a conflict too; otherwise a 409 is retried, as the
        apiserver's own optimistic-concurrency answers are."""
        self.on_write(what.replace(" ", "-"))
        retry = RETRYABLE - {409} if precondition else RETRYABLE
        conflicts = (409, 422) if precondition else (422,)
        try:
            self._retrying(f"{what} {job.namespace}/{job.name}", send, retry)
        except ApiError as exc:
            if exc.status == 404:
                return "gone"
            if (guarded or precondition) and exc.status in conflicts:
                log.info("%s %s/%s: not applied: %s", what, job.namespace, job.name, exc.message)
                return "conflict"
            log.warning("%s %s/%s refused: %s", what, job.namespace, job.name, exc)
            self.refusals[job.path] = f"HTTP {exc.status}: {exc.message}"
            return "refused"
        except OSError as exc:
            log.warning("%s %s/%s failed: %s", what, job.namespace, job.name, exc)
            return "refused"
        return "ok"

    def refusal(self, ref: JobRef) -> str:
        """Why the apiserver last refused a write to ``ref`` (and forget it)."""
        return self.refusals.pop(ref.path, "refused")

    def get_object(self, ref: JobRef) -> dict[str, Any] | None:
        """The gang object as the API holds it now (a pod gang's: its record); None if it is
        gone."""
        gang = pod_gang(ref.kind)
        path = RECORDS.path(ref.namespace, gang.record_name(ref.name)) if gang else ref.path
        try:
            return self._retrying(f"get {ref.namespace}/{ref.name}", lambda: self.client.get(path))
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
        """Queue an Event on the gang object; sent by background threads, dropped if the
        backlog is full."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {
            "metadata": {"generateName": f"{job.name}.", "namespace": job.namespace},
            "involvedObject": {
                "apiVersion": job.kind.api.api_version,
                "kind": job.kind.api.kind,
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
        self.event_sender.put(kubeapi.EVENTS.path(job.namespace), body)


def delete_members(writer: Writer, ref: JobRef, selector: str) -> Outcome:
    """Delete a pod gang's released members (each with its uid as precondition): read
    from the API, not the cache, so a pod released since the cache last heard goes too."""
    gang = pod_gang(ref.kind)
    assert gang is not None, ref.kind.name
    path = kubeapi.PODS.path(ref.namespace)
    try:
        pods = writer._retrying(
            f"list members {ref.namespace}/{ref.name}",
            lambda: writer.client.get(path, {"labelSelector": selector}),
        )["items"]
    except (ApiError, OSError) as exc:
        log.warning("evict %s/%s: cannot list its pods: %s", ref.namespace, ref.name, exc)
        return "refused"
    outcome: Outcome = "ok"
    uids = {p["metadata"]["name"]: p["metadata"].get("uid") for p in pods}
    for name in members.members_of(gang, ref.namespace, ref.name, pods):
        pod = kubeapi.PODS.path(ref.namespace, name)
        body = {"preconditions": {"uid": uids[name]}}
        sent = writer._send(
            JobRef(ref.namespace, name, ""),
            "delete member",
            lambda pod=pod, body=body: writer.client.request("DELETE", pod, body),  # type: ignore[misc]
            guarded=True,
            precondition=True,
        )
        if sent not in ("ok", "gone", "conflict"):
            outcome = sent
    return outcome


def write_record(writer: Writer, ref: JobRef, write: Write) -> Outcome:
    """A write to a pod gang's record: created (a conflict if it exists), or merge-patched
    (guarded: a conflict if it changed since it was read; with `missing`: created if it
    does not exist)."""
    body = write.body or {}
    if write.create:
        collection = RECORDS.path(ref.namespace)
        return writer._send(
            ref,
            write.what,
            lambda: writer.client.create(collection, body),
            guarded=True,
            precondition=True,
        )
    path = RECORDS.path(ref.namespace, write.record)
    outcome = writer._send(
        ref,
        write.what,
        lambda: writer.client.patch(path, body),
        guarded=write.guarded,
        precondition=write.guarded,
    )
    if outcome == "gone" and write.missing is not None:
        made, collection = write.missing, RECORDS.path(ref.namespace)
        outcome = writer._send(
            ref,
            write.what,
            lambda: writer.client.create(collection, made),
            guarded=True,
            precondition=True,
        )
    return outcome
