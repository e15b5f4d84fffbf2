"""The one reader of a Queue's spec, as a cluster admin writes it in a Queue object
(`admission.gangs.queue_from`) or in a trace's `queues:` (`simulator.traceparse`).

Strict: an unknown field, a value of the wrong type or out of range raises `PolicyError`
naming the field, the value and what to write instead. The controller keeps a Queue it cannot
read out of the planner and says why (`admission.cache.Cache.apply_queue`); a trace with one
does not load. `spec.limits` (the webhook's) and `spec.namespaceSelector` (the controller's)
have their own readers; this one only accepts them as known fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from policies import fields
from policies.model import (
    Backoff,
    NeverFitsAction,
    Ordering,
    PolicyError,
    Queue,
    SizeRatio,
)
from policies.preemption import parse_preemption

QUEUE_SPEC_FIELDS: Final = (
    "parent",
    "weight",
    "nominal",
    "borrowingLimit",
    "lendingLimit",
    "strategy",
    "sizeRatio",
    "clogTimeout",
    "backoff",
    "nodeFit",
    "preemption",
    "neverFits",
    "fairSharing",
    "ordering",
    "limits",
    "namespaceSelector",
)
"""Fields of a Queue's spec (the CRD's), in the order the docs list them."""

DEFAULT_CLOG_TIMEOUT: Final = 300.0


def parse_queue(
    name: str,
    spec: Mapping[str, Any],
    where: str,
    *,
    known: tuple[str, ...] = QUEUE_SPEC_FIELDS,
) -> Queue:
    """The planner's `Queue` named ``name`` from its spec; ``where`` prefixes every error
    (`queue "gpu": spec`, `queues[2] (gpu)`). ``known``: the fields the spec may hold."""
    fields.mapping(spec, where, known)
    parent = spec.get("parent")
    if parent is not None:
        parent = fields.string(parent, f"{where}.parent")
    weight = fields.number(spec.get("weight", 1.0), f"{where}.weight")
    if weight <= 0:
        raise PolicyError(f"{where}.weight: {weight} must be positive, e.g. 1")
    strategy = spec.get("strategy", "BestEffortFIFO")
    if strategy not in ("BestEffortFIFO", "StrictFIFO"):
        raise PolicyError(f"{where}.strategy: {strategy!r} is not BestEffortFIFO or StrictFIFO")
    return Queue(
        name=name,
        parent=parent,
        weight=weight,
        nominal=fields.optional_resources(spec.get("nominal"), f"{where}.nominal"),
        quota_names=frozenset(spec.get("nominal") or ()),
        borrowing_limit=fields.optional_resources(
            spec.get("borrowingLimit"), f"{where}.borrowingLimit"
        ),
        lending_limit=fields.optional_resources(spec.get("lendingLimit"), f"{where}.lendingLimit"),
        strategy="StrictFIFO" if strategy == "StrictFIFO" else "BestEffortFIFO",
        size_ratio=parse_size_ratio(spec, f"{where}.sizeRatio"),
        clog_timeout=fields.duration(
            spec.get("clogTimeout", DEFAULT_CLOG_TIMEOUT), f"{where}.clogTimeout"
        ),
        backoff=parse_backoff(spec.get("backoff"), f"{where}.backoff"),
        node_fit=fields.boolean(spec.get("nodeFit", True), f"{where}.nodeFit"),
        preemption=parse_preemption(spec.get("preemption"), f"{where}.preemption"),
        never_fits=parse_never_fits(spec.get("neverFits", "Warn"), f"{where}.neverFits"),
        usage_half_life=parse_fair_sharing(spec.get("fairSharing"), f"{where}.fairSharing"),
        ordering=parse_ordering(spec.get("ordering"), f"{where}.ordering"),
    )


def parse_ordering(value: object, where: str) -> Ordering:
    """``spec.ordering``: ``{by: Submission | SmallestFirst, agingBound: DURATION}``, the order
    of the queue's waiting gangs (policies/ordering.py); absent = by submission."""
    if value is None:
        return Ordering()
    data = fields.mapping(value, where, ("by", "agingBound"))
    by = data.get("by", "Submission")
    if by not in ("Submission", "SmallestFirst"):
        raise PolicyError(f"{where}.by: {by!r} is not Submission or SmallestFirst")
    bound = data.get("agingBound")
    if bound is not None:
        bound = fields.duration(bound, f"{where}.agingBound")
    return Ordering(
        by="SmallestFirst" if by == "SmallestFirst" else "Submission", aging_bound=bound
    )


def parse_fair_sharing(value: object, where: str) -> float | None:
    """``spec.fairSharing``: ``{halfLife: DURATION}``, the half-life of the recent usage the
    queue's share counts (policies/fairtime.py); None when not given."""
    if value is None:
        return None
    half_life = fields.mapping(value, where, ("halfLife",)).get("halfLife")
    if half_life is None:
        return None
    return fields.duration(half_life, f"{where}.halfLife")


def parse_never_fits(value: object, where: str) -> NeverFitsAction:
    """``neverFits``: what the webhook does with a created gang that can never fit."""
    if value == "Warn":
        return "Warn"
    if value == "Reject":
        return "Reject"
    raise PolicyError(f"{where}: {value!r} is not Warn or Reject")


def parse_size_ratio(spec: Mapping[str, Any], where: str) -> SizeRatio | None:
    """``sizeRatio``: absent = the default (0.1, Serialize); null or false = no size-ratio
    rule; a number = that ratio; or ``{ratio, action}``."""
    if "sizeRatio" not in spec:
        return SizeRatio()
    value = spec["sizeRatio"]
    if value is None or value is False:
        return None
    if isinstance(value, bool):
        raise PolicyError(
            f"{where}: use a ratio such as 0.1, {{ratio: 0.1, action: Reject}}, or null"
        )
    if isinstance(value, int | float):
        ratio, action = float(value), "Serialize"
    else:
        data = fields.mapping(value, where, ("ratio", "action"))
        ratio = fields.number(data.get("ratio", 0.1), f"{where}.ratio")
        action = data.get("action", "Serialize")
        if action not in ("Serialize", "Reject"):
            raise PolicyError(f"{where}.action: {action!r} is not Serialize or Reject")
    if not 0 < ratio <= 1:
        raise PolicyError(f"{where}.ratio: {ratio} must be in (0, 1], e.g. 0.1")
    return SizeRatio(ratio=ratio, action="Reject" if action == "Reject" else "Serialize")


def parse_backoff(value: object, where: str) -> Backoff:
    """``backoff: {base, max, limit}``; absent = the default."""
    if value is None:
        return Backoff()
    data = fields.mapping(value, where, ("base", "max", "limit"))
    default = Backoff()
    base = fields.duration(data.get("base", default.base), f"{where}.base")
    maximum = fields.duration(data.get("max", default.max), f"{where}.max")
    limit = fields.integer(data.get("limit", default.limit), f"{where}.limit", minimum=0)
    if maximum < base:
        raise PolicyError(f"{where}.max: {maximum}s is below base {base}s")
    return Backoff(base=base, max=maximum, limit=limit)
