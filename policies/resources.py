"""Kubernetes quantities and resource vectors.

Quantities are parsed exactly (no floats) into integers in one internal unit per resource:
millicores for ``cpu`` and base units for everything else (bytes for memory and storage,
counts for pods, GPUs and other extended resources). A fractional base unit is rounded up,
as Kubernetes does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Final

__all__ = [
    "QuantityError",
    "Resources",
    "format_quantity",
    "parse_quantity",
]

_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
# <signedNumber><suffix>, where suffix is binary SI, decimal SI or a decimal exponent (1e3).
_QUANTITY: Final = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)
_HINT: Final = "use a non-negative quantity such as 500m or 2"


class QuantityError(ValueError):
    """A resource quantity that is malformed or negative; the message names the field."""


def _milli(resource: str) -> bool:
    return resource == "cpu"


def parse_quantity(value: str | int | float, *, field: str, resource: str = "") -> int:
    """Parse a Kubernetes quantity into the resource's internal integer unit.

    ``field`` names where the value came from (``queues[2].nominal.cpu``) and is quoted in errors.
    ``resource`` selects the unit: millicores for ``cpu``, base units otherwise.
    """
    if isinstance(value, bool):
        raise QuantityError(f"{field}: {value!r} is not a quantity; {_HINT}")
    amount: Fraction
    if isinstance(value, int):
        amount = Fraction(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{field}: {value!r} is not a finite quantity; {_HINT}")
        # repr() is the shortest decimal that round-trips: 1.1 means 1.1, not 1.100000000000000088.
        amount = Fraction(Decimal(repr(value)))
    elif isinstance(value, str):
        amount = _parse_text(value.strip(), field)
    else:
        raise QuantityError(f"{field}: {value!r} is not a quantity; {_HINT}")
    if amount < 0:
        raise QuantityError(f'{field}: "{value}" is negative; {_HINT}')
    if _milli(resource):
        amount *= 1000
    if amount > MAX_AMOUNT:
        raise QuantityError(
            f'{field}: "{_cut(value)}" is out of range: Kubernetes holds at most {MAX_AMOUNT} '
            f"{'millicores' if _milli(resource) else 'units'}; {_HINT}"
        )
    return math.ceil(amount)


MAX_AMOUNT: Final = 2**63 - 1
"""The largest amount muster reads, in its internal unit (millicores for cpu): what a Kubernetes
quantity holds (an int64)."""


def _cut(value: object, limit: int = 40) -> str:
    text = str(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _parse_text(text: str, field: str) -> Fraction:
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(
            f'{field}: "{_cut(text)}" is not a Kubernetes quantity; use a number with an optional '
            "suffix such as 500m, 1.5, 2Gi, 1e3 or 1k"
        )
    try:
        number = Fraction(Decimal(match["number"]))
    except InvalidOperation as error:  # pragma: no cover - the regex admits only decimals
        raise QuantityError(f'{field}: "{text}" is not a number; {_HINT}') from error
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    exponent = int(suffix[1:])
    if abs(exponent) > 64:
        raise QuantityError(f'{field}: "{text}" has an exponent out of range; {_HINT}')
    return number * Fraction(10) ** exponent


_BYTE_RESOURCES: Final = ("memory", "ephemeral-storage", "storage", "hugepages-")


def _is_bytes(resource: str) -> bool:
    return resource.startswith(_BYTE_RESOURCES) or resource.endswith(("memory", "storage"))


def format_quantity(resource: str, amount: int) -> str:
    """An amount in internal units as a short human string: ``6``, ``500m``, ``20Gi``."""
    sign = "-" if amount < 0 else ""
    amount = abs(amount)
    if _milli(resource):
        if amount % 1000 == 0:
            return f"{sign}{amount // 1000}"
        if amount > 10_000:
            return f"{sign}{amount / 1000:.1f}"
        return f"{sign}{amount}m"
    if _is_bytes(resource) and amount >= 1024:
        for suffix, unit in reversed(_BINARY.items()):
            if amount >= unit:
                if amount % unit == 0:
                    return f"{sign}{amount // unit}{suffix}"
                return f"{sign}{amount / unit:.1f}{suffix}"
    return f"{sign}{amount}"


_PARSED: dict[tuple[tuple[object, type, object], ...], Resources] = {}
"""Resources.parse's results by spelling (see there)."""


class Resources(Mapping[str, int]):
    """An immutable vector of resource amounts in internal units; a missing resource is 0.

    ``r["gpu"]`` is 0 when the vector holds no gpu; iteration yields only non-zero resources,
    so ``Resources(cpu=0) == Resources()``. Arithmetic may produce negative amounts (free
    capacity of an overcommitted node); only parsing rejects them.
    """

    __slots__ = ("_amounts", "_hash")

    _amounts: dict[str, int]
    _hash: int | None

    def __init__(self, amounts: Mapping[str, int] | None = None, /, **named: int) -> None:
        merged: dict[str, int] = {}
        for source in (amounts or {}, named):
            for name, amount in source.items():
                if not isinstance(amount, int) or isinstance(amount, bool):
                    raise TypeError(
                        f"Resources[{name!r}] must be an int in internal units, got {amount!r}; "
                        "use Resources.parse for quantities such as 500m"
                    )
                if amount:
                    merged[name] = amount
        self._amounts = merged
        self._hash = None

    @classmethod
    def _of(cls, amounts: dict[str, int]) -> Resources:
        # Trusted constructor: amounts are ints, zeros already dropped.
        new = cls.__new__(cls)
        new._amounts = amounts
        new._hash = None
        return new

    @classmethod
    def parse(cls, mapping: Mapping[str, str | int | float] | None, *, field: str) -> Resources:
        """Parse ``{"cpu": "500m", "memory": "2Gi"}``; errors name ``field.<resource>``."""
        if mapping is None:
            return cls()
        if not isinstance(mapping, Mapping):
            raise QuantityError(
                f"{field}: expected a mapping of resource name to quantity, got {mapping!r}"
            )
        # The same requests come again and again (every Job of a kind, every gang of a trace):
        # parse each spelling once and share the one immutable result, which saves the parse
        # and the memory of a vector per gang, and makes the planner's look-ups by vector hit
        # by identity. The value's type is part of the key (True == 1, but True is refused).
        try:
            key = tuple((name, value.__class__, value) for name, value in mapping.items())
            found = _PARSED.get(key)
        except TypeError:  # an unhashable value: parsed, and refused, below
            key, found = None, None
        if found is not None and cls is Resources:
            return found
        amounts: dict[str, int] = {}
        for name, value in mapping.items():
            amount = parse_quantity(value, field=f"{field}.{name}", resource=str(name))
            if amount:
                amounts[str(name)] = amount
        parsed = cls._of(amounts)
        if key is not None and cls is Resources:
            if len(_PARSED) >= 4096:  # requests spelled ever differently: forget, stay bounded
                _PARSED.clear()
            _PARSED[key] = parsed
        return parsed

    def __getitem__(self, name: str) -> int:
        return self._amounts.get(name, 0)

    def __contains__(self, name: object) -> bool:
        return name in self._amounts

    def __iter__(self) -> Iterator[str]:
        return iter(self._amounts)

    def __len__(self) -> int:
        return len(self._amounts)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Resources):
            return self._amounts == other._amounts
        if isinstance(other, Mapping):
            return self._amounts == {k: v for k, v in other.items() if v}
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._amounts.items()))
        return self._hash

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={format_quantity(k, v)}" for k, v in sorted(self._amounts.items()))
        return f"Resources({inner})"

    def __add__(self, other: Mapping[str, int]) -> Resources:
        amounts = dict(self._amounts)
        for name, amount in other.items():
            total = amounts.get(name, 0) + amount
            if total:
                amounts[name] = total
            else:
                amounts.pop(name, None)
        return Resources._of(amounts)

    def __sub__(self, other: Mapping[str, int]) -> Resources:
        amounts = dict(self._amounts)
        for name, amount in other.items():
            total = amounts.get(name, 0) - amount
            if total:
                amounts[name] = total
            else:
                amounts.pop(name, None)
        return Resources._of(amounts)

    def scale(self, factor: int) -> Resources:
        """Every amount times ``factor`` (the demand of ``factor`` identical pods)."""
        if factor == 0:
            return Resources._of({})
        return Resources._of({k: v * factor for k, v in self._amounts.items()})

    def fits_in(self, other: Mapping[str, int]) -> bool:
        """True if every amount is at most the same resource in ``other`` (missing = 0)."""
        return all(amount <= other.get(name, 0) for name, amount in self._amounts.items())

    def pods_that_fit(self, free: Mapping[str, int], one_per_node: bool = False) -> int | None:
        """How many pods requesting this (per pod) fit in ``free`` capacity of one node: at most
        1 for a gang kept to one pod per node; None when it requests nothing (no limit). The
        planner asks the same of resource vectors on its hot path
        (`policies.fit.FitClass.pods_on`)."""
        room: int | None = 1 if one_per_node else None
        for name, amount in self._amounts.items():
            if amount > 0:
                fits = max(0, free.get(name, 0) // amount)
                room = fits if room is None else min(room, fits)
        return room

    def is_zero(self) -> bool:
        return not self._amounts

    def describe(self) -> str:
        """``6 cpu, 2Gi memory`` for messages."""
        if not self._amounts:
            return "nothing"
        return ", ".join(f"{format_quantity(k, v)} {k}" for k, v in sorted(self._amounts.items()))
