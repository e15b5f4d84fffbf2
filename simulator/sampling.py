"""The figures a simulator sample holds, from per-queue usage vectors: one computation for the
in-process engine (`simulator.engine`) and the kwok engine's timeline (`simulator.kwok_timeline`);
and the in-process engine's `Meter`, which keeps those vectors up to date as gangs change and
samples them.

Vectors are per queue, one amount per resource (the engines' resource order); `capacity` is
the cluster's total in the same order and `util` the index of the resource utilization is
measured in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simulator.records import (
    ADMITTED,
    BACKING_OFF,
    PENDING,
    RUNNING,
    STATES,
    GangRecord,
    PodSetRecord,
    Sample,
)


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


class Meter:
    """The in-process engine's metrics: per queue, gangs in each state and the requests of
    bound pods (``held``), of running gangs' pods (``running_use``) and of pods still needing a
    node (``waiting``), kept as gangs change; sampled once per instant, with the time integrals
    of utilization, allocation and fairness error behind the run's means."""

    def __init__(
        self,
        queues: int,
        resources: int,
        capacity: Sequence[int],
        util_r: int,
        util_scale: float,
        weights: Sequence[float],
        record: bool,
    ) -> None:
        self.capacity = capacity
        self.util_r = util_r
        self.util_scale = util_scale
        self.weights = weights
        self.record = record
        self.state_count = [dict.fromkeys(STATES, 0) for _ in range(queues)]
        self.held = [[0] * resources for _ in range(queues)]  # bound pods' requests
        self.running_use = [[0] * resources for _ in range(queues)]  # running gangs' pods'
        self.waiting = [[0] * resources for _ in range(queues)]  # pods still needing a node
        self.dirty = True
        self.samples: list[Sample] = []
        self.integral_util = 0.0
        self.integral_alloc = 0.0
        self.integral_fair = 0.0
        self._last_sample_time: float | None = None
        self._last_values = (0.0, 0.0, 0.0)
        self.integrals_at_progress = (0.0, 0.0, 0.0)

    def set_waiting(self, record: GangRecord, pods: int) -> None:
        """``record`` has ``pods`` pods that still need a node: those of the gang at a size
        (every pod set's, `GangRecord.set_sizes`), or none (0)."""
        if record.sets:
            sizes = record.set_sizes(pods) if pods else (0,) * len(record.sets)
            for part, count in zip(record.sets, sizes, strict=True):
                self.set_waiting_in(record, part, count)
            return
        delta = pods - record.waiting_pods
        if delta:
            vector = self.waiting[record.queue]
            for r, amount in record.request:
                vector[r] += amount * delta
            record.waiting_pods = pods

    def set_waiting_in(self, record: GangRecord, part: PodSetRecord, pods: int) -> None:
        """``record``'s pod set ``part`` has ``pods`` pods that still need a node."""
        delta = pods - part.waiting_pods
        if delta:
            vector = self.waiting[record.queue]
            for r, amount in part.request:
                vector[r] += amount * delta
            part.waiting_pods = pods
            record.waiting_pods += delta

    def hold(self, record: GangRecord, pods: int, part: PodSetRecord | None = None) -> None:
        """``pods`` more pods of ``record`` (of its pod set ``part``, for a gang of several)
        are bound (``pods`` < 0: fewer)."""
        held = self.held[record.queue]
        for r, amount in record.request if part is None else part.request:
            held[r] += amount * pods
        self.dirty = True

    def hold_none(self, record: GangRecord) -> None:
        """Every bound pod of ``record`` leaves its node."""
        if not record.sets:
            self.hold(record, -record.bound_pods)
        for part in record.sets:
            self.hold(record, -part.bound_pods, part)

    def run(self, record: GangRecord, sign: int) -> None:
        """``record``'s bound pods start (``sign`` 1) or stop (-1) counting as running."""
        running = self.running_use[record.queue]
        for request, pods in (
            ((part.request, part.bound_pods) for part in record.sets)
            if record.sets
            else ((record.request, record.bound_pods),)
        ):
            for r, amount in request:
                running[r] += sign * amount * pods

    def sample(self, now: float, last_progress: float, *, final: bool = False) -> None:
        """The cluster at ``now``, after that instant's events and decisions."""
        last = self._last_sample_time
        if last is not None and now > last:
            u, a, f = self._last_values
            dt = now - last
            self.integral_util += u * dt
            self.integral_alloc += a * dt
            self.integral_fair += f * dt
        self._last_sample_time = now
        if now == last_progress:
            # Means are taken up to the last change of state (a stuck cluster ends there).
            self.integrals_at_progress = (
                self.integral_util,
                self.integral_alloc,
                self.integral_fair,
            )
        if not self.dirty and not final:
            return
        self.dirty = False
        ur = self.util_r
        got = figures(self.running_use, self.held, self.waiting, self.capacity, ur, self.weights)
        util, alloc, error = got.utilization, got.allocation, got.fairness_error
        self._last_values = (util, alloc, error)
        if not self.record:
            return
        counts = self.state_count
        sample = Sample(
            time=now,
            utilization=util,
            allocation=alloc,
            fairness_error=error,
            pending=tuple(c[PENDING] + c[BACKING_OFF] for c in counts),
            holding=tuple(c[ADMITTED] for c in counts),
            running=tuple(c[RUNNING] for c in counts),
            usage=tuple(v[ur] / self.util_scale for v in self.held),
            share=got.shares,
            fair_share=got.fair,
        )
        if self.samples and self.samples[-1].time == now:
            self.samples[-1] = sample
        else:
            self.samples.append(sample)
