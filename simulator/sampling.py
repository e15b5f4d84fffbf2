"""The figures a simulator sample holds, from per-queue usage vectors: one computation for the
in-process engine (`simulator.engine`) and the kwok engine's timeline (`simulator.kwok_timeline`).

Vectors are per queue, one amount per resource (the engines' resource order); `capacity` is
the cluster's total in the same order and `util` the index of the resource utilization is
measured in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Figures:
    utilization: float
    """Running pods' share of capacity in the utilization resource."""
    allocation: float
    """Bound pods' (running or not) share of capacity in the utilization resource."""
    shares: tuple[float, ...]
    """Each queue's dominant share of what runs."""
    fair: tuple[float, ...]
    """Each queue's weighted max-min fair share of what runs, capped by its demand."""
    fairness_error: float
    """How far below their fair share the queues run, summed."""


def figures(
    running_use: Sequence[Sequence[int]],
    held: Sequence[Sequence[int]],
    waiting: Sequence[Sequence[int]],
    capacity: Sequence[int],
    util: int,
    weights: Sequence[float],
) -> Figures:
    """A sample's figures: `running_use` per queue (pods of running gangs), `held` (every bound
    pod), `waiting` (what pending and partly bound gangs still need)."""
    cap_u = capacity[util] if capacity and capacity[util] else 1
    utilization = sum(v[util] for v in running_use) / cap_u if capacity else 0.0
    allocation = sum(v[util] for v in held) / cap_u if capacity else 0.0
    shares = [dominant_share(v, capacity) for v in running_use]
    demands = [
        min(1.0, dominant_share([h + w for h, w in zip(hv, wv, strict=True)], capacity))
        for hv, wv in zip(held, waiting, strict=True)
    ]
    fair = water_fill(demands, weights, sum(shares))
    error = sum(max(0.0, f - s) for f, s in zip(fair, shares, strict=True))
    return Figures(utilization, allocation, tuple(shares), tuple(fair), error)


def dominant_share(vector: Sequence[int], capacity: Sequence[int]) -> float:
    """A usage vector's largest share of capacity (its dominant share)."""
    share = 0.0
    for amount, cap in zip(vector, capacity, strict=True):
        if cap > 0 and amount > 0:
            share = max(share, amount / cap)
    return share


def water_fill(demands: Sequence[float], weights: Sequence[float], total: float) -> list[float]:
    """Weighted max-min fair split of `total` (a dominant share) among queues, each capped by
    its demand."""
    fair = [0.0] * len(demands)
    active = [i for i, d in enumerate(demands) if d > 0]
    remaining = total
    while active and remaining > 1e-12:
        total_weight = sum(weights[i] for i in active)
        satisfied = [i for i in active if demands[i] <= remaining * weights[i] / total_weight]
        if not satisfied:
            for i in active:
                fair[i] = remaining * weights[i] / total_weight
            break
        for i in satisfied:
            fair[i] = demands[i]
            remaining -= demands[i]
        active = [i for i in active if i not in satisfied]
    return fair
