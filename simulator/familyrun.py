"""`muster sim --family DIR`: replay every trace of a family (`muster trace family`, whose
distribution is `simulator.family`) with and without gang admission, in parallel worker
processes, and say per figure on how many traces muster is at least as good as the pod-level
scheduler (`none`), and the worst trace with its seed.

"At least as good" compares the figures `simulator.report.summarize` rounds (docs/simulator.md,
*Outputs*): lower is better for clogs, stuck and failed gangs, makespan, waits and the fairness
error, higher for utilization. Makespan is compared only where `none` finishes every gang (it
can end sooner by failing gangs on their runtime limits); a wait figure only where both started
a gang. Per-queue p95 waits are counted as queue-trace pairs, muster within 10% of `none`'s:
once over the gangs that started (`wait_p95_s`), once over every gang (`wait_p95_all_s`), a gang
that never started counted by how long it had waited when it failed or the run ended. The first
leaves out the gangs a run failed or left waiting: `none` fails gangs on their runtime limits
while their pods wait (a Job's deadline counts from its creation). A last count keeps the pairs
of queues `none` did not favour: ran, on the mean over the time they ran or were owed a share,
at most the fairness goal above their fair share in the resource where most (`over_fair_share`);
a queue `none` gave more than its share waits less there than a fair scheduler can let it.

Utilization is compared over the same stretch of time for both, from the first submission to
the end of the run that ends first, and resource by resource (`utilization_common`): each run's
own mean covers its own span, and a run that ends sooner by failing gangs (or, stuck, with no
event left) leaves out the work it never did while the other's mean counts it, spread over the
longer run; and on a GPU trace the GPUs are what matters, not only the CPU.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

__all__ = [
    "FAIRNESS_GOAL",
    "P95_SLACK",
    "ROWS",
    "FamilyReport",
    "Row",
    "family_traces",
    "json_line",
    "judge",
    "replay_family",
    "table",
    "write_family",
]

P95_SLACK = 0.10
"""A queue's p95 wait under muster counts as good when at most this much above `none`'s."""

FAIRNESS_GOAL = 0.05
"""Issue 33's goal for muster's fairness error on every trace (counted besides the rows)."""


@dataclass(frozen=True, slots=True)
class Row:
    """One figure of the family table: its summary key, label, and which way is better."""

    key: str
    label: str
    lower: bool = True
    duration: bool = False


ROWS: tuple[Row, ...] = (
    Row("clogs", "clogs"),
    Row("stuck_gangs", "stuck gangs"),
    Row("failed", "failed gangs"),
    Row("makespan_s", "makespan (s)", duration=True),
    Row("utilization_mean", "utilization mean (own span)", lower=False),
    Row("utilization_common", "utilization, same window, every resource", lower=False),
    Row("wait_mean_s", "wait mean (s)", duration=True),
    Row("wait_p50_s", "wait p50 (s)", duration=True),
    Row("wait_p95_s", "wait p95 (s)", duration=True),
    Row("wait_max_s", "wait max (s)", duration=True),
    Row("fairness_error", "fairness error"),
    Row("fairness_error_by_resource", "fairness error, per resource"),
)


def family_traces(folder: Path) -> list[Path]:
    """The traces of a family folder (its `.yaml` files), in seed order."""
    if not folder.is_dir():
        raise ValueError(f"--family {folder}: not a folder; write one with muster trace family")
    paths = sorted(folder.glob("*.yaml"), key=_seed_order)
    if not paths:
        raise ValueError(
            f"--family {folder}: no .yaml trace in it; muster trace family writes them"
        )
    return paths


def _seed_order(path: Path) -> tuple[int, str]:
    match = re.search(r"(\d+)$", path.stem)
    return (int(match.group(1)) if match else -1, path.name)


def seed_of(name: str) -> str:
    """A family trace's seed, from its name (`family-7` -> `7`); else the name."""
    match = re.search(r"-(\d+)$", name)
    return match.group(1) if match else name


Job = tuple[str, str, int, str, int, float, str]
"""One replay: trace path, admission, seed, policy, lookahead, admit interval, placement."""


def _replay(job: Job) -> dict[str, Any]:
    """Worker: one engine over one trace; its summary. Runs in a separate process."""
    from simulator.engine import EngineConfig, simulate
    from simulator.report import summarize
    from simulator.trace import load

    path, admission, seed, policy, lookahead, interval, placement = job
    trace = load(path)
    config = EngineConfig(
        admission=admission,  # type: ignore[arg-type]
        seed=seed,
        policy=policy,
        lookahead=lookahead,
        admit_interval=interval,
        record=False,
        placement=placement,  # type: ignore[arg-type]
    )
    result = simulate(trace, config)
    summary = summarize(result)
    summary["trace"] = trace.name
    summary["path"] = path
    # For `_same_window`, which takes them out again.
    summary["_window"] = (result.curve, result.first_submit, result.end)
    return summary


def _same_window(none: dict[str, Any], muster: dict[str, Any]) -> None:
    """Both runs' utilization per resource over the same stretch of time (see the module
    docstring): ``utilization_common`` and ``common_window_s`` in each summary."""
    (curve_a, start, end_a), (curve_b, _, end_b) = none.pop("_window"), muster.pop("_window")
    end = min(end_a, end_b)
    for summary, curve in ((none, curve_a), (muster, curve_b)):
        summary["common_window_s"] = round(end - start, 3)
        summary["utilization_common"] = {
            name: round(value, 4)
            for name, value in curve.mean(start, end).items()
            if name != "pods" and name in (summary.get("utilization_by_resource") or {})
        }


def replay_family(
    paths: Sequence[Path],
    *,
    seed: int = 0,
    policy: str = "drf",
    lookahead: int = 1000,
    admit_interval: float = 0.0,
    placement: str = "pinned",
    workers: int = 1,
    done: Callable[[int, int], None] | None = None,
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(none's summary, muster's summary) of each trace, in the order of ``paths``."""
    jobs: list[Job] = [
        (str(path), admission, seed, policy, lookahead, admit_interval, placement)
        for path in paths
        for admission in ("none", "muster")
    ]
    summaries: list[dict[str, Any]] = []
    if workers <= 1:
        for job in jobs:
            summaries.append(_replay(job))
            if done is not None:
                done(len(summaries), len(jobs))
    else:
        # spawn, not fork: a fresh interpreter per worker, safe whatever threads the parent has.
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
            for summary in pool.map(_replay, jobs):
                summaries.append(summary)
                if done is not None:
                    done(len(summaries), len(jobs))
    pairs = [(summaries[i], summaries[i + 1]) for i in range(0, len(summaries), 2)]
    for none, muster in pairs:
        _same_window(none, muster)
    return pairs


@dataclass(slots=True)
class Verdict:
    """One row of the family table: traces compared, those where muster is at least as good,
    and the worst trace for muster (its seed and both figures)."""

    row: Row
    compared: int = 0
    good: int = 0
    worst: tuple[float, str, Any, Any] | None = None  # (badness, seed, none, muster)
    muster_worst: tuple[Any, str] | None = None  # muster's own worst figure and its seed


@dataclass(slots=True)
class FamilyReport:
    """The family table (`Verdict` per row), the per-queue p95 pairs, and every trace's figures."""

    verdicts: list[Verdict]
    pairs: int
    pairs_good: int
    worst_pair: tuple[float, str, str, Any, Any] | None  # (ratio, seed, queue, none, muster)
    traces: list[dict[str, Any]] = field(default_factory=list)
    fair_traces: int = 0  # traces with a fairness error for muster
    fair_good: int = 0  # those where it is at most FAIRNESS_GOAL
    fair_by_resource_good: int = 0  # traces where the per-resource error is within the goal
    pairs_all: int = 0  # queue-trace pairs by the p95 of every gang's wait (`wait_p95_all_s`)
    pairs_all_good: int = 0  # those where muster is within P95_SLACK
    pairs_unfavoured: int = 0  # of those, queues `none` ran at most FAIRNESS_GOAL above share
    pairs_unfavoured_good: int = 0


def _badness(row: Row, none: Any, muster: Any) -> float:
    """How much worse muster is than none on ``row`` (<= 0: at least as good); figures per
    resource (dicts): on the resource where it is worst."""
    if isinstance(none, dict):
        return max(
            (float(none[name]) - float(muster.get(name, 0.0)) for name in none),
            default=0.0,
        )
    a, b = float(none), float(muster)
    if row.duration:
        return (b - a) / max(a, 1.0)
    return b - a if row.lower else a - b


def judge(results: Sequence[tuple[dict[str, Any], dict[str, Any]]]) -> FamilyReport:
    """The family table of ``results`` (see the module docstring)."""
    verdicts = [Verdict(row) for row in ROWS]
    report = FamilyReport(verdicts, 0, 0, None)
    for none, muster in results:
        seed = seed_of(muster["trace"])
        report.traces.append(
            {"seed": seed, "trace": muster["trace"], "none": none, "muster": muster}
        )
        for verdict in verdicts:
            _compare(verdict, none, muster, seed)
        fairness = muster.get("fairness_error")
        if fairness is not None:
            report.fair_traces += 1
            report.fair_good += fairness <= FAIRNESS_GOAL
        by_resource = muster.get("fairness_error_by_resource")
        if by_resource is not None:
            report.fair_by_resource_good += by_resource <= FAIRNESS_GOAL
        for queue, stats in muster["queues"].items():
            a, b = none["queues"][queue]["wait_p95_s"], stats["wait_p95_s"]
            if a is not None or b is not None:
                report.pairs += 1
                ratio = _p95_ratio(a, b)
                report.pairs_good += ratio <= P95_SLACK
                if report.worst_pair is None or ratio > report.worst_pair[0]:
                    report.worst_pair = (ratio, seed, queue, a, b)
            a, b = none["queues"][queue].get("wait_p95_all_s"), stats.get("wait_p95_all_s")
            if a is not None and b is not None:
                within = _p95_ratio(a, b) <= P95_SLACK
                report.pairs_all += 1
                report.pairs_all_good += within
                favoured = none["queues"][queue].get("over_fair_share")
                if favoured is not None and favoured <= FAIRNESS_GOAL:
                    report.pairs_unfavoured += 1
                    report.pairs_unfavoured_good += within
    return report


def _p95_ratio(none: float | None, muster: float | None) -> float:
    """How much longer muster's p95 wait is than none's, relative (inf: muster started none)."""
    if muster is None:
        return math.inf
    if none is None:
        return -math.inf
    return (muster - none) / max(none, 1.0)


def _compare(verdict: Verdict, none: dict[str, Any], muster: dict[str, Any], seed: str) -> None:
    """One trace on one row of the table."""
    row = verdict.row
    a, b = none.get(row.key), muster.get(row.key)
    own = b if b is not None else math.inf
    if not isinstance(own, dict) and (
        verdict.muster_worst is None or _worse(row, own, verdict.muster_worst[0])
    ):  # (per resource, muster's own worst says nothing: GPUs nobody asks for stay idle)
        verdict.muster_worst = (own, seed)
    if row.key == "makespan_s" and (none["stuck_gangs"] or none["failed"]):
        return  # none ended sooner by failing or leaving gangs: not comparable
    if a is None and b is None:
        return
    verdict.compared += 1
    if b is None:  # muster never finished or started one, none did
        badness = math.inf
    elif a is None:
        badness = -math.inf
    else:
        badness = _badness(row, a, b)
    if badness <= 0:
        verdict.good += 1
    if verdict.worst is None or badness > verdict.worst[0]:
        verdict.worst = (badness, seed, a, b)


def _worse(row: Row, value: float, than: float) -> bool:
    return value > than if row.lower else value < than


def table(report: FamilyReport) -> list[list[str]]:
    """Rows [figure, muster >= none, worst for muster (seed: none -> muster), muster's worst]."""
    from simulator.report import format_value

    out = []
    for verdict in report.verdicts:
        row = verdict.row
        worst = "–"
        if verdict.worst is not None and verdict.worst[0] > 0:
            _, seed, a, b = verdict.worst
            if isinstance(a, dict):  # per resource: the one where muster is worst
                name = max(a, key=lambda n: a[n] - b.get(n, 0.0))
                worst = f"seed {seed} {name}: {a[name]:.3f} -> {b.get(name, 0.0):.3f}"
            else:
                worst = f"seed {seed}: {format_value(row.key, a)} -> {format_value(row.key, b)}"
        own = "–"
        if verdict.muster_worst is not None:
            value, seed = verdict.muster_worst
            shown = None if value == math.inf else value
            own = f"{format_value(row.key, shown)} (seed {seed})"
        out.append([row.label, f"{verdict.good}/{verdict.compared}", worst, own])
    worst = "–"
    if report.worst_pair is not None and report.worst_pair[0] > P95_SLACK:
        _, seed, queue, a, b = report.worst_pair
        worst = (
            f"seed {seed} {queue}: {format_value('wait_p95_s', a)} -> "
            f"{format_value('wait_p95_s', b)}"
        )
    out.append(
        [
            f"fairness error <= {FAIRNESS_GOAL} (traces)",
            f"{report.fair_good}/{report.fair_traces}",
            "",
            "",
        ]
    )
    out.append(
        [
            f"fairness error, per resource, <= {FAIRNESS_GOAL} (traces)",
            f"{report.fair_by_resource_good}/{report.fair_traces}",
            "",
            "",
        ]
    )
    out.append(
        [
            f"queue p95 within {P95_SLACK:.0%} (pairs)",
            f"{report.pairs_good}/{report.pairs}",
            worst,
            "",
        ]
    )
    out.append(
        [
            f"queue p95 within {P95_SLACK:.0%}, every gang (pairs)",
            f"{report.pairs_all_good}/{report.pairs_all}",
            "",
            "",
        ]
    )
    out.append(
        [
            f"same, queues none ran at most {FAIRNESS_GOAL} above their share",
            f"{report.pairs_unfavoured_good}/{report.pairs_unfavoured}",
            "",
            "",
        ]
    )
    return out


def json_line(report: FamilyReport, settings: dict[str, Any]) -> dict[str, Any]:
    """The family table in one line (`muster sim --family --json`): per row, traces where
    muster is at least as good, traces compared, the worst trace's seed for muster against
    `none`, and muster's own worst figure with its seed."""
    rows: dict[str, Any] = {}
    for verdict in report.verdicts:
        own = verdict.muster_worst
        rows[verdict.row.key] = {
            "good": verdict.good,
            "compared": verdict.compared,
            "worst_seed": None
            if verdict.worst is None or verdict.worst[0] <= 0
            else verdict.worst[1],
            "muster_worst": None if own is None or own[0] == math.inf else own[0],
            "muster_worst_seed": None if own is None else own[1],
        }
    return {
        "traces": settings.get("traces"),
        "wall_s": settings.get("wall_s"),
        "rows": rows,
        "fairness_goal": FAIRNESS_GOAL,
        "fairness_within_goal": report.fair_good,
        "fairness_by_resource_within_goal": report.fair_by_resource_good,
        "queue_p95_within": report.pairs_good,
        "queue_p95_pairs": report.pairs,
        "queue_p95_all_within": report.pairs_all_good,
        "queue_p95_all_pairs": report.pairs_all,
        "queue_p95_unfavoured_within": report.pairs_unfavoured_good,
        "queue_p95_unfavoured_pairs": report.pairs_unfavoured,
        "queue_p95_worst": None
        if report.worst_pair is None or report.worst_pair[0] <= P95_SLACK
        else {"seed": report.worst_pair[1], "queue": report.worst_pair[2]},
    }


TRACE_COLUMNS = (
    "clogs",
    "stuck_gangs",
    "failed",
    "makespan_s",
    "utilization_mean",
    "wait_mean_s",
    "wait_p95_s",
    "fairness_error",
)


def write_family(report: FamilyReport, out_dir: Path, settings: dict[str, Any]) -> Path:
    """family.json (the table, the settings, every trace's summaries) and family.csv (one line
    per trace: both engines' main figures); returns family.json's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    document = {
        "settings": settings,
        "rows": {
            verdict.row.key: {
                "compared": verdict.compared,
                "muster_at_least_as_good": verdict.good,
                "worst": None
                if verdict.worst is None
                else {
                    "seed": verdict.worst[1],
                    "none": verdict.worst[2],
                    "muster": verdict.worst[3],
                },
                "muster_worst": None
                if verdict.muster_worst is None
                else {
                    "seed": verdict.muster_worst[1],
                    "value": None
                    if verdict.muster_worst[0] == math.inf
                    else verdict.muster_worst[0],
                },
            }
            for verdict in report.verdicts
        },
        "fairness": {
            "goal": FAIRNESS_GOAL,
            "traces": report.fair_traces,
            "within": report.fair_good,
            "within_by_resource": report.fair_by_resource_good,
        },
        "queue_p95": {
            "slack": P95_SLACK,
            "pairs": report.pairs,
            "within": report.pairs_good,
            "worst": None
            if report.worst_pair is None
            else dict(zip(("seed", "queue", "none", "muster"), report.worst_pair[1:], strict=True)),
            "every_gang": {"pairs": report.pairs_all, "within": report.pairs_all_good},
            "queues_none_did_not_favour": {
                "pairs": report.pairs_unfavoured,
                "within": report.pairs_unfavoured_good,
            },
        },
        "traces": report.traces,
    }
    path = out_dir / "family.json"
    path.write_text(json.dumps(document, indent=1, default=_json_number) + "\n", encoding="utf-8")
    with (out_dir / "family.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["seed", "trace", "gangs"]
            + [f"{engine}_{key}" for key in TRACE_COLUMNS for engine in ("none", "muster")]
        )
        for trace in report.traces:
            cells = [trace["seed"], trace["trace"], trace["muster"]["gangs"]]
            for key in TRACE_COLUMNS:
                for engine in ("none", "muster"):
                    value = trace[engine].get(key)
                    cells.append("" if value is None else value)
            writer.writerow(cells)
    return path


def _json_number(value: object) -> object:
    if isinstance(value, float) and math.isinf(value):
        return None
    raise TypeError(f"not JSON: {value!r}")
