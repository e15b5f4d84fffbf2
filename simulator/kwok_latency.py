"""How long the control plane takes from a gang's admission to its run, on kwok: wall seconds
from the admission to all its pods created, all bound, ``minSize`` Running (as the engine's
looks saw them), the run started by the gang runner, and the Job's ``status.ready`` reaching
``minSize`` (what muster's controller reads as "running"). The marks of the current admission
live in each gang's `Seen`; the figures are p50, p95 and max over admissions.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from simulator.kwok_records import Seen, count
from simulator.records import GangRecord

FIGURES = (
    "admitted_to_created",
    "admitted_to_bound",
    "admitted_to_running",
    "admitted_to_started",
    "admitted_to_job_ready",
)


class AdmitLatency:
    """Marks of each gang's current admission, and the latencies they give."""

    def __init__(self) -> None:
        self.latencies: dict[str, list[float]] = defaultdict(list)  # wall seconds, per gang

    def admitted(self, seen: Seen, wall: float) -> None:
        """A new admission at ``wall``: its marks start over."""
        seen.admitted_wall = wall
        seen.created_wall = seen.bound_wall = seen.running_wall = None

    def pods(self, record: GangRecord, seen: Seen, created: int, wall: float) -> None:
        """What this look saw of the admitted gang's pods, before its run began."""
        if seen.admitted_wall is not None and seen.run_started is None:
            target = record.admitted_size or record.gang.size
            if seen.created_wall is None and created >= target:
                seen.created_wall = wall
            if seen.bound_wall is None and seen.bound >= target:
                seen.bound_wall = wall
            if seen.running_wall is None and seen.running >= record.gang.min:
                seen.running_wall = wall

    def run_started(self, seen: Seen, started: float) -> None:
        """The gang runner started the admitted gang's run at ``started`` (wall)."""
        admitted_wall = seen.admitted_wall
        if admitted_wall is None:
            return
        self.latencies["admitted_to_started"].append(started - admitted_wall)
        for name, mark in (
            ("created", seen.created_wall),
            ("bound", seen.bound_wall),
            ("running", seen.running_wall),
        ):
            if mark is not None:
                self.latencies[f"admitted_to_{name}"].append(mark - admitted_wall)

    def job_ready(
        self,
        record: GangRecord,
        seen: Seen,
        admitted: str | None,
        status: Mapping[str, Any],
        wall: float,
    ) -> None:
        """The admitted_to_job_ready latency: when the Job first counted minSize ready pods."""
        if admitted is None:
            seen.job_ready_seen = False
        elif not seen.job_ready_seen and seen.admitted_wall is not None:
            ready = count(str(status.get("ready") or 0)) + count(str(status.get("succeeded") or 0))
            if ready >= record.gang.min:
                seen.job_ready_seen = True
                self.latencies["admitted_to_job_ready"].append(wall - seen.admitted_wall)

    def figures(self) -> dict[str, dict[str, float]]:
        """p50, p95, max and count of each latency, over admissions (wall seconds)."""
        out: dict[str, dict[str, float]] = {}
        for name in FIGURES:
            values = sorted(self.latencies.get(name, []))
            if values:
                out[name] = {
                    "p50": round(values[len(values) // 2], 3),
                    "p95": round(values[min(len(values) - 1, int(len(values) * 0.95))], 3),
                    "max": round(values[-1], 3),
                    "n": len(values),
                }
        return out
