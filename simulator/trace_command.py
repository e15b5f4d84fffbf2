"""`muster trace burst`: generate a synthetic burst trace (YAML or JSON).

The generator (`burst_document`) is also what `muster bench sim` replays. Gang sizes, queues and
runtimes are drawn from a seeded RNG, so the same arguments give the same file.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EPILOG = """\
examples:
  muster trace burst --jobs 200 --sizes 1,8,64 --queues a,b,c --nodes 149 --out burst.yaml
  muster trace burst --jobs 5000 --window 1h --runtime 60s:600s --nodes 1000 --out big.json
  muster sim burst.yaml
"""


@dataclass(frozen=True, slots=True)
class BurstSpec:
    """What `muster trace burst` generates."""

    jobs: int = 100
    sizes: tuple[int, ...] = (1, 4, 16)
    size_weights: tuple[float, ...] | None = None
    queues: tuple[str, ...] = ("default",)
    queue_weights: tuple[float, ...] | None = None
    nodes: int = 100
    allocatable: tuple[tuple[str, str], ...] = (("cpu", "8"), ("memory", "32Gi"), ("pods", "110"))
    pod_requests: tuple[tuple[str, str], ...] = (("cpu", "6"), ("memory", "20Gi"))
    runtime: tuple[float, float] = (60.0, 600.0)
    window: float = 0.0
    kind: str = "MiniCluster"
    one_pod_per_node: bool = True
    seed: int = 0
    name: str = "burst"


def burst_document(spec: BurstSpec) -> dict[str, Any]:
    """A trace document (as `simulator.trace.from_dict` reads it) for a synthetic burst.

    Submission times are whole seconds drawn uniformly from [0, window]; runtimes are whole
    seconds drawn uniformly from the runtime range. Jobs with the same queue, size, runtime and
    submission second share one job group.
    """
    rng = random.Random(spec.seed)
    groups: dict[tuple[str, int, int, int], int] = {}
    low, high = int(spec.runtime[0]), int(spec.runtime[1])
    for _ in range(spec.jobs):
        size = rng.choices(spec.sizes, weights=spec.size_weights)[0]
        queue = rng.choices(spec.queues, weights=spec.queue_weights)[0]
        runtime = rng.randint(low, high) if high > low else low
        at = rng.randint(0, int(spec.window)) if spec.window > 0 else 0
        key = (queue, size, runtime, at)
        groups[key] = groups.get(key, 0) + 1
    requests = dict(spec.pod_requests)
    jobs = []
    for n, ((queue, size, runtime, at), count) in enumerate(sorted(groups.items(), key=_by_time)):
        jobs.append(
            {
                "name": f"{queue}-s{size}-{n}",
                "count": count,
                "kind": spec.kind,
                "queue": queue,
                "size": size,
                "minSize": size,
                "podRequests": requests,
                "onePodPerNode": spec.one_pod_per_node,
                "runtime": f"{runtime}s",
                "submit": {"at": f"{at}s", "interval": "0s"},
            }
        )
    weights = spec.queue_weights or (1.0,) * len(spec.queues)
    return {
        "name": spec.name,
        "cluster": {"nodes": [{"count": spec.nodes, "allocatable": dict(spec.allocatable)}]},
        "queues": [{"name": q, "weight": w} for q, w in zip(spec.queues, weights, strict=True)],
        "jobs": jobs,
    }


def _by_time(item: tuple[tuple[str, int, int, int], int]) -> tuple[int, str, int, int]:
    (queue, size, runtime, at), _ = item
    return (at, queue, size, runtime)


# --------------------------------------------------------------------------- CLI


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


def run(args: argparse.Namespace) -> int:
    from simulator.trace import TraceError, dump_yaml, from_dict

    try:
        spec = spec_from_args(args)
        document = burst_document(spec)
        trace = from_dict(document, source="muster trace burst", default_name=spec.name)
    except (ValueError, TraceError) as exc:
        print(f"muster trace burst: {exc}", file=sys.stderr)
        return 2
    text = (
        json.dumps(document, indent=1) + "\n"
        if args.out.endswith(".json")
        else (_header(spec) + dump_yaml(document))
    )
    if args.out == "-":
        sys.stdout.write(text)
        return 0
    try:
        Path(args.out).write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"muster trace burst: cannot write {args.out}: {exc}", file=sys.stderr)
        return 1
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
