"""`muster bench webhook`: what the webhook adds to Job-create latency.

Against one apiserver, with `muster run --local` serving the webhook the whole time, rounds
alternate between the MutatingWebhookConfiguration registered and removed, so both sides see
the same apiserver, etcd and machine load. Every Job is created with `spec.suspend: true` so no
pods are made in either case (the webhook still patches and stamps it). Each round waits until
the apiserver demonstrably calls (or no longer calls) the webhook before measuring.

It also reports the webhook process's CPU per review: the CPU seconds of `muster run`'s webhook
child (from /proc) over the rounds with the webhook registered, divided by the creates those
rounds made (every create is one review, probes included), and the same process's CPU over the
rounds without it (its watches and timers: what it costs when nobody creates through it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from admission.launcher import launch
from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from muster.bench.admit import child_pids
from muster.bench.harness import bench_cluster, job_body, latency_ms
from policies.vocabulary import SUBMITTED
from simulator.controlplane.cluster import controller_kubeconfig
from simulator.controlplane.processes import cpu_seconds
from webhook.configuration import NAME as WEBHOOK_CONFIG_NAME
from webhook.startup import CONFIG_PATH

NAMESPACE = "muster-bench-webhook"
QUEUE_NAME = "bench"
"""The Jobs' queue: none of that name exists, the webhook stamps them all the same."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        default=os.environ.get("MUSTER_KUBECONFIG"),
        help="cluster to measure (default: the running `muster` cluster, else a temporary one)",
    )
    parser.add_argument("--jobs", type=int, default=1000, help="Job creates per side")
    parser.add_argument("--concurrency", type=int, default=50, help="parallel creators")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds per side")
    parser.add_argument(
        "--webhook-server",
        choices=("lean", "kopf"),
        default="lean",
        help="which server muster run uses for reviews (see muster run --help)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line only")
    parser.epilog = (
        "examples:\n"
        "  muster bench webhook --jobs 1000 --concurrency 50 --json\n"
        "  muster bench webhook --jobs 400 --concurrency 1 --rounds 2 --webhook-server kopf"
    )


class _Round:
    def __init__(self, client: KubeClient, concurrency: int) -> None:
        self.client = client
        self.concurrency = concurrency
        self.counter = 0
        self.lock = threading.Lock()

    def name(self) -> str:
        with self.lock:
            self.counter += 1
            return f"b-{self.counter}"

    def create(self) -> tuple[float, bool]:
        # Suspended: no pods in either case; no requests, as its queue does not exist. Naming
        # it counts the create (`counter`): one review when the webhook is registered.
        body = job_body(self.name(), QUEUE_NAME, pods=4, cpu=None, suspend=True, runtime=None)
        started = time.perf_counter()
        stored = self.client.create(kubeapi.JOBS.path(NAMESPACE), body)
        elapsed = time.perf_counter() - started
        return elapsed, SUBMITTED in (stored["metadata"].get("annotations") or {})

    def run(self, count: int) -> tuple[list[float], int]:
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            results = list(pool.map(lambda _: self.create(), range(count)))
        return [r[0] for r in results], sum(1 for r in results if r[1])

    def wait_until(self, webhook_active: bool, timeout: float = 30) -> None:
        """Create probe Jobs until the apiserver's webhook view matches what we want."""
        wait_for_webhook(lambda: self.create()[1], webhook_active, timeout)


def wait_for_webhook(stamped: Callable[[], bool], active: bool, timeout: float = 30) -> None:
    """Call `stamped` (a probe create: did muster's webhook stamp it?) until the apiserver calls
    the webhook (`active`) or no longer does: its view of the configuration lags a
    registration or a removal by a moment."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stamped() == active:
            return
        time.sleep(0.2)
    raise TimeoutError(f"apiserver did not {'start' if active else 'stop'} calling the webhook")


def _start_webhook(
    kubeconfig: Path, stack: ExitStack, server: str
) -> tuple[dict[str, Any], int | None]:
    """Start `muster run --local`; return the configuration it registered and the pid of the
    process that serves the reviews (the webhook child; None if there is none to find)."""
    muster = launch(controller_kubeconfig(kubeconfig), "--webhook-server", server)
    stack.callback(muster.stop)
    with KubeClient.from_kubeconfig(kubeconfig) as client:
        config = client.get(f"{CONFIG_PATH}/{WEBHOOK_CONFIG_NAME}")
    children = child_pids(muster.pid)
    return config, children[0] if len(children) == 1 else None


def _cpu(pid: int | None) -> float:
    value = cpu_seconds(pid) if pid is not None else None
    return value if value is not None else 0.0


def run(args: argparse.Namespace) -> int:
    if args.jobs < args.rounds or args.concurrency < 1 or args.rounds < 1:
        print("muster bench webhook: need --jobs >= --rounds >= 1 and --concurrency >= 1")
        return 2
    from muster.bench.apiserver import fresh_namespace

    def say(message: str) -> None:
        if not args.json:
            print(message, file=sys.stderr)

    with ExitStack() as stack:
        cluster = stack.enter_context(
            bench_cluster(args.kubeconfig, name="muster-bench", reuse_running=True, log=say)
        )
        kubeconfig = cluster.kubeconfig
        client = stack.enter_context(KubeClient.from_kubeconfig(kubeconfig))
        fresh_namespace(client, NAMESPACE)
        stack.callback(client.delete, kubeapi.NAMESPACES.path(name=NAMESPACE))
        registered, webhook_pid = _start_webhook(kubeconfig, stack, args.webhook_server)
        config = {k: registered[k] for k in ("apiVersion", "kind", "webhooks")}
        config["metadata"] = {"name": registered["metadata"]["name"]}
        bench = _Round(client, args.concurrency)
        per_round = args.jobs // args.rounds
        samples: dict[str, list[float]] = {"with": [], "without": []}
        cpu = {"with": 0.0, "without": 0.0}
        creates = {"with": 0, "without": 0}
        bench.run(min(100, per_round))  # warm-up: connections, caches, webhook path
        for round_no in range(args.rounds * 2):
            side = "with" if round_no % 2 == 0 else "without"
            cpu_before, creates_before = _cpu(webhook_pid), bench.counter
            if side == "with":
                try:
                    client.create(CONFIG_PATH, config)
                except ApiError as exc:
                    if exc.status != 409:
                        raise
            else:
                client.delete(f"{CONFIG_PATH}/{WEBHOOK_CONFIG_NAME}")
            bench.wait_until(webhook_active=side == "with")
            latencies, stamped = bench.run(per_round)
            expected = per_round if side == "with" else 0
            if stamped != expected:
                raise RuntimeError(
                    f"round {round_no} ({side} webhook): {stamped}/{per_round} Jobs stamped"
                )
            samples[side].extend(latencies)
            cpu[side] += _cpu(webhook_pid) - cpu_before
            creates[side] += bench.counter - creates_before
            if not args.json:
                p50, p99 = latency_ms(latencies, 50), latency_ms(latencies, 99)
                print(
                    f"round {round_no + 1} {side:>7} webhook: p50 {p50:6.1f} ms  p99 {p99:6.1f} ms",
                    flush=True,
                )
        # Leave the webhook unregistered: the server process stops with this command.
        try:
            client.delete(f"{CONFIG_PATH}/{WEBHOOK_CONFIG_NAME}")
        except ApiError as exc:
            if exc.status != 404:
                raise
    line = _figures(args, samples, cpu, creates, webhook_pid)
    print(json.dumps(line))
    return 0


def _figures(
    args: argparse.Namespace,
    samples: dict[str, list[float]],
    cpu: dict[str, float],
    creates: dict[str, int],
    webhook_pid: int | None,
) -> dict[str, Any]:
    """The JSON line: latency with and without the webhook, and its process's CPU per review."""
    with_, without = samples["with"], samples["without"]
    line: dict[str, Any] = {
        "bench": "webhook",
        "jobs_per_side": len(with_),
        "concurrency": args.concurrency,
        "webhook_server": args.webhook_server,
        "p50_ms_with": latency_ms(with_, 50),
        "p99_ms_with": latency_ms(with_, 99),
        "p50_ms_without": latency_ms(without, 50),
        "p99_ms_without": latency_ms(without, 99),
    }
    line["p50_overhead_ms"] = round(line["p50_ms_with"] - line["p50_ms_without"], 2)
    line["p99_overhead_ms"] = round(line["p99_ms_with"] - line["p99_ms_without"], 2)
    if webhook_pid is not None:
        # Clock ticks are 10 ms: over hundreds of reviews the per-review figure is still good to
        # a few hundredths of a millisecond.
        line["reviews"] = creates["with"]
        line["webhook_cpu_s_with"] = round(cpu["with"], 2)
        line["webhook_cpu_s_without"] = round(cpu["without"], 2)
        line["webhook_cpu_ms_per_review"] = round(cpu["with"] / creates["with"] * 1000, 3)
    if not args.json and webhook_pid is not None:
        print(
            f"webhook process: {line['webhook_cpu_ms_per_review']} ms CPU per review "
            f"({cpu['with']:.2f} s over {creates['with']} reviews; {cpu['without']:.2f} s over "
            "the rounds without it)"
        )
    return line
