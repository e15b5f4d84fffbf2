"""A gang workload to be written as an object of some kind: the other direction of a kind's
reading (`Kind.templates` reads pod sets out of an object; `Kind.compose` writes an object from
pod sets). What submits workloads of every kind (the kwok engine, benches, tests) says what the
gang is here once, and each kind decides what its object looks like, so a new kind is replayed
without a branch of its own anywhere else. Pure: plain dicts out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.vocabulary import MIN_MEMBERS, POD_SET, QUEUE


@dataclass(frozen=True, slots=True)
class DraftSet:
    """One pod set of a draft: its pods' metadata (labels, annotations) and spec, and how many
    pods it makes."""

    name: str
    """The pod set's name ('' for a gang of one set; a kind that names its sets uses "main")."""
    count: int
    metadata: Mapping[str, Any]
    spec: Mapping[str, Any]

    @property
    def set_name(self) -> str:
        """The name a kind that names its pod sets gives it."""
        return self.name or "main"


@dataclass(frozen=True, slots=True)
class Draft:
    """A gang workload to write as one kind's object (or, for a pod group, its pods)."""

    name: str
    namespace: str
    labels: Mapping[str, str]
    """The object's labels (its queue's, for muster to hold it; or an outside controller's)."""
    annotations: Mapping[str, str]
    """The object's annotations: the gang's fields (priority, elastic wait...)."""
    sets: tuple[DraftSet, ...]
    size: int
    minimum: int
    """The members its pods need running to work (`muster.dev/min-members`, written where the
    kind's pods and its gang runner find it)."""
    min_size: int | None = None
    """The minimum muster admits it at, for a kind that has a field of its own for it (a
    MiniCluster's `minSize`); a kind without one reads `minimum`, or is admitted whole (a
    JobSet)."""
    spread: bool = False
    """Its pods go one per node (a kind that spreads its pods by itself is told not to when
    False)."""
    suspend: bool = False
    """Written suspended (for an outside controller to release)."""
    deadline: int | None = None
    """Seconds it may run (the kind's activeDeadlineSeconds or its own field)."""
    retries: int | None = None
    """Pod failures tolerated (a Job's backoffLimit); None for the kind's default."""
    handed: Mapping[str, str] | None = None
    """Labels an outside controller reads on the gang object (a subset of `labels`): a kind
    whose operator makes the gang object passes them on to it."""
    child_labels: Mapping[str, str] | None = None
    """Labels for the objects the kind's operator makes from it (a JobSet's Jobs)."""

    @property
    def queue(self) -> str | None:
        """The queue its labels name, if any."""
        return self.labels.get(QUEUE)


def job_spec(
    draft: Draft, pod_set: DraftSet, *, count: int | None = None, with_suspend: bool = True
) -> dict[str, Any]:
    """A batch/v1 Job spec running ``pod_set`` (``count`` pods, its own by default) in one go,
    Indexed: what a Job, and each replicated Job of a JobSet, is."""
    pods = pod_set.count if count is None else count
    spec: dict[str, Any] = {
        "parallelism": pods,
        "completions": pods,
        "completionMode": "Indexed",
    }
    if draft.retries is not None:
        spec["backoffLimit"] = draft.retries
    if with_suspend and draft.suspend:
        spec["suspend"] = True
    spec["template"] = {"metadata": dict(pod_set.metadata), "spec": dict(pod_set.spec)}
    if draft.deadline is not None:
        spec["activeDeadlineSeconds"] = draft.deadline
    return spec


def object_meta(draft: Draft, annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The object's metadata: name, namespace, labels, and annotations where there are any."""
    meta: dict[str, Any] = {
        "name": draft.name,
        "namespace": draft.namespace,
        "labels": dict(draft.labels),
    }
    written = dict(draft.annotations if annotations is None else annotations)
    if written:
        meta["annotations"] = written
    return meta


def named_set_metadata(draft: Draft, pod_set: DraftSet) -> dict[str, Any]:
    """A pod set's pods' metadata for a kind that names its pod sets: its set's label
    (`muster.dev/pod-set`, as muster's webhook writes it too) and the gang's whole minimum
    (`muster.dev/min-members`) on each pod, besides the draft's own."""
    meta = pod_set.metadata
    return {
        "labels": {**(meta.get("labels") or {}), POD_SET: pod_set.set_name},
        "annotations": {**(meta.get("annotations") or {}), MIN_MEMBERS: str(draft.minimum)},
    }
