"""The `muster.dev/submitted` stamp: a strict, stable submission order across parallel creates.

`metadata.creationTimestamp` has one-second resolution, so gangs created in the same second by
parallel submitters have no order. The webhook stamps each gang with

    2026-11-22T03:05:07.123456789Z/000000000042

an RFC3339 UTC time with nanoseconds, then `/` and a per-process sequence number. Within one
process the time is strictly increasing (never repeats, never goes back, even if the wall clock
does), so stamps sort as strings and as parsed values in arrival order; across replicas the time
orders them and the sequence is only a tiebreak.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import time
from functools import lru_cache

from policies.model import SubmitStamp

_STAMP = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{9})Z/(\d{12})$",
)


def _seconds(match: re.Match[str], value: str) -> int:
    """Whole seconds since the epoch of a matched stamp (datetime checks the calendar; strptime,
    which the controller called for every Job it read, cost more than the rest of the parse)."""
    try:
        year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
        when = dt.datetime(year, month, day, hour, minute, second, tzinfo=dt.UTC)
    except ValueError as exc:
        raise StampError(f"muster.dev/submitted {value!r}: {exc}") from None
    return int(when.timestamp())


class StampError(ValueError):
    """A `muster.dev/submitted` value that is not in muster's format."""


def format_stamp(time_ns: int, seq: int) -> str:
    seconds, nanos = divmod(time_ns, 1_000_000_000)
    return f"{_second(seconds)}.{nanos:09d}Z/{seq:012d}"


@lru_cache(maxsize=4)
def _second(seconds: int) -> str:
    # Stamps come in bursts within the same second: format each second once.
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")


def parse_stamp(value: str, name: str = "") -> SubmitStamp:
    """The stamp as the planner's SubmitStamp (time in float seconds, seq, gang name)."""
    match = _STAMP.match(value)
    if match is None:
        raise StampError(
            f"muster.dev/submitted {value!r} is not of the form "
            "2026-01-02T03:04:05.123456789Z/000000000001"
        )
    seconds = _seconds(match, value)
    return SubmitStamp(seconds + int(match.group(7)) / 1e9, int(match.group(8)), name)


def stamp_time_ns(value: str) -> int:
    """Nanoseconds since the epoch from a stamp (exact, unlike SubmitStamp.time)."""
    match = _STAMP.match(value)
    if match is None:
        raise StampError(f"muster.dev/submitted {value!r} is not in muster's format")
    return _seconds(match, value) * 1_000_000_000 + int(match.group(7))


class SubmissionClock:
    """Hands out stamps in strictly increasing order; safe to call from many threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_ns = 0
        self._seq = 0

    def stamp(self) -> str:
        with self._lock:
            now = max(time.time_ns(), self._last_ns + 1)
            self._last_ns = now
            self._seq += 1
            return format_stamp(now, self._seq)
