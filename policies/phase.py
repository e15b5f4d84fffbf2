"""Where a stored gang object stands, read from its labels, annotations and status.

One reader for every caller: the controller's cache (`admission.gangs.job_record`, whose
pending count is the Queue's `status.pending`) and the webhook's count of pending gangs that
`spec.limits` bounds (`webhook.backlog`) both decide "pending" here, so the two never disagree
on which gangs a queue holds. Also the Queue's `spec.limits`, which the webhook enforces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies import gangstate
from policies.model import PolicyError
from policies.vocabulary import ADMITTED, QUEUE, STATE, SUBMITTED


def is_managed_job(body: Mapping[str, Any]) -> bool:
    """A Job muster manages: labelled with a queue and stamped by the webhook."""
    meta = body.get("metadata") or {}
    return QUEUE in (meta.get("labels") or {}) and SUBMITTED in (meta.get("annotations") or {})


def _condition(status: Mapping[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions") or []
    )


def job_finished(status: Mapping[str, Any]) -> bool:
    """The Job has ended: its condition Complete or Failed is True."""
    return _condition(status, "Complete") or _condition(status, "Failed")


def marked_failed(annotations: Mapping[str, str]) -> bool:
    """muster gave up on the gang (`muster.dev/state: Failed`, past its backoff limit): it
    stays suspended, and counts neither as pending nor as admitted."""
    return annotations.get(STATE) == gangstate.FAILED


def job_pending(body: Mapping[str, Any]) -> bool:
    """A managed Job waiting for admission: not admitted (no `muster.dev/admitted`), not
    finished, not marked Failed. A gang evicted or preempted loses its admission and is
    pending again. (The controller also counts its own admission still in flight as admitted;
    that is the only difference between its count and this reading of the object.)"""
    meta = body.get("metadata") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    return (
        ADMITTED not in annotations
        and not marked_failed(annotations)
        and not job_finished(body.get("status") or {})
    )


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
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PolicyError(
            f"{where}: {value!r} is not a whole number >= 0; set e.g. 500, or remove it"
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
