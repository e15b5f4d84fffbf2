"""`muster sim`: replay a trace in the in-process simulator and write a report.

With no TRACE it replays the shipped blog-burst trace, once without gang admission (a pod-level
scheduler, the baseline) and once with muster's planner, and writes both into one report.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulator.engine import Admission, EngineConfig, EngineResult
    from simulator.trace import Trace

EPILOG = """\
examples:
  muster sim                                   # the shipped blog-burst trace, none vs muster
  muster sim two-queues --admission muster     # another shipped trace, muster only
  muster sim my-trace.yaml --seed 7 --out out/mine
  muster sim cluster.yaml --jobs-csv jobs.csv  # cluster and queues from a trace, jobs from CSV

Trace format, CSV columns and every output: docs/simulator.md
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "trace",
        nargs="?",
        metavar="TRACE",
        help="trace file (YAML/JSON) or the name of a shipped trace (default: blog-burst)",
    )
    parser.add_argument(
        "--admission",
        choices=("muster", "none", "both"),
        default="both",
        help="muster = gang admission by policies.plan; none = pod-level scheduler only "
        "(the baseline); both = run both into one report (default)",
    )
    parser.add_argument("--seed", type=int, default=0, help="orders same-instant submissions")
    parser.add_argument("--out", type=Path, help="output folder (default: out/sim-<trace name>)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no table")
    parser.add_argument("--policy", default="drf", help="admission policy (default: drf)")
    parser.add_argument(
        "--jobs-csv",
        type=Path,
        metavar="FILE",
        help="replace the trace's jobs with a CSV job list (columns in docs/simulator.md)",
    )
    parser.add_argument(
        "--lookahead",
        type=int,
        default=1000,
        metavar="N",
        help="pending gangs per queue the planner sees each cycle, in queue order (0 = all; "
        "default 1000)",
    )
    parser.add_argument(
        "--admit-interval",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="seconds between admission cycles (default 0: plan at every decision point)",
    )
    parser.add_argument(
        "--horizon",
        type=float,
        metavar="SECONDS",
        help="stop at this simulated time; unfinished gangs are reported stuck",
    )


def run(args: argparse.Namespace) -> int:
    from simulator.engine import EngineConfig, simulate
    from simulator.trace import TraceError, load, load_jobs_csv, with_jobs

    try:
        trace = load(args.trace)
        if args.jobs_csv is not None:
            trace = with_jobs(trace, load_jobs_csv(args.jobs_csv), str(args.jobs_csv))
    except TraceError as exc:
        print(f"muster sim: {exc}", file=sys.stderr)
        return 2
    if args.lookahead < 0:
        print("muster sim: --lookahead must be 0 (all) or positive", file=sys.stderr)
        return 2
    if args.admit_interval < 0 or (args.horizon is not None and args.horizon <= 0):
        print("muster sim: --admit-interval must be >= 0 and --horizon > 0", file=sys.stderr)
        return 2
    if not _policy_known(args.policy):
        return 2
    engines: list[Admission] = ["none", "muster"] if args.admission == "both" else [args.admission]
    out_dir: Path = args.out or Path("out") / f"sim-{trace.name}"
    results: list[EngineResult] = []
    show_progress = not args.quiet and sys.stderr.isatty()
    for admission in engines:
        config = EngineConfig(
            admission=admission,
            seed=args.seed,
            policy=args.policy,
            lookahead=args.lookahead,
            admit_interval=args.admit_interval,
            horizon=args.horizon,
        )
        if show_progress:
            results.append(_with_progress(trace, config))
        else:
            results.append(simulate(trace, config))
    return _finish(trace, results, out_dir, args)


def _policy_known(name: str) -> bool:
    from policies import get_policy

    try:
        get_policy(name)
    except (KeyError, ValueError) as exc:
        message = exc.args[0] if exc.args else str(exc)
        print(f"muster sim: --policy {name}: {message}", file=sys.stderr)
        return False
    return True


def _with_progress(trace: Trace, config: EngineConfig) -> EngineResult:
    """Run one engine under a rich progress bar: gangs done, simulated time, events/s, ETA."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from simulator.engine import simulate

    total = trace.gang_count
    began = time.perf_counter()
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} gangs"),
        TextColumn("sim t={task.fields[sim]}"),
        TextColumn("{task.fields[rate]} events/s"),
        TimeRemainingColumn(),
        transient=True,
    ) as progress:
        task = progress.add_task(config.admission, total=total, sim="0s", rate="–")

        def update(now: float, events: int, done: int) -> None:
            elapsed = max(time.perf_counter() - began, 1e-9)
            progress.update(
                task, completed=done, sim=f"{now:,.0f}s", rate=f"{events / elapsed:,.0f}"
            )

        return simulate(trace, config, update)


def _finish(
    trace: Trace, results: list[EngineResult], out_dir: Path, args: argparse.Namespace
) -> int:
    from simulator.report import ENGINE_LABELS, summarize, summary_rows, write_outputs

    try:
        report = write_outputs(trace, results, out_dir, policy=args.policy)
    except OSError as exc:
        print(f"muster sim: cannot write outputs to {out_dir}: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        from rich.console import Console
        from rich.table import Table

        summaries: dict[str, dict[str, Any]] = {r.admission: summarize(r) for r in results}
        table = Table(
            title=f"muster sim: {trace.name} ({trace.gang_count} gangs, "
            f"{trace.node_count} nodes, seed {args.seed})"
        )
        table.add_column("metric")
        for name in summaries:
            table.add_column(ENGINE_LABELS.get(name, name), justify="right")
        for row in summary_rows(summaries):
            table.add_row(*row)
        console = Console()
        console.print(table)
    print(f"report: {report}")
    return 0
