"""The planner's Node and Queue, and a pod's part in node usage, read from API objects (plain
dicts, as the watch delivers them). Pure: the controller, the webhook and the simulator's kwok
engine read objects with these."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from policies.kinds.pinning import HOSTNAME, PLACEMENT_GATE
from policies.kinds.podtemplate import pod_requests
from policies.model import Node, Queue, Taint
from policies.phase import condition_true
from policies.queuespec import parse_queue
from policies.resources import Resources
from policies.selectors import LabelSelector, parse_label_selector
from policies.vocabulary import GANG, POD_GROUP, POD_SET


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
    pod_set: str = ""
    """The pod set of its gang it belongs to (`muster.dev/pod-set`; '' for a gang of one)."""
    terminating: bool = False
    """Being deleted (bound, so it still holds its node): its kind's controller may already
    have made the pod that replaces it, which is not a pod more than admitted."""
    candidate: bool = False
    """A pod of a pod group still held at muster's gate: the gang may take it, but it is not one
    of the gang's pods until muster releases it (pods beyond the group's count stay so)."""
    owner: str = ""
    """The uid of the controller that made it (its ownerReference with controller: true; ''
    for a pod no controller made, as a pod group's members)."""
    index: str = ""
    """Its completion index (`batch.kubernetes.io/job-completion-index`), for a pod of an
    Indexed Job: a second live pod of one index is its Job controller running that member
    twice, not a member more."""

    @property
    def member(self) -> tuple[str, str, str]:
        """Which member of its gang it runs: (its controller, its completion index, '') for a
        pod of an Indexed Job; (its controller, '', the pod itself) for any other."""
        return (self.owner, self.index, "") if self.index else (self.owner, "", self.ref)

    @property
    def set_key(self) -> str | None:
        """Its gang, and for a gang of several pod sets its pod set: where it is placed from."""
        if self.gang is None or not self.pod_set:
            return self.gang
        return f"{self.gang}/{self.pod_set}"


TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
"""The Job controller's annotation (and, since Kubernetes 1.28, label) on a pod of an Indexed
Job."""


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
    gated = any(g.get("name") == PLACEMENT_GATE for g in spec.get("schedulingGates") or [])
    try:
        requests = pod_requests(spec) + Resources(pods=1)
    except ValueError:
        requests = Resources(pods=1)
    return PodRecord(
        node=spec.get("nodeName") or "",
        requests=requests,
        gang=f"{meta.get('namespace')}/{gang_label}" if gang_label else None,
        ready=condition_true(status, "Ready"),
        ref=f"{meta.get('namespace')}/{meta.get('name')}",
        gated=gated,
        target=(spec.get("nodeSelector") or {}).get(HOSTNAME, ""),
        waiting=pod_waits(spec, status),
        pod_set=labels.get(POD_SET, ""),
        terminating=bool(meta.get("deletionTimestamp")),
        candidate=gated and POD_GROUP in labels,
        owner=next(
            (
                str(ref.get("uid") or "")
                for ref in meta.get("ownerReferences") or []
                if ref.get("controller")
            ),
            "",
        ),
        index=str(
            (meta.get("annotations") or {}).get(COMPLETION_INDEX)
            or labels.get(COMPLETION_INDEX)
            or ""
        ),
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
