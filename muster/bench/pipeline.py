"""`muster bench pipeline`: how much slower a cluster runs its Jobs through muster than without.

The same burst of small Jobs (--jobs Jobs of 1 to --max-pods pods, each pod succeeding a few
seconds after it runs: kwok's Stage `muster-pod-complete`, annotation `muster.dev/runtime`) is
created on one control plane, round after round, alternately:

(a) with no admission control: no `muster run` process and no webhook configuration; the Jobs,
    created unsuspended, run at once;
(b) through muster: `muster run --local` (webhook and controller) runs; the same Job bodies are
    suspended and stamped by the webhook and admitted by the controller, into a queue with room.

--rounds pairs, a b a b ..., so drift in the machine's load falls on both sides. Each round has
a namespace of its own, deleted (and waited out) before the next round, so no round sees
another's objects. Before it measures, a round proves that the apiserver calls the webhook, or
does not (a dry-run create stamped or not), and afterwards that every Job it created was stamped
in (b) and none in (a).

Per round, from the first create sent to the last Job seen Complete: Jobs completed per second,
each Job's time from its create to all its pods seen Running (p50, p99), and the CPU seconds of
every process (from /proc: the control plane's components when the cluster is a local one,
muster's controller and webhook, and this client, whose watches and creates are the users'
side). Per side: the mean rate, the percentiles over all its Jobs, the mean CPU per round; then
(b)/(a) of the rates (goal >= 0.95), of the p99s (goal <= 1.10), and muster's share of the CPU
of a (b) round. Prints a table and one JSON line (--json: only the line).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import statistics
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from admission.launcher import MusterRun
from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from kubeport.streamwatch import StreamWatch, list_collection
from muster.bench import bench_main
from muster.bench.admit import (
    Created,
    api_calls,
    child_pids,
    cpu_of,
    create_jobs,
    create_namespaces_and_queues,
    per_gang,
    start_muster,
)
from muster.bench.apiserver import fresh_namespace
from muster.bench.harness import BenchCluster, bench_cluster, job_body
from muster.bench.webhook import wait_for_webhook
from policies.percentiles import percentile
from policies.vocabulary import ADMITTED, EVICTIONS, SUBMITTED
from simulator.controlplane.cluster import LocalCluster

Side = Literal["a", "b"]
SIDES: tuple[Side, Side] = ("a", "b")
SIDE_NAMES = {"a": "(a) no admission control", "b": "(b) through muster"}
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
CLIENT = "bench-client"
MUSTER = ("muster", "muster-webhook")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=5000, help="Jobs in the burst of each round")
    parser.add_argument("--nodes", type=int, default=1000, help="kwok nodes (32 cpu, 110 pods)")
    parser.add_argument("--rounds", type=int, default=2, help="(a)/(b) pairs, alternating")
    parser.add_argument("--max-pods", type=int, default=8, help="pods per Job: 1 to this")
    parser.add_argument(
        "--runtime",
        default="1-5",
        metavar="MIN-MAX",
        help="seconds each Job's pods run once Running (whole seconds, default 1-5)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=200,
        metavar="JOBS",
        help="first an unmeasured (a)/(b) pair of the burst's first JOBS Jobs (0: none)",
    )
    parser.add_argument("--submitters", type=int, default=16, help="threads creating Jobs")
    parser.add_argument("--seed", type=int, default=0, help="the burst's sizes and runtimes")
    parser.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds a round may take (default 1800)"
    )
    parser.add_argument("--kubeconfig", help="use this cluster instead of starting one")
    parser.add_argument("--name", default="bench-pipeline", help="cluster name when starting one")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    parser.epilog = (
        "examples:\n"
        "  muster bench pipeline --jobs 5000 --nodes 1000 --json\n"
        "  muster bench pipeline --jobs 200 --nodes 50 --rounds 3 --max-pods 4"
    )


# ---------------------------------------------------------------------------------- the burst
@dataclass(frozen=True)
class BurstJob:
    """One Job of the burst: its name, pods and the seconds each pod runs."""

    name: str
    pods: int
    runtime_s: int

    def body(self, queue: str) -> dict[str, Any]:
        """The same body on both sides: unsuspended, labelled for `queue` (inert in (a))."""
        return job_body(self.name, queue, pods=self.pods, runtime=f"{self.runtime_s}s")


def burst(jobs: int, max_pods: int, runtime: tuple[int, int], seed: int) -> list[BurstJob]:
    """`jobs` Jobs of 1..max_pods pods running runtime[0]..runtime[1] s, drawn from `seed`."""
    rng = random.Random(seed)
    return [
        BurstJob(f"p-{i:05d}", rng.randint(1, max_pods), rng.randint(*runtime)) for i in range(jobs)
    ]


def parse_runtime(text: str) -> tuple[int, int]:
    """ "1-5" -> (1, 5); a single "3" -> (3, 3)."""
    low, dash, high = text.partition("-")
    bounds = (int(low), int(high if dash else low))
    if bounds[0] < 1 or bounds[1] < bounds[0]:
        raise ValueError(f"--runtime {text!r}: expected MIN-MAX whole seconds, 1 <= MIN <= MAX")
    return bounds


# ------------------------------------------------------------------------------- the watches
class PipelineWatch:
    """When each Job of a namespace was first seen Complete (and admitted, and evicted), and
    each of its pods first seen Running or past it, from two lean list-then-watch streams. Only
    times are kept: the bodies of 20,000 pods would cost this client hundreds of MB."""

    def __init__(self, client: KubeClient, namespace: str) -> None:
        self.running: dict[str, dict[str, float]] = defaultdict(dict)  # Job -> pod uid -> time
        self.complete: dict[str, float] = {}
        self.admitted: dict[str, float] = {}
        self.evicted: set[str] = set()
        self._lock = threading.Lock()
        self._streams = [
            # Pending pods are of no interest; leaving them out saves the client two events a
            # pod (created, bound). A relist still sees the pods that already succeeded.
            self._stream(client, kubeapi.PODS.path(namespace), self._pod, "status.phase!=Pending"),
            self._stream(client, kubeapi.JOBS.path(namespace), self._job, None),
        ]

    def _stream(
        self,
        client: KubeClient,
        path: str,
        apply: Callable[[Mapping[str, Any]], None],
        field_selector: str | None,
    ) -> tuple[StreamWatch, KubeClient]:
        own = KubeClient(client.credentials)  # a watch holds its connection
        params = {"fieldSelector": field_selector} if field_selector else {}

        def relist(items: list[Any], _version: int) -> None:
            for item in items:
                apply(item)

        stream = StreamWatch(
            own,
            path,
            params,
            apply=lambda kind, body: None if kind == "DELETED" else apply(body),
            relist=relist,
            lister=list_collection,
            name=f"pipeline-{path.rsplit('/', 1)[-1]}",
            timeout_seconds=120,
        )
        return stream, own

    def start(self) -> PipelineWatch:
        for stream, _ in self._streams:
            stream.start(None)
        return self

    def stop(self) -> None:
        for stream, client in self._streams:
            stream.stop()
            client.close()

    def _pod(self, pod: Mapping[str, Any]) -> None:
        if (pod.get("status") or {}).get("phase") not in ("Running", "Succeeded"):
            return
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        job = next((labels[k] for k in JOB_NAME_LABELS if k in labels), None)
        if job is not None:
            with self._lock:
                self.running[job].setdefault(str(meta.get("uid")), time.time())

    def _job(self, job: Mapping[str, Any]) -> None:
        meta = job.get("metadata") or {}
        name = str(meta.get("name"))
        annotations = meta.get("annotations") or {}
        now = time.time()
        with self._lock:
            if ADMITTED in annotations:
                self.admitted.setdefault(name, now)
            if EVICTIONS in annotations:
                self.evicted.add(name)
            for condition in (job.get("status") or {}).get("conditions") or []:
                if condition.get("type") == "Complete" and condition.get("status") == "True":
                    self.complete.setdefault(name, now)

    def seen(self) -> tuple[dict[str, float], dict[str, float], int]:
        """(when each Job was seen Complete, when admitted, how many were evicted) so far."""
        with self._lock:
            return dict(self.complete), dict(self.admitted), len(self.evicted)

    def all_running(self, jobs: Sequence[BurstJob]) -> dict[str, float]:
        """When each Job of `jobs` had all its pods seen Running (Jobs not there yet left out)."""
        with self._lock:
            return {
                job.name: max(self.running[job.name].values())
                for job in jobs
                if len(self.running.get(job.name) or ()) >= job.pods
            }


# ------------------------------------------------------------------------------- one round
@dataclass
class Bench:
    """What every round shares: the cluster, the burst, the queue of side (b), the output."""

    args: argparse.Namespace
    client: KubeClient
    kubeconfig: Path
    cluster: LocalCluster | None
    jobs: list[BurstJob]
    say: Callable[[str], None]
    stamp: int = field(default_factory=lambda: int(time.time()))

    @property
    def queue(self) -> str:
        """Side (b)'s queue: no quota, so it always has room."""
        return f"pipeline-{self.stamp}"


@dataclass
class Round:
    """One round's figures (`figures()` is its entry of the JSON line's `rounds`)."""

    number: int
    side: Side
    namespace: str
    load_avg_1m: float
    completed: int = 0
    wall_s: float = 0.0
    create_s: float = 0.0
    to_running: list[float] = field(default_factory=list)
    to_admitted: list[float] = field(default_factory=list)
    cpu_s: dict[str, float] = field(default_factory=dict)
    evicted: int = 0
    cleanup_s: float = 0.0
    api: dict[str, float] = field(default_factory=dict)
    """(b): muster's API calls over the round (`admit.api_calls`)."""

    @property
    def jobs_per_s(self) -> float:
        return self.completed / self.wall_s if self.wall_s > 0 else 0.0

    def figures(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "round": self.number,
            "side": self.side,
            "load_avg_1m": round(self.load_avg_1m, 2),
            "completed": self.completed,
            "wall_s": round(self.wall_s, 2),
            "create_s": round(self.create_s, 2),
            "jobs_per_s": round(self.jobs_per_s, 2),
            "create_to_running_p50_s": _rounded(percentile(self.to_running, 50)),
            "create_to_running_p99_s": _rounded(percentile(self.to_running, 99)),
            "cpu_s": {k: round(v, 1) for k, v in sorted(self.cpu_s.items(), key=lambda kv: -kv[1])},
            "cleanup_s": round(self.cleanup_s, 1),
        }
        if self.side == "b":
            out["create_to_admitted_p50_s"] = _rounded(percentile(self.to_admitted, 50))
            out["create_to_admitted_p99_s"] = _rounded(percentile(self.to_admitted, 99))
            out["evicted"] = self.evicted
            out["muster_api_per_job"] = per_gang(self.api, self.completed)
        return out


def _rounded(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def run_round(bench: Bench, number: int, side: Side) -> Round:
    """Steps of one round: (1) a fresh namespace; (2) muster started for (b), none for (a);
    (3) the apiserver seen calling the webhook or not; (4) the burst, timed from the first
    create to the last Job Complete, with the CPU of every process over that span; (5) muster
    stopped and the namespace deleted, its deletion waited out before the next round."""
    namespace = f"pipeline-{bench.stamp}-{number}{side}"
    fresh_namespace(bench.client, namespace)
    muster: MusterRun | None = None
    watch: PipelineWatch | None = None
    try:
        if side == "b":
            muster, _ = start_muster(bench.kubeconfig)
        else:
            _refuse_registered_webhook(bench.client)
        probe = bench.jobs[0].body(bench.queue)
        wait_for_webhook(lambda: _stamped_on_dry_run(bench.client, namespace, probe), side == "b")
        watch = PipelineWatch(bench.client, namespace).start()
        result = _measure(bench, Round(number, side, namespace, os.getloadavg()[0]), watch, muster)
    finally:
        if watch is not None:
            watch.stop()
        if muster is not None:
            muster.stop(timeout=60)
        began = time.monotonic()
        _delete_namespace(bench.client, namespace, bench.args.timeout)
    result.cleanup_s = time.monotonic() - began
    return result


def _measure(bench: Bench, result: Round, watch: PipelineWatch, muster: MusterRun | None) -> Round:
    """Step 4: create the burst, wait for every Job to complete; fill in `result`."""
    pids = bench.cluster.component_pids() if bench.cluster is not None else {}
    if muster is not None:
        pids["muster"] = muster.pid
        for child in child_pids(muster.pid):
            pids["muster-webhook"] = child
    cpu_before = cpu_of(pids)
    bodies = [job.body(bench.queue) for job in bench.jobs]
    created = create_jobs(bench.client, result.namespace, bodies, bench.args.submitters)
    first = min(c.sent for c in created.values())
    result.create_s = time.time() - first
    _check_stamps(result, created)
    _wait_complete(bench, result, watch)
    cpu_after = cpu_of(pids)
    result.cpu_s = {k: cpu_after[k] - v for k, v in cpu_before.items() if k in cpu_after}
    if muster is not None:
        result.api = api_calls(muster)  # a fresh `muster run` each round: counted from 0
    complete, admitted, result.evicted = watch.seen()
    result.completed = len(complete)
    result.wall_s = (max(complete.values()) if complete else time.time()) - first
    running = watch.all_running(bench.jobs)
    result.to_running = [running[n] - created[n].sent for n in running if n in created]
    result.to_admitted = [admitted[n] - created[n].sent for n in admitted if n in created]
    return result


def _wait_complete(bench: Bench, result: Round, watch: PipelineWatch) -> None:
    """Until every Job is seen Complete and all its pods Running (the pod watch may trail the
    Job watch: 10 s more at most), or the round's timeout."""
    deadline = time.monotonic() + bench.args.timeout
    told = time.monotonic()
    total = len(bench.jobs)
    while time.monotonic() < deadline:
        done = len(watch.complete)
        if done >= total:
            deadline = min(deadline, time.monotonic() + 10)
            if len(watch.all_running(bench.jobs)) >= total:
                return
        if time.monotonic() - told >= 30:
            told = time.monotonic()
            bench.say(f"  round {result.number} {result.side}: {done}/{total} Jobs complete")
        time.sleep(0.2)
    bench.say(f"  round {result.number} {result.side}: timed out ({len(watch.complete)}/{total})")


def _check_stamps(result: Round, created: Mapping[str, Created]) -> None:
    """Every Job stamped by muster's webhook in (b), none in (a): or the round measured the
    wrong thing."""
    known = [c.annotations for c in created.values() if c.annotations is not None]
    stamped = sum(1 for annotations in known if SUBMITTED in annotations)
    expected = len(known) if result.side == "b" else 0
    if stamped != expected:
        raise RuntimeError(
            f"round {result.number} ({SIDE_NAMES[result.side]}): {stamped} of {len(known)} "
            f"Jobs stamped by the webhook, expected {expected}"
        )


def _stamped_on_dry_run(client: KubeClient, namespace: str, body: Mapping[str, Any]) -> bool:
    """Whether muster's webhook stamps a create of `body` now (a dry run: nothing is stored)."""
    stored = client.request("POST", kubeapi.JOBS.path(namespace), body, params={"dryRun": "All"})
    return SUBMITTED in (stored["metadata"].get("annotations") or {})


def _refuse_registered_webhook(client: KubeClient) -> None:
    """(a) needs a cluster without admission control: no muster webhook configuration."""
    from webhook.configuration import NAME
    from webhook.startup import CONFIG_PATH

    try:
        client.get(f"{CONFIG_PATH}/{NAME}")
    except ApiError as exc:
        if exc.status == 404:
            return
        raise
    raise RuntimeError(
        f"the MutatingWebhookConfiguration {NAME!r} is registered on this cluster (another "
        "muster run?): side (a) needs none; stop that muster, or let the bench start a cluster "
        "of its own (no --kubeconfig)"
    )


def _delete_namespace(client: KubeClient, namespace: str, timeout: float) -> None:
    """Delete the round's namespace and wait until it is gone: the next round must not pay for
    the deletion of this one's Jobs and pods."""
    path = kubeapi.NAMESPACES.path(name=namespace)
    with contextlib.suppress(ApiError):
        client.delete(path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            client.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return
            raise
        time.sleep(1.0)
    raise TimeoutError(f"namespace {namespace} still there {timeout:.0f} s after its deletion")


# ------------------------------------------------------------------------------- the figures
def side_figures(rounds: Sequence[Round]) -> dict[str, Any]:
    """One side's figures: the mean rate of its rounds, the percentiles over all its Jobs, the
    mean CPU seconds per round of each process."""
    to_running = [t for r in rounds for t in r.to_running]
    names = sorted({name for r in rounds for name in r.cpu_s})
    cpu = {name: sum(r.cpu_s.get(name, 0.0) for r in rounds) / len(rounds) for name in names}
    cluster_cpu = sum(v for k, v in cpu.items() if k != CLIENT)
    out: dict[str, Any] = {
        "rounds": len(rounds),
        "jobs_per_s": round(statistics.mean(r.jobs_per_s for r in rounds), 2),
        "create_to_running_p50_s": _rounded(percentile(to_running, 50)),
        "create_to_running_p99_s": _rounded(percentile(to_running, 99)),
        "cpu_s": {k: round(v, 1) for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])},
        "cpu_s_cluster": round(cluster_cpu, 1),
    }
    muster = sum(cpu.get(name, 0.0) for name in MUSTER)
    calls: dict[str, float] = defaultdict(float)
    for r in rounds:
        for kind, count in r.api.items():
            calls[kind] += count
    if calls:
        out["muster_api_per_job"] = per_gang(dict(calls), sum(r.completed for r in rounds))
    if muster:
        out["muster_cpu_share"] = round(muster / cluster_cpu, 3) if cluster_cpu else None
    return out


def summary(bench: Bench, rounds: Sequence[Round], load_start: float) -> dict[str, Any]:
    """The JSON line: every round, each side, and how (b) compares with (a)."""
    a = side_figures([r for r in rounds if r.side == "a"])
    b = side_figures([r for r in rounds if r.side == "b"])
    ratio = b["jobs_per_s"] / a["jobs_per_s"] if a["jobs_per_s"] else None
    p99_a, p99_b = a["create_to_running_p99_s"], b["create_to_running_p99_s"]
    p99_vs_a = p99_b / p99_a if p99_a and p99_b is not None else None
    return {
        "bench": "pipeline",
        "jobs": len(bench.jobs),
        "pods": sum(job.pods for job in bench.jobs),
        "nodes": bench.args.nodes,
        "load_avg_1m_start": round(load_start, 2),
        "load_avg_1m_end": round(os.getloadavg()[0], 2),
        "rounds": [r.figures() for r in rounds],
        "a": a,
        "b": b,
        "ratio": _rounded(ratio, 3),
        "p99_vs_a": _rounded(p99_vs_a, 3),
        "goal_met": {
            "ratio": ratio is not None and ratio >= 0.95,
            "p99": p99_vs_a is not None and p99_vs_a <= 1.10,
        },
    }


def print_table(line: Mapping[str, Any], say: Callable[[str], None]) -> None:
    a, b = line["a"], line["b"]
    say(f"{'':<28}{'(a) none':>12}{'(b) muster':>12}{'(b)/(a)':>10}")
    for key, label in (
        ("jobs_per_s", "Jobs completed/s"),
        ("create_to_running_p50_s", "create→running p50 s"),
        ("create_to_running_p99_s", "create→running p99 s"),
        ("cpu_s_cluster", "CPU s per round (cluster)"),
    ):
        va, vb = a.get(key), b.get(key)
        ratio = f"{vb / va:10.3f}" if va and vb is not None else f"{'':>10}"
        say(f"{label:<28}{_cell(va)}{_cell(vb)}{ratio}")
    say("CPU s per round, by process:")
    for name in sorted(set(a["cpu_s"]) | set(b["cpu_s"]), key=lambda n: -b["cpu_s"].get(n, 0.0)):
        say(f"  {name:<26}{_cell(a['cpu_s'].get(name))}{_cell(b['cpu_s'].get(name))}")
    if "muster_cpu_share" in b:
        say(f"muster's share of the cluster's CPU in (b): {b['muster_cpu_share']:.1%}")


def _cell(value: float | None) -> str:
    return f"{value:12.2f}" if value is not None else f"{'-':>12}"


# ------------------------------------------------------------------------------------ command
def run(args: argparse.Namespace) -> int:
    try:
        runtime = parse_runtime(args.runtime)
    except ValueError as exc:
        print(f"muster bench pipeline: {exc}", file=sys.stderr)
        return 2
    if min(args.jobs, args.rounds, args.max_pods, args.nodes) < 1 or args.warmup < 0:
        print(
            "muster bench pipeline: --jobs, --rounds, --max-pods and --nodes must be >= 1, "
            "--warmup >= 0"
        )
        return 2

    def say(message: str) -> None:
        if not args.json:
            print(message, file=sys.stderr, flush=True)

    load_start = os.getloadavg()[0]
    with bench_cluster(args.kubeconfig, name=args.name, nodes=args.nodes, log=say) as cluster:
        jobs = burst(args.jobs, args.max_pods, runtime, args.seed)
        return _rounds(cluster, args, jobs, load_start, say)


def _rounds(
    cluster: BenchCluster,
    args: argparse.Namespace,
    jobs: list[BurstJob],
    load_start: float,
    say: Callable[[str], None],
) -> int:
    """The warm-up pair and the measured rounds on `cluster`; prints the JSON line."""
    client = KubeClient.from_kubeconfig(cluster.kubeconfig)
    bench = Bench(args, client, cluster.kubeconfig, cluster.local, jobs, say)
    say(f"burst: {len(jobs)} Jobs, {sum(j.pods for j in jobs)} pods; {args.rounds} (a)/(b) pairs")
    try:
        create_namespaces_and_queues(client, (), [(bench.queue, {})])
        # The first burst on a fresh control plane is slower whichever side it is (kwok,
        # the scheduler and the apiserver warm their caches: 72.6 s against 38.8 s for the
        # same (a) burst a round later): an unmeasured pair of the burst's first Jobs first.
        warmup: list[Round] = []
        if args.warmup:
            small = dataclasses.replace(bench, jobs=jobs[: args.warmup])
            for side in SIDES:
                warmup.append(run_round(small, 0, side))
                _say_round(warmup[-1], len(small.jobs), say)
        rounds: list[Round] = []
        for number in range(1, args.rounds + 1):
            for side in SIDES:
                result = run_round(bench, number, side)
                rounds.append(result)
                _say_round(result, len(jobs), say)
        line = summary(bench, rounds, load_start)
        line["warmup"] = [r.figures() for r in warmup]
        if not args.json:
            print_table(line, say)
        print(json.dumps(line), flush=True)
        return 0 if all(r.completed == len(jobs) for r in rounds) else 1
    finally:
        with contextlib.suppress(ApiError, OSError):
            client.delete(f"{kubeapi.QUEUES.path()}/{bench.queue}")
        client.close()


def _say_round(result: Round, total: int, say: Callable[[str], None]) -> None:
    figures = result.figures()
    cpu = ", ".join(f"{k} {v}" for k, v in figures["cpu_s"].items())
    say(
        f"round {result.number} {SIDE_NAMES[result.side]}: {result.completed}/{total} Jobs in "
        f"{result.wall_s:.1f} s: {result.jobs_per_s:.2f} Jobs/s; create→running p50 "
        f"{figures['create_to_running_p50_s']} s, p99 {figures['create_to_running_p99_s']} s; "
        f"load {result.load_avg_1m:.2f}; cleanup {result.cleanup_s:.0f} s\n    CPU s: {cpu}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    return bench_main("muster bench pipeline", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
