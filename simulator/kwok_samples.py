"""The samples of a kwok replay: at every look that saw a change, the per-queue usage vectors
of what the engine saw (bound pods, running gangs' pods, what pending and partly bound gangs
still need) turned into the same figures the in-process engine samples
(`simulator.sampling.figures`), and the time means over a span of them.

The resources are the in-process engine's: everything nodes offer or pods ask for, "pods" one
per pod when nodes declare it, utilization measured in cpu when the cluster has any.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

from policies import Gang
from simulator.fairness import FairnessMeter
from simulator.kwok_records import Seen
from simulator.records import (
    ADMITTED,
    BACKING_OFF,
    FAILED,
    FINISHED,
    PENDING,
    RUNNING,
    STUCK,
    WAITING,
    GangRecord,
    Sample,
)
from simulator.sampling import figures, main_resource
from simulator.trace import Trace


class Means(NamedTuple):
    """A replay's time means over its span (`ReplaySamples.means`)."""

    utilization: float
    allocation: float
    fairness_error: float
    fairness_dominant: float
    over_fair_share: tuple[float, ...]
    """Per queue (`FairnessMeter.over_fair_share`); empty when no sample covers the span."""


class ReplaySamples:
    """The replay's resources, its samples, and their time means."""

    def __init__(self, trace: Trace, none: bool) -> None:
        """``none``: no gang admission (an admitted gang's need is then its whole size)."""
        tree = trace.queue_tree()
        self.weights = [tree[name].weight for name in tree.leaves]
        self.none = none
        nodes = trace.nodes()
        names: list[str] = []
        for node in nodes:
            names.extend(r for r in node.allocatable if r not in names)
        for group in trace.jobs:
            names.extend(r for r in group.pod_requests if r not in names)
        self.resources = tuple(names)
        self.r_index = r_index = {name: i for i, name in enumerate(names)}
        self.capacity = [sum(max(n.allocatable[r] - n.used[r], 0) for n in nodes) for r in names]
        cpu = r_index.get("cpu")
        self.util_r = cpu if cpu is not None and self.capacity[cpu] else 0
        self.util_scale = 1000.0 if names and names[self.util_r] == "cpu" else 1.0
        self.counts_pods = "pods" in r_index and any(n.allocatable["pods"] for n in nodes)
        self.samples: list[Sample] = []

    def request(self, gang: Gang) -> tuple[tuple[int, int], ...]:
        """One pod of ``gang``: (resource index, amount), non-zero only."""
        vector = [gang.pod_requests[r] for r in self.resources]
        if self.counts_pods:
            pods = self.r_index["pods"]
            vector[pods] = max(vector[pods], 1)
        return tuple((i, a) for i, a in enumerate(vector) if a)

    @property
    def utilization_resource(self) -> str:
        return self.resources[self.util_r] if self.resources else "cpu"

    def sample(
        self, now: float, gangs: Sequence[GangRecord], seen: Sequence[Seen], queues: int
    ) -> None:
        """The cluster at ``now``, as this look saw it; a look no later than the last sample
        replaces it (keeping its time)."""
        nr = len(self.resources)
        held = [[0] * nr for _ in range(queues)]
        running_use = [[0] * nr for _ in range(queues)]
        waiting = [[0] * nr for _ in range(queues)]
        waiting_main = [[0] * nr for _ in range(queues)]
        pending = [0] * queues
        holding = [0] * queues
        running = [0] * queues
        for record in gangs:
            q, state, bound = record.queue, record.state, seen[record.index].bound
            if state in (WAITING, FINISHED, FAILED, STUCK):
                continue
            if state in (PENDING, BACKING_OFF):
                pending[q] += 1
                need = record.gang.size
            elif state == ADMITTED:
                holding[q] += 1
                target = record.admitted_size if not self.none else record.gang.size
                need = max((target or record.gang.size) - bound, 0)
            else:
                running[q] += 1
                need = 0
            main = main_resource(record.request, self.capacity)
            for r, amount in record.request:
                held[q][r] += amount * bound
                waiting[q][r] += amount * need
                if r == main:
                    waiting_main[q][r] += amount * need
                if state == RUNNING:
                    running_use[q][r] += amount * bound
        cap = self.capacity
        ur = self.util_r
        got = figures(running_use, held, waiting, cap, ur, self.weights, waiting_main)
        sample = Sample(
            time=now,
            utilization=got.utilization,
            allocation=got.allocation,
            fairness_error=got.fairness_error,
            pending=tuple(pending),
            holding=tuple(holding),
            running=tuple(running),
            usage=tuple(v[ur] / self.util_scale for v in held) if cap else (0.0,) * queues,
            share=got.shares,
            fair_share=got.fair,
            fairness_dominant=got.dominant_error,
            running_by_resource=got.running,
            fair_by_resource=got.fair_by_resource,
        )
        samples = self.samples
        if samples and samples[-1].time >= now:
            samples[-1] = dataclasses.replace(sample, time=samples[-1].time)
        else:
            samples.append(sample)

    def means(self, start: float, end: float) -> Means:
        """Time means over [start, end] of the step functions the samples describe:
        utilization, allocation, the fairness errors (`simulator.fairness`, and as before
        issue 33) and each queue's `FairnessMeter.over_fair_share`, as the in-process engine
        takes them (`simulator.sampling`)."""
        span = end - start
        if span <= 0:
            return Means(0.0, 0.0, 0.0, 0.0, ())
        totals = [0.0, 0.0]
        fairness: FairnessMeter | None = None
        samples = self.samples
        for i, sample in enumerate(samples):
            left = max(sample.time, start)
            right = min(samples[i + 1].time if i + 1 < len(samples) else end, end)
            if right <= left:
                continue
            if fairness is None:
                fairness = FairnessMeter()
            totals[0] += sample.utilization * (right - left)
            totals[1] += sample.allocation * (right - left)
            fairness.advance(
                right - left,
                sample.running_by_resource,
                sample.fair_by_resource,
                sample.fairness_dominant,
            )
        if fairness is None:
            return Means(totals[0] / span, totals[1] / span, 0.0, 0.0, ())
        fair, dominant = fairness.integrals()
        over = fairness.over_fair_share()
        return Means(totals[0] / span, totals[1] / span, fair / span, dominant / span, over)
