"""`muster bench sim`: how fast the in-process engine replays a large synthetic burst.

Generates a burst with `muster.commands.trace.burst_document`, runs one engine over it and
prints figures (and, with --json, one JSON line). Wall time (and cpu_s, the process's CPU time
over the same span) covers the engine run only; building the trace is reported separately as
build_s. plan_s is the time inside the planner's plan calls; telling it what changed between
plans is engine time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulator.burst import BurstSpec

EPILOG = """\
examples:
  muster bench sim --gangs 10000 --nodes 1000
  muster bench sim --gangs 100000 --nodes 10000 --json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument("--gangs", type=int, default=10000, help="gangs (default 10000)")
    parser.add_argument("--nodes", type=int, default=1000, help="nodes (default 1000)")
    parser.add_argument("--queues", default="a,b,c", help="queue names (default a,b,c)")
    parser.add_argument(
        "--sizes", default="1,2,4,8,16,32", help="gang sizes, equally likely (1,2,4,8,16,32)"
    )
    parser.add_argument(
        "--load",
        type=float,
        default=1.2,
        help="offered work ÷ cluster capacity over the submission window (default 1.2: a "
        "backlog builds up); sets the window",
    )
    parser.add_argument("--admission", choices=("muster", "none"), default="muster")
    parser.add_argument("--policy", default="drf")
    parser.add_argument("--lookahead", type=int, default=1000, help="see muster sim --help")
    parser.add_argument("--admit-interval", type=float, default=0.0, help="see muster sim --help")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON line only")


def run(args: argparse.Namespace) -> int:
    from policies.planner import collector_paused
    from simulator.burst import burst_document
    from simulator.engine import EngineConfig, simulate
    from simulator.report import summarize
    from simulator.trace import TraceError, from_dict

    if args.gangs < 1 or args.nodes < 1 or args.load <= 0:
        print("muster bench sim: --gangs, --nodes and --load must be positive", file=sys.stderr)
        return 2
    try:
        sizes = tuple(int(s) for s in args.sizes.split(","))
    except ValueError:
        print(
            f"muster bench sim: --sizes: {args.sizes!r} is not a list of integers", file=sys.stderr
        )
        return 2
    spec = _burst_spec(args, sizes)
    began = time.perf_counter()
    # The document and the trace are containers without cycles, kept to the end: the cyclic
    # collector would only walk the growing heap again at each full collection.
    try:
        with collector_paused():
            trace = from_dict(burst_document(spec), source="bench", default_name="bench")
    except TraceError as exc:
        print(f"muster bench sim: {exc}", file=sys.stderr)
        return 2
    build_s = time.perf_counter() - began
    config = EngineConfig(
        admission=args.admission,
        seed=args.seed,
        policy=args.policy,
        lookahead=args.lookahead,
        admit_interval=args.admit_interval,
        record=False,
    )
    began, began_cpu = time.perf_counter(), time.process_time()
    result = simulate(trace, config)
    wall_s = time.perf_counter() - began
    cpu_s = time.process_time() - began_cpu  # steadier than wall time on a shared machine
    summary = summarize(result)
    figures = {
        "gangs": trace.gang_count,
        "nodes": trace.node_count,
        "pods": trace.pod_count,
        "admission": args.admission,
        "wall_s": round(wall_s, 3),
        "cpu_s": round(cpu_s, 3),
        "build_s": round(build_s, 3),
        "events": result.events,
        "events_per_s": round(result.events / wall_s) if wall_s > 0 else None,
        "plan_calls": result.plan_calls,
        "plan_s": round(result.plan_seconds, 3),
        "window_s": round(spec.window),
        "makespan_s": summary["makespan_s"],
        "finished": summary["finished"],
        "stuck_gangs": summary["stuck_gangs"],
        "utilization_mean": summary["utilization_mean"],
        "wait_p95_s": summary["wait_p95_s"],
    }
    if args.json:
        print(json.dumps(figures))
        return 0
    for key, value in figures.items():
        print(f"{key:>18}: {value}")
    return 0


def _burst_spec(args: argparse.Namespace, sizes: tuple[int, ...]) -> BurstSpec:
    """The synthetic burst: --gangs gangs over a window that offers --load times the cluster."""
    from simulator.burst import BurstSpec

    queues = tuple(q for q in args.queues.split(",") if q)
    # Nodes of 32 cpu / 128Gi take 8 pods of 4 cpu / 16Gi; runtimes 60..600 s (mean 330 s).
    # The window is set so the offered work is `load` times what the cluster can do in it.
    pods_per_node = 8
    mean_runtime = 330.0
    mean_size = sum(sizes) / len(sizes)
    work = args.gangs * mean_size * mean_runtime
    window = work / (args.nodes * pods_per_node * args.load)
    return BurstSpec(
        jobs=args.gangs,
        sizes=sizes,
        queues=queues,
        nodes=args.nodes,
        allocatable=(("cpu", "32"), ("memory", "128Gi"), ("pods", "110")),
        pod_requests=(("cpu", "4"), ("memory", "16Gi")),
        runtime=(60.0, 600.0),
        window=window,
        kind="Job",
        one_pod_per_node=False,
        seed=args.seed,
        name="bench",
    )
