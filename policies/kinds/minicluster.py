"""A Flux Operator MiniCluster as a gang: size `spec.size`, minimum `muster.dev/min-members`
(annotation, else label), else `spec.minSize`, else the size.

A MiniCluster has no suspend field: its gang is the Indexed Job the operator creates. The
webhook puts the queue and every gang field into `spec.jobLabels`, the operator copies them onto
that Job, and the controller reads them there with `policies.kinds.fields` like any Job's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.kinds.fields import FieldError, GangFields, parse_min_members, read_gang_fields
from policies.vocabulary import MIN_MEMBERS, QUEUE


def _size(spec: Mapping[str, Any]) -> int:
    value = spec.get("size", 1)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldError(f"spec.size: {value!r} is not an integer; set it to the number of pods")
    if value < 1:
        raise FieldError("spec.size: the MiniCluster has 0 members; set spec.size to at least 1")
    return value


def minicluster_fields(
    spec: Mapping[str, Any], labels: Mapping[str, str], annotations: Mapping[str, str]
) -> tuple[int, GangFields]:
    """(size, gang fields) of a MiniCluster. Raises FieldError."""
    size = _size(spec)
    default_minimum = size
    if spec.get("minSize") is not None:
        default_minimum = parse_min_members(spec["minSize"], size, "spec.minSize")
    return size, read_gang_fields(labels, annotations, size, default_minimum=default_minimum)


def minicluster_job_labels(queue: str, fields: GangFields) -> dict[str, str]:
    """The `spec.jobLabels` that carry a MiniCluster's queue and gang fields to its Job."""
    labels = {QUEUE: queue, MIN_MEMBERS: str(fields.minimum)}
    labels.update(fields.present)
    return labels
