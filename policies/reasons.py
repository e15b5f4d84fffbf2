"""The messages `muster explain` prints for gangs that were not admitted.

One function per reason code, so the wording lives in one place and tests can pin it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import lru_cache

from policies.decisions import Reason
from policies.durations import format_duration
from policies.resources import Resources, format_quantity

__all__ = [
    "elastic_waiting",
    "head_preempted_in",
    "namespace_not_allowed",
    "never_fits_nodes",
    "never_fits_quota",
    "no_fit",
    "no_fit_reserving",
    "preempted",
    "queue_not_found",
    "quota_exhausted",
    "quota_held",
    "quota_holding",
    "reservation_preempted_in",
    "reserved_for",
    "reserved_for_too_long",
    "size_ratio_rejected",
    "size_ratio_serialized",
    "strict_fifo_blocked",
    "topology_no_domain",
    "topology_unknown_level",
]

_RESTRICTED = " matching its node selector and tolerations"


def _amount(resource: str, amount: float) -> str:
    return _format(resource, int(max(amount, 0)))


# Plans format the same few amounts (per-pod requests times gang sizes) over and over.
_format = lru_cache(maxsize=4096)(format_quantity)


def quota_exhausted(queue: str, resource: str, needs: float, available: float) -> Reason:
    return Reason(
        "QuotaExhausted",
        f"quota of queue {queue} exhausted in {resource}: needs {_amount(resource, needs)}, "
        f"{_amount(resource, available)} available",
    )


def quota_held(queue: str, holder: str) -> Reason:
    """The queue's quota would admit the gang, but only by borrowing quota held for a big gang
    of another queue that waits within its own queue's nominal quota (`policies.quotahold`)."""
    return Reason(
        "QuotaExhausted",
        f"quota of queue {queue}: what it would borrow is held for big gang {holder}, waiting "
        "within its queue's nominal quota that other queues borrow; it may still take its own "
        "nominal quota",
    )


def quota_holding(reason: Reason) -> Reason:
    """``reason`` (QuotaExhausted) of the big gang that holds the quota its queue lent."""
    return Reason(
        reason.code,
        f"{reason.message}; within its queue's nominal quota, which other queues borrow: they "
        "borrow no more of it until it fits",
    )


def no_fit(
    pods: int, pod_requests: Resources, one_pod_per_node: bool, room: int, restricted: bool
) -> Reason:
    where = _RESTRICTED if restricted else ""
    if one_pod_per_node:
        message = (
            f"does not fit nodes: needs {pods} nodes{where} with {pod_requests.describe()} free, "
            f"{room} available"
        )
    else:
        message = (
            f"does not fit nodes: needs {pods} pods of {pod_requests.describe()}, free capacity"
            f"{' on nodes' + where if restricted else ''} holds {room}"
        )
    return Reason("NoFit", message)


def never_fits_nodes(
    pods: int, pod_requests: Resources, one_pod_per_node: bool, room: int, restricted: bool
) -> Reason:
    where = _RESTRICTED if restricted else ""
    if one_pod_per_node:
        message = (
            f"never fits: needs {pods} nodes{where} with {pod_requests.describe()} allocatable, "
            f"the cluster has {room}"
        )
    else:
        message = (
            f"never fits: needs {pods} pods of {pod_requests.describe()}, the whole cluster"
            f"{' (nodes' + where + ')' if restricted else ''} holds {room}"
        )
    return Reason("NeverFits", message)


def never_fits_quota(queue: str, resource: str, needs: float, most: float) -> Reason:
    return Reason(
        "NeverFits",
        f"never fits: needs {_amount(resource, needs)} {resource}, queue {queue} can get at most "
        f"{_amount(resource, most)} {resource} (nominal plus what it may borrow); raise the "
        "queue's quota or shrink the job",
    )


def size_ratio_serialized(behind: str) -> Reason:
    return Reason("SizeRatioSerialized", f"size ratio: serialized behind {behind}")


def size_ratio_rejected(queue: str, resource: str, share: float, ratio: float) -> Reason:
    return Reason(
        "SizeRatioRejected",
        f"size ratio: needs {share:.0%} of the cluster's {resource}, above queue {queue}'s "
        f"limit of {ratio:.0%}; split the job or raise the queue's sizeRatio.ratio",
    )


def strict_fifo_blocked(head: str) -> Reason:
    return Reason("StrictFIFOBlocked", f"blocked by StrictFIFO head {head}")


def reservation_preempted_in(holder: str) -> Reason:
    """A gang kept off the nodes reserved for ``holder``, once the holder was admitted by
    preemption later in the same plan: there is no reservation any more."""
    return Reason(
        "Reserved",
        f"capacity was reserved for big gang {holder} until it was admitted by preemption in "
        "this plan; planned again next cycle",
    )


def head_preempted_in(head: str) -> Reason:
    """The gang a StrictFIFO head blocked, once the head was admitted by preemption after the
    gangs behind it were passed over: it heads its queue now and is planned next cycle."""
    return Reason(
        "StrictFIFOBlocked",
        f"blocked by StrictFIFO head {head} until it was admitted by preemption in this plan; "
        "planned again next cycle",
    )


def elastic_waiting(size: int, fits: int, minimum: int, after: float, left: float) -> Reason:
    return Reason(
        "ElasticWaiting",
        f"elastic: {fits} of {size} pods fit (min {minimum}); it may start smaller "
        f"{after:g}s after submission, in {left:.0f}s",
    )


def queue_not_found(queue: str, leaves: Iterable[str], cohort: bool) -> Reason:
    known = ", ".join(sorted(leaves)) or "none defined"
    if cohort:
        return Reason(
            "QueueNotFound",
            f'queue "{queue}" is a cohort; set muster.dev/queue to one of its leaf queues: {known}',
        )
    return Reason(
        "QueueNotFound",
        f'queue "{queue}" not found: create it (kind: Queue) or set muster.dev/queue to one of: '
        f"{known}",
    )


def reserved_for(holder: str, waited: float | None = None) -> Reason:
    """``waited``: the holder holds because it has waited that long (no starvation), not
    because it comes first in the policy's order."""
    if waited is not None:
        return Reason(
            "Reserved",
            f"capacity reserved for big gang {holder}, older and waiting for "
            f"{format_duration(waited)} (size ratio: a big gang is not starved; queues below "
            "their fair share and the big gang's queue are not held back)",
        )
    return Reason(
        "Reserved",
        f"capacity reserved for big gang {holder}, which comes before it in the policy's order "
        "(size ratio: the first big gang that waits for nodes is not starved)",
    )


def reserved_for_too_long(holder: str, limit: float, holder_wait: float) -> Reason:
    """Reserved, for a gang with a runtime limit that may not backfill: it would not surely end
    before the big gang could start (``holder_wait`` seconds from now, infinite if unknown)."""
    if math.isinf(holder_wait):
        why = (
            "a gang on the reserved nodes has no runtime limit (activeDeadlineSeconds), so when "
            "the big gang can start is not known"
        )
    else:
        why = (
            f"its runtime limit ({format_duration(limit)}) ends after the big gang's earliest "
            f"start (in {format_duration(holder_wait)})"
        )
    return Reason(
        "Reserved",
        f"capacity reserved for big gang {holder}, which comes before it in the policy's order; "
        f"it cannot backfill: {why}",
    )


def no_fit_reserving(reason: Reason) -> Reason:
    """``reason`` of the big gang that holds the plan's reservation: NoFit, or for a holder
    that has waited STARVATION_AFTER whatever stopped it when its turn came (quota, the
    size-ratio slot, taken by gangs before it in the order)."""
    return Reason(
        reason.code,
        f"{reason.message}; holds a reservation: gangs after it in the policy's order keep off "
        "the nodes it needs",
    )


def preempted(preemptor: str, rule: str) -> Reason:
    return Reason(
        "Preempted",
        f"preempted by {preemptor} ({rule}); requeued at its submission time, no backoff",
    )


def held_behind_partial(gang: str) -> Reason:
    return Reason(
        "HeldBehindPartial",
        f"node-blind queues (nodeFit: false) admit nothing while {gang} waits for room for its "
        "pods; admission resumes when it runs or is evicted",
    )


def namespace_not_allowed(queue: str, namespace: str, selector: str) -> Reason:
    return Reason(
        "NamespaceNotAllowed",
        f'queue "{queue}" takes gangs only from namespaces matching {selector}; namespace '
        f'"{namespace}" does not match: label the namespace or use another queue',
    )


def in_pod_set(pod_set: str, reason: Reason) -> Reason:
    """``reason`` about one pod set of a gang of several (its name first)."""
    return Reason(reason.code, f"pod set {pod_set}: {reason.message}")


def never_fits_together(sets: Iterable[tuple[str, int, Resources]]) -> Reason:
    """A gang of several pod sets whose sets each fit the empty cluster, but not together."""
    listed = ", ".join(
        f"{name or 'main'} ({pods} × {requests.describe()})" for name, pods, requests in sets
    )
    return Reason(
        "NeverFits",
        f"never fits: its pod sets {listed} do not fit the nodes together, even with nothing "
        "else running; make a set smaller or let it use more nodes",
    )


def topology_no_domain(level: str, pods: int, pod_requests: Resources, largest: int) -> Reason:
    """A gang that must run within one domain of ``level``: no domain has room for ``pods``
    pods; the roomiest holds ``largest``."""
    return Reason(
        "NoFit",
        f"topology {level} required: needs one {level} with room for {pods} pods of "
        f"{pod_requests.describe()}; the largest free has {largest}",
    )


def topology_unknown_level(level: str, levels: Iterable[str]) -> Reason:
    """A gang requiring a topology level the cluster's topology does not list."""
    known = ", ".join(levels) or "none configured"
    return Reason(
        "NoFit",
        f'topology level "{level}" required, but the cluster\'s topology levels are: {known}; '
        "set muster.dev/topology-required to one of them",
    )
