"""The figures of a kwok replay itself, for the benches (`muster bench kwok`) and the report:
CPU seconds of every process it involves (this engine, muster, the control-plane components,
an outside controller), muster's API writes per admission, looks at the cluster, how late the
creates went out, gang runs and the latency from admission to run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulator.controlplane.cluster import LocalCluster
from simulator.controlplane.processes import cpu_seconds as process_cpu
from simulator.kwok_external import ControllerProcess
from simulator.kwok_muster import KwokMuster


def cpu_seconds(
    muster: KwokMuster | None,
    controllers: Sequence[ControllerProcess],
    cluster: LocalCluster | None,
) -> dict[str, float]:
    """CPU seconds used so far by this process, muster and each control-plane component
    (those we started), and each `--controller-pid` process that is still there, for figures
    measured on a shared machine."""
    out = {"engine": time.process_time()}
    if muster is not None:
        # `muster run` serves the webhook from a child process: count both.
        out["muster"] = _tree_cpu(muster.pid)
    for controller in controllers:
        if Path(f"/proc/{controller.pid}").exists():
            out[controller.label] = _tree_cpu(controller.pid)
    if cluster is not None:
        for record in cluster.records():
            out[record.component] = process_cpu(record.pid) or 0.0
    return out


def difference(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    """What grew from ``before`` to ``after``, by key."""
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


def replay_figures(
    *,
    looks: int,
    look_seconds: float,
    lags: Sequence[float],
    runs: int,
    second_wave_pods: int,
    latency: dict[str, dict[str, float]],
    wall_seconds: float,
    cpu_before: dict[str, float],
    cpu_after: dict[str, float],
    writes: dict[str, float],
) -> dict[str, Any]:
    """One replay's figures: looks, submission lag, gang runs, latencies, CPU per process,
    muster's writes in all and per admission (``writes`` holds its admissions as
    ``admitted``)."""
    lags = sorted(lags)
    writes = dict(writes)
    admitted = writes.pop("admitted", 0.0)
    return {
        "looks": looks,
        "look_s_mean": round(look_seconds / looks, 4) if looks else None,
        "submit_lag_p50_s": round(lags[len(lags) // 2], 3) if lags else None,
        "submit_lag_max_s": round(lags[-1], 3) if lags else None,
        "gang_runs": runs,
        "second_wave_pods": second_wave_pods,
        "latency_wall_s": latency,
        "replay_wall_s": round(wall_seconds, 3),
        "cpu_s": {
            name: round(cpu_after[name] - cpu_before.get(name, 0.0), 2) for name in cpu_after
        },
        "loadavg_1m_end": round(os.getloadavg()[0], 2),
        "muster_writes": {kind: int(n) for kind, n in sorted(writes.items())},
        "muster_writes_per_admission": (
            {kind: round(n / admitted, 2) for kind, n in sorted(writes.items())}
            if admitted
            else None
        ),
    }


def _tree_cpu(pid: int) -> float:
    """CPU seconds of a process and its live children (a webhook or worker child)."""
    return (process_cpu(pid) or 0.0) + sum(process_cpu(c) or 0.0 for c in _children(pid))


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(c) for c in text.split()]
