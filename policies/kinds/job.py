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
from policies.vocabulary import MIN_MEMBERS


def job_size_of(parallelism: int | None, completions: int | None) -> int:
    """A Job's gang size: parallelism, or completions if smaller (both default to 1)."""
    size = 1 if parallelism is None else int(parallelism)
    if completions is not None:
        size = min(size, int(completions))
    return size


def job_gang_size(spec: Mapping[str, Any]) -> int:
    """The gang size of a Job spec as the user wrote it."""
    return job_size_of(spec.get("parallelism"), spec.get("completions"))


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
        size = job_gang_size(spec)
        if size < 1:
            raise FieldError(
                "spec.parallelism: the gang has 0 members; muster admits whole gangs, so set "
                "spec.parallelism (and spec.completions) to at least 1"
            )
        fields = job_fields(spec, meta.get("labels") or {}, meta.get("annotations") or {}, size)
        return size, fields

    def gang_job(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return dict(obj)


JOB: Final = JobKind()
