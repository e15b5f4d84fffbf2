"""Durations as users write them: `300`, `300s`, `1.5m`, `1h30m`, `250ms`, `2d` → seconds.

Every reading is bounded: at most `MAX_SECONDS` (what a Kubernetes duration, Go's
`time.Duration`, can hold: about 292 years) and at most `MAX_TEXT` characters of text, so a
value of 90 digits and an `h` is refused with the field named rather than taken as 1e93 s.
"""

from __future__ import annotations

import math
import re
from typing import Final

_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

MAX_INT64: Final = 2**63 - 1
"""The largest integer Kubernetes stores in an int64 field (`activeDeadlineSeconds`)."""
MAX_SECONDS: Final = MAX_INT64 / 1e9
"""The longest duration muster reads: Go's `time.Duration` (int64 nanoseconds), ~292 years."""
MAX_TEXT: Final = 64
"""The longest duration text muster reads (`1h30m` is 5 characters; 64 leave room for any
honest spelling)."""


def shown(value: object, limit: int = 40) -> str:
    """``repr(value)``, cut to ``limit`` characters: an error message quotes what it refuses
    without copying a value of any length into logs, Events and answers."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 4]}...{text[-1]}"


class DurationError(ValueError):
    """A malformed or negative duration; the message names the field."""


_SECONDS: dict[str, float] = {}
"""parse_duration's results by string: a trace repeats the same few spellings per job."""


def parse_duration(value: object, *, field: str) -> float:
    """Seconds from a number or a Go-style duration string; raise DurationError naming `field`."""
    if isinstance(value, str):
        known = _SECONDS.get(value)
        if known is not None:
            return known
        seconds = _parse(value, field)
        if len(_SECONDS) >= 4096:
            _SECONDS.clear()
        _SECONDS[value] = seconds
        return seconds
    return _parse(value, field)


def _parse(value: object, field: str) -> float:
    hint = "use e.g. 300s, 5m or 1h30m"
    if isinstance(value, bool) or value is None:
        raise DurationError(f"{field}: missing or not a duration; {hint}")
    if isinstance(value, int) and abs(value) > MAX_INT64:
        seconds = math.inf  # float() of it would overflow; out of range below
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if len(text) > MAX_TEXT:
            raise DurationError(
                f"{field}: {shown(value)} is {len(text)} characters long, not a duration muster "
                f"reads (at most {MAX_TEXT}); {hint}"
            )
        try:
            seconds = float(text)
        except ValueError:
            pos, seconds = 0, 0.0
            for match in _PART.finditer(text):
                if match.start() != pos:
                    break
                seconds += float(match.group(1)) * _UNITS[match.group(2)]
                pos = match.end()
            if not text or pos != len(text):
                raise DurationError(f"{field}: {shown(value)} is not a duration; {hint}") from None
    else:
        raise DurationError(f"{field}: {shown(value)} is not a duration; {hint}")
    if math.isnan(seconds) or seconds < 0:
        raise DurationError(f"{field}: {shown(value)} must be a non-negative duration; {hint}")
    if seconds > MAX_SECONDS:
        raise DurationError(
            f"{field}: {shown(value)} is out of range: at most {MAX_SECONDS:.0f}s (about 292 "
            f"years, the longest duration Kubernetes holds); {hint}"
        )
    return seconds


def parse_clog_timeout(value: object, where: str) -> float:
    """A gang's own clog timeout (`muster.dev/clog-timeout`), in seconds.

    One reading for the webhook (which refuses a bad one) and the controller (which keeps a Job
    with a bad one waiting, with this message); raises DurationError naming `where`.
    """
    return parse_duration(value, field=where)


def parse_runtime_limit(value: object, where: str) -> float | None:
    """A gang's runtime limit in seconds from a Job's `spec.activeDeadlineSeconds` (None: unset).

    Kubernetes ends a Job that runs longer (counted from its start, which resuming a suspended
    Job resets), so the planner may lend such a gang nodes reserved for a big gang. The API
    server already refuses values below 1; this reading also refuses what an older or a
    hand-fed object might hold. Raises DurationError naming `where`.
    """
    if value is None:
        return None
    fix = "set it to a whole number of seconds >= 1, or remove it for no limit"
    if isinstance(value, bool) or not isinstance(value, int):
        raise DurationError(f"{where}: {shown(value)} is not a whole number of seconds; {fix}")
    if value < 1:
        raise DurationError(f"{where}: {shown(value)} is below 1 second; {fix}")
    if value > MAX_INT64:
        raise DurationError(
            f"{where}: {shown(value)} is out of range: Kubernetes holds at most {MAX_INT64}; {fix}"
        )
    return float(value)


def format_duration(seconds: float) -> str:
    """A short human form: 45s, 5m, 1h30m, 2d3h (rounded to whole seconds)."""
    total = round(seconds)
    if total < 60:
        return f"{total}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, total = divmod(total, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
