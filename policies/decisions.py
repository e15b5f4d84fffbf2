"""What a plan returns: admissions in the order made, and a reason for every other gang."""

from __future__ import annotations

from collections.abc import Callable, ItemsView, Iterator, KeysView, Mapping, Sequence, ValuesView
from dataclasses import dataclass, field
from typing import Final, Literal, NamedTuple, get_args

__all__ = ["REASON_CODES", "Admission", "Decisions", "PendingReasons", "Reason", "ReasonCode"]

ReasonCode = Literal[
    "QuotaExhausted",
    "NoFit",
    "SizeRatioSerialized",
    "SizeRatioRejected",
    "StrictFIFOBlocked",
    "NeverFits",
    "ElasticWaiting",
    "QueueNotFound",
    "Reserved",
    "HeldBehindPartial",
    "Preempted",
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
    """Admit ``gang_id`` at ``size`` pods (every pod set's); ``placement`` is node name -> pods
    of its main pod set, as planned, and ``other_placements`` those of its other pod sets."""

    gang_id: str
    queue: str
    size: int
    placement: Mapping[str, int]
    other_placements: tuple[Mapping[str, int], ...] = ()


class PendingReasons(Mapping[str, Reason]):
    """gang id -> Reason for the gangs a plan left waiting, built when first read.

    Most waiting gangs of a busy cluster wait for the same few reasons, and many callers (the
    simulator, a controller cycle that only admits) never read them. The planner hands over
    ``parts``: each one writes its gangs' reasons into the dict it is given, in the order the
    plan decided them; ``count`` is how many gangs they cover, so ``len()`` costs nothing.
    Reading any reason builds them all, once. A plain mapping to its readers (equal to a dict
    with the same items).
    """

    __slots__ = ("_built", "_count", "_parts")

    def __init__(self, parts: Sequence[Callable[[dict[str, Reason]], None]], count: int) -> None:
        self._parts = parts
        self._count = count
        self._built: dict[str, Reason] | None = None

    def _reasons(self) -> dict[str, Reason]:
        built = self._built
        if built is None:
            built = {}
            for part in self._parts:
                part(built)
            self._built = built
            self._parts = ()
        return built

    def __getitem__(self, gang_id: str) -> Reason:
        return self._reasons()[gang_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._reasons())

    def __len__(self) -> int:
        return self._count

    def __contains__(self, gang_id: object) -> bool:
        return gang_id in self._reasons()

    # The views of the built dict: C-speed, unlike the Mapping mixins (``dict(r.items())``
    # copies at dict speed; ``dict(r)`` and ``{**r}`` go through __getitem__ per gang).
    def keys(self) -> KeysView[str]:
        return self._reasons().keys()

    def items(self) -> ItemsView[str, Reason]:
        return self._reasons().items()

    def values(self) -> ValuesView[Reason]:
        return self._reasons().values()

    def get(self, gang_id: str, default: Reason | None = None) -> Reason | None:  # type: ignore[override]
        return self._reasons().get(gang_id, default)

    def __repr__(self) -> str:
        return f"PendingReasons({self._reasons()!r})"


@dataclass(slots=True)
class Decisions:
    """``admitted`` in admission order; ``pending`` = waiting gangs; ``rejected`` = gangs that
    can never be admitted (NeverFits, SizeRatioRejected): callers fail them; ``preempted`` =
    admitted gangs to evict (reason ``Preempted``, naming the preemptor) before the admissions
    are carried out: callers suspend and requeue them at their submission stamp, with no
    backoff. Each preemptor is among ``admitted`` in the same decisions.

    ``pending`` is a read-only mapping; the planner returns a `PendingReasons`, whose reasons
    are built only when read."""

    admitted: list[Admission] = field(default_factory=list)
    pending: Mapping[str, Reason] = field(default_factory=dict)
    rejected: dict[str, Reason] = field(default_factory=dict)
    preempted: dict[str, Reason] = field(default_factory=dict)

    def reason(self, gang_id: str) -> Reason | None:
        """The reason a gang was not admitted, or None if it was admitted (or unknown)."""
        return self.pending.get(gang_id) or self.rejected.get(gang_id)
