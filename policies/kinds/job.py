"""A batch/v1 Job as a gang: its size, whether it may be admitted smaller, how it is held and
released, and what its status says."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import chain
from typing import Any, Final, Literal

from policies.durations import parse_runtime_limit
from policies.elastic import elastic_problem
from policies.kinds.changes import (
    FieldChange,
    first_change,
    gang_field_pairs,
    mark_pairs,
    queue_pair,
    spec_pairs,
    template_pairs,
)
from policies.kinds.drafts import Draft, job_spec, object_meta
from policies.kinds.fields import (
    FieldError,
    GangFields,
    field_source,
    queue_of,
    read_gang_fields,
)
from policies.kinds.kind import ApiKind, KindStatus, PodTemplate
from policies.kinds.pinning import Original, TemplateOriginal
from policies.phase import job_finished, parse_time
from policies.vocabulary import CONTROLLER_WRITTEN, GANG, GANG_KIND, MIN_MEMBERS, QUEUE, SUBMITTED


def job_size_of(parallelism: int | None, completions: int | None) -> int:
    """A Job's gang size: parallelism, or completions if smaller (both default to 1)."""
    size = 1 if parallelism is None else int(parallelism)
    if completions is not None:
        size = min(size, int(completions))
    return size


def runs_in_waves(parallelism: int | None, completions: int | None) -> bool:
    """A Job that needs more completions than it runs pods at once (both default to 1)."""
    return completions is not None and int(completions) > (
        1 if parallelism is None else int(parallelism)
    )


def job_gang_size(spec: Mapping[str, Any]) -> int:
    """The gang size of a Job spec as the user wrote it."""
    return job_size_of(spec.get("parallelism"), spec.get("completions"))


def checked_job_gang_size(spec: Mapping[str, Any]) -> int:
    """`job_gang_size` of a new Job, at least 1; raises FieldError naming the field that makes
    it smaller."""
    size = job_gang_size(spec)
    if size >= 1:
        return size
    parallelism, completions = spec.get("parallelism"), spec.get("completions")
    where, value = (
        ("spec.parallelism", parallelism)
        if parallelism is not None and parallelism < 1
        else ("spec.completions", completions)
    )
    raise FieldError(
        f"{where}: {value} gives the gang no members; muster admits whole gangs, so set "
        "spec.parallelism (and spec.completions) to at least 1"
    )


def refuse_controller_annotations(
    annotations: Mapping[str, str], *, made_by_operator: bool
) -> None:
    """Raise FieldError for a new object that carries an annotation only muster writes: one of
    `CONTROLLER_WRITTEN`, or `muster.dev/gang-kind` on an object no operator of a kind muster
    admits made (a MiniCluster's Job carries it)."""
    for key in (*CONTROLLER_WRITTEN, *(() if made_by_operator else (GANG_KIND,))):
        if key in annotations:
            raise FieldError(
                f"annotation {key}: {annotations[key]!r} is written by muster, not by users "
                "(it marks a gang admitted, evicted or failed); remove it from the new Job "
                "(a copy of a stored Job's manifest carries it)"
            )


def job_fields(
    spec: Mapping[str, Any],
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    size: int,
) -> GangFields:
    """A Job's gang fields, with the elastic rule: a minimum below the size needs a Job whose
    completions can shrink with it (`policies.elastic`). Raises FieldError."""
    fields = read_gang_fields(labels, annotations, size)
    problem = elastic_problem(spec, size, fields.minimum)
    if problem is not None:
        found = field_source(labels, annotations, MIN_MEMBERS)
        raise FieldError(f"{found[0] if found else MIN_MEMBERS}: {problem}")
    return fields


class JobKind:
    """A batch/v1 Job: its own gang, held by `spec.suspend`, one pod template
    (`policies.kinds.kind.Kind`)."""

    name: Final[Literal["Job"]] = "Job"
    api: Final = ApiKind("batch", "v1", "jobs", "Job")
    size_fields: Final = "the Job's spec.parallelism (or muster.dev/min-members)"
    spreads: Final = False
    holds_itself: Final = True
    labels_pod_sets: Final = False
    operator: Final = None
    pins_affinity: Final = True
    """The Job's pod template may change while it is suspended and has not started (muster
    clears `status.startTime` for that, `UNFREEZE`)."""

    @property
    def unfreeze(self) -> Mapping[str, Any] | None:
        return UNFREEZE

    def queue(self, obj: Mapping[str, Any]) -> str:
        return queue_of((obj.get("metadata") or {}).get("labels") or {})

    def gang_fields(self, obj: Mapping[str, Any]) -> tuple[int, GangFields]:
        """Size (parallelism, or completions if smaller) and fields; a Job of 0 members is
        refused: muster admits whole gangs."""
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        size = checked_job_gang_size(spec)
        fields = job_fields(spec, meta.get("labels") or {}, meta.get("annotations") or {}, size)
        return size, fields

    def hold(
        self,
        obj: Mapping[str, Any],
        queue: str,
        stamp: str,
        groups: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Suspended, with `muster.dev/queue` and `muster.dev/submitted`, its pod template
        labelled with the gang (`muster.dev/gang`: the Job's name) and, with ``groups``, linked
        to its PodGroup."""
        name = (obj.get("metadata") or {}).get("name") or ""
        patch: dict[str, Any] = {
            "metadata": {"annotations": {QUEUE: queue, SUBMITTED: stamp}, "labels": {QUEUE: queue}},
            "spec": {"suspend": True},
        }
        template: dict[str, Any] = {}
        if name:
            template["metadata"] = {"labels": {GANG: name}}
        if groups and "" in groups:
            template["spec"] = {"schedulingGroup": {"podGroupName": groups[""]}}
        if template:
            patch["spec"]["template"] = template
        return patch

    def gang_object(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return dict(obj)

    def compose(self, draft: Draft) -> list[dict[str, Any]]:
        """One Indexed Job of the draft's one pod set, the gang's minimum in its annotations."""
        if len(draft.sets) != 1:
            raise ValueError(f"a Job runs one pod set, not {len(draft.sets)}")
        annotations = {MIN_MEMBERS: str(draft.minimum), **draft.annotations}
        return [
            {
                "apiVersion": self.api.api_version,
                "kind": self.api.kind,
                "metadata": object_meta(draft, annotations),
                "spec": job_spec(draft, draft.sets[0]),
            }
        ]

    def admission_change(
        self, old: Mapping[str, Any], new: Mapping[str, Any]
    ) -> FieldChange | None:
        """The queue, the minimum and priority, muster's own marks, parallelism and
        completions, and the pod template's resources and placement rules."""
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        return first_change(
            chain(
                (queue_pair(old, new),),
                gang_field_pairs(old, new),
                mark_pairs(old, new),
                spec_pairs(old_spec, new_spec, "spec", ("parallelism", "completions")),
                template_pairs(
                    old_spec.get("template") or {}, new_spec.get("template") or {}, "spec.template"
                ),
            )
        )

    def original(self, spec: Mapping[str, Any]) -> Original:
        pod_spec = (spec.get("template") or {}).get("spec") or {}
        return Original(
            {
                "parallelism": _int_or_none(spec.get("parallelism")),
                "completions": _int_or_none(spec.get("completions")),
            },
            {"": TemplateOriginal.of(pod_spec)},
        )

    def templates(self, spec: Mapping[str, Any], original: Original) -> tuple[PodTemplate, ...]:
        parallelism = original.fields.get("parallelism")
        completions = original.fields.get("completions")
        size = job_size_of(parallelism, completions)
        template = spec.get("template") or {}
        waves = runs_in_waves(parallelism, completions)
        return (PodTemplate("", "/spec/template", max(size, 1), template, waves),)

    def status(self, body: Mapping[str, Any]) -> KindStatus:
        status = body.get("status") or {}
        return KindStatus(
            finished=job_finished(status),
            ready=int(status.get("ready") or 0),
            succeeded=int(status.get("succeeded") or 0),
            started=status.get("startTime") is not None,
            active=int(status.get("active") or 0),
            start_time=status_time(status.get("startTime")),
            end_time=end_time(status),
        )

    def runtime_limit(self, spec: Mapping[str, Any]) -> float | None:
        """spec.activeDeadlineSeconds (a MiniCluster's spec.deadlineSeconds reaches its Job
        there: the operator copies it)."""
        return parse_runtime_limit(spec.get("activeDeadlineSeconds"), "spec.activeDeadlineSeconds")

    def resize(self, original: Original, spec: Mapping[str, Any], size: int) -> dict[str, int]:
        """What makes the Job run exactly `size` pods once: parallelism, and for an Indexed Job
        whose completions equal its parallelism, completions too (Kubernetes allows changing the
        two in tandem). Empty when `size` is the Job's own."""
        parallelism = original.fields.get("parallelism")
        if parallelism is not None and size >= parallelism:
            return {}
        fields = {"/spec/parallelism": size}
        indexed = spec.get("completionMode") == "Indexed"
        if indexed and original.fields.get("completions") == parallelism:
            fields["/spec/completions"] = size
        return fields

    def put_back(self, original: Original, spec: Mapping[str, Any]) -> dict[str, int]:
        """Parallelism as written, and completions for an Indexed Job (it is immutable
        otherwise, and muster never changes it there), where they differ now."""
        out: dict[str, int] = {}
        parallelism = original.fields.get("parallelism")
        if parallelism is not None and spec.get("parallelism") != parallelism:
            out["/spec/parallelism"] = parallelism
        completions = original.fields.get("completions")
        indexed = spec.get("completionMode") == "Indexed"
        if indexed and completions is not None and spec.get("completions") != completions:
            out["/spec/completions"] = completions
        return out

    def resize_owner(self, size: int, full: int) -> dict[str, Any] | None:
        return None  # it holds itself


UNFREEZE: Final = {"status": {"startTime": None}}
"""The status merge patch that lets a suspended Job's pod template change again after it ran
(Kubernetes freezes it while `status.startTime` is set; the Job controller clears it itself only
under the alpha gate MutableSchedulingDirectivesForSuspendedJobs, so muster clears it through
the status subresource, as Kueue does)."""


def _int_or_none(value: object) -> int | None:
    if value is None or isinstance(value, bool) or not isinstance(value, int | str):
        return None
    try:
        return int(value)
    except ValueError:
        return None


def status_time(value: object) -> float | None:
    """A status timestamp (RFC3339) in seconds, or None when unset or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


def end_time(status: Mapping[str, Any]) -> float | None:
    """When a finished Job ended: completionTime (set on success), else the Complete or
    Failed condition's lastTransitionTime (a Job failed by its deadline has no completionTime).
    None while it runs."""
    completion = status_time(status.get("completionTime"))
    if completion is not None:
        return completion
    for condition in status.get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return status_time(condition.get("lastTransitionTime"))
    return None


JOB: Final = JobKind()
