"""A Flux Operator MiniCluster as a gang: size `spec.size`, minimum `muster.dev/min-members`
(annotation, else label), else `spec.minSize`, else the size.

A MiniCluster has no suspend field: its gang is the Indexed Job the operator creates. The
webhook puts the queue and every gang field into `spec.jobLabels`, the operator copies them onto
that Job, and the controller reads them there with `policies.kinds.fields` like any Job's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from policies.durations import DurationError, parse_runtime_limit
from policies.kinds.fields import (
    FieldError,
    GangFields,
    parse_min_members,
    queue_of,
    read_gang_fields,
)
from policies.vocabulary import GANG_KIND, MAX_INDEXED_PODS, MIN_MEMBERS, QUEUE

APP_NAME_LABEL: Final = "app.kubernetes.io/name"
HOSTNAME: Final = "kubernetes.io/hostname"
ZONE: Final = "topology.kubernetes.io/zone"


def _size(spec: Mapping[str, Any]) -> int:
    value = spec.get("size", 1)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldError(f"spec.size: {value!r} is not an integer; set it to the number of pods")
    if value < 1:
        raise FieldError(
            f"spec.size: {value} gives the MiniCluster no members; set spec.size to at least 1"
        )
    if value > MAX_INDEXED_PODS:
        raise FieldError(
            f"spec.size: {value} is more than the {MAX_INDEXED_PODS} pods Kubernetes allows the "
            "MiniCluster's Indexed Job, so the operator could never create it; set spec.size to "
            f"at most {MAX_INDEXED_PODS}"
        )
    return value


def minicluster_fields(
    spec: Mapping[str, Any], labels: Mapping[str, str], annotations: Mapping[str, str]
) -> tuple[int, GangFields]:
    """(size, gang fields) of a MiniCluster. Raises FieldError, also for a `spec.deadlineSeconds`
    the operator cannot copy to the Job's activeDeadlineSeconds (below 1 second)."""
    size = _size(spec)
    if spec.get("deadlineSeconds") is not None:
        try:
            parse_runtime_limit(spec["deadlineSeconds"], "spec.deadlineSeconds")
        except DurationError as exc:
            raise FieldError(str(exc)) from None
    default_minimum = size
    if spec.get("minSize") is not None:
        default_minimum = parse_min_members(spec["minSize"], size, "spec.minSize")
    return size, read_gang_fields(labels, annotations, size, default_minimum=default_minimum)


def minicluster_job_labels(queue: str, fields: GangFields) -> dict[str, str]:
    """The `spec.jobLabels` that carry a MiniCluster's queue and gang fields to its Job."""
    labels = {QUEUE: queue, MIN_MEMBERS: str(fields.minimum)}
    labels.update(fields.present)
    return labels


class MiniClusterKind:
    """A Flux Operator MiniCluster: a gang through the Job its operator makes
    (`policies.kinds.kind.Kind`)."""

    name: Final[Literal["MiniCluster"]] = "MiniCluster"
    size_fields: Final = "the MiniCluster's spec.size (or spec.minSize, muster.dev/min-members)"
    spreads: Final = True
    """The operator asks for one Flux broker per node with a preferred anti-affinity on every
    MiniCluster (unless `spec.network.disableAffinity`), and the scheduler keeps to it when the
    nodes are free, which is when muster admits the gang."""

    def queue(self, obj: Mapping[str, Any]) -> str:
        return queue_of((obj.get("metadata") or {}).get("labels") or {})

    def gang_fields(self, obj: Mapping[str, Any]) -> tuple[int, GangFields]:
        meta = obj.get("metadata") or {}
        return minicluster_fields(
            obj.get("spec") or {}, meta.get("labels") or {}, meta.get("annotations") or {}
        )

    def gang_job(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """The operator's Job (`minicluster_job`, carrying `spec.jobLabels`) as the webhook
        stamps it (`muster.dev/gang-kind: MiniCluster`). A MiniCluster not named yet
        (generateName) lends its Job that prefix."""
        meta = dict(obj.get("metadata") or {})
        meta.setdefault("name", meta.get("generateName") or "minicluster")
        job = minicluster_job({**obj, "metadata": meta})
        job["metadata"]["annotations"] = {GANG_KIND: self.name}
        return job


MINICLUSTER: Final = MiniClusterKind()


def minicluster_job(minicluster: Mapping[str, Any]) -> dict[str, Any]:
    """The Job the Flux Operator would create for this MiniCluster (as stored: defaults applied)."""
    meta = minicluster["metadata"]
    spec = minicluster.get("spec") or {}
    pod = spec.get("pod") or {}
    name, namespace = meta["name"], meta["namespace"]
    size = int(spec.get("size", 1))
    pod_labels = {
        **(pod.get("labels") or {}),
        "namespace": namespace,
        "app": "flux-operator",
        APP_NAME_LABEL: name,
        "hpa-selector": name,
    }
    containers = [
        {
            "name": c.get("name") or name,
            "image": c.get("image") or "ghcr.io/rse-ops/accounting:app-latest",
            "resources": {
                key: dict(value)
                for key in ("limits", "requests")
                if (value := (c.get("resources") or {}).get(key))
            },
        }
        for c in spec.get("containers") or [{}]
    ]
    # The operator copies only these four fields of each toleration (its schema has no others).
    tolerations = [
        {key: t[key] for key in ("key", "operator", "value", "effect") if t.get(key)}
        for t in pod.get("tolerations") or []
    ]
    pod_spec: dict[str, Any] = {
        "restartPolicy": pod.get("restartPolicy") or "OnFailure",
        "nodeSelector": dict(pod.get("nodeSelector") or {}),
        "tolerations": tolerations,
        "containers": containers,
    }
    if not (spec.get("network") or {}).get("disableAffinity"):
        pod_spec["affinity"] = operator_affinity(name, pod.get("nodeAffinity") or {})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(spec.get("jobLabels") or {}),
            "ownerReferences": [
                {
                    "apiVersion": minicluster.get("apiVersion") or "flux-framework.org/v1alpha2",
                    "kind": "MiniCluster",
                    "name": name,
                    "uid": meta.get("uid") or "",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "backoffLimit": int(spec.get("backoffLimit") or 100),
            # The operator copies spec.deadlineSeconds (both CRDs default it to 31500000).
            **(
                {"activeDeadlineSeconds": int(spec["deadlineSeconds"])}
                if spec.get("deadlineSeconds")
                else {}
            ),
            "completions": size,
            "parallelism": size,
            "completionMode": "Indexed",
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    "annotations": dict(pod.get("annotations") or {}),
                },
                "spec": pod_spec,
            },
        },
    }


def operator_affinity(name: str, node_affinity: Mapping[str, Any]) -> dict[str, Any]:
    """The operator's `getAffinity`: its pods prefer one zone and one pod per node (one Flux
    broker per node); `spec.pod.nodeAffinity` (label -> values) becomes a required node affinity."""
    own_pods = {
        "labelSelector": {
            "matchExpressions": [{"key": APP_NAME_LABEL, "operator": "In", "values": [name]}]
        }
    }
    affinity: dict[str, Any] = {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": {**own_pods, "topologyKey": ZONE}}
            ]
        },
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": {**own_pods, "topologyKey": HOSTNAME}}
            ]
        },
    }
    if node_affinity:
        requirements = [
            {"key": label, "operator": "In", "values": list(values)}
            for label, values in node_affinity.items()
        ]
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": requirements}]
            }
        }
    return affinity
