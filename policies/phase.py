"""Where a stored gang object stands, read from its labels, annotations and status.

One reader for every caller: the controller's cache (`admission.gangs.job_record`, whose
pending count is the Queue's `status.pending`) and the webhook's count of pending gangs that
`spec.limits` bounds (`webhook.backlog`) both decide "pending" here, so the two never disagree
on which gangs a queue holds. The eviction count and requeue time muster writes are read here
too, for the controller and the kwok engine (`simulator.kwok_timeline`). Also the Queue's
`spec.limits`, which the webhook enforces.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies import gangstate
from policies.durations import shown
from policies.model import PolicyError, whole_number
from policies.vocabulary import EVICTIONS, MAX_INT32, QUEUE, REQUEUE_AT, STATE, SUBMITTED


def is_managed(body: Mapping[str, Any]) -> bool:
    """A gang object muster manages: labelled with a queue and stamped by the webhook."""
    meta = body.get("metadata") or {}
    return QUEUE in (meta.get("labels") or {}) and SUBMITTED in (meta.get("annotations") or {})


def condition_true(status: Mapping[str, Any], kind: str) -> bool:
    """The object's (a Job's, a Pod's) condition `kind` is True."""
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions") or []
    )


def job_finished(status: Mapping[str, Any]) -> bool:
    """The Job has ended: its condition Complete or Failed is True."""
    return condition_true(status, "Complete") or condition_true(status, "Failed")


def format_time(seconds: float) -> str:
    """RFC3339 UTC with microseconds, e.g. 2026-01-02T03:04:05.123456Z."""
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def format_admitted(seconds: float, size: int) -> str:
    """The `muster.dev/admitted` value: `<RFC3339 time>/<admitted size>`."""
    return f"{format_time(seconds)}/{size}"


def parse_time(value: str) -> float:
    """Seconds since the epoch of an RFC3339 time (`2026-01-02T03:04:05.123456Z`); ValueError
    when it is not one."""
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    return dt.datetime.fromisoformat(text).timestamp()


@dataclass(frozen=True, slots=True)
class EvictionCounts:
    """What muster wrote at a gang's last eviction."""

    evictions: int
    """`muster.dev/evictions`: how many times it was evicted (clog, deadlock)."""
    requeue_at: float
    """`muster.dev/requeue-at`: when it may be admitted again (0: at once)."""


def eviction_counts(annotations: Mapping[str, str]) -> EvictionCounts:
    """`muster.dev/evictions` and `muster.dev/requeue-at`; unreadable ones count as none
    (muster writes them; they do not make the gang invalid)."""
    requeue_at = 0.0
    if REQUEUE_AT in annotations:
        try:
            requeue_at = parse_time(annotations[REQUEUE_AT])
        except ValueError:
            requeue_at = 0.0
    evictions = whole_number(annotations.get(EVICTIONS, "0")) or 0
    if not 0 <= evictions <= MAX_INT32:
        evictions = 0
    return EvictionCounts(evictions, requeue_at)


def marked_failed(annotations: Mapping[str, str]) -> bool:
    """muster gave up on the gang (`muster.dev/state: Failed`, past its backoff limit): it
    stays suspended, and counts neither as pending nor as admitted."""
    return annotations.get(STATE) == gangstate.FAILED


@dataclass(frozen=True)
class QueueLimits:
    """A Queue's `spec.limits`: how many pending gangs it holds before the webhook refuses new
    ones (None = unlimited; 0 = it takes no new gangs)."""

    max_pending: int | None = None
    max_pending_per_namespace: int | None = None

    @property
    def unlimited(self) -> bool:
        return self.max_pending is None and self.max_pending_per_namespace is None


NO_LIMITS = QueueLimits()


def _limit(value: object, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT32:
        raise PolicyError(
            f"{where}: {shown(value)} is not a whole number from 0 to {MAX_INT32}; set e.g. "
            "500, or remove it"
        )
    return value


def parse_queue_limits(value: object, where: str) -> QueueLimits:
    """`spec.limits` of a Queue (absent or null: no limits); PolicyError naming the field."""
    if value is None:
        return NO_LIMITS
    if not isinstance(value, Mapping):
        raise PolicyError(
            f"{where}: expected a mapping such as {{maxPending: 500, maxPendingPerNamespace: 50}}"
        )
    unknown = sorted(set(value) - {"maxPending", "maxPendingPerNamespace"})
    if unknown:
        raise PolicyError(
            f"{where}: unknown field {unknown[0]!r}; known fields: maxPending, "
            "maxPendingPerNamespace"
        )
    return QueueLimits(
        max_pending=_limit(value.get("maxPending"), f"{where}.maxPending"),
        max_pending_per_namespace=_limit(
            value.get("maxPendingPerNamespace"), f"{where}.maxPendingPerNamespace"
        ),
    )
