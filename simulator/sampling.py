"""The figures a simulator sample holds, from per-queue usage vectors: one computation for the
in-process engine (`simulator.engine`) and the kwok engine's timeline (`simulator.kwok_timeline`);
and the in-process engine's `Meter`, which keeps those vectors up to date as gangs change and
samples them.

Vectors are per queue, one amount per resource (the engines' resource order); `capacity` is
the cluster's total in the same order and `util` the index of the resource utilization is
measured in.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from simulator.fairness import FairnessMeter, fair_shares, instant_error, water_fill
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
    """Each queue's share of what runs of the resource shared worst (`simulator.fairness`)."""
    fair: tuple[float, ...]
    """Each queue's fair share of that resource."""
    fairness_error: float
    """How far below their fair share the queues run, summed, for that resource."""
    dominant_error: float
    """The instant error as measured before issue 33 (dominant shares added across resources)."""
    running: tuple[tuple[float, ...], ...]
    """Per queue and resource, the share of the resource's capacity its running gangs hold."""
    fair_by_resource: tuple[tuple[float, ...], ...]
    """Per queue and resource, its fair share of what runs of the resource."""


def figures(
    running_use: Sequence[Sequence[int]],
    held: Sequence[Sequence[int]],
    waiting: Sequence[Sequence[int]],
    capacity: Sequence[int],
    util: int,
    weights: Sequence[float],
    waiting_main: Sequence[Sequence[int]] | None = None,
) -> Figures:
    """A sample's figures: `running_use` per queue (pods of running gangs), `held` (every bound
    pod), `waiting` (what pending and partly bound gangs still need) and `waiting_main` (the
    same in each gang's dominant resource only; default: `waiting`)."""
    cap_u = capacity[util] if capacity and capacity[util] else 1
    utilization = sum(v[util] for v in running_use) / cap_u if capacity else 0.0
    allocation = sum(v[util] for v in held) / cap_u if capacity else 0.0
    inverse = [1.0 / cap if cap > 0 else 0.0 for cap in capacity]
    running = tuple(tuple(a * i for a, i in zip(v, inverse, strict=True)) for v in running_use)
    main = waiting if waiting_main is None else waiting_main
    demands = [
        [min(1.0, (h + w) * i) for h, w, i in zip(hv, wv, inverse, strict=True)]
        for hv, wv in zip(held, main, strict=True)
    ]
    fair = fair_shares(demands, weights, running)
    # The resource shared worst: the error, and the queues' shares of it (for the plots).
    worst, error = 0, -1.0
    for r in range(len(capacity)):
        here = sum(max(0.0, f[r] - s[r]) for f, s in zip(fair, running, strict=True))
        if here > error:
            worst, error = r, here
    dominant = [dominant_share(v, capacity) for v in running_use]
    old_demands = [
        min(1.0, dominant_share([h + w for h, w in zip(hv, wv, strict=True)], capacity))
        for hv, wv in zip(held, waiting, strict=True)
    ]
    old = water_fill(old_demands, weights, sum(dominant))
    return Figures(
        utilization,
        allocation,
        tuple(row[worst] for row in running) if capacity else (0.0,) * len(running_use),
        tuple(row[worst] for row in fair) if capacity else (0.0,) * len(running_use),
        max(error, 0.0),
        instant_error(dominant, old),
        running,
        tuple(tuple(row) for row in fair),
    )


def main_resource(request: Sequence[tuple[int, int]], capacity: Sequence[int]) -> int:
    """The index of a pod request's dominant resource ((index, amount) pairs): its largest
    share of the cluster's capacity; -1 if it asks for nothing the cluster has."""
    best, main = 0.0, -1
    for r, amount in request:
        cap = capacity[r]
        if cap > 0 and amount > 0 and amount / cap > best:
            best, main = amount / cap, r
    return main


def dominant_share(vector: Sequence[int], capacity: Sequence[int]) -> float:
    """A usage vector's largest share of capacity (its dominant share)."""
    share = 0.0
    for amount, cap in zip(vector, capacity, strict=True):
        if cap > 0 and amount > 0:
            share = max(share, amount / cap)
    return share


class UtilizationCurve:
    """The time integral of each resource's running share, at every instant the shares
    changed: the utilization of any stretch of a run, for comparing two runs over the same
    stretch (`simulator.familyrun`)."""

    __slots__ = ("_at", "_sums", "resources")

    def __init__(self, resources: Sequence[str]) -> None:
        self.resources = tuple(resources)
        self._at = array("d")  # instants
        self._sums = array("d")  # per instant, the integral of each resource up to it

    def add(self, time: float, sums: Sequence[float]) -> None:
        """The integrals up to ``time`` (after the previous instant's)."""
        self._at.append(time)
        self._sums.extend(sums)

    def mean(self, start: float, end: float) -> dict[str, float]:
        """Each resource's mean running share over [start, end]."""
        if end <= start or not self._at:
            return dict.fromkeys(self.resources, 0.0)
        low, high = self._integral(start), self._integral(end)
        return {
            name: (b - a) / (end - start)
            for name, a, b in zip(self.resources, low, high, strict=True)
        }

    def _integral(self, time: float) -> list[float]:
        width = len(self.resources)
        at = self._at
        i = bisect_right(at, time) - 1
        if i < 0:
            return [0.0] * width
        base = list(self._sums[i * width : (i + 1) * width])
        if i + 1 < len(at) and at[i + 1] > at[i]:
            # Between two instants the shares are constant: the integral grows linearly.
            after = self._sums[(i + 1) * width : (i + 2) * width]
            part = (time - at[i]) / (at[i + 1] - at[i])
            base = [a + (b - a) * part for a, b in zip(base, after, strict=True)]
        return base


class Meter:
    """The in-process engine's metrics: per queue, gangs in each state and the requests of
    bound pods (``held``), of running gangs' pods (``running_use``) and of pods still needing a
    node (``waiting``), kept as gangs change; sampled once per instant, with the time integrals
    of utilization (per resource too), allocation and the fairness errors behind the run's
    means."""

    def __init__(
        self,
        queues: int,
        resources: Sequence[str],
        capacity: Sequence[int],
        util_r: int,
        util_scale: float,
        weights: Sequence[float],
        record: bool,
    ) -> None:
        width = len(resources)
        self.capacity = capacity
        self.util_r = util_r
        self.util_scale = util_scale
        self.weights = weights
        self.record = record
        self.state_count = [dict.fromkeys(STATES, 0) for _ in range(queues)]
        self.held = [[0] * width for _ in range(queues)]  # bound pods' requests
        self.running_use = [[0] * width for _ in range(queues)]  # running gangs' pods'
        self.waiting = [[0] * width for _ in range(queues)]  # pods still needing a node
        # The same, each gang's in its dominant resource only (simulator.fairness).
        self.waiting_main = [[0] * width for _ in range(queues)]
        self._main: dict[tuple[tuple[int, int], ...], int] = {}  # request -> dominant resource
        self.dirty = True
        self.samples: list[Sample] = []
        self.fairness = FairnessMeter()
        self.curve = UtilizationCurve(resources)
        self.integral_util = 0.0
        self.integral_alloc = 0.0
        self.integral_use = [0.0] * width  # per resource, the running share's integral
        self._last_sample_time: float | None = None
        self._last: Figures | None = None
        self.integrals_at_progress: Integrals = (0.0, 0.0, (0.0, 0.0), ())
        self.over_at_progress: tuple[float, ...] = ()  # `FairnessMeter.over_fair_share` then

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
            self._wait_main(record.queue, record.request, delta)
            record.waiting_pods = pods

    def set_waiting_in(self, record: GangRecord, part: PodSetRecord, pods: int) -> None:
        """``record``'s pod set ``part`` has ``pods`` pods that still need a node."""
        delta = pods - part.waiting_pods
        if delta:
            vector = self.waiting[record.queue]
            for r, amount in part.request:
                vector[r] += amount * delta
            self._wait_main(record.queue, part.request, delta)
            part.waiting_pods = pods
            record.waiting_pods += delta

    def _wait_main(self, queue: int, request: tuple[tuple[int, int], ...], delta: int) -> None:
        r = self._main.get(request)
        if r is None:
            r = self._main[request] = main_resource(request, self.capacity)
        if r >= 0:
            amount = dict(request)[r]
            self.waiting_main[queue][r] += amount * delta

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
        got = self._last
        if last is not None and now > last and got is not None:
            dt = now - last
            self.integral_util += got.utilization * dt
            self.integral_alloc += got.allocation * dt
            use = self.integral_use
            for row in got.running:
                for r, share in enumerate(row):
                    use[r] += share * dt
            self.fairness.advance(dt, got.running, got.fair_by_resource, got.dominant_error)
            self.curve.add(now, use)
        self._last_sample_time = now
        if now == last_progress:
            # Means are taken up to the last change of state (a stuck cluster ends there).
            self.integrals_at_progress = self.integrals()
            self.over_at_progress = self.fairness.over_fair_share()
        if not self.dirty and not final and got is not None:
            return
        self.dirty = False
        ur = self.util_r
        got = self._last = figures(
            self.running_use,
            self.held,
            self.waiting,
            self.capacity,
            ur,
            self.weights,
            self.waiting_main,
        )
        if not self.record:
            return
        counts = self.state_count
        sample = Sample(
            time=now,
            utilization=got.utilization,
            allocation=got.allocation,
            fairness_error=got.fairness_error,
            pending=tuple(c[PENDING] + c[BACKING_OFF] for c in counts),
            holding=tuple(c[ADMITTED] for c in counts),
            running=tuple(c[RUNNING] for c in counts),
            usage=tuple(v[ur] / self.util_scale for v in self.held),
            share=got.shares,
            fair_share=got.fair,
            fairness_dominant=got.dominant_error,
            running_by_resource=got.running,
            fair_by_resource=got.fair_by_resource,
        )
        if self.samples and self.samples[-1].time == now:
            self.samples[-1] = sample
        else:
            self.samples.append(sample)

    def integrals(self) -> Integrals:
        """The integrals so far: utilization, allocation, the fairness errors (this measure's
        and the one before issue 33's), each resource's running share."""
        return (
            self.integral_util,
            self.integral_alloc,
            self.fairness.integrals(),
            tuple(self.integral_use),
        )


Integrals = tuple[float, float, tuple[float, float], tuple[float, ...]]
"""`Meter.integrals`."""
