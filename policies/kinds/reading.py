"""A gang as the controller and the webhook read it from its gang object, for every kind: the
gang fields, the planner's `Gang` (one pod set per pod template of the kind) and what admission
wrote on the object (`muster.dev/admitted`, `muster.dev/restore`, `muster.dev/placement`).
Pure: plain dicts in. What differs by kind comes from its `policies.kinds.kind.Kind` (a
MiniCluster's gang object is its Job, whose `muster.dev/gang-kind` names the MiniCluster)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policies.devices.catalog import DeviceCatalog
from policies.devices.gangs import GangClaims, gang_claims, with_devices
from policies.durations import DurationError, shown
from policies.kinds.fields import FieldError, GangFields, queue_of
from policies.kinds.kind import Kind, PodTemplate
from policies.kinds.nativegroups import GroupLink, links_of
from policies.kinds.pinning import Original, PinError, decode_placement
from policies.kinds.podtemplate import node_terms, one_pod_per_node, pod_requests, tolerations_of
from policies.kinds.registry import kind_named
from policies.model import Gang, PodSet, SubmitStamp, whole_number
from policies.phase import format_admitted as format_admitted
from policies.phase import format_time as format_time
from policies.phase import marked_failed, parse_time
from policies.resources import Resources
from policies.submitted import StampError, parse_stamp
from policies.vocabulary import (
    ADMITTED,
    GANG_KIND,
    MAX_INT32,
    PLACEMENT,
    PREEMPTIONS,
    RESTORE,
    SUBMITTED,
)


class GangParseError(ValueError):
    """A managed Job whose muster.dev/* fields cannot be read; the message says which."""


def parse_admitted(value: str) -> tuple[float, int]:
    """(time, size) from a `muster.dev/admitted` value; raise GangParseError if malformed."""
    when, _, size = value.partition("/")
    admitted_size = whole_number(size)
    try:
        if admitted_size is None or not 0 <= admitted_size <= MAX_INT32:
            raise ValueError(size)
        return parse_time(when), admitted_size
    except ValueError:
        raise GangParseError(
            f"annotation {ADMITTED}: {value!r} is not of the form 2026-01-02T03:04:05.000000Z/8"
        ) from None


def gang_pending(kind: Kind, body: Mapping[str, Any]) -> bool:
    """A managed gang object waiting for admission: not admitted (no `muster.dev/admitted`),
    not finished, not marked Failed. A gang evicted or preempted loses its admission and is
    pending again. (The controller also counts its own admission still in flight as admitted;
    that is the only difference between its count and this reading of the object.)"""
    annotations: Mapping[str, str] = (body.get("metadata") or {}).get("annotations") or {}
    return (
        ADMITTED not in annotations
        and not marked_failed(annotations)
        and not kind.status(body).finished
    )


def gang_of(kind: Kind, body: Mapping[str, Any], devices: DeviceCatalog | None = None) -> Gang:
    """The gang a record of ``body`` holds, read without the rest of the record (the status,
    eviction counts, the pin): what the webhook's never-fits screen asks about at create, about
    a third of the record's cost. With `devices`, its claims' devices are added (a claim that
    cannot be counted yet adds nothing)."""
    meta = body.get("metadata") or {}
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    reading = read_gang(kind, namespace, name, body.get("spec") or {}, labels, annotations)
    if reading.claims is None or devices is None:
        return reading.gang
    return with_devices(reading.gang, reading.claims, devices)[0]


@dataclass(frozen=True, slots=True)
class Reading:
    """What `read_gang` reads of a gang object (besides its status)."""

    problem: str | None
    """The last malformed field's message: the gang waits with it (the record's parse_error)."""
    marks: AdmissionMarks
    fields: GangFields
    gang: Gang
    templates: tuple[PodTemplate, ...]
    kind: Kind
    """The gang's kind (a MiniCluster for its Job)."""
    live_size: int
    """Pods the object asks for as it is now: the gang's size, but for a gang whose own fields
    muster lowered at admission (an elastic Job: then its admitted size), or someone changed
    since (a Job's parallelism raised past its admission: `gang` is read from the saved
    original, this from the spec)."""
    links: tuple[GroupLink, ...] = ()
    """Its pod templates' links to the PodGroups muster named for it (`links_of`); empty: the
    gang is not native (released by pins alone)."""
    claims: GangClaims | None = None
    """The DRA claims its pods use (`policies.devices.gang_claims`); None: none. `gang` does
    not hold their devices yet: `policies.devices.with_devices` adds them."""


def read_gang(
    kind: Kind,
    namespace: str,
    name: str,
    spec: Mapping[str, Any],
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
) -> Reading:
    """The admission annotations (the spec as the user wrote it), the gang fields and the
    planner's gang, and the last malformed field, of a gang object of ``kind``."""
    problem = Problem()
    marks = _admission_annotations(kind, spec, annotations, problem)
    gang_kind = kind_named(annotations.get(GANG_KIND)) if kind.name == "Job" else kind
    fields, gang, templates = _gang(
        kind, gang_kind, namespace, name, spec, labels, annotations, marks.original, problem
    )
    live_size = gang.size
    if RESTORE in annotations:
        live_size = _live_size(kind, spec, live_size)
    links = links_of(templates, annotations.get(SUBMITTED, ""))
    claims = gang_claims(namespace, [(t.name, t.template.get("spec") or {}) for t in templates])
    return Reading(
        problem.message, marks, fields, gang, templates, gang_kind, live_size, links, claims
    )


def _live_size(kind: Kind, spec: Mapping[str, Any], default: int) -> int:
    """Pods the spec asks for as it is now (the kind's own fields as they are, not as saved)."""
    try:
        return sum(t.count for t in kind.templates(spec, kind.original(spec)))
    except FieldError:
        return default


class Problem:
    """The message of a malformed field of the object being read (the last one read wins)."""

    __slots__ = ("message",)

    def __init__(self) -> None:
        self.message: str | None = None


@dataclass(frozen=True, slots=True)
class AdmissionMarks:
    original: Original
    pinned: dict[str, dict[str, int]]
    """Pod set -> node -> pods: muster.dev/placement, the planned nodes while admitted."""
    admitted_at: float | None
    admitted_size: int


def _admission_annotations(
    kind: Kind, spec: Mapping[str, Any], annotations: Mapping[str, str], problem: Problem
) -> AdmissionMarks:
    """What admission wrote: the original fields (`muster.dev/restore`), the pin
    (`muster.dev/placement`), the admission time and size (`muster.dev/admitted`)."""
    # An admitted elastic gang has its own fields lowered (a Job's parallelism): its gang is
    # the size it had before admission, saved in muster.dev/restore.
    original = kind.original(spec)
    if RESTORE in annotations:
        try:
            original = Original.decode(annotations[RESTORE], f"annotation {RESTORE}")
        except PinError as exc:
            problem.message = str(exc)
    pinned: dict[str, dict[str, int]] = {}
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
    return AdmissionMarks(original, pinned, admitted_at, admitted_size)


def as_written(kind: Kind, spec: Mapping[str, Any], original: Original) -> dict[str, Any]:
    """``spec`` with the kind's own fields as the user wrote them (a release may have lowered
    them): the `/spec/<field>` values of `Kind.put_back`."""
    written = dict(spec)
    for pointer_, value in kind.put_back(original, spec).items():
        field = pointer_.removeprefix("/spec/")
        assert "/" not in field, pointer_  # a kind's own fields are top-level spec fields
        written[field] = value
    return written


def _gang(
    kind: Kind,
    gang_kind: Kind,
    namespace: str,
    name: str,
    spec: Mapping[str, Any],
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    original: Original,
    problem: Problem,
) -> tuple[GangFields, Gang, tuple[PodTemplate, ...]]:
    """The gang fields (read as the webhook reads them) and the planner's gang."""
    written = as_written(kind, spec, original)
    try:
        templates = kind.templates(written, original)
    except FieldError as exc:
        problem.message = str(exc)
        templates = (PodTemplate("", "", 1, {}),)
    size = sum(template.count for template in templates)
    # The gang fields, read as the webhook reads them (one adapter: policies.kinds), from the
    # object as the user wrote it; a bad one keeps the gang waiting with the webhook's refusal.
    try:
        _, fields = kind.gang_fields(
            {"metadata": {"labels": labels, "annotations": annotations}, "spec": written}
        )
    except FieldError as exc:
        problem.message = str(exc)
        fields = GangFields(size)
    try:
        stamp = parse_stamp(annotations.get(SUBMITTED, ""), f"{namespace}/{name}")
    except StampError as exc:
        problem.message = str(exc)
        stamp = SubmitStamp(0.0, 0, f"{namespace}/{name}")
    runtime_limit: float | None = None
    try:
        runtime_limit = kind.runtime_limit(spec)
    except DurationError as exc:
        problem.message = str(exc)
    sets = _pod_sets(templates, original, gang_kind.spreads, problem)
    main = max(range(len(sets)), key=lambda i: (sets[i].count, -i))
    head = sets[main]
    gang = Gang(
        id=f"{namespace}/{name}",
        queue=queue_of(labels),
        pod_requests=head.requests,
        size=size,
        min_size=fields.minimum if fields.minimum < size else None,
        priority=fields.priority,
        elastic_after=fields.elastic_after,
        submitted=stamp,
        one_pod_per_node=head.one_pod_per_node,
        node_selector=head.node_selector,
        tolerations=head.tolerations,
        node_terms=head.node_terms,
        kind=gang_kind.name,
        runtime_limit=runtime_limit,
        preemptions=_preemptions(annotations, problem),
        others=(*sets[:main], *sets[main + 1 :]),
        set_name=head.name,
        topology=fields.topology,
    )
    return fields, gang, templates


def _pod_sets(
    templates: Sequence[PodTemplate], original: Original, spreads: bool, problem: Problem
) -> list[PodSet]:
    """One pod set per pod template; a gang's largest pod set (the first of equals) is its main
    one, the one an elastic gang shrinks."""
    sets = []
    for template in templates:
        pod_spec = template.template.get("spec") or {}
        pod_labels: Mapping[str, str] = (template.template.get("metadata") or {}).get(
            "labels"
        ) or {}
        try:
            requests = pod_requests(pod_spec)
        except ValueError as exc:
            problem.message = str(exc)
            requests = Resources()
        sets.append(
            PodSet(
                template.name,
                template.count,
                requests,
                one_pod_per_node=one_pod_per_node(pod_spec, pod_labels, preferred=spreads),
                node_selector=dict(pod_spec.get("nodeSelector") or {}),
                tolerations=tolerations_of(pod_spec),
                # The user's own required node affinity: from the saved original, not the pin.
                node_terms=node_terms(original.template(template.name).affinity),
            )
        )
    return sets


def _preemptions(annotations: Mapping[str, str], problem: Problem) -> int:
    """`muster.dev/preemptions`: how many times the gang was preempted."""
    text = annotations.get(PREEMPTIONS)
    if text is None:
        return 0
    preemptions = whole_number(text)
    if preemptions is not None and 0 <= preemptions <= MAX_INT32:
        return preemptions
    problem.message = (
        f"annotation {PREEMPTIONS}: {shown(text)} is not a whole number from 0 to {MAX_INT32}; "
        "muster writes it at each preemption: set it back to the count (or remove it)"
    )
    return 0
