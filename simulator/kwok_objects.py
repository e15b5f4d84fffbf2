"""The Kubernetes objects a trace becomes on kwok: Nodes, Queues, Namespaces, and each gang as
an object of its kind (a Job, a MiniCluster, a JobSet, a pod group's pods), which the kind
writes itself (`Kind.compose`, from the `policies.kinds.drafts.Draft` made here).

Pure functions from the trace model to API bodies (plain dicts); nothing here talks to the API.
The kwok engine (`simulator.kwok_engine`) creates them. Times are compressed by the time scale:
a trace duration of `d` seconds is written as `d / scale` wall seconds (runtimes, clog timeouts,
backoffs), so `scale` 25 replays 100 s of trace time in 4 s.

What the objects carry so the cluster behaves as the trace says:

- gang pods are labelled `muster.dev/gang` (the webhook would add it too; without admission
  nobody would) and annotated `muster.dev/gang-runtime`, so the gang runner
  (`simulator.controlplane.gangrun`) starts the gang's runtime only once its minimum members run;
- the gang minimum is where its kind's readers look (`muster.dev/min-members` on a Job, in a
  MiniCluster's `jobLabels`, on each pod of a kind that names its pod sets), where the gang
  runner reads it with or without the webhook;
- `onePodPerNode` is a Job's required pod anti-affinity on the gang label per hostname, which is
  how muster's gang adapter (`admission.gangs`) recognises it; a MiniCluster has no affinity
  field (the real CRD prunes one): the operator gives every MiniCluster's pods its own
  one-pod-per-node anti-affinity (`simulator.controlplane.minicluster.operator_affinity`);
- every pod tolerates the kwok fake-node taint; on a shared cluster pods also select the run's
  nodes (`muster.dev/sim-run`), so nothing of the replay lands elsewhere;
- with admission `external` (a controller muster does not run admits them), a Job is created
  suspended, as that controller's webhook would make it, and carries the `--label` labels (a
  MiniCluster in `jobLabels` too, so the Job the operator makes has them); it has no
  `muster.dev/queue` label, so muster's webhook, if one runs, leaves it alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kubeport import kubeapi
from policies import Gang, PodSet, Preemption, Resources, Toleration
from policies.kinds import KindName
from policies.kinds.drafts import Draft, DraftSet
from policies.kinds.registry import kind_named
from policies.model import Ordering
from policies.preemption import preemption_spec
from policies.vocabulary import (
    ELASTIC_AFTER,
    GANG,
    GANG_RUNTIME,
    POD_SET,
    PRIORITY,
    QUEUE,
    TOPOLOGY_PREFERRED,
    TOPOLOGY_REQUIRED,
)
from simulator.controlplane.nodes import FAKE_NODE_TAINT, kwok_node
from simulator.records import Admission
from simulator.trace import QueueSpec, SubmittedGang, Trace
from simulator.tracedevices import without_devices

SIM_RUN: Final = "muster.dev/sim-run"
"""Label on every object of one kwok replay (nodes, namespaces, Jobs, MiniClusters, pods)."""
SIM_NODE_GROUP: Final = "muster.dev/sim-node-group"
"""Node label: the trace's node group the node belongs to."""
HOSTNAME: Final = "kubernetes.io/hostname"
STANDARD_RESOURCES: Final = frozenset({"cpu", "memory", "ephemeral-storage"})
DEFAULT_PODS: Final = "110"
"""Pods a node takes when the trace does not say (the kubelet's default)."""

QUEUES_PATH: Final = kubeapi.QUEUES.path()


def quantity(resource: str, amount: int) -> str:
    """An exact Kubernetes quantity for an amount in `policies` units (millicores for cpu)."""
    if resource == "cpu":
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if amount and (resource == "memory" or resource.endswith(("storage", "memory"))):
        for suffix, unit in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
            if amount % unit == 0:
                return f"{amount // unit}{suffix}"
    return str(amount)


def quantities(resources: Resources) -> dict[str, str]:
    return {name: quantity(name, amount) for name, amount in sorted(resources.items())}


def wall_deadline_seconds(trace_seconds: float, scale: float) -> int:
    """A trace runtime limit compressed by `scale`, as whole seconds for `activeDeadlineSeconds`
    (an integer >= 1): rounded up, so Kubernetes never ends a gang before its trace limit."""
    return max(1, math.ceil(trace_seconds / scale - 1e-9))


def wall_duration(trace_seconds: float, scale: float) -> str:
    """A trace duration compressed by `scale`, as a Go duration (ms precision, at least 1ms)."""
    millis = max(1, round(trace_seconds * 1000.0 / scale))
    if millis % 1000 == 0:
        return f"{millis // 1000}s"
    return f"{millis}ms"


# --------------------------------------------------------------------------------- nodes


@dataclass(frozen=True, slots=True)
class NodePlan:
    """One kwok node of the trace: its name in the cluster and its body."""

    name: str
    trace_name: str
    body: dict[str, Any]


def node_bodies(trace: Trace, run: str, *, prefix: str = "") -> list[NodePlan]:
    """The trace's nodes as kwok Node bodies (named `<prefix><trace node name>`).

    Allocatable is exactly the trace's (plus `pods: 110` when the trace does not count pods: a
    node without a pods figure takes none in Kubernetes); labels and taints as the trace says,
    plus the kwok fake-node taint every pod of the replay tolerates.
    """
    plans: list[NodePlan] = []
    nodes = trace.nodes()
    groups = [
        group.name or f"node-g{index}"
        for index, group in enumerate(trace.node_groups)
        for _ in range(group.total)  # count nodes in each of its domains
    ]
    for node, group in zip(nodes, groups, strict=True):
        name = f"{prefix}{node.name}"
        # A node's DRA devices are its ResourceSlices' (`simulator.kwok_devices`), not its own.
        allocatable = quantities(without_devices(node.allocatable, trace.devices))
        allocatable.setdefault("pods", DEFAULT_PODS)
        taints: list[dict[str, str]] = []
        for taint in node.taints:
            entry = {"key": taint.key, "effect": taint.effect}
            if taint.value:
                entry["value"] = taint.value
            taints.append(entry)
        labels = {**dict(node.labels), HOSTNAME: name, SIM_RUN: run, SIM_NODE_GROUP: group}
        body = kwok_node(name, allocatable, labels, taints)
        plans.append(NodePlan(name=name, trace_name=node.name, body=body))
    return plans


# -------------------------------------------------------------------------------- queues


def queue_body(
    spec: QueueSpec, scale: float, run: str, min_clog_timeout: float = 0.0
) -> dict[str, Any]:
    """A Queue object for a trace queue, with its clog timeout and backoff compressed by scale.

    The clog timeout is never below `min_clog_timeout` wall seconds: a gang the control plane
    is still starting must not be taken for a clog because the trace's timeout was compressed
    below the time the control plane needs to start a gang.

    A trace queue with the size-ratio rule off (`sizeRatio: null`) gets ratio 1: no gang that
    fits the cluster is larger than the whole cluster, so the rule never fires (the Queue CRD
    has no "off").
    """
    body: dict[str, Any] = {"weight": spec.weight}
    if spec.parent:
        body["parent"] = spec.parent
    if spec.nominal is not None:
        # A resource named in nominal with amount 0 limits the queue to 0 (quota_names).
        body["nominal"] = {
            name: quantity(name, spec.nominal[name]) for name in sorted(spec.quota_names)
        }
    if spec.borrowing_limit is not None:
        body["borrowingLimit"] = quantities(spec.borrowing_limit)
    if spec.lending_limit is not None:
        body["lendingLimit"] = quantities(spec.lending_limit)
    body["strategy"] = spec.strategy
    ratio = spec.size_ratio
    body["sizeRatio"] = (
        {"ratio": 1.0, "action": "Serialize"}
        if ratio is None
        else {"ratio": ratio.ratio, "action": ratio.action}
    )
    body["clogTimeout"] = wall_duration(max(spec.clog_timeout, min_clog_timeout * scale), scale)
    body["backoff"] = {
        "base": wall_duration(spec.backoff.base, scale),
        "max": wall_duration(spec.backoff.max, scale),
        "limit": spec.backoff.limit,
    }
    body["nodeFit"] = spec.node_fit
    if spec.never_fits != "Warn":
        body["neverFits"] = spec.never_fits
    if spec.preemption != Preemption():
        body["preemption"] = preemption_body(spec.preemption, scale)
    if spec.usage_half_life is not None:
        half_life = spec.usage_half_life
        body["fairSharing"] = {"halfLife": wall_duration(half_life, scale) if half_life else "0s"}
    if spec.ordering != Ordering():
        ordering: dict[str, str] = {"by": spec.ordering.by}
        if spec.ordering.aging_bound is not None:
            ordering["agingBound"] = wall_duration(spec.ordering.aging_bound, scale)
        body["ordering"] = ordering
    return {
        "apiVersion": "muster.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": spec.name, "labels": {SIM_RUN: run}},
        "spec": body,
    }


def preemption_body(preemption: Preemption, scale: float) -> dict[str, Any]:
    """A Queue's `spec.preemption` (camelCase, as `policies.parse_preemption` reads it), with
    `protectFor` compressed by scale like the other durations."""
    return {
        **preemption_spec(preemption),
        "protectFor": wall_duration(preemption.protect_for, scale),
    }


def namespace_body(name: str, run: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {SIM_RUN: run}},
    }


# --------------------------------------------------------------------------------- gangs


def _toleration(t: Toleration) -> dict[str, str]:
    out: dict[str, str] = {"operator": t.operator}
    if t.key:
        out["key"] = t.key
    if t.value and t.operator == "Equal":
        out["value"] = t.value
    if t.effect:
        out["effect"] = t.effect
    return out


def container_resources(requests: Resources) -> dict[str, dict[str, str]]:
    """Requests of one pod (without `pods`, which is not a container resource); extended
    resources need limits equal to requests in Kubernetes."""
    wanted = {name: quantity(name, amount) for name, amount in sorted(requests.items())}
    wanted.pop("pods", None)
    limits = {
        name: value
        for name, value in wanted.items()
        if name not in STANDARD_RESOURCES and not name.startswith("hugepages-")
    }
    return {"requests": wanted, "limits": limits} if limits else {"requests": wanted}


@dataclass(frozen=True, slots=True)
class GangObject:
    """What the engine creates for one gang: the API path and body, and where its Job lives."""

    path: str
    body: dict[str, Any]
    namespace: str
    job_name: str
    kind: KindName
    more: tuple[dict[str, Any], ...] = ()
    """Further objects created at `path` after `body` (a pod group's other pods)."""


def gang_object(
    arrival: SubmittedGang,
    *,
    namespace: str,
    admission: Admission,
    scale: float,
    run: str,
    node_selector: Mapping[str, str] | None = None,
    priority_shift: int = 0,
    labels: Mapping[str, str] | None = None,
    claims: PodClaims | None = None,
) -> GangObject:
    """The Job, MiniCluster, JobSet or pod group's pods for one gang of the trace.

    `namespace` is the cluster namespace the trace's namespace maps to; the object's name is
    the gang's name in the trace. With admission `muster` it carries the `muster.dev/queue`
    label (the webhook suspends it and the controller admits it); with `none` it has no queue
    label, so nothing but the default scheduler decides where its pods go; with `external` it
    is created suspended and carries `labels` (e.g. Kueue's queue-name label), for a controller
    muster does not run to admit. Its priority
    (plus `priority_shift`, which keeps negative trace priorities in muster's 0..1e9) and its
    elastic wait (compressed by `scale`) and its topology request go in muster's annotations.
    With `claims`, its pods claim their DRA devices through claim templates instead of
    requesting them.
    """
    gang = arrival.gang
    parts = _PodParts.of(
        arrival,
        admission=admission,
        scale=scale,
        run=run,
        node_selector=node_selector,
        extra_labels=labels or {},
        claims=claims or NO_CLAIMS,
    )
    gang_fields: dict[str, str] = {}
    if gang.priority + priority_shift:
        gang_fields[PRIORITY] = str(gang.priority + priority_shift)
    if gang.elastic_after:
        gang_fields[ELASTIC_AFTER] = wall_duration(gang.elastic_after, scale)
    if gang.topology is not None:
        request = TOPOLOGY_REQUIRED if gang.topology.required else TOPOLOGY_PREFERRED
        gang_fields[request] = gang.topology.level
    deadline = (
        wall_deadline_seconds(gang.runtime_limit, scale) if gang.runtime_limit is not None else None
    )
    kind = kind_named(gang.kind)
    draft = Draft(
        name=parts.name,
        namespace=namespace,
        labels=parts.labels,
        annotations=gang_fields,
        sets=_draft_sets(gang, parts, kind.labels_pod_sets),
        size=gang.size,
        minimum=gang.min,
        min_size=gang.min_size,
        spread=gang.one_pod_per_node,
        suspend=parts.suspend,
        deadline=deadline,
        retries=100,
        handed=parts.handed_labels,
        child_labels={SIM_RUN: parts.run},
    )
    bodies = kind.compose(draft)
    api = kind.api
    return GangObject(
        path=kubeapi.Resource(api.group, api.version, api.plural).path(namespace),
        body=bodies[0],
        namespace=namespace,
        job_name=parts.name,
        kind=kind.name,
        more=tuple(bodies[1:]),
    )


def _draft_sets(gang: Gang, parts: _PodParts, named: bool) -> tuple[DraftSet, ...]:
    """The gang's pod sets as its kind writes them: each set with its own requests, selector
    and tolerations for a kind that names its sets; else the gang's one set."""
    meta = {"labels": parts.pod_labels, "annotations": {GANG_RUNTIME: parts.runtime}}
    claims = parts.claims
    if named:
        return tuple(
            DraftSet(
                pod_set.name,
                pod_set.count,
                meta,
                claims.claim(_set_pod_spec(gang, pod_set, parts), pod_set.name),
            )
            for pod_set in gang.pod_sets
        )
    spec = claims.claim(_gang_pod_spec(gang, parts), gang.set_name)
    return (DraftSet("", gang.size, meta, spec),)


@dataclass(frozen=True, slots=True)
class PodClaims:
    """How a gang's pods claim their DRA devices (`simulator.tracedevices`): the resources
    their claims count as (which they do not request), and the claim template of each pod set
    that claims any."""

    resources: frozenset[str] = frozenset()
    templates: Mapping[str, str] = field(default_factory=dict)

    def requests(self, requests: Resources) -> Resources:
        names = self.resources
        if not names or not names & set(requests):
            return requests
        return Resources({k: v for k, v in requests.items() if k not in names})

    def claim(self, spec: dict[str, Any], pod_set: str) -> dict[str, Any]:
        """`spec` whose pods claim from `pod_set`'s template, if it has one."""
        template = self.templates.get(pod_set)
        if template is None:
            return spec
        spec["resourceClaims"] = [{"name": "devices", "resourceClaimTemplateName": template}]
        for container in spec["containers"]:
            container.setdefault("resources", {})["claims"] = [{"name": "devices"}]
        return spec


NO_CLAIMS: Final = PodClaims()


@dataclass(frozen=True)
class _PodParts:
    """What a gang's Job and MiniCluster share: its labels and its pods' template parts."""

    name: str
    run: str
    runtime: str
    """The pods' compressed runtime (the GANG_RUNTIME annotation kwok's stages read)."""
    selector: dict[str, str]
    tolerations: list[dict[str, Any]]
    pod_labels: dict[str, str]
    resources: dict[str, Any]
    labels: dict[str, str]
    minimum: str
    suspend: bool
    """Created suspended (admission `external`: the outside controller unsuspends it)."""
    handed_labels: dict[str, str]
    """The labels that hand it to the outside controller (`external`), also in `jobLabels`."""
    claims: PodClaims

    @classmethod
    def of(
        cls,
        arrival: SubmittedGang,
        *,
        admission: Admission,
        scale: float,
        run: str,
        node_selector: Mapping[str, str] | None,
        extra_labels: Mapping[str, str],
        claims: PodClaims,
    ) -> _PodParts:
        gang = arrival.gang
        name = gang.submitted.name
        tolerations = [
            {"key": FAKE_NODE_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
        ]
        tolerations.extend(_toleration(t) for t in gang.tolerations)
        labels: dict[str, str] = {SIM_RUN: run}
        handed = dict(extra_labels) if admission == "external" else {}
        if admission == "muster":
            labels[QUEUE] = gang.queue
        labels = {**handed, **labels}
        return cls(
            name=name,
            run=run,
            runtime=wall_duration(arrival.runtime, scale),
            selector={**dict(gang.node_selector), **dict(node_selector or {})},
            tolerations=tolerations,
            pod_labels={GANG: name, SIM_RUN: run},
            resources=container_resources(claims.requests(gang.pod_requests)),
            labels=labels,
            minimum=str(gang.min),
            suspend=admission == "external",
            handed_labels=handed,
            claims=claims,
        )


def _gang_pod_spec(gang: Gang, parts: _PodParts) -> dict[str, Any]:
    """The pod spec of a gang of one pod set: its requests, tolerations and selector, and a
    required anti-affinity to its own pods per node if it has one pod per node."""
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "muster-sim", "resources": parts.resources}],
        "tolerations": parts.tolerations,
    }
    if parts.selector:
        pod_spec["nodeSelector"] = parts.selector
    if gang.one_pod_per_node:
        pod_spec["affinity"] = _one_per_node({GANG: parts.name})
    return pod_spec


def _set_pod_spec(gang: Gang, pod_set: PodSet, parts: _PodParts) -> dict[str, Any]:
    """The pod spec of one pod set of a kind that names its sets (a JobSet, a pod group): its
    own requests, selector, tolerations, and a required anti-affinity to its own set's pods per
    node if it has one pod per node."""
    tolerations = [parts.tolerations[0], *(_toleration(t) for t in pod_set.tolerations)]
    resources = container_resources(parts.claims.requests(pod_set.requests))
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "muster-sim", "resources": resources}],
        "tolerations": tolerations,
    }
    selector = {
        **dict(pod_set.node_selector),
        **{k: v for k, v in parts.selector.items() if k == SIM_RUN},
    }
    if selector:
        spec["nodeSelector"] = selector
    if pod_set.one_pod_per_node:
        spec["affinity"] = _one_per_node({GANG: parts.name, POD_SET: pod_set.name or "main"})
    return spec


def _one_per_node(own: Mapping[str, str]) -> dict[str, Any]:
    """A required anti-affinity to the pods labelled ``own`` on the same node."""
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": dict(own)}, "topologyKey": HOSTNAME}
            ]
        }
    }
