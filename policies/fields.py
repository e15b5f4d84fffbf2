"""Readers of one field of a spec users write (a trace, a Queue's spec): each checks the value's
type and range and raises `PolicyError` naming the field, the value and what to write instead.
The trace reader (`simulator.traceparse`) and the queue spec reader (`policies.queuespec`) use
the same ones, so a field means and accepts the same thing wherever it is written.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from policies import durations
from policies.durations import shown
from policies.model import PolicyError
from policies.resources import QuantityError, Resources
from policies.vocabulary import MAX_INT32

_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def mapping(value: object, where: str, known: Sequence[str]) -> dict[str, Any]:
    """A mapping whose keys are all in ``known``."""
    if value is None:
        raise PolicyError(f"{where}: missing; expected a mapping with fields {', '.join(known)}")
    if not isinstance(value, Mapping):
        raise PolicyError(f"{where}: expected a mapping, got {type(value).__name__}")
    for key in value:
        if key not in known:
            name = value.get("name")
            if isinstance(name, str) and name and where.endswith("]"):
                where = f"{where} ({name})"
            raise PolicyError(f"{where}: unknown field {key!r}; known fields: {', '.join(known)}")
    return dict(value)


def items(value: object, where: str, *, required: bool = False) -> list[Any]:
    """A list (absent: empty, unless ``required``)."""
    if value is None and not required:
        return []
    if not isinstance(value, list):
        raise PolicyError(f"{where}: expected a list, got {type(value).__name__}")
    if required and not value:
        raise PolicyError(f"{where}: must not be empty")
    return value


def string(value: object, where: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise PolicyError(f"{where}: expected a string, got {value!r}")
    if not value and not allow_empty:
        raise PolicyError(f"{where}: must not be empty")
    return value


def dns_name(value: str, where: str) -> None:
    """``value`` is a valid object name (lower-case DNS label, dots allowed)."""
    if not _NAME_RE.match(value) or len(value) > 63:
        raise PolicyError(
            f"{where}: {value!r} is not a valid name; use lower-case letters, digits and '-'"
        )


def integer(value: object, where: str, *, minimum: int | None, maximum: int = MAX_INT32) -> int:
    """A whole number (a float with no fraction is taken), at least ``minimum`` (None: at
    least ``-maximum - 1``) and at most ``maximum`` (by default what Kubernetes stores in an
    int32: counts of pods, replicas, evictions)."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise PolicyError(f"{where}: expected an integer, got {shown(value)}")
    if minimum is not None and value < minimum:
        raise PolicyError(f"{where}: {shown(value)} is below the minimum {minimum}")
    if value > maximum or value < -maximum - 1:
        raise PolicyError(f"{where}: {shown(value)} is out of range: at most {maximum}")
    return value


def number(value: object, where: str) -> float:
    """A finite number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PolicyError(f"{where}: expected a number, got {value!r}")
    if not math.isfinite(value):
        raise PolicyError(f"{where}: {value!r} is not a finite number")
    return float(value)


def boolean(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise PolicyError(f"{where}: expected true or false, got {value!r}")
    return value


def str_map(value: object, where: str) -> dict[str, str]:
    """A mapping of strings to strings (labels, a node selector)."""
    if not isinstance(value, dict):
        raise PolicyError(f"{where}: expected a mapping of strings, got {value!r}")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise PolicyError(f"{where}.{key}: expected a string, got {item!r}")
    return dict(value)


def resources(value: object, where: str, *, required: bool = False) -> Resources:
    """Resource quantities, e.g. ``{cpu: '6', memory: 20Gi}`` (absent: none, unless
    ``required``)."""
    if value is None and not required:
        return Resources()
    if not isinstance(value, Mapping) or (required and not value):
        raise PolicyError(f"{where}: expected a mapping of resource quantities, e.g. {{cpu: '6'}}")
    for key, item in value.items():
        if not isinstance(key, str):
            raise PolicyError(f"{where}: resource name {key!r} is not a string")
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise PolicyError(f"{where}.{key}: {item!r} is not a quantity; use e.g. 500m or 2Gi")
    try:
        return Resources.parse(value, field=where)
    except QuantityError as exc:
        raise PolicyError(str(exc)) from None


def optional_resources(value: object, where: str) -> Resources | None:
    return None if value is None else resources(value, where)


def duration(value: object, where: str) -> float:
    """Seconds from ``300``, ``300s``, ``1.5m``, ``1h30m``, ``250ms``."""
    try:
        return durations.parse_duration(value, field=where)
    except durations.DurationError as exc:
        raise PolicyError(str(exc)) from None
