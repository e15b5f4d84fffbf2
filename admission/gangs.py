"""The gang adapter: what muster reads from a Job (or a MiniCluster's Job), a Pod, a Node, a Queue.

Pure functions from API objects (plain dicts, as the watch delivers them) to compact records the
cache keeps. Nothing here talks to the API. A MiniCluster's gang is its Job: the webhook labels
that Job through the MiniCluster's `jobLabels` (queue, min-members, priority, elastic-after,
clog-timeout) and stamps it with the MiniCluster's submission stamp, so one adapter serves both
kinds.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from admission.pinning import PLACEMENT_GATE, Original, PinError, decode_placement
from policies import (
    Gang,
    Node,
    Queue,
    Resources,
    SubmitStamp,
    Taint,
    Toleration,
    gangstate,
)
from policies.durations import (
    DurationError,
    parse_runtime_limit,
)
from policies.gangstate import GangState
from policies.kinds import JOB, FieldError, GangFields, job_size_of, kind_named, queue_of
from policies.model import NodeTerm
from policies.phase import (
    condition_true,
    eviction_counts,
    job_finished,
    marked_failed,
    parse_time,
)
from policies.queuespec import parse_queue
from policies.selectors import LabelSelector, parse_label_selector
from policies.submitted import StampError, parse_stamp
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

HOSTNAME: Final = "kubernetes.io/hostname"


class GangParseError(ValueError):
    """A managed Job whose muster.dev/* fields cannot be read; the message says which."""


def format_time(seconds: float) -> str:
    """RFC3339 UTC with microseconds, e.g. 2026-01-02T03:04:05.123456Z."""
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def format_admitted(seconds: float, size: int) -> str:
    """The `muster.dev/admitted` value: `<RFC3339 time>/<admitted size>`."""
    return f"{format_time(seconds)}/{size}"


def parse_admitted(value: str) -> tuple[float, int]:
    """(time, size) from a `muster.dev/admitted` value; raise GangParseError if malformed."""
    when, _, size = value.partition("/")
    try:
        return parse_time(when), int(size)
    except ValueError:
        raise GangParseError(
            f"annotation {ADMITTED}: {value!r} is not of the form 2026-01-02T03:04:05.000000Z/8"
        ) from None


def _requests(spec: Mapping[str, Any]) -> Resources:
    """A pod's requests: the sum over containers, at least the largest init container."""
    total = Resources()
    for container in spec.get("containers") or []:
        requests = (container.get("resources") or {}).get("requests") or {}
        if requests:
            total = total + Resources.parse(requests, field="resources.requests")
    for container in spec.get("initContainers") or []:
        requests = (container.get("resources") or {}).get("requests") or {}
        if requests:
            init = Resources.parse(requests, field="initContainers.resources.requests")
            total = Resources({r: max(total[r], init[r]) for r in set(total) | set(init)})
    return total


def _tolerations(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(
            key=t.get("key") or "",
            operator="Exists" if t.get("operator") == "Exists" else "Equal",
            value=t.get("value") or "",
            effect=t.get("effect") or "",
        )
        for t in spec.get("tolerations") or []
    )


def _one_pod_per_node(
    spec: Mapping[str, Any], labels: Mapping[str, str], *, preferred: bool = False
) -> bool:
    """True when the pod template has required anti-affinity to its own pods per hostname.

    With `preferred` (a kind that `spreads`: a MiniCluster's Job), a preferred anti-affinity
    counts too (see `policies.kinds.minicluster.MiniClusterKind.spreads`).
    """
    anti = (spec.get("affinity") or {}).get("podAntiAffinity") or {}
    terms = list(anti.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
    if preferred:
        terms.extend(
            weighted.get("podAffinityTerm") or {}
            for weighted in anti.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        )
    return any(
        term.get("topologyKey") == HOSTNAME and _selects(term.get("labelSelector") or {}, labels)
        for term in terms
    )


def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """True when a non-empty label selector (matchLabels, `In` expressions) matches `labels`."""
    wanted = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not wanted and not expressions:
        return False
    if not all(labels.get(k) == v for k, v in wanted.items()):
        return False
    return all(
        e.get("operator") == "In" and labels.get(e.get("key", "")) in (e.get("values") or [])
        for e in expressions
    )


@dataclass(slots=True)
class JobRecord:
    """What the cache keeps of one muster-managed Job (the gang's adapter object)."""

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
    finished: bool  # Job condition Complete or Failed
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
    pinned: dict[str, int] = field(default_factory=dict)
    """muster.dev/placement: the planned nodes the pod template is pinned to while admitted."""
    indexed: bool = False
    """spec.completionMode Indexed: an elastic admission lowers completions with parallelism."""
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
    # Controller-side bookkeeping (not from the object).
    local_admit: tuple[float, int] | None = field(default=None)
    reached_min: bool = False
    below_min_since: float | None = None
    advanced: int | None = None
    """The clog clock's highest start measure of the gang's pods (policies.lifecycle)."""
    advanced_at: float | None = None
    started_at: float | None = None
    """When the cache saw the admitted gang's minimum of pods ready (its start, for history)."""

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


def node_terms(affinity: Mapping[str, Any] | None) -> tuple[NodeTerm, ...]:
    """The required node affinity's terms as the planner matches them (matchExpressions;
    `matchFields` name single nodes, which the planner does not model, and are left out)."""
    required = ((affinity or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms: list[NodeTerm] = []
    for term in required.get("nodeSelectorTerms") or []:
        terms.append(
            tuple(
                (
                    str(e.get("key") or ""),
                    str(e.get("operator") or ""),
                    tuple(str(v) for v in e.get("values") or ()),
                )
                for e in term.get("matchExpressions") or []
            )
        )
    return tuple(terms)


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
    status = body.get("status") or {}
    return replace(
        previous,
        resource_version=(body.get("metadata") or {}).get("resourceVersion") or "",
        finished=job_finished(status),
        ready=int(status.get("ready") or 0),
        succeeded=int(status.get("succeeded") or 0),
        started=status.get("startTime") is not None,
        start_time=status_time(status.get("startTime")),
        end_time=_end_time(status),
    )


def status_time(value: object) -> float | None:
    """A status timestamp (RFC3339) in seconds, or None when unset or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


def _end_time(status: Mapping[str, Any]) -> float | None:
    """When a finished Job ended: completionTime (set on success), else the Complete or
    Failed condition's lastTransitionTime (a Job failed by its deadline has no completionTime).
    None while it runs."""
    completion = status_time(status.get("completionTime"))
    if completion is not None:
        return completion
    for condition in status.get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return status_time(condition.get("lastTransitionTime"))
    return None


def job_record(body: Mapping[str, Any], previous: JobRecord | None = None) -> JobRecord:
    """The record of a managed Job. Malformed muster fields are kept in `parse_error` (the gang
    then never gets admitted and its status says why) rather than raised.

    With `previous` (the record of an earlier version of the same Job), an event that changed
    only the Job's status (most events: pods becoming ready, succeeding) reuses the parsed
    gang instead of parsing the pod template and every annotation again."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    source = (
        meta.get("uid"),
        meta.get("generation"),
        *(labels.get(key) for key in _READ_LABELS),
        *(annotations.get(key) for key in _READ_ANNOTATIONS),
    )
    if previous is not None and previous.source == source:
        return _status_only(previous, body)
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    pod_labels: Mapping[str, str] = ((spec.get("template") or {}).get("metadata") or {}).get(
        "labels"
    ) or {}
    problem, admission, fields, gang = _read_gang(namespace, name, spec, labels, annotations)
    counts = eviction_counts(annotations)
    return JobRecord(
        namespace=namespace,
        name=name,
        uid=meta.get("uid") or "",
        resource_version=meta.get("resourceVersion") or "",
        gang=gang,
        queue=gang.queue,
        suspended=bool(spec.get("suspend")),
        admitted_at=admission.admitted_at,
        admitted_size=admission.admitted_size,
        evictions=counts.evictions,
        failed_state=marked_failed(annotations),
        finished=job_finished(status),
        ready=int(status.get("ready") or 0),
        succeeded=int(status.get("succeeded") or 0),
        clog_timeout=fields.clog_timeout,
        requeue_at=counts.requeue_at,
        kind=gang.kind,
        gang_label=pod_labels.get(GANG) or name,
        parse_error=problem.message,
        source=source,
        evicted_reason=annotations.get(EVICTED_REASON, ""),
        preempted_by=annotations.get(PREEMPTED_BY, ""),
        failed_reason=annotations.get(FAILED_REASON, ""),
        original=admission.original,
        pinned=admission.pinned,
        indexed=spec.get("completionMode") == "Indexed",
        started=status.get("startTime") is not None,
        start_time=status_time(status.get("startTime")),
        end_time=_end_time(status),
    )


def gang_of(body: Mapping[str, Any]) -> Gang:
    """The gang `job_record(body).gang` is, read without the rest of the record (the status,
    eviction counts, the pin): what the webhook's never-fits screen asks about at create, about
    a third of `job_record`'s cost."""
    meta = body.get("metadata") or {}
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    return _read_gang(namespace, name, body.get("spec") or {}, labels, annotations)[3]


def _read_gang(
    namespace: str,
    name: str,
    spec: Mapping[str, Any],
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
) -> tuple[_Problem, _Admission, GangFields, Gang]:
    """What `job_record` and `gang_of` both read: the admission annotations (the spec as the
    user wrote it), the gang fields and the planner's gang, and the last malformed field."""
    problem = _Problem()
    admission = _admission_annotations(spec, annotations, problem)
    fields, gang = _gang(namespace, name, spec, labels, annotations, admission.original, problem)
    return problem, admission, fields, gang


class _Problem:
    """The message of a malformed field of the Job being read (the last one read wins): the
    record's `parse_error`."""

    __slots__ = ("message",)

    def __init__(self) -> None:
        self.message: str | None = None


@dataclass(frozen=True, slots=True)
class _Admission:
    original: Original
    pinned: dict[str, int]
    admitted_at: float | None
    admitted_size: int


def _admission_annotations(
    spec: Mapping[str, Any], annotations: Mapping[str, str], problem: _Problem
) -> _Admission:
    """What admission wrote: the original fields (`muster.dev/restore`), the pin
    (`muster.dev/placement`), the admission time and size (`muster.dev/admitted`)."""
    # An admitted elastic Job has its parallelism (and completions) lowered: its gang is the
    # size it had before admission, saved in muster.dev/restore.
    original = Original.of(spec)
    if RESTORE in annotations:
        try:
            original = Original.decode(annotations[RESTORE], f"annotation {RESTORE}")
        except PinError as exc:
            problem.message = str(exc)
    pinned: dict[str, int] = {}
    if PLACEMENT in annotations:
        try:
            pinned = decode_placement(annotations[PLACEMENT], f"annotation {PLACEMENT}")
        except PinError as exc:
            problem.message = str(exc)
    admitted_at: float | None = None
    admitted_size = 0
    if ADMITTED in annotations:
        try:
            admitted_at, admitted_size = parse_admitted(annotations[ADMITTED])
        except GangParseError as exc:
            problem.message = str(exc)
    return _Admission(original, pinned, admitted_at, admitted_size)


def _gang(
    namespace: str,
    name: str,
    spec: Mapping[str, Any],
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    original: Original,
    problem: _Problem,
) -> tuple[GangFields, Gang]:
    """The gang fields (read as the webhook reads them) and the planner's gang."""
    size = max(job_size_of(original.parallelism, original.completions), 1)
    # The gang fields, read as the webhook reads them (one adapter: policies.kinds), from the
    # Job as the user wrote it; a bad one keeps the gang waiting with the webhook's refusal.
    as_written = {
        **spec,
        "parallelism": original.parallelism,
        "completions": original.completions,
    }
    try:
        _, fields = JOB.gang_fields(
            {"metadata": {"labels": labels, "annotations": annotations}, "spec": as_written}
        )
    except FieldError as exc:
        problem.message = str(exc)
        fields = GangFields(size)
    try:
        stamp = parse_stamp(annotations.get(SUBMITTED, ""), f"{namespace}/{name}")
    except StampError as exc:
        problem.message = str(exc)
        stamp = SubmitStamp(0.0, 0, f"{namespace}/{name}")
    # A MiniCluster's spec.deadlineSeconds reaches its Job here (the operator copies it).
    runtime_limit: float | None = None
    try:
        runtime_limit = parse_runtime_limit(
            spec.get("activeDeadlineSeconds"), "spec.activeDeadlineSeconds"
        )
    except DurationError as exc:
        problem.message = str(exc)
    preemptions = _preemptions(annotations, problem)
    template = spec.get("template") or {}
    pod_spec = template.get("spec") or {}
    pod_labels: Mapping[str, str] = (template.get("metadata") or {}).get("labels") or {}
    try:
        requests = _requests(pod_spec)
    except ValueError as exc:
        problem.message = str(exc)
        requests = Resources()
    kind = kind_named(annotations.get(GANG_KIND))
    gang = Gang(
        id=f"{namespace}/{name}",
        queue=queue_of(labels),
        pod_requests=requests,
        size=size,
        min_size=fields.minimum if fields.minimum < size else None,
        priority=fields.priority,
        elastic_after=fields.elastic_after,
        submitted=stamp,
        one_pod_per_node=_one_pod_per_node(pod_spec, pod_labels, preferred=kind.spreads),
        node_selector=dict(pod_spec.get("nodeSelector") or {}),
        tolerations=_tolerations(pod_spec),
        # The user's own required node affinity: from the saved original, not the pin.
        node_terms=node_terms(original.affinity),
        kind=kind.name,
        runtime_limit=runtime_limit,
        preemptions=preemptions,
    )
    return fields, gang


def _preemptions(annotations: Mapping[str, str], problem: _Problem) -> int:
    """`muster.dev/preemptions`: how many times the gang was preempted."""
    preemptions = 0
    preemptions_text = annotations.get(PREEMPTIONS)
    if preemptions_text is not None:
        try:
            preemptions = int(preemptions_text)
        except ValueError:
            preemptions = -1
        if preemptions < 0:
            preemptions = 0
            problem.message = (
                f"annotation {PREEMPTIONS}: {preemptions_text!r} is not a whole number >= 0; "
                "muster writes it at each preemption: set it back to the count (or remove it)"
            )
    return preemptions


@dataclass(frozen=True, slots=True)
class PodRecord:
    """A pod's contribution to node usage: where it runs, what it requests, whose gang it is."""

    node: str
    requests: Resources
    gang: str | None  # "namespace/gang-label" for gang pods, None for others
    ready: bool
    ref: str = ""  # "namespace/name"
    gated: bool = False  # held by muster's scheduling gate until muster names its node
    target: str = ""  # the kubernetes.io/hostname its nodeSelector names ("" if none)
    waiting: bool = False
    """Waiting on the control plane, not on capacity (`pod_waits`)."""


TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})


def pod_record(body: Mapping[str, Any]) -> PodRecord | None:
    """None for pods that hold nothing (finished ones); unbound pods have node ''."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    if status.get("phase") in TERMINAL_PHASES or (
        meta.get("deletionTimestamp") and not spec.get("nodeName")
    ):
        return None
    labels: Mapping[str, str] = meta.get("labels") or {}
    gang_label = labels.get(GANG)
    try:
        requests = _requests(spec) + Resources(pods=1)
    except ValueError:
        requests = Resources(pods=1)
    return PodRecord(
        node=spec.get("nodeName") or "",
        requests=requests,
        gang=f"{meta.get('namespace')}/{gang_label}" if gang_label else None,
        ready=condition_true(status, "Ready"),
        ref=f"{meta.get('namespace')}/{meta.get('name')}",
        gated=any(g.get("name") == PLACEMENT_GATE for g in spec.get("schedulingGates") or []),
        target=(spec.get("nodeSelector") or {}).get(HOSTNAME, ""),
        waiting=pod_waits(spec, status),
    )


def pod_waits(spec: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """A live pod that waits on the control plane rather than on capacity: not bound and not
    (yet) found unschedulable by the scheduler (still gated, or in the scheduler's queue), or
    bound and not reported on by its kubelet (no container status yet). The clog clock does
    not run for a gang while one of its pods waits so (admission.loop, `_clog_clock`)."""
    if status.get("phase") not in (None, "Pending"):
        return False
    if spec.get("nodeName"):
        return not status.get("containerStatuses")
    return not any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or []
    )


def node_from(body: Mapping[str, Any]) -> Node | None:
    """The planner's Node (without `used`), or None for nodes pods cannot go to."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    allocatable = status.get("allocatable") or {}
    try:
        resources = Resources.parse(allocatable, field="status.allocatable")
    except ValueError:
        return None
    taints = tuple(
        Taint(key=t.get("key") or "", value=t.get("value") or "", effect=t["effect"])
        for t in spec.get("taints") or []
        if t.get("effect") in ("NoSchedule", "NoExecute", "PreferNoSchedule")
    )
    if spec.get("unschedulable"):
        taints = (*taints, Taint("node.kubernetes.io/unschedulable", "", "NoSchedule"))
    return Node(
        name=meta.get("name") or "",
        allocatable=resources,
        labels=dict(meta.get("labels") or {}),
        taints=taints,
    )


def queue_from(body: Mapping[str, Any]) -> Queue:
    """The planner's Queue from a Queue object (`policies.queuespec.parse_queue`); raise
    PolicyError (a ValueError) naming the field."""
    name = (body.get("metadata") or {}).get("name") or ""
    return parse_queue(name, body.get("spec") or {}, f'queue "{name}": spec')


def namespace_selector_from(body: Mapping[str, Any]) -> LabelSelector:
    """A Queue's `spec.namespaceSelector` (empty: every namespace); ValueError naming the field."""
    name = (body.get("metadata") or {}).get("name") or ""
    spec = body.get("spec") or {}
    return parse_label_selector(
        spec.get("namespaceSelector"), f'queue "{name}": spec.namespaceSelector'
    )
