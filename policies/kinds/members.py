"""A gang whose gang object is a set of plain pods (a pod group): nothing holds itself, so its
kind assembles a *virtual* gang object from the member pods and the gang's record, and muster
writes what it decides to that record and to the pods. Pure: plain dicts in, values and
`Write`s out; `admission.members` keeps the pods and records and hands each virtual object to
the cache as any gang object's event.

Why a record: a pod cannot be gated again once released (Kubernetes allows removing scheduling
gates, never adding them), so evicting or preempting a running pod gang deletes its released
pods, and their operator makes them again (the webhook gates them at create). Annotations on
the pods would go with them; the gang's record (a `GangRecord`, muster.dev/v1alpha1) holds what
must outlive them, with the same annotations a Job carries: the admission and the placement
(`muster.dev/admitted`, `muster.dev/placement`), the submission stamp (the gang keeps its place
in line), evictions, requeue time, preemptions and why, failure. It is made at the gang's first
admission (or failure) and owned by the pods' common controller (a ReplicaSet, an operator's
object) when they have one, so Kubernetes deletes it with them.

What the kind says (`PodGang`): which label makes a pod a member (its value names the gang),
the gang's size and fields (read from the members, which must agree), and the record's name.
What every pod gang shares is here: the members in submission order (the first `size` of them
are the gang; pods beyond stay gated), one pod set per `muster.dev/pod-set` (the webhook names a
pod's set after its shape), a gang not whole until `size` pods exist, finished once every member
ended, and the writes (`release_writes`, `evict_writes`, `preempt_writes`, `fail_writes`).
"""

from __future__ import annotations

import copy
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from policies.kinds.fields import FieldError
from policies.kinds.kind import ApiKind, Kind, KindStatus
from policies.kinds.pinning import HOSTNAME, PLACEMENT_GATE, encode_placement
from policies.kinds.writes import Release, Write
from policies.phase import condition_true, format_admitted, format_time, parse_time
from policies.submitted import StampError, parse_stamp
from policies.vocabulary import (
    ADMITTED,
    EVICTED_REASON,
    EVICTIONS,
    FAILED_REASON,
    GANG,
    GANG_KIND,
    GANG_RECORD,
    PLACEMENT,
    POD_SET,
    PREEMPTED_BY,
    PREEMPTIONS,
    REQUEUE_AT,
    STATE,
    SUBMITTED,
)

RECORDS: Final = ApiKind("muster.dev", "v1alpha1", "gangrecords", "GangRecord")
"""Where the API serves gang records (the CRD in admission/crd/gangrecords.muster.dev.yaml)."""

RECORDED: Final = (
    ADMITTED,
    PLACEMENT,
    SUBMITTED,
    EVICTIONS,
    REQUEUE_AT,
    EVICTED_REASON,
    PREEMPTIONS,
    PREEMPTED_BY,
    STATE,
    FAILED_REASON,
)
"""The annotations a gang's record carries to its virtual gang object (all muster's)."""

_SHAPE_SPEC: Final = (
    "containers",
    "initContainers",
    "nodeSelector",
    "tolerations",
    "affinity",
    "activeDeadlineSeconds",
)
"""What a member's pod spec contributes to its pod set's template: what fit reads."""


@dataclass(frozen=True, slots=True)
class Member:
    """One pod of a pod gang, as the gang reads it (`member_of`)."""

    name: str
    uid: str
    stamp: str
    """`muster.dev/submitted` ('' if the webhook never stamped it)."""
    pod_set: str
    labels: Mapping[str, str]
    """Its labels (the gang fields are read from them, and anti-affinity matches them)."""
    annotations: Mapping[str, str]
    """Its annotations under muster.dev/ (the gang fields, annotation first)."""
    spec: Mapping[str, Any]
    """What fit reads of its pod spec (`_SHAPE_SPEC`), muster's own node pin left out."""
    live: bool
    """Pending or running, not being deleted."""
    ended: str
    """'Succeeded' or 'Failed' once it ended, else ''."""
    ready: bool
    gated: bool
    """Held at muster's scheduling gate: not released yet (a candidate, not yet in the gang)."""
    owner: tuple[tuple[str, str], ...]
    """Its controller owner (apiVersion, kind, name, uid as pairs), if any."""
    ended_at: float | None = None


def member_of(pod: Mapping[str, Any]) -> Member:
    """A pod as its gang reads it."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    phase = status.get("phase") or ""
    gated = any(g.get("name") == PLACEMENT_GATE for g in spec.get("schedulingGates") or [])
    shape = {key: copy.deepcopy(spec[key]) for key in _SHAPE_SPEC if spec.get(key) is not None}
    if not gated and HOSTNAME in (shape.get("nodeSelector") or {}):
        # Released: the node muster named is muster's pin, not the user's selector.
        selector = {k: v for k, v in shape["nodeSelector"].items() if k != HOSTNAME}
        shape["nodeSelector"] = selector
    owner: tuple[tuple[str, str], ...] = ()
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            owner = tuple(
                (key, str(ref.get(key) or "")) for key in ("apiVersion", "kind", "name", "uid")
            )
    ended = phase if phase in ("Succeeded", "Failed") else ""
    annotations = meta.get("annotations") or {}
    return Member(
        name=meta.get("name") or "",
        uid=meta.get("uid") or "",
        stamp=str(annotations.get(SUBMITTED) or ""),
        pod_set=str((meta.get("labels") or {}).get(POD_SET) or ""),
        labels=dict(meta.get("labels") or {}),
        annotations={k: str(v) for k, v in annotations.items() if k.startswith("muster.dev/")},
        spec=shape,
        live=not ended and not meta.get("deletionTimestamp"),
        ended=ended,
        ready=condition_true(status, "Ready"),
        gated=gated,
        owner=owner,
        ended_at=_ended_at(status) if ended else None,
    )


def _ended_at(status: Mapping[str, Any]) -> float | None:
    """When a pod that ended stopped: its containers' last finishedAt."""
    times: list[float] = []
    for container in status.get("containerStatuses") or []:
        finished = ((container.get("state") or {}).get("terminated") or {}).get("finishedAt")
        if isinstance(finished, str):
            try:
                times.append(parse_time(finished))
            except ValueError:
                continue
    return max(times) if times else None


def shape_name(pod_spec: Mapping[str, Any]) -> str:
    """The pod set a pod belongs to when it names none: its first container's name and a digest
    of what fit reads of it (requests, node selector, tolerations, affinity), so pods of the
    same shape make one pod set and others a set each."""
    shape = {key: pod_spec.get(key) for key in _SHAPE_SPEC if key != "activeDeadlineSeconds"}
    requests = [
        ((c.get("resources") or {}).get("requests") or {}) for c in shape.pop("containers") or []
    ]
    init = [
        ((c.get("resources") or {}).get("requests") or {})
        for c in shape.pop("initContainers") or []
    ]
    text = json.dumps({"requests": requests, "init": init, **shape}, sort_keys=True)
    digest = f"{zlib.crc32(text.encode()):08x}"
    first = ((pod_spec.get("containers") or [{}])[0].get("name") or "pods").lower()
    prefix = "".join(c if c.isalnum() or c == "-" else "-" for c in first)[:54].strip("-")
    return f"{prefix or 'pods'}-{digest}"


class PodGang(Kind, Protocol):
    """A kind whose gang object is a set of pods (`policies.kinds.podgroup.PodGroupKind`)."""

    @property
    def member_label(self) -> str:
        """The label that makes a pod a member: its value is the gang's name. Only pods that
        carry it are sent to muster's webhook for pods."""
        ...

    def record_name(self, gang: str) -> str:
        """The name of the gang's record (a GangRecord in the gang's namespace)."""
        ...

    def assemble(
        self,
        namespace: str,
        gang: str,
        members: Sequence[Member],
        record: Mapping[str, Any] | None,
    ) -> dict[str, Any] | None:
        """The gang's virtual gang object from its members and its record (None: no member)."""
        ...

    def disagreement(self, gang: str, first: Member, other: Member) -> str | None:
        """Why ``other`` cannot be a member of the gang whose first member is ``first`` (they
        say a field of the gang differently), naming the field; None when they agree."""
        ...


# ------------------------------------------------------------------ the virtual gang object


@dataclass(frozen=True, slots=True)
class Assembly:
    """What a pod gang's kind read of its members, for `virtual_object`."""

    kind: str
    namespace: str
    gang: str
    size: int
    members: tuple[Member, ...]
    """Every member, in submission order (the first `size` are the gang)."""
    labels: Mapping[str, str]
    """The gang fields' labels (the queue among them), as its first member carries them."""
    annotations: Mapping[str, str]
    problem: str | None = None
    """Why the members cannot make a gang (they disagree on a field): it waits with this."""
    timeout: float = 600.0
    """Seconds the gang may wait for all of its members to exist."""
    noun: str = "pod group"
    """What the kind calls one gang, for messages."""


def in_order(members: Sequence[Member]) -> list[Member]:
    """Members in submission order (unstamped ones last, then by name)."""
    return sorted(members, key=lambda m: (not m.stamp, m.stamp, m.name))


def virtual_object(assembly: Assembly, record: Mapping[str, Any] | None) -> dict[str, Any]:
    """The virtual gang object: its metadata (the queue and gang fields of its first member,
    what the record says muster decided), one pod set per `muster.dev/pod-set` among the first
    `size` members (each set's template from its first member), and what its members' phases
    say (`member_status`). Long because it is one object's fields, each read in one place."""
    members = assembly.members
    taken = members[: assembly.size]
    counts: dict[str, int] = {}
    shapes: dict[str, Member] = {}
    for member in taken:
        counts[member.pod_set] = counts.get(member.pod_set, 0) + 1
        if member.pod_set not in shapes or (member.gated and not shapes[member.pod_set].gated):
            shapes[member.pod_set] = member
    missing = assembly.size - len(taken)
    if missing > 0:
        # Not whole yet (kept out of the plan): its missing pods counted as its largest set's.
        largest = max(counts, key=lambda name: counts[name])
        counts[largest] += missing
    pod_sets = [
        {
            "name": name,
            "count": count,
            "template": {
                "metadata": {"labels": dict(shapes[name].labels)},
                "spec": shapes[name].spec,
            },
        }
        for name, count in counts.items()
    ]
    record_meta = (record or {}).get("metadata") or {}
    recorded = record_meta.get("annotations") or {}
    annotations = {**assembly.annotations, GANG_KIND: assembly.kind}
    first_stamp = next((m.stamp for m in members if m.stamp), "")
    annotations[SUBMITTED] = recorded.get(SUBMITTED) or first_stamp
    annotations.update({key: recorded[key] for key in RECORDED if key in recorded})
    if not annotations[SUBMITTED]:
        del annotations[SUBMITTED]
    spec: dict[str, Any] = {
        "suspend": ADMITTED not in recorded,
        "size": assembly.size,
        "podSets": pod_sets,
        "problem": assembly.problem,
        "record": str(record_meta.get("name") or ""),
        "recordVersion": str(record_meta.get("resourceVersion") or ""),
        "owner": _common_owner(members),
    }
    generation = zlib.crc32(json.dumps(spec, sort_keys=True, default=str).encode())
    return {
        "apiVersion": "muster.dev/virtual",
        "kind": assembly.kind,
        "metadata": {
            "namespace": assembly.namespace,
            "name": assembly.gang,
            "uid": f"{assembly.kind}/{assembly.namespace}/{assembly.gang}",
            "resourceVersion": str(record_meta.get("resourceVersion") or "0"),
            "generation": generation,
            "labels": {**assembly.labels, GANG: assembly.gang},
            "annotations": annotations,
        },
        "spec": spec,
        "status": member_status(assembly, first_stamp),
    }


def _common_owner(members: Sequence[Member]) -> str:
    """The controller owner every member shares (JSON of an ownerReference), else ''."""
    owners = {m.owner for m in members}
    if len(owners) != 1:
        return ""
    (owner,) = owners
    return json.dumps(dict(owner), sort_keys=True) if owner else ""


def member_status(assembly: Assembly, first_stamp: str) -> dict[str, Any]:
    """What the members' phases say: how many exist, live, are ready, succeeded and failed;
    when the gang finished (every one of at least `size` members ended); and, while fewer than
    `size` exist, why it waits and until when (its first member's stamp + the timeout)."""
    members = assembly.members
    present = len(members)
    live = sum(1 for m in members if m.live)
    status: dict[str, Any] = {
        "present": present,
        "live": live,
        "ready": sum(1 for m in members if m.live and m.ready),
        "succeeded": sum(1 for m in members if m.ended == "Succeeded"),
        "failed": sum(1 for m in members if m.ended == "Failed"),
    }
    if present >= assembly.size and live == 0:
        ends = [m.ended_at for m in members if m.ended_at is not None]
        status["finished"] = True
        if ends:
            status["endTime"] = max(ends)
            status["completionTime"] = format_time(max(ends))  # as a Job's, for the history
    elif present < assembly.size:
        start = 0.0
        try:
            start = parse_stamp(first_stamp).time if first_stamp else 0.0
        except StampError:
            start = 0.0
        until = start + assembly.timeout
        status["incomplete"] = (
            f"{present} of the {assembly.size} pods of {assembly.noun} "
            f"{assembly.gang} exist; it is admitted once all exist, and is marked Failed if "
            f"they do not by {format_time(until)}"
        )
        status["incompleteUntil"] = until
    return status


def kind_status(body: Mapping[str, Any]) -> KindStatus:
    """A virtual gang object's status (`Kind.status` of a pod gang)."""
    status = body.get("status") or {}
    return KindStatus(
        finished=bool(status.get("finished")),
        ready=int(status.get("ready") or 0),
        succeeded=int(status.get("succeeded") or 0),
        active=int(status.get("live") or 0),
        end_time=status.get("endTime"),
        incomplete=status.get("incomplete"),
        incomplete_until=status.get("incompleteUntil"),
    )


def problem_of(spec: Mapping[str, Any]) -> None:
    """Raise the members' disagreement (`Assembly.problem`) as the gang's FieldError."""
    problem = spec.get("problem")
    if problem:
        raise FieldError(str(problem))


# ------------------------------------------------------------------ the writes


def record_body(
    kind: PodGang,
    namespace: str,
    gang: str,
    spec: Mapping[str, Any],
    annotations: Mapping[str, Any],
) -> dict[str, Any]:
    """A new record of the gang, owned by its members' common controller if any (``spec``: the
    virtual object's)."""
    meta: dict[str, Any] = {
        "name": kind.record_name(gang),
        "namespace": namespace,
        "labels": {GANG_RECORD: kind.name, GANG: gang},
        "annotations": {k: v for k, v in annotations.items() if v is not None},
    }
    owner = spec.get("owner")
    if owner:
        meta["ownerReferences"] = [{**json.loads(str(owner)), "controller": False}]
    return {
        "apiVersion": RECORDS.api_version,
        "kind": RECORDS.kind,
        "metadata": meta,
        "spec": {"kind": kind.name, "gang": gang},
    }


def _guarded(version: str, annotations: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch of the record's annotations that the apiserver applies only to the record
    at ``version`` (409 Conflict otherwise: a stale view never admits twice)."""
    return {"metadata": {"resourceVersion": version, "annotations": dict(annotations)}}


def release_writes(
    kind: PodGang, namespace: str, gang: str, spec: Mapping[str, Any], release: Release
) -> list[Write]:
    """Admit: record the admission, the placement and the stamp on the gang's record (made now
    if it has none; else only if it is still as read). Its pods are released by the
    controller's placement of gated pods, each to a node of its set's plan."""
    annotations: dict[str, Any] = {
        ADMITTED: format_admitted(release.when, release.size),
        PLACEMENT: encode_placement(release.placements) if release.placements else None,
    }
    name = kind.record_name(gang)
    version = str(spec.get("recordVersion") or "")
    if not version:
        body = record_body(kind, namespace, gang, spec, annotations)
        return [Write("admit", body=body, record=name, create=True)]
    return [Write("admit", body=_guarded(version, annotations), record=name, guarded=True)]


def _member_selector(kind: PodGang, gang: str) -> str:
    return f"{kind.member_label}={gang}"


def evict_writes(
    kind: PodGang,
    gang: str,
    *,
    evictions: int,
    requeue_at: float,
    reason: str,
    failed: bool,
) -> list[Write]:
    """Evict: the record says why and until when, then the released members are deleted (their
    operator makes them again, gated at create; those muster never released stay)."""
    annotations: dict[str, Any] = {
        ADMITTED: None,
        PLACEMENT: None,
        EVICTIONS: str(evictions),
        REQUEUE_AT: format_time(requeue_at),
        EVICTED_REASON: reason,
    }
    if failed:
        annotations[STATE] = "Failed"
    name = kind.record_name(gang)
    return [
        Write("evict", body={"metadata": {"annotations": annotations}}, record=name),
        Write("delete-members", members=_member_selector(kind, gang)),
    ]


def preempt_writes(
    kind: PodGang, gang: str, version: str, *, preemptions: int, message: str
) -> list[Write]:
    """Preempt: only while the record is as the plan read it (``version``), record the
    preemption and drop the admission, then delete the released members."""
    annotations: dict[str, Any] = {
        ADMITTED: None,
        PLACEMENT: None,
        PREEMPTIONS: str(preemptions),
        PREEMPTED_BY: message,
        EVICTED_REASON: "Preempted",
    }
    name = kind.record_name(gang)
    return [
        Write("preempt", body=_guarded(version, annotations), record=name, guarded=True),
        Write("delete-members", members=_member_selector(kind, gang)),
    ]


def fail_writes(kind: PodGang, namespace: str, gang: str, reason: str) -> list[Write]:
    """Give up on a waiting gang: `muster.dev/state: Failed` and why, on its record (made if it
    has none). Its pods stay gated: they never run, and the user deletes them."""
    annotations = {STATE: "Failed", FAILED_REASON: reason}
    name = kind.record_name(gang)
    body = record_body(kind, namespace, gang, {}, annotations)
    return [
        Write("fail", body={"metadata": {"annotations": annotations}}, record=name, missing=body)
    ]


def members_of(
    kind: PodGang, namespace: str, gang: str, pods: Sequence[Mapping[str, Any]]
) -> list[str]:
    """The members an eviction deletes: those muster released (not held at its gate)."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(kind.member_label) != gang or meta.get("namespace") != namespace:
            continue
        gates = (pod.get("spec") or {}).get("schedulingGates") or []
        if not any(g.get("name") == PLACEMENT_GATE for g in gates):
            out.append(str(meta.get("name") or ""))
    return out


def record_key(body: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(kind, namespace, gang) a record belongs to, from its labels; None if not a record."""
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    kind, gang = labels.get(GANG_RECORD), labels.get(GANG)
    if not kind or not gang:
        return None
    return str(kind), str(meta.get("namespace") or ""), str(gang)
