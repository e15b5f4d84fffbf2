"""`muster sim --family DIR`: none and muster on every trace of a family folder (written by
`muster trace family`), in worker processes, under a progress bar; then the family table
(`simulator.familyrun`), family.json and family.csv, and with ``--json`` one JSON line."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path


def add_family_arguments(parser: argparse.ArgumentParser) -> None:
    """`muster sim`'s options for a family."""
    parser.add_argument(
        "--family",
        type=Path,
        metavar="DIR",
        help="replay every trace of a family folder (muster trace family) with none and muster "
        "and print, per figure, on how many traces muster is at least as good, and the worst "
        "trace with its seed (instead of TRACE)",
    )
    parser.add_argument(
        "--parallel",
        type=int,
        default=0,
        metavar="N",
        help="--family: worker processes (default: the CPU count)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="--family: also print the family table as one JSON line on stdout",
    )


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def _refused(args: argparse.Namespace, policy_known: Callable[[str], bool]) -> bool:
    if args.trace is not None or args.jobs_csv is not None or args.engine != "in-process":
        _stderr(
            "muster sim: --family replays its folder's traces in-process: drop TRACE, "
            "--jobs-csv and --engine kwok"
        )
        return True
    if args.lookahead < 0 or args.admit_interval < 0 or args.parallel < 0:
        _stderr("muster sim: --lookahead, --admit-interval and --parallel must not be negative")
        return True
    return not policy_known(args.policy)


def run_family(args: argparse.Namespace, policy_known: Callable[[str], bool]) -> int:
    """`--family DIR`: none and muster on every trace of the folder, then the family table."""
    from simulator.familyrun import family_traces, judge, replay_family, write_family

    if _refused(args, policy_known):
        return 2
    try:
        paths = family_traces(args.family)
    except ValueError as exc:
        _stderr(f"muster sim: {exc}")
        return 2
    workers = min(args.parallel or os.cpu_count() or 1, 2 * len(paths))
    began = time.perf_counter()
    placement = args.placement or "pinned"
    with _progress(not args.quiet and sys.stderr.isatty(), 2 * len(paths)) as done:
        results = replay_family(
            paths,
            seed=args.seed,
            policy=args.policy,
            lookahead=args.lookahead,
            admit_interval=args.admit_interval,
            placement=placement,
            workers=workers,
            done=done,
        )
    report = judge(results)
    settings = {
        "family": str(args.family),
        "traces": len(paths),
        "seed": args.seed,
        "policy": args.policy,
        "placement": placement,
        "workers": workers,
        "wall_s": round(time.perf_counter() - began, 1),
    }
    out_dir: Path = args.out or Path("out") / f"family-{args.family.name}"
    try:
        path = write_family(report, out_dir, settings)
    except OSError as exc:
        _stderr(f"muster sim: cannot write outputs to {out_dir}: {exc}")
        return 1
    if not args.quiet:
        _show(report, args, settings)
    if args.json:
        from simulator.familyrun import json_line

        print(json.dumps(json_line(report, settings), separators=(",", ":")))
    print(f"family: {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


class _progress:
    """A rich progress bar over the replays (none and muster per trace); a no-op when off."""

    def __init__(self, shown: bool, total: int) -> None:
        self.shown = shown
        self.total = total
        self.bar: object = None

    def __enter__(self) -> Callable[[int, int], None]:
        if not self.shown:
            return lambda count, total: None
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        bar = Progress(
            TextColumn("[bold]family"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} replays"),
            TimeRemainingColumn(),
            transient=True,
        )
        bar.start()
        task = bar.add_task("family", total=self.total)
        self.bar = bar
        return lambda count, total: bar.update(task, completed=count)

    def __exit__(self, *exc: object) -> None:
        from rich.progress import Progress

        if isinstance(self.bar, Progress):
            self.bar.stop()


def _show(report: object, args: argparse.Namespace, settings: dict[str, object]) -> None:
    from rich.console import Console
    from rich.table import Table

    from simulator.familyrun import FamilyReport, table

    assert isinstance(report, FamilyReport)
    shown = Table(
        title=f"muster sim --family {args.family} ({settings['traces']} traces, policy "
        f"{args.policy}, {settings['wall_s']} s)"
    )
    for column in (
        "figure",
        "muster >= none",
        "worst for muster (none -> muster)",
        "muster's worst",
    ):
        shown.add_column(column, justify="left" if column == "figure" else "right")
    for row in table(report):
        shown.add_row(*row)
    Console(stderr=bool(args.json)).print(shown)
