"""Why each gang a plan left waiting waits, written when someone reads it.

A plan does not format a reason per gang: it logs *parts* (`ReasonLog`), each of which writes
the reasons of a stretch of a queue, or of one gang, into the dict it is given, in the order the
plan decided them; `policies.decisions.PendingReasons` runs them when first read. The functions
here are those parts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from itertools import islice
from operator import attrgetter, itemgetter
from typing import TypeVar

from policies import reasons
from policies.decisions import Reason
from policies.planstate import Entry

__all__ = ["ReasonLog", "View", "from_index"]

_T = TypeVar("_T")
_GANG = itemgetter(2)
_ID = attrgetter("id")

View = tuple[str, list[Entry], list[int], list[Entry]]
"""A queue as one plan sees it: leaf, entries, verdict keys, big entries."""


def from_index(items: list[_T], start: int) -> Iterator[_T]:
    """An iterator over ``items[start:]`` in O(1) (islice would step over the first ``start``)."""
    iterator = iter(items)
    iterator.__setstate__(start)  # type: ignore[attr-defined]
    return iterator


class ReasonLog:
    """The parts one plan logs, and how many gangs they cover (see the module docstring)."""

    __slots__ = ("count", "parts")

    def __init__(self) -> None:
        self.parts: list[Callable[[dict[str, Reason]], None]] = []
        self.count = 0

    def one(self, gang_id: str, reason: Reason) -> None:
        self.parts.append(partial(_fill_one, gang_id, reason))
        self.count += 1

    def all(self, found: Mapping[str, Reason]) -> None:
        """Every gang of ``found`` waits for its reason."""
        if found:
            self.parts.append(partial(_fill_all, found))
            self.count += len(found)

    def stretch(
        self,
        entries: list[Entry],
        vkeys: list[int],
        start: int,
        stop: int,
        known: dict[int, Reason],
        extras: dict[str, Reason] | None,
    ) -> None:
        """The gangs from ``start`` to ``stop`` a scan passed over: by verdict key, then those
        decided one by one (``extras``)."""
        if stop > start:
            self.parts.append(partial(_fill_scan, entries, vkeys, start, stop, known, extras))
            self.count += stop - start

    def block(self, entries: list[Entry], at: int, head: str) -> None:
        """The gangs of a queue from ``at`` on wait behind ``head`` (StrictFIFO)."""
        if at < len(entries):
            self.same(entries, at, reasons.strict_fifo_blocked(head))

    def same(self, entries: list[Entry], at: int, reason: Reason) -> None:
        """The gangs of a queue from ``at`` on wait for ``reason``."""
        self.parts.append(partial(_fill_same, entries, at, reason))
        self.count += len(entries) - at

    def admitted_after_all(self, preemptors: Sequence[str], views: Sequence[View]) -> None:
        """Preemptors were admitted after their reasons were logged: they wait for nothing, and
        what waited behind them says so."""
        self.parts.append(partial(_forget, preemptors))
        self.count -= len(preemptors)
        self.parts.append(partial(_reblock, preemptors, views))

    def holds_reservation(self, holder: str) -> None:
        self.parts.append(partial(_holds_reservation, holder))

    def holds_quota(self, holder: str) -> None:
        self.parts.append(partial(_holds_quota, holder))


def _fill_scan(
    entries: list[Entry],
    vkeys: list[int],
    start: int,
    stop: int,
    known: dict[int, Reason],
    extras: dict[str, Reason] | None,
    out: dict[str, Reason],
) -> None:
    """Reasons for a stretch of a queue one scan passed over: by verdict key, then the gangs
    decided one by one (updating a key keeps its place in the dict)."""
    ids = map(_ID, map(_GANG, islice(from_index(entries, start), stop - start)))
    out.update(zip(ids, map(known.get, from_index(vkeys, start)), strict=False))  # type: ignore[arg-type]
    if extras:
        out.update(extras)


def _fill_same(entries: list[Entry], start: int, reason: Reason, out: dict[str, Reason]) -> None:
    out.update(dict.fromkeys(map(_ID, map(_GANG, from_index(entries, start))), reason))


def _fill_one(gang_id: str, reason: Reason, out: dict[str, Reason]) -> None:
    out[gang_id] = reason


def _fill_all(found: Mapping[str, Reason], out: dict[str, Reason]) -> None:
    out.update(found)


def _forget(gang_ids: Sequence[str], out: dict[str, Reason]) -> None:
    """Preemptors were admitted after their reasons were decided."""
    for gang_id in gang_ids:
        out.pop(gang_id, None)


def _reblock(heads: Sequence[str], views: Sequence[View], out: dict[str, Reason]) -> None:
    """Preemptors that were StrictFIFO heads were admitted after the gangs behind them were
    marked blocked by them: the first of those gangs heads the line now, the rest are blocked
    by it. A preemptor that held the plan's reservation holds none now: the gangs kept off its
    nodes say so."""
    for head in heads:
        named = f"big gang {head},"
        for gang_id, reason in list(out.items()):
            if reason.code == "Reserved" and named in reason.message:
                out[gang_id] = reasons.reservation_preempted_in(head)
        blocked = reasons.strict_fifo_blocked(head)
        behind = sorted(
            (entry[0], entry[2].id)
            for view in views
            for entry in view[1]
            if out.get(entry[2].id) == blocked
        )
        if not behind:
            continue
        first = behind[0][1]
        out[first] = reasons.head_preempted_in(head)
        now_blocked = reasons.strict_fifo_blocked(first)
        for _, gang_id in behind[1:]:
            out[gang_id] = now_blocked


def _holds_reservation(holder: str, out: dict[str, Reason]) -> None:
    # Whatever it waits for by the time its turn comes (nodes, or quota or the size-ratio slot
    # that gangs before it in the order took): it still holds the reservation.
    reason = out.get(holder)
    if reason is not None and "holds a reservation" not in reason.message:
        out[holder] = reasons.no_fit_reserving(reason)


def _holds_quota(holder: str, out: dict[str, Reason]) -> None:
    # A quota holder (policies.quotahold) that still lacks quota says it holds it.
    reason = out.get(holder)
    if reason is not None and reason.code == "QuotaExhausted":
        out[holder] = reasons.quota_holding(reason)
