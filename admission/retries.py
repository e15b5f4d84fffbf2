"""Writes the apiserver refused for good, and when to try them again: a backoff per object.

A write the `Writer` gave up on (its own retries spent: a validating admission policy, RBAC, a
webhook that refuses it) would otherwise be sent again by the next cycle that plans it, every
cycle (a refused preemption victim took 17 PATCHes in 25 s, issue 28). Each refusal doubles the
wait before the next try, from `FIRST` to `LONGEST`; a write that lands, or an object that goes
or changes, clears it. `muster explain` says why and until when (`Hold.message`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from policies.durations import format_duration

FIRST: Final = 2.0
"""Seconds before the first try again."""
LONGEST: Final = 300.0
"""The longest wait between two tries."""


@dataclass(frozen=True, slots=True)
class Hold:
    """One object's refused write: how often, why the last time, when to try again."""

    refusals: int
    why: str
    until: float

    def message(self, now: float) -> str:
        wait = format_duration(max(0.0, self.until - now))
        times = "once" if self.refusals == 1 else f"{self.refusals} times"
        return f"refused {times} ({self.why}); tried again in {wait}"


class RetryBackoff(dict[str, Hold]):
    """Refused writes by object key ("namespace/name")."""

    __slots__ = ()

    def refused(self, key: str, why: str, now: float) -> Hold:
        """Another refusal of ``key``'s write: hold it for twice as long as the last time."""
        last = self.get(key)
        refusals = 1 if last is None else last.refusals + 1
        wait = min(LONGEST, FIRST * 2 ** (refusals - 1))
        hold = self[key] = Hold(refusals, why[:300], now + wait)
        return hold

    def held(self, key: str, now: float) -> Hold | None:
        """The hold on ``key``'s write if it is not due yet."""
        hold = self.get(key)
        return hold if hold is not None and hold.until > now else None
