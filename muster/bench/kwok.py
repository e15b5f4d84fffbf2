"""`muster bench kwok`: the kwok engine measured, in two ways.

- `agree`: the same trace (default the blog burst) through the in-process engine and the kwok
  engine with the same admission; prints makespan and mean wait of both and the gap in %
  (kwok − in-process, relative to in-process). The target is agreement within 10%.
- `throughput`: a generated burst of at least `--pods` pods on `--nodes` kwok nodes replayed end
  to end through muster; prints wall time, pods/s and where the CPU went.

Both bring up their own local control plane (`--cluster-name`, taken down at the end) unless
`--kubeconfig` names one, print figures, and end with one JSON line (`--json`: only that line).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulator.engine import Admission
    from simulator.trace import Trace

EPILOG = """\
examples:
  muster bench kwok agree                                   # blog burst, time scale 10
  muster bench kwok agree --trace two-queues --time-scale 50 --json
  muster bench kwok throughput --pods 5000 --nodes 1000     # end-to-end pods/s
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument("what", choices=("agree", "throughput"), help="which measurement")
    parser.add_argument("--trace", default="blog-burst", help="agree: trace file or shipped name")
    parser.add_argument(
        "--admission",
        choices=("muster", "none"),
        default="muster",
        help="agree: admission compared (default muster)",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=None,
        metavar="X",
        help="trace seconds per wall second (default: 10 for agree, 60 for throughput)",
    )
    parser.add_argument("--pods", type=int, default=5000, help="throughput: pods at least")
    parser.add_argument("--nodes", type=int, default=1000, help="throughput: kwok nodes")
    parser.add_argument(
        "--window",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="throughput: trace seconds over which the burst is submitted (default 300)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--kubeconfig", type=Path, metavar="FILE", help="use this running control plane"
    )
    parser.add_argument(
        "--cluster-name",
        default="muster-bench-kwok",
        metavar="NAME",
        help="control plane to bring up (default muster-bench-kwok)",
    )
    parser.add_argument("--out", type=Path, help="also write the kwok run's report here")
    parser.add_argument("--json", action="store_true", help="print one JSON line only")


def _gap(kwok: float | None, reference: float | None) -> float | None:
    if kwok is None or reference is None or reference == 0:
        return None
    return round((kwok - reference) / reference * 100.0, 1)


def run(args: argparse.Namespace) -> int:
    from simulator.kwok_engine import replay
    from simulator.kwok_settings import KwokError, KwokSettings
    from simulator.trace import TraceError

    log = (lambda _m: None) if args.json else _stderr
    scale = args.time_scale or (10.0 if args.what == "agree" else 60.0)
    if scale <= 0:
        print("muster bench kwok: --time-scale must be positive", file=sys.stderr)
        return 2
    try:
        trace = _agree_trace(args) if args.what == "agree" else _throughput_trace(args)
    except (TraceError, ValueError) as exc:
        print(f"muster bench kwok: {exc}", file=sys.stderr)
        return 2
    settings = KwokSettings(
        time_scale=scale,
        kubeconfig=args.kubeconfig,
        cluster_name=args.cluster_name,
        seed=args.seed,
        out_dir=args.out or Path("out") / f"bench-kwok-{args.what}",
        # Thousands of pods starting at once take this control plane minutes (kwok marks pods
        # Running four at a time); nothing in the throughput burst can clog (node-aware
        # admission), and evicting gangs that are slow to start only feeds the backlog.
        min_clog_timeout=30.0 if args.what == "agree" else 3600.0,
    )
    figures: dict[str, dict[str, Any]] = {}
    admission: Admission = "none" if args.what == "agree" and args.admission == "none" else "muster"
    load_before = os.getloadavg()[0]
    began = time.perf_counter()
    try:
        (result,) = replay(trace, [admission], settings, log=log, figures=figures)
    except KwokError as exc:
        print(f"muster bench kwok: {exc}", file=sys.stderr)
        return 1
    total_wall = time.perf_counter() - began
    from simulator.report import summarize, write_outputs

    kwok = summarize(result)
    if args.out is not None:
        write_outputs(trace, [result], args.out, policy="drf")
    replay_figures = figures.get(admission, {})
    out: dict[str, Any] = {
        "bench": "kwok",
        "what": args.what,
        "trace": trace.name,
        "gangs": trace.gang_count,
        "pods": trace.pod_count,
        "nodes": trace.node_count,
        "time_scale": scale,
        "admission": admission,
        "replay_wall_s": round(result.wall_seconds, 2),
        "total_wall_s": round(total_wall, 2),
        "loadavg_1m_start": round(load_before, 2),
        "cpu_s": replay_figures.get("cpu_s"),
        "submit_lag_max_s": replay_figures.get("submit_lag_max_s"),
        "looks": replay_figures.get("looks"),
        "latency_wall_s": replay_figures.get("latency_wall_s"),
        "kwok": _figures(kwok),
    }
    if args.what == "agree":
        out.update(_in_process_gaps(trace, admission, args.seed, scale, kwok, replay_figures))
    else:
        out["pods_per_s"] = round(trace.pod_count / result.wall_seconds, 1)
    if not args.json:
        _print(out)
    print(json.dumps(out))
    return 0


def _in_process_gaps(
    trace: Trace,
    admission: Admission,
    seed: int,
    scale: float,
    kwok: dict[str, Any],
    replay_figures: dict[str, Any],
) -> dict[str, Any]:
    """`agree`: the in-process engine on the same trace, and how far kwok's figures are off."""
    from simulator.engine import EngineConfig, simulate
    from simulator.report import summarize

    config = EngineConfig(admission=admission, seed=seed, record=False)
    reference = summarize(simulate(trace, config))
    gaps: dict[str, Any] = {}
    gaps["in_process"] = _figures(reference)
    gaps["gap_makespan_pct"] = _gap(kwok["makespan_s"], reference["makespan_s"])
    gaps["gap_wait_mean_pct"] = _gap(kwok["wait_mean_s"], reference["wait_mean_s"])
    # The same model with kwok's measured start latency (admission to the gang running,
    # median, in trace seconds) as its pod start delay: what is left of the gap then is not
    # the control plane's latency.
    started = (replay_figures.get("latency_wall_s") or {}).get("admitted_to_started")
    if started:
        delay = round(started["p50"] * scale, 1)
        calibrated = summarize(simulate(dataclasses.replace(trace, pod_start_delay=delay), config))
        gaps["in_process_start_delay_s"] = delay
        gaps["in_process_calibrated"] = _figures(calibrated)
        gaps["gap_calibrated_makespan_pct"] = _gap(kwok["makespan_s"], calibrated["makespan_s"])
        gaps["gap_calibrated_wait_mean_pct"] = _gap(kwok["wait_mean_s"], calibrated["wait_mean_s"])
    return gaps


def _figures(summary: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "makespan_s",
        "wait_mean_s",
        "wait_p50_s",
        "wait_p95_s",
        "utilization_mean",
        "finished",
        "stuck_gangs",
        "failed",
        "evictions",
        "clogs",
    )
    return {key: summary[key] for key in keys}


def _agree_trace(args: argparse.Namespace) -> Any:
    from simulator.trace import load

    return load(args.trace)


def _throughput_trace(args: argparse.Namespace) -> Any:
    """Jobs of 1..16 pods (4 cpu / 16Gi) on nodes of 32 cpu / 128Gi (8 such pods each),
    runtimes 60..600 s, submitted over --window: enough gangs for at least --pods pods."""
    from simulator.burst import BurstSpec, burst_document
    from simulator.trace import from_dict

    if args.pods < 1 or args.nodes < 1 or args.window < 0:
        raise ValueError("--pods and --nodes must be positive, --window not negative")
    sizes = (1, 2, 4, 8, 16)
    gangs = max(1, round(args.pods / (sum(sizes) / len(sizes))))
    while True:
        spec = BurstSpec(
            jobs=gangs,
            sizes=sizes,
            queues=("a", "b", "c"),
            nodes=args.nodes,
            allocatable=(("cpu", "32"), ("memory", "128Gi"), ("pods", "110")),
            pod_requests=(("cpu", "4"), ("memory", "16Gi")),
            runtime=(60.0, 600.0),
            window=args.window,
            kind="Job",
            one_pod_per_node=False,
            seed=args.seed,
            name="bench-kwok",
        )
        trace = from_dict(burst_document(spec), source="bench", default_name="bench-kwok")
        if trace.pod_count >= args.pods:
            return trace
        gangs += max(1, (args.pods - trace.pod_count) // 4)


def _print(out: dict[str, Any]) -> None:
    for key, value in out.items():
        if isinstance(value, dict):
            print(f"{key:>18}:")
            for inner, figure in value.items():
                print(f"{'':>20}{inner}: {figure}")
        else:
            print(f"{key:>18}: {value}")


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
