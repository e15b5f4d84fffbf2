"""`muster history`: the gangs muster saw finish or fail, one row each, from the status service
(`/v1/history`) or rebuilt from the Jobs in the cluster (muster/view.py).

`-o csv` writes the columns of the simulator's gangs.csv (policies/history.py), so a cluster's
history replays with `muster sim CLUSTER-TRACE --jobs-csv history.csv`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Mapping
from typing import Any

from muster.view import ViewError, add_source_arguments, close_view, dump, open_view, table
from policies.durations import DurationError, format_duration, parse_duration
from policies.history import to_csv


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--since",
        default=None,
        metavar="DURATION",
        help="only gangs that ended in the last DURATION, e.g. 90s, 30m, 1h (default: all the "
        "controller holds, up to its --history-limit)",
    )
    parser.add_argument(
        "--output",
        "-o",
        choices=("table", "csv", "json", "yaml"),
        default="table",
        help="table (for people, default); csv (the simulator's gangs.csv columns, for `muster "
        "sim --jobs-csv`); json or yaml",
    )
    add_source_arguments(parser, plans=False)
    parser.epilog = (
        "Times in csv/json are wall-clock seconds since the epoch (submitted_s, admitted_s,\n"
        "started_s, finished_s); wait_s and runtime_s are durations. started_s is when the\n"
        "gang had its minimum of pods ready, finished_s when its last pod ended; for gangs\n"
        "that ended before the controller last started, the Job's status.startTime and\n"
        "completionTime (docs/simulator.md, 'gangs.csv' and 'Replaying a history').\n"
        "\nexamples:\n"
        "  muster history --status-url http://localhost:8081\n"
        "  muster history --since 1h -o csv > history.csv\n"
        "  muster sim my-cluster.yaml --jobs-csv history.csv --admission muster\n"
        "  kubectl muster history -o json | jq '.gangs[] | select(.state == \"failed\")'"
    )


def _when(value: object) -> str:
    if not isinstance(value, int | float):
        return "-"
    return dt.datetime.fromtimestamp(value, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _duration(value: object) -> str:
    return format_duration(float(value)) if isinstance(value, int | float) else "-"


def history_table(rows: list[Mapping[str, Any]]) -> str:
    headers = ["GANG", "QUEUE", "KIND", "SIZE", "SUBMITTED (UTC)", "WAIT", "RUNTIME", "EVICT"]
    headers += ["PREEMPT", "STATE"]
    body = [
        [
            str(r.get("gang")),
            str(r.get("queue")),
            str(r.get("kind")),
            str(r.get("size")),
            _when(r.get("submitted_s")),
            _duration(r.get("wait_s")),
            _duration(r.get("runtime_s")),
            str(r.get("evictions", 0)),
            str(r.get("preemptions", 0)),
            str(r.get("state")),
        ]
        for r in rows
    ]
    return table(headers, body)


def run(args: argparse.Namespace) -> int:
    since: float | None = None
    if args.since is not None:
        try:
            since = parse_duration(args.since, field="--since")
        except DurationError as exc:
            print(f"muster history: {exc}", file=sys.stderr)
            return 2
        if since <= 0:
            print("muster history: --since must be positive, e.g. 1h", file=sys.stderr)
            return 2
    try:
        view = open_view(args)
        try:
            body = view.history(since)
        finally:
            close_view(view)
    except ViewError as exc:
        print(f"muster history: {exc}", file=sys.stderr)
        return exc.exit_code
    rows: list[Mapping[str, Any]] = list(body.get("gangs") or [])
    if args.output == "csv":
        sys.stdout.write(to_csv(rows))
    elif args.output == "table":
        if rows:
            print(history_table(rows))
        else:
            window = f" in the last {args.since}" if args.since else ""
            print(f"no gang ended{window} (that the controller holds)")
        print(f"source: {view.source.describe()}", file=sys.stderr)
    else:
        print(dump({**body, "source": view.source.as_dict()}, args.output))
    return 0
