"""Synthetic burst traces: gang sizes, queues and runtimes drawn from a seeded RNG, so the same
spec gives the same trace. `muster trace burst` writes one (muster/commands/trace.py) and
`muster bench sim` replays one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class BurstSpec:
    """What `muster trace burst` generates."""

    jobs: int = 100
    sizes: tuple[int, ...] = (1, 4, 16)
    size_weights: tuple[float, ...] | None = None
    queues: tuple[str, ...] = ("default",)
    queue_weights: tuple[float, ...] | None = None
    nodes: int = 100
    allocatable: tuple[tuple[str, str], ...] = (("cpu", "8"), ("memory", "32Gi"), ("pods", "110"))
    pod_requests: tuple[tuple[str, str], ...] = (("cpu", "6"), ("memory", "20Gi"))
    runtime: tuple[float, float] = (60.0, 600.0)
    window: float = 0.0
    kind: str = "MiniCluster"
    one_pod_per_node: bool = True
    seed: int = 0
    name: str = "burst"


def burst_document(spec: BurstSpec) -> dict[str, Any]:
    """A trace document (as `simulator.trace.from_dict` reads it) for a synthetic burst.

    Submission times are whole seconds drawn uniformly from [0, window]; runtimes are whole
    seconds drawn uniformly from the runtime range. Jobs with the same queue, size, runtime and
    submission second share one job group.
    """
    rng = random.Random(spec.seed)
    groups: dict[tuple[str, int, int, int], int] = {}
    low, high = int(spec.runtime[0]), int(spec.runtime[1])
    for _ in range(spec.jobs):
        size = rng.choices(spec.sizes, weights=spec.size_weights)[0]
        queue = rng.choices(spec.queues, weights=spec.queue_weights)[0]
        runtime = rng.randint(low, high) if high > low else low
        at = rng.randint(0, int(spec.window)) if spec.window > 0 else 0
        key = (queue, size, runtime, at)
        groups[key] = groups.get(key, 0) + 1
    requests = dict(spec.pod_requests)
    jobs = []
    # Jobs share the values they have in common (the trace reader only reads them): a burst of
    # a million jobs is built in memory before it is read.
    runtimes: dict[int, str] = {}
    submits: dict[int, dict[str, str]] = {}
    for n, ((queue, size, runtime, at), count) in enumerate(sorted(groups.items(), key=_by_time)):
        spelled = runtimes.get(runtime)
        if spelled is None:
            spelled = runtimes[runtime] = f"{runtime}s"
        submit = submits.get(at)
        if submit is None:
            submit = submits[at] = {"at": f"{at}s", "interval": "0s"}
        jobs.append(
            {
                "name": f"{queue}-s{size}-{n}",
                "count": count,
                "kind": spec.kind,
                "queue": queue,
                "size": size,
                "minSize": size,
                "podRequests": requests,
                "onePodPerNode": spec.one_pod_per_node,
                "runtime": spelled,
                "submit": submit,
            }
        )
    weights = spec.queue_weights or (1.0,) * len(spec.queues)
    return {
        "name": spec.name,
        "cluster": {"nodes": [{"count": spec.nodes, "allocatable": dict(spec.allocatable)}]},
        "queues": [{"name": q, "weight": w} for q, w in zip(spec.queues, weights, strict=True)],
        "jobs": jobs,
    }


def _by_time(item: tuple[tuple[str, int, int, int], int]) -> tuple[int, str, int, int]:
    (queue, size, runtime, at), _ = item
    return (at, queue, size, runtime)
