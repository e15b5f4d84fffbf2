"""The fairness error of a run (docs/simulator.md, *Fairness error*): each queue's fair share of
what runs, per resource, and how far below it the queues run.

Per resource, what runs of it is the capacity to share (idle capacity is the utilization
figure's business), split among the queues that want it by weight, each capped by its demand:
the weighted max-min split (`water_fill`), as KAI divides each resource (deserved, then
over-quota by weight, capped by what is requested). A queue's demand for a resource is what it
holds of it plus what its waiting gangs ask for *where that is their dominant resource*: a gang
waiting for GPUs that are all in use could not use the CPU its pods would also ask for, so it is
owed GPUs, not CPU. The error at an instant is, for the resource shared worst, how far below
their fair share the queues run, summed (as shares of that resource's capacity); the run's
figure is its time mean: the summaries' `fairness_error_by_resource`.

With one resource this is `fairness_error`, the measure of every report before issue 33. With
several, that measure adds each queue's dominant share, whatever its resource, into one total
and splits that: a queue holding every GPU counts as holding as much as a queue holding all the
CPU, and a waiting GPU gang's CPU counts as demand for CPU. The two disagree on whether a queue
that holds a resource nobody else wants is owed less of the others: dominant resource fairness
says so, KAI's per-resource division and muster's own order of queue heads (each head
compared by its queue's share of what it asks for: `policies.shares.Shares.head_share`) do not.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "FairnessMeter",
    "error_of",
    "fair_shares",
    "instant_error",
    "over_share",
    "water_fill",
]


def water_fill(demands: Sequence[float], weights: Sequence[float], total: float) -> list[float]:
    """Weighted max-min fair split of `total` (a dominant share) among queues, each capped by
    its demand: the fair shares of `fairness_error`, the measure before issue 33."""
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


Matrix = Sequence[Sequence[float]]
"""Per queue, per resource: a share of the resource's capacity."""


def fair_shares(demands: Matrix, weights: Sequence[float], running: Matrix) -> list[list[float]]:
    """Per queue and resource, its fair share of what runs of the resource (see the module
    docstring): ``demands`` and ``running`` are shares of each resource's capacity."""
    queues = len(demands)
    width = len(demands[0]) if queues else 0
    fair = [[0.0] * width for _ in range(queues)]
    for r in range(width):
        split = water_fill(
            [demands[q][r] for q in range(queues)],
            weights,
            sum(running[q][r] for q in range(queues)),
        )
        for q in range(queues):
            fair[q][r] = split[q]
    return fair


def error_of(running: Matrix, fair: Matrix) -> float:
    """For the resource shared worst, how far below their fair share the queues run, summed."""
    worst = 0.0
    for r in range(len(running[0]) if running else 0):
        worst = max(worst, sum(max(0.0, f[r] - s[r]) for f, s in zip(fair, running, strict=True)))
    return worst


def over_share(running: Sequence[float], fair: Sequence[float]) -> float:
    """How far above its fair share one queue runs, in the resource where it is most: the
    other side of the error (what some queues run above their share, others run below)."""
    return max(0.0, max((s - f for s, f in zip(running, fair, strict=True)), default=0.0))


def instant_error(shares: Sequence[float], fair: Sequence[float]) -> float:
    """How far below its fair share each queue runs, summed (one share per queue)."""
    return sum(max(0.0, f - s) for f, s in zip(fair, shares, strict=True))


class FairnessMeter:
    """The time integrals behind a run's fairness figures, fed once per instant with the queues'
    running and fair shares of each resource since the previous instant: the error by this
    module's measure and by the one before issue 33."""

    __slots__ = ("active", "dominant", "excess", "instant")

    def __init__(self) -> None:
        self.instant = 0.0  # integral of the error
        self.dominant = 0.0  # integral of the error before issue 33
        self.excess: list[float] = []  # per queue, integral of `over_share`
        self.active: list[float] = []  # per queue, time it ran or was owed a share

    def advance(self, span: float, running: Matrix, fair: Matrix, dominant_error: float) -> None:
        """``span`` seconds went by with these running and fair shares, and old-measure error."""
        if span > 0:
            self.instant += error_of(running, fair) * span
            self.dominant += dominant_error * span
            excess, active = self.excess, self.active
            if len(excess) < len(running):
                excess.extend([0.0] * (len(running) - len(excess)))
                active.extend([0.0] * (len(running) - len(active)))
            for q, (s, f) in enumerate(zip(running, fair, strict=True)):
                if any(s) or any(f):
                    excess[q] += over_share(s, f) * span
                    active[q] += span

    def over_fair_share(self) -> tuple[float, ...]:
        """Per queue, the mean of `over_share` over the time it ran or was owed a share (a
        queue that waits most of a run and is favoured while it runs is not averaged away)."""
        return tuple(e / t if t > 0 else 0.0 for e, t in zip(self.excess, self.active, strict=True))

    def integrals(self) -> tuple[float, float]:
        """(this measure's, the one before issue 33's) error integrals so far."""
        return self.instant, self.dominant
