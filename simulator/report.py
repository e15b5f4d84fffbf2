"""Simulation outputs: summary.json, gangs.csv, queues.csv, PNG plots and report.html.

`summarize` turns one `EngineResult` into the summary figures (defined in docs/simulator.md);
`write_outputs` writes every file for one or two engine runs of the same trace. matplotlib is
imported only inside the plotting functions (Agg backend, no display needed).
"""

from __future__ import annotations

import csv
import html
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from policies.gangstate import CSV_NAMES
from policies.history import COLUMNS, HistoryRow, cells, write_csv
from policies.percentiles import percentile
from simulator.records import (
    FAILED,
    FINISHED,
    STUCK,
    EngineResult,
    GangRecord,
    Sample,
)
from simulator.trace import POD_SETS_COLUMN, Trace, pod_sets_cell

ENGINE_LABELS = {
    "none": "none (pod-level scheduler)",
    "muster": "muster (gang admission)",
    "external": "external (outside controller)",
}


def engine_label(result: EngineResult) -> str:
    """How tables and plots name one engine run: an outside controller by its name."""
    if result.controller:
        return f"{result.controller} (outside controller)"
    return ENGINE_LABELS.get(result.admission, result.admission)


def _wait(record: GangRecord) -> float | None:
    if record.started is None:
        return None
    return record.started - record.submitted


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _wait_so_far(record: GangRecord, end: float) -> float:
    """How long ``record`` waited: to its start, or, never started, to when it failed or to the
    run's ``end`` (at least that long: the `*_all_s` figures count the gangs a run failed or
    left waiting, which the others leave out)."""
    wait = _wait(record)
    if wait is not None:
        return wait
    ended = record.ended if record.ended is not None else end
    return max(0.0, ended - record.submitted)


def _wait_stats(records: Sequence[GangRecord], end: float) -> dict[str, Any]:
    waits = [w for r in records if (w := _wait(r)) is not None]
    every = [_wait_so_far(r, end) for r in records]
    return {
        "gangs": len(records),
        "started": len(waits),
        "finished": sum(1 for r in records if r.state == FINISHED),
        "failed": sum(1 for r in records if r.state == FAILED),
        "stuck": sum(1 for r in records if r.state == STUCK),
        "wait_mean_s": _round(sum(waits) / len(waits)) if waits else None,
        "wait_p50_s": _round(percentile(waits, 50)),
        "wait_p95_s": _round(percentile(waits, 95)),
        "wait_max_s": _round(max(waits)) if waits else None,
        "wait_p95_all_s": _round(percentile(every, 95)),
    }


def _class_stats(records: Sequence[GangRecord]) -> dict[str, Any]:
    """One `class` of gangs as Kueue's benchmark sums up a workload class: the mean time from
    submission to the (last) admission and to the end, over the gangs that finished, and
    how often the class was preempted or evicted."""
    done = [r for r in records if r.state == FINISHED and r.finished is not None]
    to_admission = [r.admitted_at - r.submitted for r in done if r.admitted_at is not None]
    to_finish = [r.finished - r.submitted for r in done if r.finished is not None]
    return {
        "gangs": len(records),
        "finished": len(done),
        "admission_mean_s": _round(sum(to_admission) / len(to_admission)) if to_admission else None,
        "finish_mean_s": _round(sum(to_finish) / len(to_finish)) if to_finish else None,
        "preemptions": sum(r.preemptions for r in records),
        "evictions": sum(r.evictions for r in records),
    }


def summarize(result: EngineResult, classes: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The summary figures of one engine run (keys documented in docs/simulator.md);
    `classes` (job group name -> its `class`, `Trace.classes`) adds the figures per class."""
    gangs = result.gangs
    stuck = sum(1 for r in gangs if r.state == STUCK)
    final_times = [r.finished for r in gangs if r.finished is not None]
    final_times.extend(r.admitted_at or r.submitted for r in gangs if r.state == FAILED)
    makespan = None
    if not stuck and gangs:
        makespan = max(final_times, default=result.first_submit) - result.first_submit
    overall = _wait_stats(gangs, result.end)
    summary: dict[str, Any] = {
        "admission": result.admission,
        **({"controller": result.controller} if result.controller else {}),
        "placement": result.placement,
        "seed": result.seed,
        "gangs": len(gangs),
        "pods": sum(r.gang.size for r in gangs),
        "finished": overall["finished"],
        "failed": overall["failed"],
        "stuck_gangs": stuck,
        "admitted": sum(1 for r in gangs if r.first_admitted is not None),
        "clogs": sum(r.clogs for r in gangs),
        "evictions": sum(r.evictions for r in gangs),
        "preemptions": sum(r.preemptions for r in gangs),
        "makespan_s": _round(makespan),
        "end_s": _round(result.end - result.first_submit),
        "utilization_resource": result.utilization_resource,
        "utilization_mean": _round(result.utilization_mean, 4),
        "allocation_mean": _round(result.allocation_mean, 4),
        # The measure every earlier figure and the issues' goals use; the per-resource one
        # (issue 33, simulator/fairness.py) beside it under its own name.
        "fairness_error": _round(result.fairness_dominant, 4),
        "fairness_error_by_resource": _round(result.fairness_error, 4),
        "utilization_by_resource": {
            name: _round(value, 4) for name, value in (result.utilization_by_resource or {}).items()
        },
        "wait_mean_s": overall["wait_mean_s"],
        "wait_p50_s": overall["wait_p50_s"],
        "wait_p95_s": overall["wait_p95_s"],
        "wait_max_s": overall["wait_max_s"],
        "queues": {
            name: {
                **_wait_stats([r for r in gangs if r.queue == q], result.end),
                "over_fair_share": _round(result.over_fair_share[q], 4)
                if q < len(result.over_fair_share)
                else None,
            }
            for q, name in enumerate(result.queues)
        },
        "events": result.events,
        "plan_calls": result.plan_calls,
        "plan_s": _round(result.plan_seconds),
        # Not measured on kwok (no placement model there): null rather than a made-up 0.
        "placement_misses": result.placement_misses if result.placement is not None else None,
        "wall_s": _round(result.wall_seconds),
        "horizon_reached": result.horizon_reached,
    }
    if result.topology is not None:
        summary["topology"] = result.topology
    if classes:
        by_class: dict[str, list[GangRecord]] = {}
        for record in gangs:
            name = classes.get(record.group)
            if name:
                by_class.setdefault(name, []).append(record)
        summary["classes"] = {name: _class_stats(by_class[name]) for name in sorted(by_class)}
    return summary


def write_outputs(
    trace: Trace, results: Sequence[EngineResult], out_dir: Path, *, policy: str
) -> Path:
    """Write summary.json, gangs.csv, queues.csv, the plots and report.html; return the report."""
    out_dir.mkdir(parents=True, exist_ok=True)
    classes = trace.classes()
    summaries: dict[str, dict[str, Any]] = {r.admission: summarize(r, classes) for r in results}
    document: dict[str, Any] = {
        "trace": {
            "name": trace.name,
            "source": trace.source,
            "gangs": trace.gang_count,
            "pods": trace.pod_count,
            "nodes": trace.node_count,
            "policy": policy,
        },
        **summaries,
    }
    (out_dir / "summary.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    _write_gangs_csv(results, out_dir / "gangs.csv")
    _write_queues_csv(results, out_dir / "queues.csv")
    plots = write_plots(results, out_dir)
    report = out_dir / "report.html"
    report.write_text(_html(trace, results, summaries, plots), encoding="utf-8")
    return report


def _fmt_time(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}".rstrip("0").rstrip(".")


def gang_rows(result: EngineResult) -> list[HistoryRow]:
    """One engine run's gangs as history rows (policies/history.py), in trace seconds. Their
    `runtime` is the trace's (what the gang runs once started), so gangs.csv replays the trace
    with `muster sim --jobs-csv`."""
    return [
        HistoryRow(
            gang=r.gang.id,
            queue=r.gang.queue,
            kind=r.gang.kind,
            size=r.gang.size,
            min_size=r.gang.min,
            submitted=r.submitted,
            admitted=r.first_admitted,
            started=r.started,
            finished=r.finished,
            state=CSV_NAMES[r.state],
            requests=r.gang.pod_requests,
            evictions=r.evictions,
            preemptions=r.preemptions,
            clogs=r.clogs,
            admitted_size=r.admitted_size or None,
            reason=r.reason if r.state != FINISHED else "",
            one_pod_per_node=r.gang.one_pod_per_node,
            priority=r.gang.priority,
            engine=result.admission,
            group=r.group,
            runtime=r.runtime,
        )
        for r in result.gangs
    ]


def _write_gangs_csv(results: Sequence[EngineResult], path: Path) -> None:
    """The history's columns (policies/history.py), and a last one, `pod_sets`, when a gang
    has several pod sets: without one, the file is what it always was."""
    several = any(record.gang.others for result in results for record in result.gangs)
    with path.open("w", newline="", encoding="utf-8") as handle:
        if not several:
            write_csv((row.as_dict() for result in results for row in gang_rows(result)), handle)
            return
        writer = csv.writer(handle)
        writer.writerow((*COLUMNS, POD_SETS_COLUMN))
        for result in results:
            for record, row in zip(result.gangs, gang_rows(result), strict=True):
                writer.writerow((*cells(row.as_dict()), pod_sets_cell(record.gang)))


def _write_queues_csv(results: Sequence[EngineResult], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        usage = f"usage_{results[0].utilization_resource}" if results else "usage"
        writer.writerow(
            [
                "engine",
                "time_s",
                "queue",
                "pending",
                "holding",
                "running",
                usage,
                "share",
                "fair_share",
            ]
        )
        for result in results:
            for sample in result.samples:
                for q, name in enumerate(result.queues):
                    writer.writerow(
                        [
                            result.admission,
                            _fmt_time(sample.time),
                            name,
                            sample.pending[q],
                            sample.holding[q],
                            sample.running[q],
                            f"{sample.usage[q]:.6g}",
                            f"{sample.share[q]:.4f}",
                            f"{sample.fair_share[q]:.4f}",
                        ]
                    )


# --------------------------------------------------------------------------- plots


def write_plots(results: Sequence[EngineResult], out_dir: Path) -> list[tuple[str, str]]:
    """Write the PNG plots, one column per engine; return (file name, caption) pairs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x_end = max((_x_end(r) for r in results), default=1.0)
    figures = _Figures(plt, len(results), out_dir)
    _plot_utilization(figures, results, x_end)
    _plot_fairness(figures, results, x_end)
    _plot_pending(figures, results, x_end)
    _plot_wait_cdf(figures, results)
    _plot_incidents(figures, results, x_end)
    return figures.plots


class _Figures:
    """Makes each plot's figure (one column of axes per engine) and records its caption."""

    def __init__(self, plt: Any, columns: int, out_dir: Path) -> None:
        self.plt, self.columns, self.out_dir = plt, columns, out_dir
        self.plots: list[tuple[str, str]] = []

    def new(self, name: str, caption: str) -> tuple[Any, list[Any]]:
        fig, axes = self.plt.subplots(
            1, self.columns, figsize=(6.0 * self.columns, 3.6), squeeze=False, sharey=True
        )
        self.plots.append((name, caption))
        return fig, list(axes[0])

    def save(self, fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(self.out_dir / name, dpi=100)
        self.plt.close(fig)


def _plot_utilization(figures: _Figures, results: Sequence[EngineResult], x_end: float) -> None:
    resource = results[0].utilization_resource if results else "cpu"
    fig, axes = figures.new(
        "utilization.png",
        "Cluster utilization: share of each resource held by running gangs (solid; on a GPU "
        f"trace the GPUs are what matters) and of the {resource} held by any bound pod "
        "(dashed; the gap is capacity held by gangs that are not running).",
    )
    for ax, result in zip(axes, results, strict=True):
        times, (util, alloc) = _series(result, x_end, lambda s: (s.utilization, s.allocation))
        names = list(result.utilization_by_resource or {}) or [
            name for name in result.resources if name != "pods"
        ]
        shown = False
        for name in names:
            r = _resource_index(result, name)
            if r is None:
                continue
            _, (running, _) = _series(result, x_end, _resource_share(r))
            ax.step(times, running, where="post", label=f"{name} running")
            shown = True
        if not shown:
            ax.step(times, util, where="post", label=f"{resource} running")
        ax.step(times, alloc, where="post", linestyle="--", label=f"{resource} bound")
        ax.set_ylim(0, 1.05)
        _decorate(ax, result, "share of cluster")
    figures.save(fig, "utilization.png")


def _plot_fairness(figures: _Figures, results: Sequence[EngineResult], x_end: float) -> None:
    fig, axes = figures.new(
        "fairness.png",
        "Fairness error over time: for the resource shared worst, how far below their fair "
        "share of what runs the queues run, summed (solid; docs/simulator.md, *Fairness "
        "error*), and the measure before issue 33 (dashed: dominant shares of every resource "
        "added). The run's figure is the time mean of the solid line.",
    )
    for ax, result in zip(axes, results, strict=True):
        times, (error, old) = _series(
            result, x_end, lambda s: (s.fairness_error, s.fairness_dominant)
        )
        ax.step(times, error, where="post", label="fairness error")
        ax.step(times, old, where="post", linestyle="--", label="before issue 33")
        ax.set_ylim(0, 1.05)
        _decorate(ax, result, "error")
    figures.save(fig, "fairness.png")


def _resource_index(result: EngineResult, name: str) -> int | None:
    """The index of resource ``name`` in the samples' per-resource shares, if recorded."""
    return result.resources.index(name) if name in result.resources else None


def _resource_share(r: int) -> Callable[[Sample], tuple[float, float]]:
    def pick(sample: Sample) -> tuple[float, float]:
        share = sum(row[r] for row in sample.running_by_resource if r < len(row))
        return share, 0.0

    return pick


def _plot_pending(figures: _Figures, results: Sequence[EngineResult], x_end: float) -> None:
    fig, axes = figures.new(
        "pending.png",
        "Gangs per queue over time: pending (solid: not admitted / no pod bound) and holding "
        "(dashed: holding capacity with fewer than min pods running).",
    )
    for ax, result in zip(axes, results, strict=True):
        for q, name in enumerate(result.queues):
            times, (pending, holding) = _series(result, x_end, _queue_counts(q))
            line = ax.step(times, pending, where="post", label=f"{name} pending")[0]
            ax.step(
                times,
                holding,
                where="post",
                linestyle="--",
                color=line.get_color(),
                label=f"{name} holding",
            )
        _decorate(ax, result, "gangs")
    figures.save(fig, "pending.png")


def _plot_wait_cdf(figures: _Figures, results: Sequence[EngineResult]) -> None:
    fig, axes = figures.new(
        "wait_cdf.png",
        "Wait-time CDF per queue (wait = gang started − submitted; gangs that never started are "
        "not in the curve, so a curve ending below 1 shows the unstarted fraction).",
    )
    wait_end = max(
        (w for result in results for r in result.gangs if (w := _wait(r)) is not None),
        default=1.0,
    )
    for ax, result in zip(axes, results, strict=True):
        if all(r.started is None for r in result.gangs):
            ax.text(0.5, 0.5, "no gang started", ha="center", va="center", transform=ax.transAxes)
        for q, name in enumerate(result.queues):
            records = [r for r in result.gangs if r.queue == q]
            waits = sorted(w for r in records if (w := _wait(r)) is not None)
            if not records:
                continue
            ys = [(i + 1) / len(records) for i in range(len(waits))]
            ax.step([0.0, *waits], [0.0, *ys], where="post", label=name)
        ax.set_ylim(0, 1.05)
        ax.set_xlim(0, max(wait_end, 1.0) * 1.02)
        ax.set_xlabel("wait (s)")
        ax.set_ylabel("fraction of gangs")
        ax.set_title(engine_label(result))
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    figures.save(fig, "wait_cdf.png")


def _plot_incidents(figures: _Figures, results: Sequence[EngineResult], x_end: float) -> None:
    fig, axes = figures.new(
        "incidents.png",
        "Cumulative clogs (a gang holding capacity with fewer than min pods running past its "
        "clog timeout), evictions, preemptions and failures over time.",
    )
    for ax, result in zip(axes, results, strict=True):
        for kind in ("clog", "evict", "preempt", "fail"):
            times = [i.time for i in result.incidents if i.kind == kind]
            xs = [0.0, *times, x_end]
            ys = [0, *range(1, len(times) + 1), len(times)]
            ax.step(xs, ys, where="post", label=f"{kind} ({len(times)})")
        _decorate(ax, result, "count")
    figures.save(fig, "incidents.png")


def _queue_counts(q: int) -> Callable[[Sample], tuple[float, float]]:
    def pick(sample: Sample) -> tuple[float, float]:
        return float(sample.pending[q]), float(sample.holding[q])

    return pick


def _x_end(result: EngineResult) -> float:
    last = result.samples[-1].time if result.samples else 0.0
    return max(last, result.end, 1.0)


def _series(
    result: EngineResult, x_end: float, pick: Callable[[Sample], tuple[float, float]]
) -> tuple[list[float], tuple[list[float], list[float]]]:
    """Two step series from the samples, extended flat to x_end so engines share an x axis."""
    times = [s.time for s in result.samples]
    values = [pick(s) for s in result.samples]
    if not times:
        return [0.0, x_end], ([0.0, 0.0], [0.0, 0.0])
    times.append(x_end)
    values.append(values[-1])
    return times, ([v[0] for v in values], [v[1] for v in values])


def _decorate(ax: Any, result: EngineResult, ylabel: str) -> None:
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel(ylabel)
    title = engine_label(result)
    stuck = sum(1 for r in result.gangs if r.state == STUCK)
    if stuck:
        title += f" — {stuck} stuck"
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")


# --------------------------------------------------------------------------- tables


SUMMARY_ROWS: tuple[tuple[str, str], ...] = (
    ("gangs", "gangs"),
    ("finished", "finished"),
    ("stuck_gangs", "stuck"),
    ("failed", "failed"),
    ("makespan_s", "makespan (s)"),
    ("utilization_mean", "utilization mean"),
    ("wait_p50_s", "wait p50 (s)"),
    ("wait_p95_s", "wait p95 (s)"),
    ("wait_max_s", "wait max (s)"),
    ("clogs", "clogs"),
    ("evictions", "evictions"),
    ("placement_misses", "pods off plan"),
    ("preemptions", "preemptions"),
    ("fairness_error", "fairness error"),
    ("fairness_error_by_resource", "fairness error, per resource"),
    ("admitted", "admitted"),
    ("wall_s", "wall time (s)"),
)


def format_value(key: str, value: Any) -> str:
    if value is None:
        return "never (stuck)" if key == "makespan_s" else "–"
    if isinstance(value, float):
        if key in (
            "utilization_mean",
            "fairness_error",
            "fairness_error_by_resource",
            "allocation_mean",
            "over_fair_share",
        ):
            return f"{value:.3f}"
        return f"{value:,.1f}"
    return str(value)


CLASS_ROWS: tuple[tuple[str, str], ...] = (
    ("admission_mean_s", "to admission mean (s)"),
    ("finish_mean_s", "to finish mean (s)"),
    ("preemptions", "preemptions"),
)


def summary_rows(summaries: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """Rows [label, engine1, engine2...] for the human summary table (and, for a trace whose
    job groups have a `class`, a few rows per class)."""
    rows = [
        [label, *(format_value(key, s.get(key)) for s in summaries.values())]
        for key, label in SUMMARY_ROWS
    ]
    names = sorted({name for s in summaries.values() for name in s.get("classes") or {}})
    for name in names:
        for key, label in CLASS_ROWS:
            values = [(s.get("classes") or {}).get(name, {}).get(key) for s in summaries.values()]
            rows.append([f"{name}: {label}", *(format_value(key, v) for v in values)])
    rows.extend(topology_rows(summaries))
    return rows


TOPOLOGY_ROWS: tuple[tuple[str, str], ...] = (
    ("within_one_domain_share", "gangs within one {level}"),
    ("required_within_one_domain_share", "required gangs within one {level}"),
    ("whole_domains_free_mean", "whole {level}s free, mean"),
)


def topology_rows(summaries: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """A trace with topology levels: how many gangs ran within one domain of the measured
    level, and how many whole domains stood free on average."""
    figures = [s.get("topology") for s in summaries.values()]
    if not any(figures):
        return []
    level = next(f["level"] for f in figures if f)
    rows = []
    for key, label in TOPOLOGY_ROWS:
        cells = []
        for found in figures:
            value = None if not found else found.get(key)
            share = key.endswith("_share")
            cells.append("–" if value is None else f"{value:.0%}" if share else f"{value:.2f}")
        rows.append([label.format(level=level), *cells])
    return rows


def queue_rows(summaries: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """Rows [label, engine1, engine2...] with each queue's wait p50 / p95 / max, and how far
    above its fair share it ran, beside the overall figures of the human summary table (an
    overall p95 hides who waits, and the fairness error who gains)."""
    names: list[str] = []
    for summary in summaries.values():
        names.extend(q for q in summary.get("queues") or {} if q not in names)
    rows = []
    for name in names:
        cells = []
        for summary in summaries.values():
            stats = (summary.get("queues") or {}).get(name)
            if stats is None:
                cells.append("–")
                continue
            values = (stats.get(key) for key in ("wait_p50_s", "wait_p95_s", "wait_max_s"))
            cells.append(" / ".join("–" if v is None else f"{v:,.0f}" for v in values))
        rows.append([f"{name} wait p50/p95/max (s)", *cells])
        over = [(summary.get("queues") or {}).get(name, {}) for summary in summaries.values()]
        if any(stats.get("over_fair_share") is not None for stats in over):
            # Who a run favoured: the other side of the fairness error, queue by queue.
            rows.append(
                [
                    f"{name} above its fair share (mean)",
                    *(
                        format_value("over_fair_share", stats.get("over_fair_share"))
                        for stats in over
                    ),
                ]
            )
    return rows


def _html(
    trace: Trace,
    results: Sequence[EngineResult],
    summaries: dict[str, dict[str, Any]],
    plots: list[tuple[str, str]],
) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(engine_label(result))}</th>" for result in results)
    rows = "".join(
        "<tr>" + "".join(f"<td>{esc(cell)}</td>" for cell in row) + "</tr>"
        for row in summary_rows(summaries)
    )
    queue_rows = ""
    for name, summary in summaries.items():
        for queue, stats in summary["queues"].items():
            cells = [
                name,
                queue,
                stats["gangs"],
                stats["finished"],
                stats["stuck"],
                stats["failed"],
                format_value("wait_p50_s", stats["wait_p50_s"]),
                format_value("wait_p95_s", stats["wait_p95_s"]),
                format_value("wait_max_s", stats["wait_max_s"]),
                format_value("over_fair_share", stats.get("over_fair_share")),
            ]
            queue_rows += "<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in cells) + "</tr>"
    seed = results[0].seed if results else 0
    placement = ""
    if results and results[0].placement is not None:
        placement = f"; placement {esc(results[0].placement)} (docs/simulator.md, --placement)"
    figures = "".join(
        f'<figure><img src="{esc(name)}" alt="{esc(name)}"><figcaption>{esc(caption)}'
        "</figcaption></figure>"
        for name, caption in plots
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>muster sim: {esc(trace.name)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 1300px; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }}
img {{ max-width: 100%; }} figure {{ margin: 1.5em 0; }}
figcaption {{ color: #444; font-size: 0.9em; }}
</style></head><body>
<h1>muster sim: {esc(trace.name)}</h1>
<p>Trace <code>{esc(trace.source)}</code>: {trace.gang_count} gangs, {trace.pod_count} pods,
{trace.node_count} nodes, {len(trace.queues)} queue(s); seed {seed}{placement}.
Files: <a href="summary.json">summary.json</a>, <a href="gangs.csv">gangs.csv</a>,
<a href="queues.csv">queues.csv</a>. Definitions: docs/simulator.md.</p>
<h2>Summary</h2>
<table><tr><th>metric</th>{head}</tr>{rows}</table>
<h2>Per queue</h2>
<table><tr><th>engine</th><th>queue</th><th>gangs</th><th>finished</th><th>stuck</th>
<th>failed</th><th>wait p50 (s)</th><th>wait p95 (s)</th><th>wait max (s)</th>
<th>above its fair share (mean)</th></tr>
{queue_rows}</table>
<h2>Plots</h2>
{figures}
</body></html>
"""
