"""A Flux Operator MiniCluster as a gang: size `spec.size`, minimum `muster.dev/min-members`
(annotation, else label), else `spec.minSize`, else the size.

A MiniCluster has no suspend field: its gang is the Indexed Job the operator creates. The
webhook puts the queue and every gang field into `spec.jobLabels`, the operator copies them onto
that Job, and the controller reads them there with `policies.kinds.fields` like any Job's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import chain
from typing import Any, Final, Literal

from policies.durations import DurationError, parse_runtime_limit
from policies.kinds.changes import (
    GANG_FIELDS,
    FieldChange,
    Pair,
    first_change,
    gang_field_pairs,
    queue_pair,
    spec_pairs,
)
from policies.kinds.drafts import Draft, object_meta
from policies.kinds.fields import (
    FieldError,
    GangFields,
    parse_min_members,
    queue_of,
    read_gang_fields,
)
from policies.kinds.job import JOB
from policies.kinds.kind import ApiKind, KindStatus, PodTemplate
from policies.kinds.pinning import Original
from policies.vocabulary import (
    GANG_KIND,
    MAX_INDEXED_PODS,
    MIN_MEMBERS,
    QUEUE,
    RESIZED_FROM,
    SUBMITTED,
)

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
    (`policies.kinds.kind.Kind`). The webhook holds the MiniCluster by labelling that Job
    through `spec.jobLabels`; the controller holds, reads and releases the Job as a Job (the
    methods for the gang object are the Job's)."""

    name: Final[Literal["MiniCluster"]] = "MiniCluster"
    api: Final = ApiKind("flux-framework.org", "v1alpha2", "miniclusters", "MiniCluster")
    holds_itself: Final = False
    labels_pod_sets: Final = False
    operator: Final = "flux"
    pins_affinity: Final = JOB.pins_affinity
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

    def hold(
        self,
        obj: Mapping[str, Any],
        queue: str,
        stamp: str,
        groups: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """The queue and every gang field go into `spec.jobLabels`: the operator copies them
        onto the Job it creates, which the webhook then suspends (as a Job owned by this
        MiniCluster, with its stamp) and links to its PodGroup (a MiniCluster has no pod
        template of its own to link: ``groups`` is not used). Raises FieldError."""
        _, fields = self.gang_fields(obj)
        return {
            "metadata": {"annotations": {QUEUE: queue, SUBMITTED: stamp}, "labels": {QUEUE: queue}},
            "spec": {"jobLabels": minicluster_job_labels(queue, fields)},
        }

    @property
    def unfreeze(self) -> Mapping[str, Any] | None:
        return JOB.unfreeze

    def original(self, spec: Mapping[str, Any]) -> Original:
        return JOB.original(spec)

    def templates(self, spec: Mapping[str, Any], original: Original) -> tuple[PodTemplate, ...]:
        return JOB.templates(spec, original)

    def status(self, body: Mapping[str, Any]) -> KindStatus:
        return JOB.status(body)

    def runtime_limit(self, spec: Mapping[str, Any]) -> float | None:
        return JOB.runtime_limit(spec)

    def resize(self, original: Original, spec: Mapping[str, Any], size: int) -> dict[str, int]:
        return JOB.resize(original, spec, size)

    def put_back(self, original: Original, spec: Mapping[str, Any]) -> dict[str, int]:
        return JOB.put_back(original, spec)

    def admission_change(
        self, old: Mapping[str, Any], new: Mapping[str, Any]
    ) -> FieldChange | None:
        """What reached its Job at create and cannot follow later: the queue, every gang field
        (carried by `spec.jobLabels`, which the operator copies onto the Job it makes, once),
        `spec.minSize` and `spec.size` (the minimum written into the Job's labels then, and the
        size the Job was made at; the operator would resize the Job, but not its minimum).
        `spec.size` moves only by muster's own elastic resize (`resize_owner`): down to no
        less than the minimum with `muster.dev/resized-from` set to the size it left, and back
        to exactly that size with the annotation removed."""
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        old_labels = old_spec.get("jobLabels") or {}
        new_labels = new_spec.get("jobLabels") or {}
        pairs = chain(
            (queue_pair(old, new),),
            gang_field_pairs(old, new, GANG_FIELDS),
            spec_pairs(old_spec, new_spec, "spec", ("minSize",)),
            (
                (f"spec.jobLabels[{key}]", old_labels.get(key), new_labels.get(key))
                for key in (QUEUE, *GANG_FIELDS)
            ),
        )
        if not _muster_resize(old, new):
            pairs = chain(pairs, _size_pairs(old, new))
        return first_change(pairs)

    def resize_owner(self, size: int, full: int) -> dict[str, Any] | None:
        """`spec.size`: the Flux Operator keeps its Job's parallelism and completions at the
        MiniCluster's size (measured: it patched a Job admitted at 2 of 4 back to 4 at once), so
        an elastic admission resizes the MiniCluster too (and a restore puts it back). With it
        `muster.dev/resized-from` says the size to come back to (removed by the restore): the
        webhook lets `spec.size` move only so (`admission_change`)."""
        resized_from = str(full) if size < full else None
        return {"metadata": {"annotations": {RESIZED_FROM: resized_from}}, "spec": {"size": size}}

    def gang_object(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """The operator's Job (`minicluster_job`, carrying `spec.jobLabels`) as the webhook
        stamps it (`muster.dev/gang-kind: MiniCluster`). A MiniCluster not named yet
        (generateName) lends its Job that prefix."""
        meta = dict(obj.get("metadata") or {})
        meta.setdefault("name", meta.get("generateName") or "minicluster")
        job = minicluster_job({**obj, "metadata": meta})
        job["metadata"]["annotations"] = {GANG_KIND: self.name}
        return job

    def compose(self, draft: Draft) -> list[dict[str, Any]]:
        """A MiniCluster of the draft's one pod set: its containers, pods' metadata, tolerations
        and node selector; the handed and child labels and the gang's minimum in
        `spec.jobLabels` (the operator puts them on the Job it makes: the gang object). Its
        pods spread one per node unless the draft does not spread. Not suspendable."""
        if len(draft.sets) != 1:
            raise ValueError(f"a MiniCluster runs one pod set, not {len(draft.sets)}")
        pod_set = draft.sets[0]
        pod = pod_set.spec
        pod_meta = pod_set.metadata
        spec: dict[str, Any] = {
            "size": draft.size,
            "jobLabels": {
                **(draft.handed or {}),
                **(draft.child_labels or {}),
                MIN_MEMBERS: str(draft.minimum),
            },
            "containers": [
                {"name": c.get("name"), "image": c.get("image"), "resources": c.get("resources")}
                for c in pod.get("containers") or []
            ],
            "pod": {
                "labels": dict(pod_meta.get("labels") or {}),
                "annotations": dict(pod_meta.get("annotations") or {}),
                "tolerations": list(pod.get("tolerations") or []),
                **({"nodeSelector": dict(pod["nodeSelector"])} if pod.get("nodeSelector") else {}),
            },
        }
        if not draft.spread:
            spec["network"] = {"disableAffinity": True}
        if draft.min_size is not None:
            spec["minSize"] = draft.min_size
        if draft.deadline is not None:
            spec["deadlineSeconds"] = draft.deadline  # the operator's Job: activeDeadlineSeconds
        return [
            {
                "apiVersion": self.api.api_version,
                "kind": self.api.kind,
                "metadata": object_meta(draft),
                "spec": spec,
            }
        ]


MINICLUSTER: Final = MiniClusterKind()


def _resized_from(obj: Mapping[str, Any]) -> str | None:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(RESIZED_FROM)
    return value if isinstance(value, str) else None


def _size_pairs(old: Mapping[str, Any], new: Mapping[str, Any]) -> Iterator[Pair]:
    yield "spec.size", (old.get("spec") or {}).get("size"), (new.get("spec") or {}).get("size")
    yield f"annotation {RESIZED_FROM}", _resized_from(old), _resized_from(new)


def _muster_resize(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether an update moves `spec.size` as muster's elastic admission and its restore do
    (`MiniClusterKind.resize_owner`), never above the size the MiniCluster had before: down
    from its size to at least its minimum (`spec.jobLabels[muster.dev/min-members]`, fixed
    at create) marking that size, or back to exactly the marked size, removing the mark."""
    was, now = (old.get("spec") or {}).get("size", 1), (new.get("spec") or {}).get("size", 1)
    if not (isinstance(was, int) and isinstance(now, int)) or was == now:
        return False
    was_from, now_from = _resized_from(old), _resized_from(new)
    if was_from is None and now_from == str(was):  # the elastic admission
        labels = (new.get("spec") or {}).get("jobLabels") or {}
        try:
            minimum = int(labels.get(MIN_MEMBERS) or was)
        except ValueError:
            return False
        return minimum <= now < was
    return was_from is not None and now_from is None and was_from == str(now)  # its restore


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
