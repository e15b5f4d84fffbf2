"""Kubernetes' own gangs: the PodGroups (`scheduling.k8s.io/v1beta1`, Kubernetes 1.37 with the
GenericWorkload gate) muster links and writes for a gang, for every kind. Pure.

Where the cluster serves PodGroups (discovery, at start), the webhook links each pod template of
a new gang to its pod set's PodGroup (`group_names`, written by the kind's `hold`): the link,
`spec.schedulingGroup.podGroupName`, is immutable once the object is stored, so it is written
at create. Its name carries a mark of the gang's submission stamp (`stamp_mark`), so a gang
deleted and created again under its name never meets its old group (kept by the scheduler's
protection finalizer until that gang's pods are gone). The controller reads the links back
(`links_of`: a gang is native only when every pod template names the group muster would have
named) and at each admission applies each group (`group_writes`), owned by the gang object, with
`minCount` = the pods admitted of its set (`admitted_counts`), before the release that
unsuspends it: kube-scheduler then binds each set's pods all or none. The group outlives
evictions and preemptions (without pods it does nothing; the next admission sets its minCount
again) and goes with its gang object (the garbage collector, by the owner reference).

One PodGroup per pod set, not one per gang: kube-scheduler requires every pod of a group to have
the group's priority and one scheduler name and preemption policy, which the pod sets of a gang
(a launcher beside its workers) need not share. No Workload: kube-scheduler never reads one, it
would cost a write per gang, and it holds at most 8 pod group templates (a JobSet may have more
replicated Jobs). docs/dev/native-gangs.md has the research behind each rule.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from policies.kinds.fields import FieldError
from policies.kinds.kind import ApiKind, Kind, PodTemplate
from policies.kinds.writes import Target, Write
from policies.model import Gang
from policies.vocabulary import GANG, POD_SET

POD_GROUPS: Final = ApiKind("scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup")
"""Where Kubernetes 1.37 serves PodGroups (beta, off by default: GenericWorkload and
`--runtime-config scheduling.k8s.io/v1beta1=true`)."""

MAX_NAME: Final = 253
"""A PodGroup's name is a DNS subdomain (`ValidatePodGroupName`)."""


def stamp_mark(stamp: str) -> str:
    """The 10 hex digits of a gang's submission stamp that end the names of its PodGroups."""
    return hashlib.sha256(stamp.encode()).hexdigest()[:10]


def group_name(gang: str, pod_set: str, stamp: str) -> str:
    """`<gang>-<pod set>-<mark>` (no pod set part for a kind of one pod template), the gang's
    part shortened to fit a name; a gang named by `generateName` lends its prefix."""
    mark = stamp_mark(stamp)
    base = "-".join(part for part in (gang.rstrip("-."), pod_set) if part)
    base = base[: MAX_NAME - len(mark) - 1].rstrip("-.")
    return f"{base}-{mark}" if base else mark


def linked_group(template: PodTemplate) -> str:
    """The PodGroup a pod template names ('' for none)."""
    group = ((template.template.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    return group if isinstance(group, str) else ""


def group_names(kind: Kind, obj: Mapping[str, Any], gang: str, stamp: str) -> dict[str, str]:
    """Pod set -> PodGroup name, for the hold of a new gang object of ``kind`` (its gang named
    ``gang``, stamped ``stamp``) to link each pod template. Empty, and the gang keeps muster's
    pins alone, for a kind whose operator makes the gang object (that object is linked when it
    is created), a gang of one pod (bound whole by itself: a group would cost a write and an
    object for nothing), a template that names a group of its own (the user's, left as it
    is), a pod set that runs in waves (`PodTemplate.waves`), or templates the kind cannot read
    (refused)."""
    if not kind.holds_itself or not stamp:
        return {}
    spec = obj.get("spec") or {}
    try:
        templates = kind.templates(spec, kind.original(spec))
    except FieldError:
        return {}
    if sum(template.count for template in templates) <= 1:
        return {}
    if any(template.waves or linked_group(template) for template in templates):
        return {}
    return {template.name: group_name(gang, template.name, stamp) for template in templates}


@dataclass(frozen=True, slots=True)
class GroupLink:
    """A pod set's PodGroup, as the gang object's pod template links it."""

    pod_set: str
    group: str
    priority_class: str = ""
    """The pod template's priorityClassName: the group's must be the same (kube-scheduler
    refuses a group whose priority is not its pods')."""


def links_of(templates: Sequence[PodTemplate], stamp: str) -> tuple[GroupLink, ...]:
    """The links of a gang object's pod templates to the PodGroups muster named for it (by its
    submission stamp, `muster.dev/submitted`); empty unless every template has one: a gang
    created where the API was not served, or whose templates name groups of their own, keeps
    the pin path."""
    if not stamp or not templates:
        return ()
    suffix = f"-{stamp_mark(stamp)}"
    links = []
    for template in templates:
        group = linked_group(template)
        if not group.endswith(suffix):
            return ()
        priority_class = (template.template.get("spec") or {}).get("priorityClassName")
        links.append(GroupLink(template.name, group, str(priority_class or "")))
    return tuple(links)


def admitted_counts(gang: Gang, size: int) -> dict[str, int]:
    """Pods admitted of each pod set of ``gang`` admitted at ``size`` (every set's pods): the
    main set's share (an elastic gang's smaller than asked), every other set whole."""
    counts = {gang.set_name: size - gang.fixed}
    for other in gang.others:
        counts[other.name] = other.count
    return counts


@dataclass(frozen=True, slots=True)
class GroupOwner:
    """The gang object that owns its PodGroups (the garbage collector deletes them with it)."""

    api: ApiKind
    name: str
    uid: str
    gang: str
    """The gang's name (`muster.dev/gang` of its pod templates), labelled on each group."""


def group_body(link: GroupLink, min_count: int, owner: GroupOwner) -> dict[str, Any]:
    """The PodGroup muster applies for ``link``: a gang of ``min_count`` (at least 1), the
    template's priority class, owned by the gang object (no `blockOwnerDeletion`, as the Job
    controller's own groups: that would need the right to set the owner's finalizers)."""
    labels = {GANG: owner.gang}
    if link.pod_set:
        labels[POD_SET] = link.pod_set
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": max(1, min_count)}}}
    if link.priority_class:
        spec["priorityClassName"] = link.priority_class
    return {
        "apiVersion": POD_GROUPS.api_version,
        "kind": POD_GROUPS.kind,
        "metadata": {
            "name": link.group,
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": owner.api.api_version,
                    "kind": owner.api.kind,
                    "name": owner.name,
                    "uid": owner.uid,
                    "controller": True,
                }
            ],
        },
        "spec": spec,
    }


def group_writes(
    links: Iterable[GroupLink], counts: Mapping[str, int], owner: GroupOwner
) -> list[Write]:
    """The applies that make each linked PodGroup a gang of its set's admitted pods (created if
    missing, its minCount set if not), sent before the release."""
    return [
        Write(
            "pod-group",
            body=group_body(link, counts.get(link.pod_set, 1), owner),
            target=Target(POD_GROUPS, link.group),
        )
        for link in links
    ]


def min_count_of(body: Mapping[str, Any]) -> int | None:
    """A stored PodGroup's gang minimum (None for a basic, non-gang group)."""
    gang = ((body.get("spec") or {}).get("schedulingPolicy") or {}).get("gang") or {}
    value = gang.get("minCount")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def stale_links(
    links: Iterable[GroupLink], counts: Mapping[str, int], stored: Mapping[str, int | None]
) -> list[GroupLink]:
    """The links of an admitted gang whose PodGroup is missing from ``stored`` (group name ->
    its minCount, as listed) or does not hold the admitted count: what a restarted controller
    applies again before the gang's pods can run."""
    return [
        link
        for link in links
        if link.group not in stored or stored[link.group] != max(1, counts.get(link.pod_set, 1))
    ]
