"""Trace families: many traces drawn from one distribution of workloads, one per seed, so a claim
about muster is checked on shapes nobody tuned it to (`muster trace family`, replayed by
`muster sim --family`, `simulator.familyrun`).

A family trace is what a new user might try on a shared cluster: three or four weighted queues
in one cohort; one queue floods small one-pod jobs, another submits gangs of 30-60% of the
cluster, the others train elastic gangs, run GPU jobs on a tainted pool or mixed gangs;
arrivals are streams, floods at one instant and late bursts; some job groups have runtime
limits, some queues quotas (that lend: a borrowing limit idles capacity by design) or
preemption rules. `FamilySpec` holds the ranges; the same spec and seed give the same
document, and each seed's trace is named after it (`family-7`).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["ROLES", "FamilySpec", "describe", "family_document", "parse_range"]

ROLES = ("flood", "big", "train", "gpu", "mixed")
"""What a family queue submits: one-pod jobs in floods and streams; gangs of 30-60% of the
cluster; elastic training gangs; GPU jobs on the GPU pool; mixed gangs of 2-16 pods."""

_NODE_CPU = 32
_GPU_NODE_CPU = 48
_GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
_GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@dataclass(frozen=True, slots=True)
class FamilySpec:
    """The distribution one family draws its traces from (ranges are inclusive)."""

    nodes: tuple[int, int] = (40, 120)
    """CPU nodes (32 cpu, 128Gi)."""
    gpu_probability: float = 0.5
    """Chance a trace has a GPU pool (nodes of 8 GPUs, tainted half the time)."""
    gpu_nodes: tuple[int, int] = (8, 24)
    queues: tuple[int, int] = (3, 4)
    """Leaf queues, all in one cohort."""
    window: tuple[float, float] = (900.0, 2400.0)
    """Seconds over which the work arrives."""
    load: tuple[float, float] = (0.7, 1.4)
    """Offered cpu-seconds over what the CPU nodes hold during the window."""
    big_share: tuple[float, float] = (0.3, 0.6)
    """Size of the big queue's gangs, as a share of the CPU nodes."""
    quota_probability: float = 0.4
    """Chance a trace gives its queues nominal cpu quota (by weight; borrowing unbounded)."""
    preemption_probability: float = 0.3
    """Chance each queue has preemption rules."""
    limit_probability: float = 0.3
    """Chance each job group has a runtime limit (1.1-2x its runtime)."""
    half_life: str | None = None
    """`fairSharing.halfLife` of every queue (None: not set, the default instant share)."""
    ordering: str | None = None
    """`ordering.by` of every queue (None: not set, the default order by submission)."""
    borrow_within_cohort: bool = False
    """Give each queue whose drawn rules reclaim within the cohort `borrowWithinCohort:
    {policy: LowerPriority}` (no other draw changes)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_range(text: str, flag: str) -> tuple[int, int]:
    """``A-B`` or ``A`` (inclusive), with 0 <= A <= B; ValueError naming ``flag`` otherwise."""
    low, sep, high = text.partition("-")
    try:
        first = int(low)
        last = int(high) if sep else first
    except ValueError:
        raise ValueError(f"{flag}: {text!r} is not a range such as 1-50") from None
    if first < 0 or last < first:
        raise ValueError(f"{flag}: {text!r}: give FIRST-LAST with 0 <= FIRST <= LAST")
    return first, last


def family_document(spec: FamilySpec, seed: int) -> dict[str, Any]:
    """The trace document (as `simulator.trace.from_dict` reads it) of ``seed`` in the family."""
    return _Draw(spec, seed).document()


class _Draw:
    """One trace drawn from the family: the cluster, the queues and their roles, the jobs."""

    def __init__(self, spec: FamilySpec, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        self.rng = random.Random(seed)
        self.jobs: list[dict[str, Any]] = []

    def document(self) -> dict[str, Any]:
        rng, spec = self.rng, self.spec
        self.cpu_nodes = rng.randint(*spec.nodes)
        self.gpu_nodes = rng.randint(*spec.gpu_nodes) if rng.random() < spec.gpu_probability else 0
        self.tainted = self.gpu_nodes > 0 and rng.random() < 0.5
        self.window = rng.uniform(*spec.window)
        nodes: list[dict[str, Any]] = [
            {
                "count": self.cpu_nodes,
                "name": "cpu",
                "allocatable": {"cpu": str(_NODE_CPU), "memory": "128Gi", "pods": "110"},
            }
        ]
        if self.gpu_nodes:
            gpu: dict[str, Any] = {
                "count": self.gpu_nodes,
                "name": "gpu",
                "allocatable": {
                    "cpu": str(_GPU_NODE_CPU),
                    "memory": "384Gi",
                    "pods": "110",
                    "nvidia.com/gpu": "8",
                },
                "labels": {"pool": "gpu"},
            }
            if self.tainted:
                gpu["taints"] = [dict(_GPU_TAINT)]
            nodes.append(gpu)
        roles = self._roles()
        queues = self._queues(roles)
        budget = spec_load = rng.uniform(*spec.load)
        capacity = self.cpu_nodes * _NODE_CPU * self.window  # cpu-seconds in the window
        # The flood queue offers fewer cpu-seconds than the others (its jobs are many, but
        # small and short).
        parts = [
            rng.uniform(0.3, 0.8) if role == "flood" else rng.uniform(0.5, 1.5) for _, role in roles
        ]
        for (name, role), part in zip(roles, parts, strict=True):
            work = budget * capacity * part / sum(parts)
            getattr(self, f"_{role}")(name, work, queues[name])
        self._limits()
        document: dict[str, Any] = {
            "name": f"family-{self.seed}",
            "cluster": {"nodes": nodes},
            "queues": [{"name": "org"}, *(queues[name] for name, _ in roles)],
            "jobs": self.jobs,
        }
        self.summary = (
            f"seed {self.seed}: {self.cpu_nodes} cpu nodes, {self.gpu_nodes} gpu nodes"
            f"{' (tainted)' if self.tainted else ''}, window {self.window:.0f}s, load "
            f"{spec_load:.2f}, queues {', '.join(f'{n}={r}' for n, r in roles)}"
        )
        return document

    def _roles(self) -> list[tuple[str, str]]:
        """Queue names and roles: one floods, one submits big gangs, the rest draw."""
        rng = self.rng
        count = rng.randint(*self.spec.queues)
        others = ["train", "mixed"] + (["gpu"] if self.gpu_nodes else [])
        roles = ["flood", "big", *(rng.choice(others) for _ in range(count - 2))]
        rng.shuffle(roles)
        return [(f"team-{chr(ord('a') + i)}", role) for i, role in enumerate(roles)]

    def _queues(self, roles: list[tuple[str, str]]) -> dict[str, dict[str, Any]]:
        rng, spec = self.rng, self.spec
        weights = {name: rng.choice((1, 1, 2, 3)) for name, _ in roles}
        quota = rng.random() < spec.quota_probability
        cpus = _split(self._usable_cpu(roles), [weights[name] for name, _ in roles])
        queues: dict[str, dict[str, Any]] = {}
        for (name, role), cpu in zip(roles, cpus, strict=True):
            queue: dict[str, Any] = {"name": name, "parent": "org", "weight": weights[name]}
            if quota:
                nominal = {"cpu": str(cpu)}
                if self.gpu_nodes:
                    nominal["nvidia.com/gpu"] = str(self.gpu_nodes * 8 if role == "gpu" else 0)
                queue["nominal"] = nominal
            if rng.random() < spec.preemption_probability:
                queue["preemption"] = rng.choice(
                    (
                        {"reclaimWithinCohort": "Any"},
                        {"fairShare": "Reclaim"},
                        {"withinQueue": "LowerPriority"},
                        {"reclaimWithinCohort": "LowerPriority", "withinQueue": "LowerPriority"},
                    )
                )
            rules = queue.get("preemption")
            if spec.borrow_within_cohort and rules and "reclaimWithinCohort" in rules:
                rules["borrowWithinCohort"] = {"policy": "LowerPriority"}
            if spec.half_life is not None:
                queue["fairSharing"] = {"halfLife": spec.half_life}
            if spec.ordering is not None:
                queue["ordering"] = {"by": spec.ordering}
            queues[name] = queue
        return queues

    def _usable_cpu(self, roles: list[tuple[str, str]]) -> int:
        """The cpu the queues' nominal quotas split: every node some queue's jobs can use (the
        GPU pool too unless it is tainted and no queue runs GPU jobs), so that quotas lend
        capacity but never idle it: the cohort holds no more than the sum of its queues'
        nominal quotas, and the pod-level scheduler ignores quotas altogether."""
        cpu = self.cpu_nodes * _NODE_CPU
        if self.gpu_nodes and (not self.tainted or any(role == "gpu" for _, role in roles)):
            cpu += self.gpu_nodes * _GPU_NODE_CPU
        return cpu

    # --- the roles: job groups until the queue's share of the work is offered --------------

    def _add(
        self,
        queue: dict[str, Any],
        name: str,
        count: int,
        size: int,
        requests: dict[str, str],
        runtime: float,
        at: float,
        interval: float,
        **extra: Any,
    ) -> float:
        """One job group; returns the cpu-seconds it offers."""
        priority = self.rng.choice((0, 10)) if "preemption" in queue else 0
        job: dict[str, Any] = {
            "name": f"{queue['name']}-{name}-{len(self.jobs)}",
            "count": count,
            "kind": "Job",
            "queue": queue["name"],
            "size": size,
            "podRequests": requests,
            "runtime": f"{int(runtime)}s",
            "submit": {"at": f"{int(at)}s", "interval": f"{interval:g}s"},
        }
        if priority:
            job["priority"] = priority
        job.update(extra)
        self.jobs.append(job)
        return count * size * float(requests["cpu"]) * int(runtime)

    def _arrival(self) -> tuple[str, float]:
        """A pattern and its start: a stream over the window, a flood at one instant, or a
        late burst (the last third of the window)."""
        rng = self.rng
        pattern = rng.choice(("stream", "stream", "flood", "late"))
        if pattern == "late":
            return pattern, rng.uniform(0.6, 0.9) * self.window
        return pattern, rng.uniform(0.0, 0.3) * self.window if pattern == "flood" else 0.0

    def _spread(self, pattern: str, start: float, count: int) -> float:
        """The interval between a group's submissions."""
        if pattern == "stream":
            return round((self.window - start) / max(count, 1), 2)
        if pattern == "late":
            return round(self.rng.uniform(0.0, 2.0), 2)
        return 0.0

    def _flood(self, name: str, work: float, queue: dict[str, Any]) -> None:
        rng = self.rng
        while work > 0:
            cpu = rng.choice((1, 2, 4))
            runtime = rng.randint(60, 240)
            pattern, start = self._arrival()
            count = rng.randint(50, 300)
            work -= self._add(
                queue,
                "task",
                count,
                1,
                {"cpu": str(cpu), "memory": f"{2 * cpu}Gi"},
                runtime,
                start,
                self._spread(pattern, start, count),
            )

    def _big(self, name: str, work: float, queue: dict[str, Any]) -> None:
        rng = self.rng
        while work > 0:
            share = rng.uniform(*self.spec.big_share)
            whole = rng.random() < 0.5  # one pod per node of 16 cpu, or whole nodes
            size = max(2, round(share * self.cpu_nodes))
            cpu = 16 if whole else _NODE_CPU
            runtime = rng.randint(600, 1500)
            count = rng.randint(1, 3)
            at = rng.uniform(0.0, 0.7) * self.window
            work -= self._add(
                queue,
                "sim",
                count,
                size,
                {"cpu": str(cpu), "memory": "32Gi"},
                runtime,
                at,
                round(rng.uniform(60, 600)),
                onePodPerNode=True,
            )

    def _train(self, name: str, work: float, queue: dict[str, Any]) -> None:
        rng = self.rng
        while work > 0:
            size = rng.choice((4, 8, 16, 32))
            cpu = rng.choice((4, 8))
            runtime = rng.randint(120, 600)
            pattern, start = self._arrival()
            count = rng.randint(5, 40)
            extra: dict[str, Any] = {}
            if rng.random() < 0.6:
                extra["minSize"] = size // 2
                extra["elasticAfter"] = f"{rng.choice((0, 60, 300))}s"
            work -= self._add(
                queue,
                "train",
                count,
                size,
                {"cpu": str(cpu), "memory": f"{3 * cpu}Gi"},
                runtime,
                start,
                self._spread(pattern, start, count),
                **extra,
            )

    def _gpu(self, name: str, work: float, queue: dict[str, Any]) -> None:
        rng = self.rng
        # GPU jobs are few and long: their cpu is a small part of the work, so the GPUs they
        # ask for, not the cpu, bound how many the queue submits (about 1.2x the pool's time).
        gpu_work = 1.2 * self.gpu_nodes * 8 * self.window
        while gpu_work > 0 and work > 0:
            size = rng.randint(1, 4)
            gpus = rng.choice((1, 2, 4, 8))
            runtime = rng.randint(300, 1200)
            pattern, start = self._arrival()
            count = rng.randint(3, 20)
            extra: dict[str, Any] = {"nodeSelector": {"pool": "gpu"}}
            if self.tainted:
                extra["tolerations"] = [dict(_GPU_TOLERATION)]
            if gpus == 8:
                extra["onePodPerNode"] = True
            offered = self._add(
                queue,
                "gpu",
                count,
                size,
                {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": str(gpus)},
                runtime,
                start,
                self._spread(pattern, start, count),
                **extra,
            )
            work -= offered
            gpu_work -= count * size * gpus * runtime

    def _mixed(self, name: str, work: float, queue: dict[str, Any]) -> None:
        rng = self.rng
        while work > 0:
            size = rng.randint(2, 16)
            cpu = rng.choice((2, 4, 8))
            runtime = rng.randint(60, 900)
            pattern, start = self._arrival()
            count = rng.randint(3, 30)
            work -= self._add(
                queue,
                "mixed",
                count,
                size,
                {"cpu": str(cpu), "memory": f"{2 * cpu}Gi"},
                runtime,
                start,
                self._spread(pattern, start, count),
                onePodPerNode=rng.random() < 0.3,
            )

    def _limits(self) -> None:
        """Runtime limits on some job groups: 1.1-2x the runtime (a Job's
        activeDeadlineSeconds, set with some slack)."""
        rng = self.rng
        for job in self.jobs:
            if rng.random() < self.spec.limit_probability:
                runtime = int(job["runtime"].rstrip("s"))
                job["runtimeLimit"] = f"{math.ceil(runtime * rng.uniform(1.1, 2.0))}s"


def _split(total: int, weights: list[int]) -> list[int]:
    """``total`` split by ``weights`` in whole units that add up to it (largest remainder)."""
    whole = sum(weights)
    parts = [total * w // whole for w in weights]
    order = sorted(range(len(weights)), key=lambda i: -(total * weights[i] % whole))
    for i in order[: total - sum(parts)]:
        parts[i] += 1
    return parts


def describe(spec: FamilySpec, seed: int) -> str:
    """One line on what ``seed`` drew (for the trace file's header)."""
    draw = _Draw(spec, seed)
    draw.document()
    return draw.summary
