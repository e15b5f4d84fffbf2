"""`muster sweep`: capacity planning from the command line. The sweep itself (objectives, one
replay per size, the CSV and the plot) is simulator/sweep.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from muster.view import add_output_argument, dump
from simulator.sweep import (
    COLUMNS,
    Objective,
    parse_objective,
    parse_sizes,
    plot,
    scale_counts,
    sweep,
    write_csv,
)

EPILOG = """\
examples:
  muster sweep --nodes 50:400:25 --slo 'p95_wait<=10m'
  muster sweep --trace two-queues --nodes 24,32,48,64 --slo 'p95_wait<=15m' --slo 'stuck==0'

SLO metrics: p50_wait, p95_wait, max_wait, mean_wait, makespan (durations: 90s, 10m, 1h) and
utilization, fairness_error, stuck, failed, evictions (numbers). Operators: <= < >= > ==.
A size meets the SLO when every --slo holds and no gang is stuck or failed.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument("--trace", help="trace file or shipped trace name (default blog-burst)")
    parser.add_argument("--jobs-csv", help="replace the trace's jobs with a CSV job list")
    parser.add_argument(
        "--nodes", required=True, help="cluster sizes: START:STOP:STEP (stop included) or a list"
    )
    parser.add_argument(
        "--slo", action="append", required=True, help="objective, e.g. 'p95_wait<=10m' (repeat)"
    )
    parser.add_argument("--admission", choices=("muster", "none"), default="muster")
    parser.add_argument("--policy", default="drf")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--parallel", type=int, default=0, help="worker processes (default: CPU count)"
    )
    parser.add_argument("--out", type=Path, help="output folder (default out/sweep-<trace name>)")
    parser.add_argument("--quiet", action="store_true", help="no table")
    add_output_argument(parser)


def run(args: argparse.Namespace) -> int:
    from simulator.trace import TraceError, load, load_jobs_csv, with_jobs

    try:
        objectives = [parse_objective(text) for text in args.slo]
        sizes = parse_sizes(args.nodes)
        trace = load(args.trace)
        if args.jobs_csv:
            trace = with_jobs(trace, load_jobs_csv(args.jobs_csv), args.jobs_csv)
        scale_counts([g.count for g in trace.node_groups], sizes[0])
    except (ValueError, TraceError) as exc:
        print(f"muster sweep: {exc}", file=sys.stderr)
        return 2
    jobs = [(args.trace, args.jobs_csv, n, args.admission, args.seed, args.policy) for n in sizes]
    result = sweep(jobs, objectives, args.parallel or os.cpu_count() or 1)
    rows, boundary, non_monotone = result.rows, result.boundary, result.non_monotone
    out_dir: Path = args.out or Path("out") / f"sweep-{trace.name}"
    out_dir.mkdir(parents=True, exist_ok=True)
    document = {
        "trace": trace.name,
        "admission": args.admission,
        "slo": [o.text for o in objectives],
        "smallest_nodes_meeting_slo": boundary,
        "non_monotone": non_monotone,
        "sizes": rows,
    }
    (out_dir / "sweep.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    write_csv(rows, out_dir / "sweep.csv")
    figure = plot(rows, objectives, boundary, trace.name, out_dir / "sweep.png")
    if args.output != "table":
        # For scripts: the sweep.json document alone on stdout (files are written all the same).
        print(dump({**document, "plot": str(figure)}, args.output))
        return 0
    if not args.quiet:
        _print_table(rows, objectives, trace.name)
    if boundary is None:
        print(f"no size in {sizes[0]}..{sizes[-1]} meets {' and '.join(args.slo)}")
    else:
        print(f"smallest cluster meeting {' and '.join(args.slo)}: {boundary} nodes")
        if non_monotone:
            print(
                "note: a larger size misses the SLO again (see the table); results are not monotone"
            )
    print(f"plot: {figure}")
    return 0


def _print_table(rows: list[dict[str, Any]], objectives: list[Objective], name: str) -> None:
    from rich.console import Console
    from rich.table import Table

    from simulator.report import format_value

    slo = " and ".join(o.text for o in objectives)
    table = Table(title=f"muster sweep: {name}, SLO {slo} (times in s)")
    for _, label in COLUMNS:
        table.add_column(label, justify="right")
    for row in rows:
        cells = [format_value(key, row[key]) for key, _ in COLUMNS[:-1]]
        cells.append("yes" if row["meets_slo"] else "no")
        table.add_row(*cells)
    Console().print(table)
