"""A pod group as a gang: plain pods that carry `muster.dev/pod-group: NAME` and the group's
total count (`muster.dev/pod-group-size`, annotation or label, the same on every pod; optionally
`muster.dev/min-members` and the other gang fields) are one gang, whatever operator makes them.

The webhook gates each such pod at create (muster's scheduling gate, `muster.dev/placement`),
stamps it and labels it with the gang (`muster.dev/gang`) and its pod set (`muster.dev/pod-set`:
the user's, else one named after the pod's shape, `policies.kinds.members.shape_name`). The gang
object is virtual (`policies.kinds.members`): assembled from the group's pods and its record.
The group waits until all of its pods exist (for at most its `muster.dev/pod-group-timeout`,
default 10 minutes, from its first pod's stamp; then it is marked Failed), is admitted whole
(its first `size` pods in submission order; pods beyond stay gated) and released pod by pod
(each gated pod is given a planned node and ungated by the controller). Evicted or preempted, its
released pods are deleted; their operator makes them again, gated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from policies.durations import DurationError, parse_duration
from policies.kinds.changes import FieldChange
from policies.kinds.drafts import Draft, named_set_metadata
from policies.kinds.fields import FieldError, GangFields, field_source, queue_of, read_gang_fields
from policies.kinds.kind import ApiKind, KindStatus, PodTemplate
from policies.kinds.members import (
    Assembly,
    Member,
    in_order,
    kind_status,
    member_of,
    problem_of,
    shape_name,
    virtual_object,
)
from policies.kinds.pinning import PLACEMENT_GATE, Original
from policies.model import is_digits
from policies.vocabulary import (
    CLOG_TIMEOUT,
    ELASTIC_AFTER,
    GANG,
    MAX_INDEXED_PODS,
    MIN_MEMBERS,
    POD_GROUP,
    POD_GROUP_SIZE,
    POD_GROUP_TIMEOUT,
    POD_SET,
    PRIORITY,
    QUEUE,
    SUBMITTED,
)

DEFAULT_TIMEOUT: Final = 600.0
"""Seconds a pod group waits for all of its pods to exist before it is marked Failed."""

GROUP_FIELDS: Final = (
    POD_GROUP,
    POD_GROUP_SIZE,
    POD_GROUP_TIMEOUT,
    MIN_MEMBERS,
    PRIORITY,
    ELASTIC_AFTER,
    CLOG_TIMEOUT,
)
"""The fields of a pod group its pods carry (annotation or label); the first pod's are the
gang's, and `AGREED` must be the same on every pod."""
AGREED: Final = (POD_GROUP_SIZE, MIN_MEMBERS, QUEUE)


def _group_name(labels: Mapping[str, str]) -> str:
    name = str(labels.get(POD_GROUP) or "")
    ok = (
        0 < len(name) <= 63
        and name[0].isalnum()
        and name[-1].isalnum()
        and all(c.isdigit() or c == "-" or ("a" <= c <= "z") for c in name)
    )
    if not ok:
        raise FieldError(
            f"label {POD_GROUP}: {name!r} is not a pod group name muster can record; use lower "
            "case letters, digits and '-', starting and ending with a letter or digit (at most "
            "63 characters)"
        )
    return name


def _size(labels: Mapping[str, str], annotations: Mapping[str, str], group: str) -> int:
    found = field_source(labels, annotations, POD_GROUP_SIZE)
    fix = f"set it on every pod of pod group {group} to the number of pods in the group"
    if found is None:
        raise FieldError(f"label {POD_GROUP_SIZE}: missing; {fix}")
    where, text = found
    value = text.strip()
    if not is_digits(value):
        raise FieldError(f"{where}: {text!r} is not a whole number; {fix}")
    size = int(value)
    if not 1 <= size <= MAX_INDEXED_PODS:
        raise FieldError(f"{where}: {size} is not from 1 to {MAX_INDEXED_PODS}; {fix}")
    return size


def _timeout(labels: Mapping[str, str], annotations: Mapping[str, str]) -> float:
    found = field_source(labels, annotations, POD_GROUP_TIMEOUT)
    if found is None:
        return DEFAULT_TIMEOUT
    try:
        timeout = parse_duration(found[1], field=found[0])
    except DurationError as exc:
        raise FieldError(str(exc)) from None
    if timeout <= 0:
        raise FieldError(f"{found[0]}: {found[1]!r} must be longer than 0, such as 10m")
    return timeout


def group_fields(
    labels: Mapping[str, str], annotations: Mapping[str, str]
) -> tuple[str, int, GangFields, float]:
    """(group, size, gang fields, timeout) a pod of a pod group carries; raises FieldError
    naming the field to fix (a missing or malformed size, a minimum above it, ...)."""
    group = _group_name(labels)
    size = _size(labels, annotations, group)
    fields = read_gang_fields(labels, annotations, size)
    return group, size, fields, _timeout(labels, annotations)


def _said(member: Member, key: str) -> tuple[str, str] | None:
    if key == QUEUE:
        queue = member.labels.get(QUEUE)
        return (f"label {QUEUE}", queue) if queue is not None else None
    return field_source(member.labels, member.annotations, key)


def disagreement(group: str, first: Member, other: Member) -> str | None:
    """Why ``other`` cannot be in the same pod group as ``first`` (a field they do not say alike),
    naming the field; None when they agree."""
    for key in AGREED:
        ours, theirs = _said(first, key), _said(other, key)
        if (ours or ("", ""))[1].strip() == (theirs or ("", ""))[1].strip():
            continue
        where = (theirs or ours or (f"label {key}", ""))[0]
        said = repr(theirs[1]) if theirs else "nothing"
        wanted = repr(ours[1]) if ours else "nothing"
        return (
            f"{where}: pod {other.name} says {said} but pod {first.name} of pod group {group} "
            f"says {wanted}; every pod of a pod group must say the same: create pod "
            f"{other.name} again with {wanted}"
        )
    return None


class PodGroupKind:
    """A pod group: a gang of plain pods (`policies.kinds.kind.Kind`, and
    `policies.kinds.members.PodGang`: its gang object is assembled from its pods)."""

    name: Final[Literal["PodGroup"]] = "PodGroup"
    api: Final = ApiKind("", "v1", "pods", "Pod")
    """What the webhook reviews: the pods, the ones that carry `member_label` only."""
    size_fields: Final = f"the pod group's {POD_GROUP_SIZE}"
    spreads: Final = False
    holds_itself: Final = False
    labels_pod_sets: Final = True
    operator: Final = None
    pins_affinity: Final = False
    """A pod's affinity cannot change once created: each pod is pinned by the node selector the
    controller gives it as it removes the gate."""
    member_label: Final = POD_GROUP

    @property
    def unfreeze(self) -> Mapping[str, Any] | None:
        return None

    def record_name(self, gang: str) -> str:
        return f"podgroup-{gang}"

    # --- the webhook, at a pod's create ---------------------------------------------------

    def queue(self, obj: Mapping[str, Any]) -> str:
        return queue_of((obj.get("metadata") or {}).get("labels") or {})

    def gang_fields(self, obj: Mapping[str, Any]) -> tuple[int, GangFields]:
        """Of a pod of the group, or of the group's virtual gang object (which carries its first
        pod's fields, and why its pods cannot make a gang: `members.problem_of`)."""
        meta = obj.get("metadata") or {}
        problem_of(obj.get("spec") or {})
        _, size, fields, _ = group_fields(meta.get("labels") or {}, meta.get("annotations") or {})
        return size, fields

    def hold(
        self,
        obj: Mapping[str, Any],
        queue: str,
        stamp: str,
        groups: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """The pod gated (muster's gate added to its own), stamped, labelled with its queue, its
        gang and its pod set. Raises FieldError for a pod bound at create (`spec.nodeName`).
        ``groups`` is not used: a pod group's members are not linked to native PodGroups (its
        pods are made one by one by their operator, so a group could not be named before its
        first pod; muster's gate holds them all until it releases the group whole)."""
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        labels = meta.get("labels") or {}
        if spec.get("nodeName"):
            raise FieldError(
                f"spec.nodeName: {spec['nodeName']!r}: a pod of pod group "
                f"{labels.get(POD_GROUP)} is placed by muster once its group is admitted; "
                "remove spec.nodeName"
            )
        gates = [dict(g) for g in spec.get("schedulingGates") or []]
        if not any(g.get("name") == PLACEMENT_GATE for g in gates):
            gates.append({"name": PLACEMENT_GATE})
        pod_set = str(labels.get(POD_SET) or shape_name(spec))
        return {
            "metadata": {
                "labels": {QUEUE: queue, GANG: _group_name(labels), POD_SET: pod_set},
                "annotations": {SUBMITTED: stamp},
            },
            "spec": {"schedulingGates": gates},
        }

    def compose(self, draft: Draft) -> list[dict[str, Any]]:
        """The group's plain pods, `<name>-<set>-<i>`, created together as their own operator
        would. With a queue in the draft's labels they opt in (`muster.dev/pod-group`, its
        size, the queue, the gang's fields); otherwise they are plain pods."""
        pods = []
        for pod_set in draft.sets:
            for i in range(pod_set.count):
                meta = named_set_metadata(draft, pod_set)
                meta["name"] = f"{draft.name}-{pod_set.set_name}-{i}"
                meta["namespace"] = draft.namespace
                if draft.queue is not None:
                    meta["labels"].update(
                        {POD_GROUP: draft.name, POD_GROUP_SIZE: str(draft.size), QUEUE: draft.queue}
                    )
                    meta["annotations"].update(draft.annotations)
                pods.append(
                    {
                        "apiVersion": self.api.api_version,
                        "kind": self.api.kind,
                        "metadata": meta,
                        "spec": dict(pod_set.spec),
                    }
                )
        return pods

    def gang_object(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """The group as if all of its pods were like this one (what the webhook's never-fits
        check asks about at its first pod)."""
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        virtual = self.assemble(
            str(meta.get("namespace") or ""), _group_name(labels), [member_of(obj)], None
        )
        assert virtual is not None
        return virtual

    # --- the virtual gang object ------------------------------------------------------------

    def assemble(
        self,
        namespace: str,
        gang: str,
        members: Sequence[Member],
        record: Mapping[str, Any] | None,
    ) -> dict[str, Any] | None:
        """The group's virtual gang object: its first pod's fields (a pod that disagrees on its
        size, minimum or queue keeps the group waiting, naming the field), one pod set per
        pod-set label among its first `size` pods."""
        if not members:
            return None
        ordered = in_order(members)
        first = ordered[0]
        problem = None
        size, timeout = len(ordered), DEFAULT_TIMEOUT
        try:
            _, size, _, timeout = group_fields(first.labels, first.annotations)
        except FieldError as exc:
            problem = f"pod {first.name}: {exc}"
        for other in ordered[1:]:
            problem = problem or disagreement(gang, first, other)
        labels = {k: first.labels[k] for k in (QUEUE, *GROUP_FIELDS) if k in first.labels}
        annotations = {k: first.annotations[k] for k in GROUP_FIELDS if k in first.annotations}
        assembly = Assembly(
            self.name, namespace, gang, size, tuple(ordered), labels, annotations, problem, timeout
        )
        return virtual_object(assembly, record)

    def disagreement(self, gang: str, first: Member, other: Member) -> str | None:
        return disagreement(gang, first, other)

    # --- the controller, from the virtual gang object -----------------------------------------

    def original(self, spec: Mapping[str, Any]) -> Original:
        return Original({}, {})  # a release changes nothing a restore puts back

    def templates(self, spec: Mapping[str, Any], original: Original) -> tuple[PodTemplate, ...]:
        sets = spec.get("podSets") or []
        if not sets:
            raise FieldError(f"label {POD_GROUP}: the pod group has no pods")
        return tuple(
            PodTemplate(
                str(s["name"]), f"/spec/podSets/{i}/template", int(s["count"]), s["template"]
            )
            for i, s in enumerate(sets)
        )

    def status(self, body: Mapping[str, Any]) -> KindStatus:
        return kind_status(body)

    def runtime_limit(self, spec: Mapping[str, Any]) -> float | None:
        return None  # a pod's activeDeadlineSeconds runs from its own start, not the gang's

    def resize(self, original: Original, spec: Mapping[str, Any], size: int) -> dict[str, int]:
        return {}  # admitted smaller: fewer pods are released, the rest stay gated

    def put_back(self, original: Original, spec: Mapping[str, Any]) -> dict[str, int]:
        return {}

    def resize_owner(self, size: int, full: int) -> dict[str, Any] | None:
        return None

    def admission_change(
        self, old: Mapping[str, Any], new: Mapping[str, Any]
    ) -> FieldChange | None:
        """None: a pod group's members get no update review (webhook.configuration registers
        none for pods). Kubernetes does not let a pod's requests or node selector change once it
        exists, and a member's labels decide nothing after admission: the group's record keeps
        its admitted size, and pods beyond it stay at muster's gate."""
        return None


PODGROUP: Final = PodGroupKind()
