"""`muster trace burst`: generate a synthetic burst trace (YAML or JSON).

The generator is simulator/burst.py (`burst_document`, also what `muster bench sim` replays);
the same arguments give the same file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from simulator.burst import BurstSpec, burst_document

EPILOG = """\
examples:
  muster trace burst --jobs 200 --sizes 1,8,64 --queues a,b,c --nodes 149 --out burst.yaml
  muster trace burst --jobs 5000 --window 1h --runtime 60s:600s --nodes 1000 --out big.json
  muster sim burst.yaml
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument("--jobs", type=int, default=100, help="number of gangs (default 100)")
    parser.add_argument("--sizes", default="1,4,16", help="gang sizes to draw from (1,4,16)")
    parser.add_argument("--size-weights", help="relative weights of --sizes (default equal)")
    parser.add_argument("--queues", default="default", help="queue names (default: default)")
    parser.add_argument("--queue-weights", help="DRF weights of --queues, also the draw weights")
    parser.add_argument("--nodes", type=int, default=100, help="number of nodes (default 100)")
    parser.add_argument(
        "--allocatable",
        default="cpu=8,memory=32Gi,pods=110",
        help="per-node allocatable (default cpu=8,memory=32Gi,pods=110)",
    )
    parser.add_argument(
        "--pod-requests", default="cpu=6,memory=20Gi", help="per-pod requests (cpu=6,memory=20Gi)"
    )
    parser.add_argument(
        "--runtime", default="60s:600s", help="runtime, or a MIN:MAX range (default 60s:600s)"
    )
    parser.add_argument(
        "--window", default="0s", help="submissions spread over [0, window] (default 0s: at once)"
    )
    parser.add_argument("--kind", choices=("Job", "MiniCluster"), default="MiniCluster")
    parser.add_argument(
        "--one-pod-per-node",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="each gang's pods on distinct nodes (default: yes)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--name", default="burst", help="trace name (default burst)")
    parser.add_argument(
        "--out", required=True, help="output file (.yaml or .json); - for standard output"
    )


def spec_from_args(args: argparse.Namespace) -> BurstSpec:
    """Validate the generator arguments; raise ValueError with a one-line message."""
    from simulator.trace import TraceError, parse_duration

    def numbers(text: str, flag: str, kind: type[int] | type[float]) -> tuple[Any, ...]:
        try:
            values = tuple(kind(part) for part in text.split(",") if part.strip())
        except ValueError:
            raise ValueError(f"{flag}: {text!r} is not a comma-separated list of numbers") from None
        if not values or any(v <= 0 for v in values):
            raise ValueError(f"{flag}: give positive numbers, e.g. 1,8,64")
        return values

    def pairs(text: str, flag: str) -> tuple[tuple[str, str], ...]:
        result = []
        for part in text.split(","):
            key, sep, value = part.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise ValueError(f"{flag}: {part!r} is not name=quantity; e.g. cpu=8,memory=32Gi")
            result.append((key.strip(), value.strip()))
        return tuple(result)

    sizes = numbers(args.sizes, "--sizes", int)
    size_weights = (
        numbers(args.size_weights, "--size-weights", float) if args.size_weights else None
    )
    if size_weights is not None and len(size_weights) != len(sizes):
        raise ValueError("--size-weights: give one weight per size")
    queues = tuple(q.strip() for q in args.queues.split(",") if q.strip())
    if not queues:
        raise ValueError("--queues: give at least one queue name")
    queue_weights = (
        numbers(args.queue_weights, "--queue-weights", float) if args.queue_weights else None
    )
    if queue_weights is not None and len(queue_weights) != len(queues):
        raise ValueError("--queue-weights: give one weight per queue")
    if args.jobs < 1 or args.nodes < 1:
        raise ValueError("--jobs and --nodes must be at least 1")
    try:
        low_text, _, high_text = args.runtime.partition(":")
        low = parse_duration(low_text, "--runtime")
        high = parse_duration(high_text, "--runtime") if high_text else low
        window = parse_duration(args.window, "--window")
    except TraceError as exc:
        raise ValueError(str(exc)) from None
    if low < 1 or high < low:
        raise ValueError("--runtime: give MIN:MAX with 1s <= MIN <= MAX, e.g. 60s:600s")
    return BurstSpec(
        jobs=args.jobs,
        sizes=sizes,
        size_weights=size_weights,
        queues=queues,
        queue_weights=queue_weights,
        nodes=args.nodes,
        allocatable=pairs(args.allocatable, "--allocatable"),
        pod_requests=pairs(args.pod_requests, "--pod-requests"),
        runtime=(low, high),
        window=window,
        kind=args.kind,
        one_pod_per_node=args.one_pod_per_node,
        seed=args.seed,
        name=args.name,
    )


def write_trace(command: str, out: str, document: dict[str, Any], header: str) -> int | None:
    """Write a trace document as the trace commands do: JSON to a `.json` path, else YAML after
    ``header``; `-` is standard output. The exit code to return now (0: written to standard
    output; 1: ``out`` cannot be written, said on stderr), or None when it went to ``out``."""
    from simulator.trace import dump_yaml

    text = (
        json.dumps(document, indent=1) + "\n"
        if out.endswith(".json")
        else header + dump_yaml(document)
    )
    if out == "-":
        sys.stdout.write(text)
        return 0
    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"{command}: cannot write {out}: {exc}", file=sys.stderr)
        return 1
    return None


def run(args: argparse.Namespace) -> int:
    from simulator.trace import TraceError, from_dict

    try:
        spec = spec_from_args(args)
        document = burst_document(spec)
        trace = from_dict(document, source="muster trace burst", default_name=spec.name)
    except (ValueError, TraceError) as exc:
        print(f"muster trace burst: {exc}", file=sys.stderr)
        return 2
    done = write_trace("muster trace burst", args.out, document, _header(spec))
    if done is not None:
        return done
    print(
        f"wrote {args.out}: {trace.gang_count} gangs ({trace.pod_count} pods) in "
        f"{len(trace.jobs)} job groups, {trace.node_count} nodes, {len(trace.queues)} queue(s)"
    )
    return 0


def _header(spec: BurstSpec) -> str:
    return (
        "# Generated by muster trace burst\n"
        f"# {spec.jobs} gangs, sizes {','.join(map(str, spec.sizes))}, "
        f"queues {','.join(spec.queues)}, {spec.nodes} nodes, seed {spec.seed}\n"
    )
