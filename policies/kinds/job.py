"""A batch/v1 Job as a gang: its size and whether it may be admitted smaller."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from policies.elastic import elastic_problem
from policies.kinds.fields import (
    FieldError,
    GangFields,
    field_source,
    queue_of,
    read_gang_fields,
)
from policies.vocabulary import CONTROLLER_WRITTEN, GANG_KIND, MIN_MEMBERS


def job_size_of(parallelism: int | None, completions: int | None) -> int:
    """A Job's gang size: parallelism, or completions if smaller (both default to 1)."""
    size = 1 if parallelism is None else int(parallelism)
    if completions is not None:
        size = min(size, int(completions))
    return size


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
    annotations: Mapping[str, str], *, minicluster_owned: bool
) -> None:
    """Raise FieldError for a new Job that carries an annotation only muster writes: one of
    `CONTROLLER_WRITTEN`, or `muster.dev/gang-kind` on a Job no MiniCluster owns."""
    for key in (*CONTROLLER_WRITTEN, *(() if minicluster_owned else (GANG_KIND,))):
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
    """A batch/v1 Job: its own gang (`policies.kinds.kind.Kind`)."""

    name: Final[Literal["Job"]] = "Job"
    size_fields: Final = "the Job's spec.parallelism (or muster.dev/min-members)"
    spreads: Final = False

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

    def gang_job(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return dict(obj)


JOB: Final = JobKind()
