"""`muster bench estimate TRACE`: how close wait-time estimates come to what happens.

Replays a trace in the in-process engine (muster admission, pinned placement) and, at every
instant gangs are submitted, asks `policies.estimate` (the controller's estimator) for their
expected start, on the engine's state of that instant: its nodes, queues, admitted gangs (with
their placement and admission time) and pending gangs, and the runtimes of the gangs that
finished so far (finish − admission, per queue and size class, as the controller learns them
from Jobs' startTime and completionTime). Each estimate is then compared with the gang's actual
start. *Start* is admission (the unsuspend): what muster decides; the pods run a pod start-up
later in both.

Figures: how many gangs got an estimate (and how many "unknown"), median and p90 absolute
error in seconds over all estimated gangs, and, over gangs that waited at least
``--min-wait`` seconds, median and p90 of the error as a percentage of the actual wait, and
how often the actual start fell in the estimate's range. Gangs admitted at their submission
wait 0 and are left out of the percentages (their error is in the seconds figures).

``--deadline-factor F`` gives every job group without a ``runtimeLimit`` one of F × its runtime
(as a Job's activeDeadlineSeconds would be): the estimator's upper bound, and the planner's
backfill, use it. Without it the estimator knows only finished runtimes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from muster.bench import bench_main
from policies.estimate import Estimate, RuntimeHistory, estimate
from policies.model import Gang, Snapshot
from policies.percentiles import percentile
from simulator.engine import PENDING, Engine, EngineConfig, GangRecord
from simulator.trace import Trace, TraceError, load


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", metavar="TRACE", help="trace file or shipped trace name")
    parser.add_argument(
        "--deadline-factor",
        type=float,
        default=None,
        metavar="F",
        help="give job groups without runtimeLimit one of F x runtime (e.g. 1.2); "
        "default: the trace's own",
    )
    parser.add_argument(
        "--min-wait",
        type=float,
        default=10.0,
        help="gangs that waited less are left out of the %% error (default 10 s)",
    )
    parser.add_argument("--seed", type=int, default=0, help="trace expansion seed (0)")
    parser.add_argument("--policy", default="drf", help="admission policy (drf)")
    parser.add_argument(
        "--limit", type=int, default=None, help="ask only at the first N submissions"
    )
    parser.add_argument(
        "--ask-every",
        type=float,
        default=None,
        metavar="SECONDS",
        help="also ask for every waiting gang's estimate every SECONDS of simulated time and "
        "score those (figures later_*): how estimates improve as runtimes are learned",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line only")
    parser.epilog = (
        "examples:\n"
        "  muster bench estimate ../shared/traces/mixed-queues.yaml --deadline-factor 1.2\n"
        "  muster bench estimate simulator/traces/two-queues.yaml --json"
    )


class Asker:
    """Watches an engine run (`simulator.engine.RunWatch`) and asks the estimator at every
    instant gangs are submitted (and, with ``ask_every``, for every waiting gang that often),
    learning runtimes from the gangs that end, as the controller learns them from Jobs."""

    def __init__(self, limit: int | None, ask_every: float | None = None) -> None:
        self.ask_every = ask_every
        self.next_ask = ask_every
        self.later: list[tuple[str, float, Estimate]] = []  # (gang, asked at, estimate)
        self.history = RuntimeHistory()
        self.estimates: dict[str, Estimate] = {}
        self.asked_at: dict[str, float] = {}
        self.submitted_now: list[GangRecord] = []
        self.estimate_seconds: list[float] = []
        self.limit = limit

    def submitted(self, record: GangRecord) -> None:
        if self.limit is None or len(self.asked_at) < self.limit:
            self.submitted_now.append(record)

    def ended(self, record: GangRecord) -> None:
        admitted = record.admitted_at
        if admitted is not None and record.finished is not None:
            self.history.record(record.gang.queue, record.gang.size, record.finished - admitted)

    def sampled(self, engine: Engine, now: float) -> None:
        every, due = self.ask_every, self.next_ask
        if every is None or due is None or now < due:
            return
        # After this instant's admissions: every gang still waiting, from the state now.
        self.next_ask = due + every * (1 + (now - due) // every)
        pending = [r.gang for r in engine.gangs if r.state == PENDING]
        if pending:
            found = estimate(_snapshot(engine, pending, now), self.history, engine.config.policy)
            self.later.extend((gang_id, now, item) for gang_id, item in found.items())
            engine.clock.wake(self.next_ask)

    def deciding(self, engine: Engine, now: float) -> None:
        if not self.submitted_now:
            return
        asked = self.submitted_now
        self.submitted_now = []
        pending = [r.gang for r in engine.gangs if r.state == PENDING]
        began = time.perf_counter()
        found = estimate(
            _snapshot(engine, pending, now),
            self.history,
            engine.config.policy,
            only=[r.gang.id for r in asked],
        )
        self.estimate_seconds.append(time.perf_counter() - began)
        for record in asked:
            self.asked_at[record.gang.id] = now
            if record.gang.id in found:
                self.estimates[record.gang.id] = found[record.gang.id]


def _snapshot(engine: Engine, pending: list[Gang], now: float) -> Snapshot:
    """The engine's state at ``now``, as the controller's estimator would see it."""
    planner = engine.planner
    assert planner is not None
    return Snapshot(engine.nodes, engine.tree, list(planner.admitted.values()), pending, now)


def with_deadlines(trace: Trace, factor: float) -> Trace:
    """The trace with runtimeLimit = factor x runtime on job groups that have none."""
    jobs = tuple(
        group
        if group.runtime_limit is not None
        else dataclasses.replace(group, runtime_limit=group.runtime * factor)
        for group in trace.jobs
    )
    return dataclasses.replace(trace, jobs=jobs)


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def score(
    asks: Sequence[tuple[GangRecord, float, Estimate | None]], min_wait: float
) -> dict[str, Any]:
    """Compare each asked estimate (gang, asked at, estimate) with the actual admission."""
    errors: list[float] = []
    relative: list[float] = []
    in_range = waited = 0
    unknown = never = 0
    for record, asked_at, found in asks:
        actual = record.first_admitted
        if found is None or found.start is None:
            unknown += 1
            continue
        if actual is None:
            never += 1
            continue
        error = abs(found.start - actual)
        errors.append(error)
        wait = actual - asked_at
        if wait >= min_wait:
            waited += 1
            relative.append(100.0 * error / wait)
            low = found.earliest if found.earliest is not None else found.start
            high = found.latest if found.latest is not None else float("inf")
            if low - 1.0 <= actual <= high + 1.0:
                in_range += 1
    return {
        "asked": len(asks),
        "estimated": len(errors),
        "unknown": unknown,
        "never_started": never,
        "error_s_median": _round(percentile(errors, 50)),
        "error_s_p90": _round(percentile(errors, 90)),
        "waited": waited,
        "min_wait_s": min_wait,
        "error_pct_median": _round(percentile(relative, 50)),
        "error_pct_p90": _round(percentile(relative, 90)),
        "in_range_pct": _round(100.0 * in_range / waited) if waited else None,
    }


def measure(engine: Engine, asker: Asker, min_wait: float) -> dict[str, Any]:
    """Score the estimates asked at submission (and, with --ask-every, the later ones)."""
    at_submission = [
        (record, asker.asked_at[record.gang.id], asker.estimates.get(record.gang.id))
        for record in engine.gangs
        if record.gang.id in asker.asked_at
    ]
    times = asker.estimate_seconds
    figures = score(at_submission, min_wait)
    if asker.ask_every is not None:
        later = score(
            [(engine.by_id[gang_id], at, found) for gang_id, at, found in asker.later], min_wait
        )
        figures.update({f"later_{key}": value for key, value in later.items()})
    return {
        **figures,
        "estimate_calls": len(times),
        "estimate_ms_median": _round(1000 * statistics.median(times), 2) if times else None,
        "estimate_ms_max": _round(1000 * max(times), 2) if times else None,
    }


def run(args: argparse.Namespace) -> int:
    try:
        trace = load(args.trace)
    except (TraceError, OSError) as exc:
        print(f"muster bench estimate: {exc}", file=sys.stderr)
        return 2
    if args.deadline_factor is not None:
        if not args.deadline_factor >= 1.0:
            print(
                "muster bench estimate: --deadline-factor must be >= 1 (a deadline below the "
                "runtime ends every job early)",
                file=sys.stderr,
            )
            return 2
        trace = with_deadlines(trace, args.deadline_factor)
    config = EngineConfig(seed=args.seed, policy=args.policy, record=False)
    began = time.perf_counter()
    asker = Asker(args.limit, args.ask_every)
    engine = Engine(trace, config, watch=asker)
    engine.run()
    figures: dict[str, Any] = {
        "trace": trace.name,
        "deadline_factor": args.deadline_factor,
        **measure(engine, asker, args.min_wait),
        "wall_s": round(time.perf_counter() - began, 1),
    }
    if args.json:
        print(json.dumps(figures))
        return 0
    deadlines = (
        f"deadline = {args.deadline_factor:g} x runtime"
        if args.deadline_factor is not None
        else "the trace's own deadlines"
    )
    print(f"trace {trace.name} ({deadlines}); start = admission")
    print(
        f"  asked at submission: {figures['asked']} gangs; estimated {figures['estimated']}, "
        f"unknown {figures['unknown']}, never started {figures['never_started']}"
    )
    print(f"  absolute error: median {figures['error_s_median']} s, p90 {figures['error_s_p90']} s")
    print(
        f"  over {figures['waited']} gangs that waited >= {args.min_wait:g} s: error median "
        f"{figures['error_pct_median']}% of the wait, p90 {figures['error_pct_p90']}%; "
        f"actual start in range {figures['in_range_pct']}%"
    )
    if args.ask_every is not None:
        print(
            f"  asked every {args.ask_every:g} s for every waiting gang: {figures['later_asked']} "
            f"estimates, unknown {figures['later_unknown']}; over "
            f"{figures['later_waited']} that waited >= {args.min_wait:g} s: error median "
            f"{figures['later_error_pct_median']}%, p90 {figures['later_error_pct_p90']}%; in "
            f"range {figures['later_in_range_pct']}%"
        )
    print(
        f"  estimator: {figures['estimate_calls']} calls, median {figures['estimate_ms_median']}"
        f" ms, max {figures['estimate_ms_max']} ms; wall {figures['wall_s']} s"
    )
    print(json.dumps(figures))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return bench_main("muster bench estimate", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
