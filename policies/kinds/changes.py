"""What an update of a gang object changes of what muster's admission decided on, in the
object's own field names: the comparisons every kind's `Kind.admission_change` is made of.

Pure: the stored object and the update in, the first field that differs out (`FieldChange`), or
None. Each kind lists its fields in the order a user reads them (the queue first, then the gang
fields, then the size, then the pod templates); the webhook refuses the first one it finds and
names it (`webhook.decision.decide_update`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from policies.durations import shown
from policies.kinds.fields import field_source
from policies.vocabulary import (
    ADMITTED,
    CLOG_TIMEOUT,
    ELASTIC_AFTER,
    MIN_MEMBERS,
    PLACEMENT,
    PRIORITY,
    QUEUE,
    RESTORE,
    TOPOLOGY_PREFERRED,
    TOPOLOGY_REQUIRED,
)

Pair = tuple[str, object, object]
"""(field, its value in the stored object, its value in the update)."""

HELD_FIELDS: Final = (MIN_MEMBERS, PRIORITY)
"""The gang fields an admitted gang keeps: its minimum decided its admitted size and is what
its clog clock waits for; its priority ordered its admission and guards it from preemption.
(`muster.dev/clog-timeout` and `muster.dev/elastic-after` may change: the one is read afresh by
the clog clock, the other only matters while the gang waits.)"""

GANG_FIELDS: Final = (
    MIN_MEMBERS,
    PRIORITY,
    CLOG_TIMEOUT,
    ELASTIC_AFTER,
    TOPOLOGY_REQUIRED,
    TOPOLOGY_PREFERRED,
)
"""Every gang field (`policies.kinds.fields.read_gang_fields`)."""

ADMISSION_MARKS: Final = (ADMITTED, PLACEMENT, RESTORE)
"""What admission wrote on the object: only muster changes them, and only on an object it
suspends in the same write (or that is suspended already)."""


@dataclass(frozen=True, slots=True)
class FieldChange:
    """One field an update changes: where, and its value before and after (as shown to a
    user: cut short)."""

    field: str
    was: str
    now: str

    def describe(self) -> str:
        return f"{self.field}: {self.was} -> {self.now}"


def first_change(pairs: Iterable[Pair]) -> FieldChange | None:
    """The first pair whose two values differ. ``pairs`` is walked lazily: a kind's generator
    reads the pod templates only when nothing before them changed."""
    for field, was, now in pairs:
        if was != now:
            return FieldChange(field, _value(was), _value(now))
    return None


def _value(value: object) -> str:
    return "(unset)" if value is None else shown(value, 60)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def queue_pair(old: Mapping[str, Any], new: Mapping[str, Any]) -> Pair:
    """The `muster.dev/queue` label: the queue whose quota the gang holds."""
    return (
        f"label {QUEUE}",
        (_meta(old).get("labels") or {}).get(QUEUE),
        (_meta(new).get("labels") or {}).get(QUEUE),
    )


def gang_field_pairs(
    old: Mapping[str, Any], new: Mapping[str, Any], keys: Sequence[str] = HELD_FIELDS
) -> Iterator[Pair]:
    """Each gang field as muster reads it (the annotation, else the label): the field is named
    where the update sets it (or where the stored object had it, when the update drops it)."""
    for key in keys:
        was = _source(old, key)
        now = _source(new, key)
        where = (now or was or (f"annotation {key}", ""))[0]
        yield where, was[1] if was else None, now[1] if now else None


def _source(obj: Mapping[str, Any], key: str) -> tuple[str, str] | None:
    meta = _meta(obj)
    return field_source(meta.get("labels") or {}, meta.get("annotations") or {}, key)


def mark_pairs(old: Mapping[str, Any], new: Mapping[str, Any]) -> Iterator[Pair]:
    """muster's own admission annotations (`ADMISSION_MARKS`)."""
    was = _meta(old).get("annotations") or {}
    now = _meta(new).get("annotations") or {}
    for key in ADMISSION_MARKS:
        yield f"annotation {key}", was.get(key), now.get(key)


def spec_pairs(
    old: Mapping[str, Any], new: Mapping[str, Any], where: str, keys: Sequence[str]
) -> Iterator[Pair]:
    """Top-level fields of two specs (``old`` and ``new`` are the specs), named `where.key`."""
    for key in keys:
        yield f"{where}.{key}", old.get(key), new.get(key)


def template_pairs(old: Mapping[str, Any], new: Mapping[str, Any], where: str) -> Iterator[Pair]:
    """What the planner reads of a pod template (``old`` and ``new`` are the templates, at
    `where`): each container's resources (requests, and limits, which default them), how many
    containers there are, the node selector, the tolerations and the affinity (muster's own pin
    is in both, unchanged, while the gang runs)."""
    was = old.get("spec") or {}
    now = new.get("spec") or {}
    for kind in ("initContainers", "containers"):
        old_containers = _containers(was.get(kind))
        new_containers = _containers(now.get(kind))
        yield f"{where}.spec.{kind}", len(old_containers), len(new_containers)
        for i, (a, b) in enumerate(zip(old_containers, new_containers, strict=False)):
            yield f"{where}.spec.{kind}[{i}].resources", a.get("resources"), b.get("resources")
    for key in ("nodeSelector", "tolerations", "affinity"):
        yield f"{where}.spec.{key}", was.get(key) or None, now.get(key) or None


def _containers(value: object) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        return []
    return [c if isinstance(c, Mapping) else {} for c in value]


def suspended(obj: Mapping[str, Any]) -> bool:
    """The object's `spec.suspend` (a kind that holds itself by it)."""
    return bool((obj.get("spec") or {}).get("suspend"))
