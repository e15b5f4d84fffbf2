"""What the controller's cache keeps of a managed gang object (a Job, a MiniCluster's Job, a
JobSet): its `JobRecord`, read from the object by its kind's adapter
(`policies.kinds.reading.read_gang`), with the controller's own bookkeeping beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from policies import Gang, gangstate
from policies.devices import DeviceCatalog, GangClaims, with_devices
from policies.gangstate import GangState
from policies.kinds.job import JOB
from policies.kinds.kind import Kind, PodTemplate
from policies.kinds.nativegroups import GroupLink
from policies.kinds.pinning import Original
from policies.kinds.reading import Reading, read_gang
from policies.kinds.registry import owner_of
from policies.phase import eviction_counts, marked_failed
from policies.vocabulary import (
    ADMITTED,
    CLOG_TIMEOUT,
    ELASTIC_AFTER,
    EVICTED_REASON,
    EVICTIONS,
    FAILED_REASON,
    GANG,
    GANG_KIND,
    MIN_MEMBERS,
    PLACEMENT,
    PREEMPTED_BY,
    PREEMPTIONS,
    PRIORITY,
    QUEUE,
    REQUEUE_AT,
    RESTORE,
    STATE,
    SUBMITTED,
)


@dataclass(slots=True)
class JobRecord:
    """What the cache keeps of one muster-managed gang object (its kind: `object_kind`)."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    gang: Gang
    queue: str
    suspended: bool
    admitted_at: float | None  # from the muster.dev/admitted annotation
    admitted_size: int
    evictions: int
    failed_state: bool  # muster.dev/state: Failed
    finished: bool  # the kind's status says it ended (a Job's Complete or Failed condition)
    ready: int
    succeeded: int
    clog_timeout: float | None
    requeue_at: float
    kind: str
    gang_label: str
    parse_error: str | None = None
    evicted_reason: str = ""
    """muster.dev/evicted-reason: why it was last suspended by muster (Preempted, Clogged, ...)."""
    preempted_by: str = ""
    """muster.dev/preempted-by: the message of its last preemption, naming the preemptor."""
    failed_reason: str = ""
    """muster.dev/failed-reason: why muster gave up on a gang that can never be admitted."""
    original: Original | None = None
    """The fields admission changes, as the user wrote them (muster.dev/restore, else the
    spec): what eviction puts back."""
    pinned: dict[str, dict[str, int]] = field(default_factory=dict)
    """muster.dev/placement: pod set -> the planned nodes its pods go to while admitted."""
    object_kind: Kind = JOB
    """The kind of the object this record is read from and written to (a MiniCluster's gang
    object is a Job: `kind` names the MiniCluster)."""
    templates: tuple[PodTemplate, ...] = ()
    """The object's pod templates, one per pod set: their names, pointers and counts (not their
    contents, which a release does not read: thousands of records are kept)."""
    owner: tuple[Kind, str] | None = None
    """The object that made the gang object, when it is of a kind muster admits that does not
    hold itself (a MiniCluster): some writes go to it (`Kind.resize_owner`)."""
    spec: Mapping[str, Any] = field(default_factory=dict)
    """The spec's own scalar fields as last read (a Job's parallelism, completions and mode:
    what a release's elastic size is worked out from), not its templates."""
    links: tuple[GroupLink, ...] = ()
    """Its pod templates' links to the PodGroups muster named for it: a native gang, released
    through them where the cluster serves PodGroups (`policies.kinds.nativegroups`); empty: pins."""
    restore_pending: bool = False
    """muster.dev/restore is on the object while it is suspended and not admitted: what an
    eviction put in place is still to be put back (its pods were still active)."""
    active_pods: int = 0
    """Pods its kind's controller still counts as running (`KindStatus.active`)."""
    started: bool = False
    """status.startTime is set: the pod template cannot change until it is cleared."""
    source: tuple[object, ...] = ()
    """What the record was read from besides the status (uid, generation, the labels and
    annotations muster reads): an event that changes only the status reuses everything else
    (see `job_record`)."""
    start_time: float | None = None
    """status.startTime: when the Job last started (Kubernetes clears it on suspend)."""
    end_time: float | None = None
    """When it finished: status.completionTime, else its Failed condition's transition time."""
    live_size: int = 0
    """Pods the object asks for as it is now (`policies.kinds.reading.Reading.live_size`):
    more than `admitted_size` is a gang that outgrew its admission."""
    incomplete: str | None = None
    """The gang object is not whole yet (`KindStatus.incomplete`: a pod group whose pods do not
    all exist): it waits out of the plan with this reason until `incomplete_until`."""
    incomplete_until: float | None = None
    # Controller-side bookkeeping (not from the object).
    local_admit: tuple[float, int] | None = field(default=None)
    reached_min: bool = False
    below_min_since: float | None = None
    advanced: int | None = None
    """The clog clock's highest start measure of the gang's pods (policies.lifecycle)."""
    advanced_at: float | None = None
    started_at: float | None = None
    """When the cache saw the admitted gang's minimum of pods ready (its start, for history)."""
    devices: DeviceReading | None = None
    """What its pods claim through DRA, to add their devices again when the claims' objects
    change (`with_claims`); None: no claim, or no DeviceClass mapped."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def admission(self) -> tuple[float, int] | None:
        """(time, size) of the admission in force: the object's, or ours still in flight."""
        if self.admitted_at is not None:
            return self.admitted_at, self.admitted_size
        return self.local_admit

    @property
    def active(self) -> bool:
        """Admitted and not finished: holds quota and nodes."""
        return self.admission is not None and not self.finished

    def state(self, now: float) -> GangState:
        """Where the gang stands, in the gang state vocabulary (`policies.gangstate`)."""
        if self.finished:
            return gangstate.FINISHED
        if self.failed_state:
            return gangstate.FAILED
        if self.admission is not None:
            enough = self.ready + self.succeeded >= self.gang.min
            return gangstate.RUNNING if enough else gangstate.ADMITTED
        if self.requeue_at > now:
            return gangstate.BACKING_OFF
        return gangstate.PENDING


_READ_LABELS: Final = (QUEUE, MIN_MEMBERS, PRIORITY, ELASTIC_AFTER, CLOG_TIMEOUT)
_READ_ANNOTATIONS: Final = (
    QUEUE,
    SUBMITTED,
    ADMITTED,
    MIN_MEMBERS,
    PRIORITY,
    ELASTIC_AFTER,
    CLOG_TIMEOUT,
    REQUEUE_AT,
    EVICTIONS,
    STATE,
    GANG_KIND,
    EVICTED_REASON,
    FAILED_REASON,
    PREEMPTIONS,
    PREEMPTED_BY,
    PLACEMENT,
    RESTORE,
)
"""Every label and annotation `job_record` reads (keep in step with it)."""


def _status_only(previous: JobRecord, body: Mapping[str, Any]) -> JobRecord:
    status = previous.object_kind.status(body)
    return replace(
        previous,
        resource_version=(body.get("metadata") or {}).get("resourceVersion") or "",
        finished=status.finished,
        ready=status.ready,
        succeeded=status.succeeded,
        started=status.started,
        active_pods=status.active,
        start_time=status.start_time,
        end_time=status.end_time,
        incomplete=status.incomplete,
        incomplete_until=status.incomplete_until,
    )


@dataclass(frozen=True, slots=True)
class DeviceReading:
    """A gang as read before its claims' devices were added, and its claims."""

    gang: Gang
    problem: str | None
    """What reading the object found malformed (it outranks a claim that cannot be counted)."""
    claims: GangClaims


def with_claims(record: JobRecord, catalog: DeviceCatalog) -> JobRecord:
    """`record` with its claims' devices as `catalog` counts them now (a template that came,
    a DeviceClass that changed), or unchanged when it claims nothing."""
    reading = record.devices
    if reading is None:
        return record
    gang, problem = with_devices(reading.gang, reading.claims, catalog)
    return replace(record, gang=gang, queue=gang.queue, parse_error=reading.problem or problem)


def job_record(
    body: Mapping[str, Any],
    previous: JobRecord | None = None,
    kind: Kind = JOB,
    devices: DeviceCatalog | None = None,
) -> JobRecord:
    """The record of a managed gang object of ``kind``. Malformed muster fields are kept in
    `parse_error` (the gang then never gets admitted and its status says why) rather than
    raised.

    With `previous` (the record of an earlier version of the same object), an event that
    changed only its status (most events: pods becoming ready, succeeding) reuses the parsed
    gang instead of parsing the pod templates and every annotation again."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    source = (
        kind.name,
        meta.get("uid"),
        meta.get("generation"),
        *(labels.get(key) for key in _READ_LABELS),
        *(annotations.get(key) for key in _READ_ANNOTATIONS),
    )
    if previous is not None and previous.source == source:
        return _status_only(previous, body)
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    reading = read_gang(kind, namespace, name, spec, labels, annotations)
    marks, templates = reading.marks, reading.templates
    gang, problem, device_reading = _claimed(reading, devices)
    first: Mapping[str, Any] = templates[0].template if templates else {}
    pod_labels: Mapping[str, str] = (first.get("metadata") or {}).get("labels") or {}
    counts = eviction_counts(annotations)
    status = kind.status(body)
    return JobRecord(
        namespace=namespace,
        name=name,
        uid=meta.get("uid") or "",
        resource_version=meta.get("resourceVersion") or "",
        gang=gang,
        queue=gang.queue,
        suspended=bool(spec.get("suspend")),
        admitted_at=marks.admitted_at,
        admitted_size=marks.admitted_size,
        evictions=counts.evictions,
        failed_state=marked_failed(annotations),
        finished=status.finished,
        ready=status.ready,
        succeeded=status.succeeded,
        clog_timeout=reading.fields.clog_timeout,
        requeue_at=counts.requeue_at,
        kind=gang.kind,
        gang_label=pod_labels.get(GANG) or name,
        parse_error=problem,
        source=source,
        evicted_reason=annotations.get(EVICTED_REASON, ""),
        preempted_by=annotations.get(PREEMPTED_BY, ""),
        failed_reason=annotations.get(FAILED_REASON, ""),
        original=marks.original,
        pinned=marks.pinned,
        object_kind=kind,
        owner=_owner(meta),
        restore_pending=(
            RESTORE in annotations and bool(spec.get("suspend")) and ADMITTED not in annotations
        ),
        templates=tuple(PodTemplate(t.name, t.pointer, t.count, {}) for t in templates),
        links=reading.links,
        spec={key: value for key, value in spec.items() if not isinstance(value, dict | list)},
        started=status.started,
        active_pods=status.active,
        start_time=status.start_time,
        end_time=status.end_time,
        live_size=reading.live_size,
        incomplete=status.incomplete,
        incomplete_until=status.incomplete_until,
        devices=device_reading,
    )


def _claimed(
    reading: Reading, devices: DeviceCatalog | None
) -> tuple[Gang, str | None, DeviceReading | None]:
    """The gang with its claims' devices (with `devices`: a DeviceClass is mapped), the
    problem it waits with, and what `with_claims` needs to count them again."""
    if reading.claims is None or devices is None:
        return reading.gang, reading.problem, None
    gang, problem = with_devices(reading.gang, reading.claims, devices)
    again = DeviceReading(reading.gang, reading.problem, reading.claims)
    return gang, reading.problem or problem, again


def _owner(meta: Mapping[str, Any]) -> tuple[Kind, str] | None:
    """See `JobRecord.owner`."""
    owner = owner_of(meta)
    return owner if owner is not None and not owner[0].holds_itself else None
