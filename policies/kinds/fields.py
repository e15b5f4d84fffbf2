"""The gang fields every kind carries, read one way for the webhook and the controller.

Each field is read from the object's annotation if present, else its label (a MiniCluster's Job
carries them as labels: the operator copies the MiniCluster's `spec.jobLabels` onto it). A bad
value raises `FieldError` naming where it was read, the value and what to do: the webhook
refuses the object with that message, the controller keeps the gang waiting with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from policies.durations import DurationError, parse_clog_timeout, parse_duration, shown
from policies.model import PolicyError, parse_priority, spelled, whole_number
from policies.topology import TopologyError, TopologyRequest, check_level, short_name
from policies.vocabulary import (
    CLOG_TIMEOUT,
    ELASTIC_AFTER,
    MIN_MEMBERS,
    PRIORITY,
    QUEUE,
    TOPOLOGY_PREFERRED,
    TOPOLOGY_REQUIRED,
)


class FieldError(ValueError):
    """A `muster.dev/*` field holds a value muster cannot use; the message says where and how
    to fix it."""


@dataclass(frozen=True, slots=True)
class GangFields:
    """What the gang fields say, with their defaults filled in."""

    minimum: int
    """muster.dev/min-members, else the gang's size (no elastic admission)."""
    priority: int = 0
    elastic_after: float = 0.0
    clog_timeout: float | None = None
    """The gang's own clog timeout; None: the controller's default."""
    topology: TopologyRequest | None = None
    """muster.dev/topology-required or -preferred (the whole gang's, every pod set alike)."""
    present: tuple[tuple[str, str], ...] = ()
    """(key, text) of the fields that were set, to carry them on unchanged (a MiniCluster's
    jobLabels)."""


def queue_of(labels: Mapping[str, str]) -> str:
    """The queue an object belongs to: its `muster.dev/queue` label ('' when unlabelled).

    The webhook labels every managed object (also those it assigns a namespace's default queue)
    and the controller watches that label, so the label is the one source."""
    return str(labels.get(QUEUE) or "")


def field_source(
    labels: Mapping[str, str], annotations: Mapping[str, str], key: str
) -> tuple[str, str] | None:
    """(where, value) of a gang field: the annotation if set, else the label, else None."""
    if key in annotations:
        return f"annotation {key}", str(annotations[key])
    if key in labels:
        return f"label {key}", str(labels[key])
    return None


def parse_min_members(value: object, size: int, where: str) -> int:
    """A gang minimum: a whole number from 1 to the gang's size."""
    fix = f"set it to a whole number from 1 to {size}"
    minimum = whole_number(value)
    if minimum is None:
        raise FieldError(f"{where}: {shown(value)} is not an integer; {fix}")
    if not 1 <= minimum <= size:
        raise FieldError(
            f"{where}: {spelled(minimum, value)} is out of range; the gang has {size} members, "
            f"so {fix}"
        )
    return minimum


def read_gang_fields(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    size: int,
    *,
    default_minimum: int | None = None,
) -> GangFields:
    """Read min-members, priority, elastic-after and clog-timeout (annotation first, else
    label). `default_minimum` is the kind's own minimum when min-members is unset (a
    MiniCluster's spec.minSize), else the size. Raises FieldError on the first bad value."""
    present: list[tuple[str, str]] = []
    minimum = size if default_minimum is None else default_minimum
    if (found := field_source(labels, annotations, MIN_MEMBERS)) is not None:
        minimum = parse_min_members(found[1], size, found[0])
        present.append((MIN_MEMBERS, str(minimum)))
    priority = 0
    if (found := field_source(labels, annotations, PRIORITY)) is not None:
        try:
            priority = parse_priority(found[1], found[0])
        except PolicyError as exc:
            raise FieldError(str(exc)) from None
        present.append((PRIORITY, found[1].strip()))
    elastic_after = 0.0
    if (found := field_source(labels, annotations, ELASTIC_AFTER)) is not None:
        try:
            elastic_after = parse_duration(found[1], field=found[0])
        except DurationError as exc:
            raise FieldError(str(exc)) from None
        present.append((ELASTIC_AFTER, found[1].strip()))
    clog_timeout: float | None = None
    if (found := field_source(labels, annotations, CLOG_TIMEOUT)) is not None:
        try:
            clog_timeout = parse_clog_timeout(found[1], found[0])
        except DurationError as exc:
            raise FieldError(str(exc)) from None
        present.append((CLOG_TIMEOUT, found[1].strip()))
    topology = read_topology(labels, annotations)
    if topology is not None:
        # Carried as a label value (a MiniCluster's jobLabels), which cannot hold a "/": the
        # level's name part, which names it as well (policies.topology).
        key = TOPOLOGY_REQUIRED if topology.required else TOPOLOGY_PREFERRED
        present.append((key, short_name(topology.level)))
    return GangFields(minimum, priority, elastic_after, clog_timeout, topology, tuple(present))


def read_topology(
    labels: Mapping[str, str], annotations: Mapping[str, str]
) -> TopologyRequest | None:
    """muster.dev/topology-required or muster.dev/topology-preferred (not both): a level."""
    required = field_source(labels, annotations, TOPOLOGY_REQUIRED)
    preferred = field_source(labels, annotations, TOPOLOGY_PREFERRED)
    if required is not None and preferred is not None:
        raise FieldError(
            f"{required[0]} and {preferred[0]}: a gang asks for one topology level, required or "
            "preferred; remove one of them"
        )
    found = required or preferred
    if found is None:
        return None
    try:
        level = check_level(found[1], found[0])
    except TopologyError as exc:
        raise FieldError(str(exc)) from None
    return TopologyRequest(level, required is not None)


def pointer(*keys: str) -> str:
    """The JSON Pointer (RFC 6901) of a field: ``pointer("metadata", "annotations",
    "muster.dev/admitted")`` is ``/metadata/annotations/muster.dev~1admitted``. The one place
    JSON Patches (the webhook's and the controller's) escape a key."""
    return "".join("/" + key.replace("~", "~0").replace("/", "~1") for key in keys)
