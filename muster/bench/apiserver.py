"""`muster bench apiserver`: raw PATCH throughput of an apiserver on Job objects.

This is the ceiling the admission controller is compared against: an admission is one PATCH
of a Job, so no controller can admit gangs faster than this apiserver accepts Job PATCHes.

Method: create N suspended Jobs (no pods are made), then for each concurrency level send
`--patches` merge PATCHes of one annotation, round-robin over the Jobs, from that many threads
each with its own keep-alive connection. The client runs on the same machine, so the figure is
for client + apiserver + etcd sharing its cores, as the controller will.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from muster.bench.harness import bench_cluster
from policies.percentiles import percentile_of_sorted

BENCH_NAMESPACE = "muster-bench"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        default=os.environ.get("MUSTER_KUBECONFIG"),
        help="cluster to measure (default: $MUSTER_KUBECONFIG, else the running `muster` "
        "cluster, else a temporary one started and stopped for this run)",
    )
    parser.add_argument("--jobs", type=int, default=200, help="Jobs to patch round-robin")
    parser.add_argument("--patches", type=int, default=3000, help="PATCHes per concurrency level")
    parser.add_argument(
        "--concurrency", default="1,8,32", help="comma-separated levels (default 1,8,32)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line only")
    parser.epilog = (
        "examples:\n  muster bench apiserver --json\n  muster bench apiserver --patches 10000"
    )


def fresh_namespace(client: KubeClient, namespace: str, timeout: float = 120) -> None:
    """Create `namespace`, or keep it if it exists; wait out a previous run still deleting it.

    A bench deletes its namespace at the end, and the apiserver takes a while to finalize it:
    a second run started at once would otherwise be refused (403, "being terminated").
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.create(kubeapi.NAMESPACES.path(), {"metadata": {"name": namespace}})
            return
        except ApiError as exc:
            if exc.status != 409:
                raise
        try:
            current = client.get(kubeapi.NAMESPACES.path(name=namespace))
        except ApiError as exc:
            if exc.status == 404:
                continue  # gone between the create and the get: create it now
            raise
        if not current["metadata"].get("deletionTimestamp"):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"namespace {namespace} from an earlier run is still being deleted after "
                f"{timeout:.0f}s; wait, or delete it by hand"
            )
        time.sleep(1.0)


def create_jobs(client: KubeClient, namespace: str, count: int) -> list[str]:
    fresh_namespace(client, namespace)
    names = [f"bench-{i}" for i in range(count)]
    path = kubeapi.JOBS.path(namespace)

    def create(name: str) -> None:
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {
                "suspend": True,
                "parallelism": 1,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": "busybox"}],
                    }
                },
            },
        }
        try:
            client.create(path, body)
        except ApiError as exc:
            if exc.status != 409:
                raise

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(create, names))
    return names


def measure_patches(
    client: KubeClient, namespace: str, jobs: list[str], patches: int, concurrency: int
) -> dict[str, float]:
    """Send `patches` PATCHes from `concurrency` threads; return rate and latency figures."""
    counter = iter(range(patches))
    lock = threading.Lock()
    latencies: list[float] = []
    path = kubeapi.JOBS.path(namespace)

    def worker() -> None:
        mine: list[float] = []
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                break
            body = {"metadata": {"annotations": {"muster.dev/bench": str(i)}}}
            t0 = time.perf_counter()
            client.patch(f"{path}/{jobs[i % len(jobs)]}", body)
            mine.append(time.perf_counter() - t0)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    latencies.sort()
    return {
        "patch_per_s": patches / wall,
        "p50_ms": percentile_of_sorted(latencies, 50) * 1000,
        "p99_ms": percentile_of_sorted(latencies, 99) * 1000,
    }


def run(args: argparse.Namespace) -> int:
    try:
        levels = [int(x) for x in str(args.concurrency).split(",") if x]
    except ValueError:
        print(f"muster bench apiserver: --concurrency {args.concurrency!r}: expected e.g. 1,8,32")
        return 2
    if not levels or min(levels) < 1 or args.patches < 1 or args.jobs < 1:
        print("muster bench apiserver: --concurrency, --patches and --jobs must be >= 1")
        return 2

    def say(message: str) -> None:
        if not args.json:
            print(message, file=sys.stderr)

    with ExitStack() as stack:
        cluster = stack.enter_context(
            bench_cluster(args.kubeconfig, name="muster-bench", reuse_running=True, log=say)
        )
        client = stack.enter_context(KubeClient.from_kubeconfig(cluster.kubeconfig))
        jobs = create_jobs(client, BENCH_NAMESPACE, args.jobs)
        # Warm up connections and caches so the first level is not penalised.
        measure_patches(client, BENCH_NAMESPACE, jobs, min(200, args.patches), max(levels))
        results: dict[str, dict[str, float]] = {}
        for level in levels:
            results[str(level)] = measure_patches(
                client, BENCH_NAMESPACE, jobs, args.patches, level
            )
            if not args.json:
                r = results[str(level)]
                print(
                    f"concurrency {level:>3}: {r['patch_per_s']:8.0f} PATCH/s  "
                    f"p50 {r['p50_ms']:6.1f} ms  p99 {r['p99_ms']:6.1f} ms",
                    flush=True,
                )
        client.delete(kubeapi.NAMESPACES.path(name=BENCH_NAMESPACE))
    line: dict[str, Any] = {
        "bench": "apiserver",
        "patches_per_level": args.patches,
        "patch_per_s": {k: round(v["patch_per_s"], 1) for k, v in results.items()},
        "p50_ms": {k: round(v["p50_ms"], 2) for k, v in results.items()},
        "p99_ms": {k: round(v["p99_ms"], 2) for k, v in results.items()},
        "cpus": os.cpu_count(),
    }
    print(json.dumps(line))
    return 0
