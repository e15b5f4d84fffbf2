"""What a plan returns: admissions in the order made, and a reason for every other gang."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, NamedTuple, get_args

__all__ = ["REASON_CODES", "Admission", "Decisions", "Reason", "ReasonCode"]

ReasonCode = Literal[
    "QuotaExhausted",
    "NoFit",
    "SizeRatioSerialized",
    "SizeRatioRejected",
    "StrictFIFOBlocked",
    "NeverFits",
    "ElasticWaiting",
    "QueueNotFound",
    "ReservedForOlder",
    "HeldBehindPartial",
]
REASON_CODES: Final[tuple[str, ...]] = get_args(ReasonCode)


class Reason(NamedTuple):
    """Why a gang was not admitted: a stable ``code`` for machines and a ``message`` for people.

    A NamedTuple rather than a dataclass: the planner makes one per waiting gang every cycle.
    """

    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Admission:
    """Admit ``gang_id`` at ``size`` pods; ``placement`` is node name -> pods, as planned."""

    gang_id: str
    queue: str
    size: int
    placement: Mapping[str, int]


@dataclass(slots=True)
class Decisions:
    """``admitted`` in admission order; ``pending`` = waiting gangs; ``rejected`` = gangs that
    can never be admitted (NeverFits, SizeRatioRejected): callers fail them."""

    admitted: list[Admission] = field(default_factory=list)
    pending: dict[str, Reason] = field(default_factory=dict)
    rejected: dict[str, Reason] = field(default_factory=dict)

    def reason(self, gang_id: str) -> Reason | None:
        """The reason a gang was not admitted, or None if it was admitted (or unknown)."""
        return self.pending.get(gang_id) or self.rejected.get(gang_id)
