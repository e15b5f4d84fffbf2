"""`muster bench status-estimate`: what a wait-time estimate costs the status service.

Fills a controller cache (admission/cache.py) with a synthetic backlog, through the same
`apply_*` the watches use: ``--nodes`` nodes of 32 cpu, ten leaf queues in one cohort,
``--running`` admitted Jobs (half with an activeDeadlineSeconds, bound pods on their nodes),
``--finished`` finished Jobs (the runtimes the estimates learn from) and ``--pending`` waiting
Jobs of 1 to 64 pods. Then:

1. the background refresh (`admission/estimates.py`) once, timed: every pending gang's
   estimate from three or four fast-forwards (`refresh_s`);
2. the status service (`admission/status.py`, the controller's own server) on loopback, and a
   client in another process that GETs ``/v1/gangs/NS/NAME`` of random pending gangs one after
   another over fresh HTTP connections, as `muster status` does: latency per answer, end to
   end (p50, p99, max), first with the service idle, then while refreshes run back to back in
   the controller's process (their thread competes for the interpreter: the worst case).

Prints the figures and one JSON line (``--json``: only that line).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from admission.cache import Cache
from admission.estimates import EstimateRefresher, refresh_now
from admission.status import StatusServer
from muster.bench import bench_main
from muster.bench.harness import job_body, latency_ms
from policies.kinds.reading import format_admitted, format_time
from policies.submitted import format_stamp
from policies.vocabulary import ADMITTED, GANG, QUEUE, SUBMITTED

_CLIENT = r"""
import json, sys, time, urllib.request
url, names = sys.argv[1], json.loads(sys.stdin.read())
out = []
for name in names:
    began = time.perf_counter()
    with urllib.request.urlopen(url + "/v1/gangs/" + name, timeout=30) as response:
        body = json.load(response)
    out.append(time.perf_counter() - began)
    assert "estimate" in body, body
print(json.dumps(out))
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pending", type=int, default=10_000, help="pending gangs (10000)")
    parser.add_argument("--running", type=int, default=500, help="admitted gangs (500)")
    parser.add_argument("--finished", type=int, default=500, help="finished gangs (500)")
    parser.add_argument("--nodes", type=int, default=1_000, help="nodes (1000)")
    parser.add_argument("--requests", type=int, default=2_000, help="GETs per phase (2000)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (1)")
    parser.add_argument("--json", action="store_true", help="print one JSON line only")
    parser.epilog = (
        "examples:\n"
        "  muster bench status-estimate --pending 10000 --json\n"
        "  muster bench status-estimate --pending 1000 --requests 200"
    )


def _job(
    name: str,
    queue: str,
    pods: int,
    cpu: int,
    seq: int,
    now: float,
    *,
    admitted: float | None = None,
    deadline: int | None = None,
    finished: float | None = None,
) -> dict[str, Any]:
    """A Job as the watch delivers it: the bench's Job body (`harness.job_body`) as the webhook
    stamped it and the apiserver stored it, admitted and finished as told."""
    annotations = {QUEUE: queue, SUBMITTED: format_stamp(int(now - 3600) * 10**9 + seq, seq)}
    status: dict[str, Any] = {}
    if admitted is not None:
        annotations[ADMITTED] = format_admitted(admitted, pods)
        status = {"startTime": format_time(admitted), "ready": pods}
    if finished is not None:
        status.update(
            completionTime=format_time(finished),
            succeeded=pods,
            ready=0,
            conditions=[{"type": "Complete", "status": "True"}],
        )
    body = job_body(
        name,
        queue,
        pods=pods,
        cpu=str(cpu),
        suspend=admitted is None,
        runtime=None,
        annotations=annotations,
        kwok=False,
    )
    body["metadata"].update(namespace="bench", uid=f"uid-{name}", resourceVersion=str(seq + 1))
    body["spec"]["template"]["metadata"] = {"labels": {GANG: name}}
    if deadline is not None:
        body["spec"]["activeDeadlineSeconds"] = deadline
    body["status"] = status
    return body


_SIZES = (1, 1, 2, 4, 8, 8, 16, 32, 64)
"""Gang sizes the backlog draws from (running gangs from the first six)."""


def build_cache(args: argparse.Namespace, now: float) -> Cache:
    """The synthetic backlog of the module docstring, applied as watch events."""
    rng = random.Random(args.seed)
    cache = Cache()
    _add_nodes(cache, args.nodes)
    leaves = _add_queues(cache)
    seq = _add_running(cache, rng, args, leaves, now)
    seq = _add_finished(cache, rng, args.finished, leaves, seq, now)
    _add_pending(cache, rng, args.pending, leaves, seq, now)
    cache.synced = True
    return cache


def _add_nodes(cache: Cache, nodes: int) -> None:
    for i in range(nodes):
        allocatable = {"cpu": "32", "memory": "128Gi", "pods": "110"}
        cache.apply_node(
            "ADDED",
            {
                "metadata": {"name": f"node-{i}", "resourceVersion": "1", "labels": {}},
                "spec": {},
                "status": {"allocatable": allocatable, "capacity": allocatable},
            },
        )


def _add_queues(cache: Cache) -> list[str]:
    """Ten leaf queues under one root; returns the leaves' names."""
    leaves = [f"team-{k}" for k in range(10)]
    cache.apply_queue("ADDED", {"metadata": {"name": "org", "resourceVersion": "1"}, "spec": {}})
    for k, leaf in enumerate(leaves):
        cache.apply_queue(
            "ADDED",
            {
                "metadata": {"name": leaf, "resourceVersion": "1"},
                "spec": {"parent": "org", "weight": 1 + k % 3},
            },
        )
    return leaves


def _add_running(
    cache: Cache, rng: random.Random, args: argparse.Namespace, leaves: list[str], now: float
) -> int:
    """--running admitted gangs with their pods, round-robin over the nodes; the last seq."""
    seq = 0
    node = 0
    for i in range(args.running):
        pods, cpu = rng.choice(_SIZES[:6]), rng.choice((2, 4, 8))
        seq += 1
        name = f"run-{i}"
        body = _job(
            name,
            rng.choice(leaves),
            pods,
            cpu,
            seq,
            now,
            admitted=now - rng.uniform(0, 1800),
            deadline=rng.choice((None, 3600)),
        )
        cache.apply_job("ADDED", body)
        for p in range(pods):
            cache.apply_pod("ADDED", _running_pod(name, p, f"node-{node % args.nodes}", cpu))
            node += 1
    return seq


def _running_pod(gang: str, index: int, node: str, cpu: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{gang}-{index}",
            "namespace": "bench",
            "uid": f"pod-{gang}-{index}",
            "resourceVersion": "1",
            "labels": {"muster.dev/gang": gang},
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "m", "resources": {"requests": {"cpu": str(cpu)}}}],
        },
        "status": {"phase": "Running"},
    }


def _add_finished(
    cache: Cache, rng: random.Random, count: int, leaves: list[str], seq: int, now: float
) -> int:
    """`count` gangs that ran and finished an hour or two ago; the last seq."""
    for i in range(count):
        pods = rng.choice(_SIZES)
        seq += 1
        start = now - rng.uniform(3600, 7200)
        cache.apply_job(
            "ADDED",
            _job(
                f"done-{i}",
                rng.choice(leaves),
                pods,
                2,
                seq,
                now,
                admitted=start,
                finished=start + rng.uniform(300, 3000),
            ),
        )
    return seq


def _add_pending(
    cache: Cache, rng: random.Random, count: int, leaves: list[str], seq: int, now: float
) -> None:
    """`count` gangs waiting, some with an active deadline."""
    for i in range(count):
        seq += 1
        cache.apply_job(
            "ADDED",
            _job(
                f"wait-{i}",
                rng.choice(leaves),
                rng.choice(_SIZES),
                rng.choice((1, 2, 4, 8)),
                seq,
                now,
                deadline=rng.choice((None, 1800, 3600)),
            ),
        )


async def _measure(cache: Cache, names: list[str], busy: bool) -> list[float]:
    server = StatusServer(cache, dict, None)
    port = await server.start()
    refresher = EstimateRefresher(
        cache, "drf", interval=0.0, pace=0.0, unchanged_every=0.0, on_demand=False
    )
    stop = asyncio.Event()

    async def refresh_forever() -> None:
        while not stop.is_set():
            refresher.poke()
            task = refresher._task
            if task is not None:
                await task
            await asyncio.sleep(0)

    background = asyncio.get_running_loop().create_task(refresh_forever()) if busy else None
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _CLIENT,
            f"http://127.0.0.1:{port}",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        out, _ = await process.communicate(json.dumps(names).encode())
        if process.returncode != 0:
            raise RuntimeError("the status client failed (see its error above)")
        latencies: list[float] = json.loads(out)
    finally:
        stop.set()
        if background is not None:
            await background
        await server.stop()
    return latencies


def run(args: argparse.Namespace) -> int:
    if min(args.pending, args.nodes, args.requests) < 1 or min(args.running, args.finished) < 0:
        print(
            "muster bench status-estimate: --pending, --nodes and --requests must be >= 1",
            file=sys.stderr,
        )
        return 2
    now = time.time()
    cache = build_cache(args, now)
    began = time.perf_counter()
    refresh_now(cache, time.time(), "drf")
    refresh_s = time.perf_counter() - began
    known = sum(1 for e in cache.status.estimates.values() if e.start is not None)
    rng = random.Random(args.seed + 1)
    names = [f"bench/wait-{rng.randrange(args.pending)}" for _ in range(args.requests)]
    idle = asyncio.run(_measure(cache, names, busy=False))
    busy = asyncio.run(_measure(cache, names, busy=True))
    figures = {
        "pending": args.pending,
        "running": args.running,
        "finished": args.finished,
        "nodes": args.nodes,
        "estimated": known,
        "unknown": len(cache.status.estimates) - known,
        "refresh_s": round(refresh_s, 2),
        "requests": args.requests,
        "idle_ms_p50": latency_ms(idle, 50),
        "idle_ms_p99": latency_ms(idle, 99),
        "idle_ms_max": round(1000 * max(idle), 2),
        "refreshing_ms_p50": latency_ms(busy, 50),
        "refreshing_ms_p99": latency_ms(busy, 99),
        "refreshing_ms_max": round(1000 * max(busy), 2),
    }
    if not args.json:
        print(
            f"{args.pending} pending, {args.running} running, {args.finished} finished gangs on "
            f"{args.nodes} nodes: estimated {known}, unknown {figures['unknown']}"
        )
        print(f"  background refresh (every pending gang): {refresh_s:.2f} s")
        print(
            f"  GET /v1/gangs/NS/NAME, {args.requests} answers, end to end over HTTP: "
            f"idle p50 {figures['idle_ms_p50']} ms, p99 {figures['idle_ms_p99']} ms; "
            f"while refreshing p50 {figures['refreshing_ms_p50']} ms, "
            f"p99 {figures['refreshing_ms_p99']} ms"
        )
    print(json.dumps(figures))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return bench_main("muster bench status-estimate", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
