"""A JobSet (`jobset.x-k8s.io/v1alpha2`) as a gang: every replicated Job × its replicas × its
pods, one pod set per replicated Job, held by the JobSet's own `spec.suspend`.

The JobSet controller suspends and resumes the child Jobs with it, and while the JobSet is
suspended lets the labels, annotations, node selector, tolerations and scheduling gates of the
replicated Jobs' pod templates change (its webhook's rule for Kueue; not the affinity), and
copies them onto the child Jobs when it resumes them. So a release gates each pod template
(each pod then waits for muster to give it its planned node) and pins nothing else; eviction
suspends the JobSet (its controller deletes the child Jobs' pods) and takes the gates away.

A JobSet is admitted whole: its replicated Jobs cannot shrink while it runs, so
`muster.dev/min-members` below its size is refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
from typing import Any, Final, Literal

from policies.durations import DurationError, parse_runtime_limit, shown
from policies.kinds.changes import (
    FieldChange,
    Pair,
    first_change,
    gang_field_pairs,
    mark_pairs,
    queue_pair,
    spec_pairs,
    template_pairs,
)
from policies.kinds.drafts import Draft, DraftSet, job_spec, named_set_metadata, object_meta
from policies.kinds.fields import FieldError, GangFields, queue_of, read_gang_fields
from policies.kinds.job import end_time, job_size_of, runs_in_waves
from policies.kinds.kind import ApiKind, KindStatus, PodTemplate
from policies.kinds.pinning import Original, TemplateOriginal
from policies.model import spelled, whole_number
from policies.phase import condition_true
from policies.vocabulary import GANG, MAX_INT32, MIN_MEMBERS, POD_SET, QUEUE, SUBMITTED

MAX_JOBSET_PODS: Final = 100_000
"""The most pods muster admits as one JobSet (a typo of a replicas count, refused at create)."""


def _whole(value: object, where: str, default: int, least: int) -> int:
    """A whole number from ``least`` to `MAX_INT32` (what Kubernetes stores in replicas,
    parallelism and completions)."""
    if value is None:
        return default
    number = whole_number(value)
    if number is None:
        raise FieldError(
            f"{where}: {shown(value)} is not a whole number; set it to at least {least}"
        )
    if number < least:
        raise FieldError(
            f"{where}: {spelled(number, value)} is below {least}; set it to at least {least}"
        )
    if number > MAX_INT32:
        raise FieldError(
            f"{where}: {spelled(number, value)} is out of range: Kubernetes stores at most "
            f"{MAX_INT32}"
        )
    return number


def replicated_jobs(spec: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    """(name, pods, the replicated Job's template) of each replicated Job, in the JobSet's
    order; raises FieldError naming the field that makes no gang."""
    found = spec.get("replicatedJobs")
    if not isinstance(found, Sequence) or isinstance(found, str) or not found:
        raise FieldError("spec.replicatedJobs: a JobSet needs at least one replicated Job; add one")
    out: list[tuple[str, int, Mapping[str, Any]]] = []
    seen: set[str] = set()
    for i, rjob in enumerate(found):
        where = f"spec.replicatedJobs[{i}]"
        if not isinstance(rjob, Mapping):
            raise FieldError(f"{where}: must be an object with name, replicas and template")
        name = rjob.get("name")
        if not isinstance(name, str) or not name or name in seen:
            raise FieldError(f"{where}.name: {name!r} must be a unique, non-empty name")
        seen.add(name)
        replicas = _whole(rjob.get("replicas"), f"{where}.replicas", 1, 1)
        template = rjob.get("template") or {}
        job_spec = template.get("spec") or {}
        parallelism = _whole(
            job_spec.get("parallelism"), f"{where}.template.spec.parallelism", 1, 1
        )
        completions = job_spec.get("completions")
        if completions is not None:
            completions = _whole(completions, f"{where}.template.spec.completions", 1, 1)
        out.append((name, replicas * job_size_of(parallelism, completions), template))
    total = sum(pods for _, pods, _ in out)
    if total > MAX_JOBSET_PODS:
        raise FieldError(
            f"spec.replicatedJobs: {total} pods in all is more than the {MAX_JOBSET_PODS} muster "
            "admits as one gang; lower replicas or parallelism"
        )
    return out


def _in_waves(job_spec: Mapping[str, Any]) -> bool:
    """A replicated Job that needs more completions than it runs pods at once (read by
    `replicated_jobs`, which refuses what is not a whole number)."""
    parallelism, completions = job_spec.get("parallelism"), job_spec.get("completions")
    try:
        return runs_in_waves(
            None if parallelism is None else int(parallelism),
            None if completions is None else int(completions),
        )
    except (TypeError, ValueError):
        return False


class JobSetKind:
    """A JobSet: one gang, one pod set per replicated Job (`policies.kinds.kind.Kind`)."""

    name: Final[Literal["JobSet"]] = "JobSet"
    api: Final = ApiKind("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
    size_fields: Final = "the JobSet's replicas and parallelism of its replicated Jobs"
    spreads: Final = False
    holds_itself: Final = True
    labels_pod_sets: Final = True
    operator: Final = "jobset"
    pins_affinity: Final = False
    """The JobSet's webhook refuses a change of a pod template's affinity, even suspended."""

    @property
    def unfreeze(self) -> Mapping[str, Any] | None:
        return None

    def queue(self, obj: Mapping[str, Any]) -> str:
        return queue_of((obj.get("metadata") or {}).get("labels") or {})

    def gang_fields(self, obj: Mapping[str, Any]) -> tuple[int, GangFields]:
        """Size (every replicated Job's replicas × pods) and fields; refuses a minimum below the
        size: a JobSet is admitted whole."""
        meta = obj.get("metadata") or {}
        size = sum(pods for _, pods, _ in replicated_jobs(obj.get("spec") or {}))
        fields = read_gang_fields(meta.get("labels") or {}, meta.get("annotations") or {}, size)
        if fields.minimum < size:
            raise FieldError(
                f"{MIN_MEMBERS}: {fields.minimum} is below the JobSet's {size} pods, but a JobSet "
                "is admitted whole (its replicated Jobs cannot shrink while it runs); remove "
                f"{MIN_MEMBERS} or set it to {size}"
            )
        return size, fields

    def hold(
        self,
        obj: Mapping[str, Any],
        queue: str,
        stamp: str,
        groups: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Suspended, with `muster.dev/queue` and `muster.dev/submitted`, every replicated Job's
        pod template labelled with the gang and its pod set and, with ``groups``, linked to its
        pod set's PodGroup (the JobSet controller copies the templates to its child Jobs; the
        list is written whole: a merge patch replaces lists)."""
        name = (obj.get("metadata") or {}).get("name") or ""
        spec = obj.get("spec") or {}
        labelled = []
        for rjob in spec.get("replicatedJobs") or []:
            template = dict(rjob.get("template") or {})
            job_spec = dict(template.get("spec") or {})
            pod_template = dict(job_spec.get("template") or {})
            meta = dict(pod_template.get("metadata") or {})
            meta["labels"] = {**(meta.get("labels") or {}), GANG: name, POD_SET: rjob["name"]}
            pod_template["metadata"] = meta
            group = (groups or {}).get(rjob["name"])
            if group:
                pod_spec = dict(pod_template.get("spec") or {})
                pod_spec["schedulingGroup"] = {"podGroupName": group}
                pod_template["spec"] = pod_spec
            job_spec["template"] = pod_template
            template["spec"] = job_spec
            labelled.append({**rjob, "template": template})
        return {
            "metadata": {"annotations": {QUEUE: queue, SUBMITTED: stamp}, "labels": {QUEUE: queue}},
            "spec": {"suspend": True, "replicatedJobs": labelled},
        }

    def gang_object(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return dict(obj)

    def compose(self, draft: Draft) -> list[dict[str, Any]]:
        """A JobSet of one replicated Job per pod set (one replica of its count, Indexed), its
        Jobs labelled with the draft's child labels, suspended if the draft is."""
        replicated = []
        for pod_set in draft.sets:
            named = DraftSet(
                pod_set.name, pod_set.count, named_set_metadata(draft, pod_set), pod_set.spec
            )
            replicated.append(
                {
                    "name": pod_set.set_name,
                    "replicas": 1,
                    "template": {
                        "metadata": {"labels": dict(draft.child_labels or {})},
                        "spec": job_spec(draft, named, with_suspend=False),
                    },
                }
            )
        spec: dict[str, Any] = {"replicatedJobs": replicated}
        if draft.suspend:
            spec["suspend"] = True
        return [
            {
                "apiVersion": self.api.api_version,
                "kind": self.api.kind,
                "metadata": object_meta(draft),
                "spec": spec,
            }
        ]

    def admission_change(
        self, old: Mapping[str, Any], new: Mapping[str, Any]
    ) -> FieldChange | None:
        """The queue, the minimum and priority, muster's own marks, the replicated Jobs (which
        there are, and each one's replicas, parallelism, completions and pod template)."""
        return first_change(
            chain(
                (queue_pair(old, new),),
                gang_field_pairs(old, new),
                mark_pairs(old, new),
                _replicated_pairs(old.get("spec") or {}, new.get("spec") or {}),
            )
        )

    def original(self, spec: Mapping[str, Any]) -> Original:
        templates = {}
        for rjob in spec.get("replicatedJobs") or []:
            pod_spec = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get(
                "spec"
            ) or {}
            templates[str(rjob.get("name") or "")] = TemplateOriginal.of(pod_spec)
        return Original({}, templates)

    def templates(self, spec: Mapping[str, Any], original: Original) -> tuple[PodTemplate, ...]:
        return tuple(
            PodTemplate(
                name,
                f"/spec/replicatedJobs/{i}/template/spec/template",
                pods,
                (template.get("spec") or {}).get("template") or {},
                _in_waves(template.get("spec") or {}),
            )
            for i, (name, pods, template) in enumerate(replicated_jobs(spec))
        )

    def status(self, body: Mapping[str, Any]) -> KindStatus:
        """Finished on its Completed or Failed condition; its pods are counted by the
        controller (the JobSet's status counts Jobs, not pods)."""
        status = body.get("status") or {}
        finished = condition_true(status, "Completed") or condition_true(status, "Failed")
        return KindStatus(finished=finished, end_time=end_time(status) if finished else None)

    def runtime_limit(self, spec: Mapping[str, Any]) -> float | None:
        """The longest activeDeadlineSeconds of its replicated Jobs, when every one has one
        (each child Job then ends by it); else None."""
        limits = []
        for i, rjob in enumerate(spec.get("replicatedJobs") or []):
            job_spec = (rjob.get("template") or {}).get("spec") or {}
            where = f"spec.replicatedJobs[{i}].template.spec.activeDeadlineSeconds"
            try:
                limit = parse_runtime_limit(job_spec.get("activeDeadlineSeconds"), where)
            except DurationError:
                raise
            if limit is None:
                return None
            limits.append(limit)
        return max(limits) if limits else None

    def resize(self, original: Original, spec: Mapping[str, Any], size: int) -> dict[str, int]:
        return {}  # admitted whole: never smaller

    def put_back(self, original: Original, spec: Mapping[str, Any]) -> dict[str, int]:
        return {}

    def resize_owner(self, size: int, full: int) -> dict[str, Any] | None:
        return None  # it holds itself


def _replicated_pairs(old: Mapping[str, Any], new: Mapping[str, Any]) -> Iterator[Pair]:
    was, now = _rjobs(old), _rjobs(new)
    names = [str(r.get("name")) for r in was], [str(r.get("name")) for r in now]
    yield "spec.replicatedJobs", names[0], names[1]
    for i, (a, b) in enumerate(zip(was, now, strict=False)):
        where = f"spec.replicatedJobs[{i}]"
        yield f"{where}.replicas", a.get("replicas"), b.get("replicas")
        a_job = (a.get("template") or {}).get("spec") or {}
        b_job = (b.get("template") or {}).get("spec") or {}
        yield from spec_pairs(
            a_job, b_job, f"{where}.template.spec", ("parallelism", "completions")
        )
        yield from template_pairs(
            a_job.get("template") or {},
            b_job.get("template") or {},
            f"{where}.template.spec.template",
        )


def _rjobs(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = spec.get("replicatedJobs")
    if not isinstance(found, list):
        return []
    return [r if isinstance(r, Mapping) else {} for r in found]


JOBSET: Final = JobSetKind()
