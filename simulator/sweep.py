"""Capacity planning: replays one trace on clusters of several sizes (in parallel processes) and
finds the smallest cluster that meets a service-level objective. The command line is
muster/commands/sweep.py.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

METRICS: dict[str, tuple[str, bool]] = {
    # name -> (summary key, value is a duration)
    "p50_wait": ("wait_p50_s", True),
    "p95_wait": ("wait_p95_s", True),
    "max_wait": ("wait_max_s", True),
    "mean_wait": ("wait_mean_s", True),
    "makespan": ("makespan_s", True),
    "utilization": ("utilization_mean", False),
    "fairness_error": ("fairness_error", False),
    "stuck": ("stuck_gangs", False),
    "failed": ("failed", False),
    "evictions": ("evictions", False),
}
OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
    "<": operator.lt,
    ">": operator.gt,
}
_SLO_RE = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|>=|==|<|>)\s*(\S+)\s*$")


@dataclass(frozen=True, slots=True)
class Objective:
    """One SLO clause: `metric op value`, e.g. p95_wait <= 600 s."""

    metric: str
    op: str
    value: float
    text: str

    def holds(self, summary: dict[str, Any]) -> bool:
        actual = summary.get(METRICS[self.metric][0])
        if actual is None:  # e.g. no gang started, or makespan of a stuck run
            return False
        return OPERATORS[self.op](float(actual), self.value)


def parse_objective(text: str) -> Objective:
    from simulator.trace import TraceError, parse_duration

    match = _SLO_RE.match(text)
    if match is None:
        raise ValueError(f"--slo {text!r}: write METRIC OP VALUE, e.g. 'p95_wait<=10m'")
    metric, op, raw = match.groups()
    if metric not in METRICS:
        raise ValueError(
            f"--slo {text!r}: unknown metric {metric!r}; use one of: {', '.join(METRICS)}"
        )
    if METRICS[metric][1]:
        try:
            value = parse_duration(raw, f"--slo {text!r}")
        except TraceError as exc:
            raise ValueError(str(exc)) from None
    else:
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"--slo {text!r}: {raw!r} is not a number") from None
    return Objective(metric, op, value, text)


def parse_sizes(text: str) -> list[int]:
    """`50:400:25` (start:stop:step, stop included) or `50,100,200`."""
    try:
        if ":" in text:
            parts = [int(p) for p in text.split(":")]
            if len(parts) not in (2, 3):
                raise ValueError
            start, stop = parts[0], parts[1]
            step = parts[2] if len(parts) == 3 else 1
            if step < 1 or stop < start:
                raise ValueError
            sizes = list(range(start, stop + 1, step))
        else:
            sizes = sorted({int(p) for p in text.split(",") if p.strip()})
    except ValueError:
        raise ValueError(
            f"--nodes {text!r}: give START:STOP:STEP (e.g. 50:400:25) or a list (50,100,200)"
        ) from None
    if not sizes or sizes[0] < 1:
        raise ValueError(f"--nodes {text!r}: sizes must be at least 1")
    return sizes


def scale_counts(counts: Sequence[int], total: int) -> list[int]:
    """Node-group counts scaled to `total` nodes, in proportion (largest remainder), each >= 1."""
    if len(counts) > total:
        raise ValueError(f"{total} nodes cannot hold {len(counts)} node groups of at least 1 node")
    whole = sum(counts)
    exact = [c * total / whole for c in counts]
    scaled = [max(1, math.floor(x)) for x in exact]
    order = sorted(range(len(counts)), key=lambda i: exact[i] - math.floor(exact[i]), reverse=True)
    i = 0
    while sum(scaled) < total:
        scaled[order[i % len(order)]] += 1
        i += 1
    while sum(scaled) > total:
        j = max(range(len(scaled)), key=lambda k: scaled[k])
        scaled[j] -= 1
    return scaled


def _run_one(job: tuple[str | None, str | None, int, str, int, str]) -> dict[str, Any]:
    """Worker: one cluster size. Runs in a separate process."""
    from dataclasses import replace

    from simulator.engine import EngineConfig, simulate
    from simulator.report import summarize
    from simulator.trace import load, load_jobs_csv, with_jobs

    trace_arg, jobs_csv, nodes, admission, seed, policy = job
    trace = load(trace_arg)
    if jobs_csv:
        trace = with_jobs(trace, load_jobs_csv(jobs_csv), jobs_csv)
    counts = scale_counts([g.count for g in trace.node_groups], nodes)
    groups = tuple(replace(g, count=c) for g, c in zip(trace.node_groups, counts, strict=True))
    trace = replace(trace, node_groups=groups)
    config = EngineConfig(admission=admission, seed=seed, policy=policy, record=False)  # type: ignore[arg-type]
    summary = summarize(simulate(trace, config))
    summary["nodes"] = nodes
    return summary


@dataclass(frozen=True, slots=True)
class SweepResult:
    """One summary row per size (with `meets_slo`) and where the SLO starts to hold."""

    rows: list[dict[str, Any]]
    boundary: int | None
    non_monotone: bool


def sweep(
    jobs: Sequence[tuple[str | None, str | None, int, str, int, str]],
    objectives: Sequence[Objective],
    workers: int,
) -> SweepResult:
    """Run one job per size (see `_run_one`) and judge each against every objective."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    if workers == 1 or len(jobs) == 1:
        summaries = [_run_one(job) for job in jobs]
    else:
        # spawn, not fork: a fresh interpreter per worker, safe whatever threads the parent has.
        with ProcessPoolExecutor(
            max_workers=min(workers, len(jobs)), mp_context=get_context("spawn")
        ) as pool:
            summaries = list(pool.map(_run_one, jobs))
    rows = []
    for summary in summaries:
        complete = summary["stuck_gangs"] == 0 and summary["failed"] == 0
        met = complete and all(o.holds(summary) for o in objectives)
        rows.append({**summary, "meets_slo": met})
    boundary = next((row["nodes"] for row in rows if row["meets_slo"]), None)
    non_monotone = boundary is not None and any(
        not row["meets_slo"] for row in rows if row["nodes"] > boundary
    )
    return SweepResult(rows, boundary, non_monotone)


COLUMNS = (
    ("nodes", "nodes"),
    ("wait_p50_s", "p50 wait"),
    ("wait_p95_s", "p95 wait"),
    ("wait_max_s", "max wait"),
    ("makespan_s", "makespan"),
    ("utilization_mean", "util"),
    ("stuck_gangs", "stuck"),
    ("failed", "failed"),
    ("meets_slo", "SLO"),
)


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    import csv

    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([key for key, _ in COLUMNS])
        for row in rows:
            writer.writerow(["" if row[key] is None else row[key] for key, _ in COLUMNS])


def plot(
    rows: list[dict[str, Any]],
    objectives: list[Objective],
    boundary: int | None,
    name: str,
    path: Path,
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nodes = [row["nodes"] for row in rows]
    fig, ax = plt.subplots(figsize=(8, 4.5))

    def series(key: str) -> list[float]:
        return [math.nan if row[key] is None else float(row[key]) for row in rows]

    ax.plot(nodes, series("wait_p95_s"), marker="o", label="wait p95")
    ax.plot(nodes, series("wait_p50_s"), marker=".", label="wait p50")
    for objective in objectives:
        if METRICS[objective.metric][1] and "wait" in objective.metric:
            ax.axhline(objective.value, color="red", linestyle=":", label=f"SLO {objective.text}")
    stuck = [row["nodes"] for row in rows if row["stuck_gangs"]]
    if stuck:
        ax.scatter(stuck, [0] * len(stuck), marker="x", color="black", label="stuck gangs")
    if boundary is not None:
        ax.axvline(
            boundary, color="green", linestyle="--", label=f"smallest meeting SLO: {boundary}"
        )
    ax.set_xlabel("nodes")
    ax.set_ylabel("wait (s)")
    ax.grid(alpha=0.3)
    right = ax.twinx()
    right.plot(nodes, series("utilization_mean"), color="gray", marker="s", label="utilization")
    right.set_ylabel("utilization mean")
    right.set_ylim(0, 1.05)
    lines = ax.get_legend_handles_labels()
    more = right.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize="small", loc="upper right")
    ax.set_title(f"muster sweep: {name}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
