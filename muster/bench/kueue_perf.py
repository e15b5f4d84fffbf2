"""`muster bench kueue-perf --generator FILE`: Kueue's own scheduler benchmark (sigs.k8s.io/kueue
`test/performance/scheduler`), run against muster the way Kueue's runner runs it against Kueue,
and reported with Kueue's metrics.

1. A control plane of etcd and kube-apiserver only (`LocalCluster(components=API_ONLY)`, as
   Kueue's envtest): no scheduler, no Job controller, no nodes, hence no pods. Admission is on
   quota alone (the Queues' `nodeFit: false`).
2. The generator's objects (`simulator.kueueperf`, the same mapping `muster trace
   from-kueue-perf` writes): cohorts as parent Queues, ClusterQueues as leaf Queues with the
   same quota and preemption, a namespace per ClusterQueue.
3. `muster run --local` (webhook and controller), as shipped.
4. The workloads, one-pod Jobs created through the webhook (so suspended) at the generator's
   pace: one creation loop per queue and workloads set, each waiting `creationIntervalMs`
   before each create, as Kueue's generator does; `--creators` threads send them.
5. The runner (`muster.bench.kueue_runner`): marks each admitted Job complete through its
   status subresource `runtimeMs` after it saw the admission, so muster sees it end.
6. When every workload finished: Kueue's figures (wall time, per workload class the mean time
   to admission and to finish and the evictions, per queue class the usage of nominal quota),
   muster's CPU seconds (controller and webhook, from /proc) and its API requests and writes
   per workload (`muster_api_requests_total`, `muster_api_writes_total`), the apiserver's and
   etcd's CPU, and the load average; a table, and one JSON line (`--json`: only the line).

Wall time is Kueue's: from the start of the admission controller's process (Kueue's
`minimalkueue`; here `muster run`) to the last workload's finish.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from admission.crd import queue_crd
from admission.launcher import LaunchError, MusterRun, launch, stop_process
from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from muster.bench import bench_main
from muster.bench.admit import api_calls, child_pids, per_gang
from muster.bench.kueue_runner import Recorder, Runner, figures, latencies
from policies.resources import format_quantity
from policies.vocabulary import PRIORITY, QUEUE
from simulator.controlplane.cluster import LocalCluster, controller_kubeconfig
from simulator.controlplane.components import API_ONLY
from simulator.controlplane.processes import cpu_seconds
from simulator.kueueperf import (
    Generator,
    KueuePerfError,
    PerfWorkload,
    cohort_names,
    load_generator,
    queues,
    workloads,
)

CLASS_LABEL = "bench.muster.dev/class"
"""The workload's class on its Job, for people looking at the cluster (the runner knows it)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--generator", required=True, help="Kueue's generator.yaml")
    parser.add_argument("--creators", type=int, default=16, help="threads sending the creates")
    parser.add_argument(
        "--patchers", type=int, default=16, help="threads marking Jobs complete (16)"
    )
    parser.add_argument(
        "--timeout", type=float, default=1800, help="seconds to wait for every finish (1800)"
    )
    parser.add_argument(
        "--nodes",
        choices=("quota", "none"),
        default="quota",
        help="quota (default): one Node object, nothing running on it, whose cpu is the sum of "
        "the queues' nominal quota (the trace's one node); none: no Node, as Kueue's runner "
        "(muster then serializes every gang: docs/benchmarks.md)",
    )
    parser.add_argument("--name", default="bench-kueue-perf", help="the control plane's name")
    parser.add_argument(
        "--muster-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="pass ARG to the `muster run --local` it starts (repeatable)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="record muster's controller and webhook processes with py-spy (raw, 50 Hz, "
        "non-blocking, the thread holding the interpreter: where its CPU goes) from the "
        "generator's start to the end, into DIR (py-spy must be installed beside muster)",
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    parser.epilog = (
        "examples:\n"
        "  muster bench kueue-perf --generator ../shared/bench/kueue-perf/baseline/generator.yaml\n"
        "  muster bench kueue-perf --generator generator.yaml --json"
    )


def job_body(workload: PerfWorkload) -> dict[str, Any]:
    """The workload's one-pod Job: its queue, priority and cpu request; the webhook suspends and
    stamps it."""
    container = {"name": "w", "image": "x", "resources": {"requests": {"cpu": workload.request}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": workload.name,
            "labels": {QUEUE: workload.queue, CLASS_LABEL: workload.class_name},
            "annotations": {PRIORITY: str(workload.priority)},
        },
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


class Pacer:
    """Kueue's generator's pace: one creation loop per queue and workloads set (a `stream`),
    each waiting its interval before each create, counted from when its previous create
    returned. `create` sends one workload's create and returns when it is stored."""

    def __init__(
        self,
        items: Sequence[PerfWorkload],
        create: Callable[[PerfWorkload], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.create = create
        self.clock = clock
        self.streams: dict[int, list[PerfWorkload]] = {}
        for w in reversed(items):  # popped from the end: the stream's first comes last
            self.streams.setdefault(w.stream, []).append(w)
        self.errors: list[str] = []
        self.first: float | None = None
        self.last: float | None = None
        self._due: list[tuple[float, int]] = []
        self._busy = 0
        self._wake = threading.Condition()
        self._stopped = False

    def stop(self) -> None:
        """Create nothing more (creates already sent finish)."""
        with self._wake:
            self._stopped = True
            self._wake.notify_all()

    def run(self, pool: Executor) -> None:
        """Create every workload at its pace, each create on `pool`; returns when the last
        create returned."""
        start = self.clock()
        with self._wake:
            for stream, pending in self.streams.items():
                heapq.heappush(self._due, (start + pending[-1].interval_ms / 1000, stream))
        while True:
            with self._wake:
                if self._stopped:
                    return
                if not self._due:
                    if not self._busy:
                        return
                    self._wake.wait(1.0)
                    continue
                due, stream = self._due[0]
                wait = due - self.clock()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                heapq.heappop(self._due)
                self._busy += 1
            try:
                pool.submit(self._one, stream)
            except RuntimeError:  # the pool was shut down: the run is over
                return

    def _one(self, stream: int) -> None:
        workload = self.streams[stream].pop()
        try:
            self.create(workload)
        except (ApiError, OSError) as exc:
            self.errors.append(f"create {workload.queue}/{workload.name}: {exc}")
        returned = self.clock()
        with self._wake:
            self.first = returned if self.first is None else min(self.first, returned)
            self.last = returned if self.last is None else max(self.last, returned)
            if self.streams[stream]:
                following = self.streams[stream][-1]
                heapq.heappush(self._due, (returned + following.interval_ms / 1000, stream))
            self._busy -= 1
            self._wake.notify()


def create_one(client: KubeClient, workload: PerfWorkload) -> None:
    """Create the workload's Job, retrying what the apiserver throttles or fails for a while;
    a Job already there (a retried create that went through) counts as created."""
    path = kubeapi.JOBS.path(workload.queue)
    body = job_body(workload)
    for attempt in range(40):
        try:
            client.create(path, body)
            return
        except ApiError as exc:
            if exc.status == 409:
                return
            if (exc.status < 500 and exc.status != 429) or attempt == 39:
                raise
            time.sleep(0.25)


QUOTA_NODE = "kueue-perf-quota"


def quota_node(generator: Generator) -> dict[str, Any]:
    """A Node object whose allocatable cpu is every queue's nominal quota together: the most
    the queues can ever hold at once (cohorts have no quota of their own). Nothing runs on it
    (no kubelet, no scheduler, no pods); it gives the cluster the capacity that muster's
    size-ratio rule and DRF shares are fractions of. A cluster with no node has no cpu, so
    every gang would be bigger than any size ratio (docs/benchmarks.md)."""
    total = sum(q.nominal_milli for q in queues(generator))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": QUOTA_NODE, "labels": {"kubernetes.io/hostname": QUOTA_NODE}},
        "status": {
            "allocatable": {"cpu": format_quantity("cpu", total)},
            "capacity": {"cpu": format_quantity("cpu", total)},
        },
    }


def make_objects(client: KubeClient, generator: Generator, with_node: bool) -> None:
    """Step 2: the Queue CRD, the cohorts and queues as Queues, a namespace per queue, and
    (`with_node`) the quota node."""
    from simulator.controlplane.minicluster import apply_crd

    apply_crd(client, queue_crd())
    path = kubeapi.QUEUES.path()
    made: list[tuple[str, dict[str, Any]]] = [(name, {}) for name in cohort_names(generator)]
    made += [(q.name, q.spec) for q in queues(generator)]
    for name, spec in made:
        body = {"apiVersion": "muster.dev/v1alpha1", "kind": "Queue", "metadata": {"name": name}}
        client.create(path, {**body, "spec": spec})
    for q in queues(generator):
        client.create(kubeapi.NAMESPACES.path(), {"metadata": {"name": q.name}})
    if with_node:
        client.create(kubeapi.NODES.path(), quota_node(generator))


def run(args: argparse.Namespace) -> int:
    def say(message: str) -> None:
        if not args.json:
            print(message, file=sys.stderr, flush=True)

    if args.creators < 1 or args.patchers < 1 or args.timeout <= 0:
        print(
            "muster bench kueue-perf: --creators and --patchers must be at least 1, "
            "--timeout positive",
            file=sys.stderr,
        )
        return 2
    if args.profile is not None and _py_spy() is None:
        print(
            "muster bench kueue-perf: --profile needs py-spy: pip install py-spy", file=sys.stderr
        )
        return 2

    try:
        generator = load_generator(args.generator)
    except KueuePerfError as exc:
        print(f"muster bench kueue-perf: {exc}", file=sys.stderr)
        return 2
    cluster = LocalCluster(name=args.name, components=API_ONLY, log=say)
    if cluster.is_healthy():
        print(
            f"muster bench kueue-perf: a control plane named {args.name!r} runs already; "
            "stop it (muster cluster down --name ...) or pass another --name",
            file=sys.stderr,
        )
        return 1
    cluster.up()
    try:
        return _run_on(cluster, generator, args, say)
    finally:
        cluster.down(quiet=True)


def _run_on(
    cluster: LocalCluster,
    generator: Generator,
    args: argparse.Namespace,
    say: Callable[[str], None],
) -> int:
    """Steps 2 to 6 on the control plane `cluster`."""
    client = cluster.client()
    items = workloads(generator)
    say(
        f"{len(items)} workloads, {len(queues(generator))} queues in "
        f"{len(cohort_names(generator))} cohorts; creating the queues ..."
    )
    make_objects(client, generator, with_node=args.nodes == "quota")
    recorder = Recorder(items)
    runner = Runner(client, recorder, patchers=args.patchers)
    runner.start()
    pids = cluster.component_pids()
    run = Measured(load_start=os.getloadavg()[0], launched=time.time())
    try:
        muster = launch(
            controller_kubeconfig(cluster.kubeconfig),
            *args.muster_arg,
            status=False,
            keep_lines=200,
        )
    except LaunchError as exc:
        runner.stop()
        client.close()
        print(f"muster bench kueue-perf: {exc}", file=sys.stderr)
        return 1
    try:
        pids["muster"] = muster.pid
        for child in child_pids(muster.pid):
            pids["muster-webhook"] = child
        _generate_and_wait(client, items, recorder, muster, run, pids, args, say)
    finally:
        runner.stop()
        muster.stop(timeout=60)
        client.close()
    result = report(generator, args.generator, recorder, runner, run)
    if not args.json:
        _print_table(result)
    print(json.dumps(result), flush=True)
    return 0 if result["finished"] == result["workloads"] else 1


class Measured:
    """What one run measured besides the recorder's events."""

    def __init__(self, load_start: float, launched: float) -> None:
        self.load_start = load_start
        self.launched = launched
        """When `muster run` was started: the start of Kueue's wall time."""
        self.began = launched
        """When the generator started: a queue's first event."""
        self.created: tuple[float | None, float | None] = (None, None)
        self.cpu_s: dict[str, float] = {}
        """CPU seconds of each process from the generator's start to the end (muster's, from
        its own start: all of it)."""
        self.api: dict[str, float] = {}
        self.errors: list[str] = []
        self.load_end = 0.0


def _generate_and_wait(
    client: KubeClient,
    items: Sequence[PerfWorkload],
    recorder: Recorder,
    muster: MusterRun,
    run: Measured,
    pids: dict[str, int],
    args: argparse.Namespace,
    say: Callable[[str], None],
) -> None:
    """Steps 4 and 5 run; wait until every workload finished (or --timeout, or muster
    exits), reading the CPU and muster's API calls at the end."""

    def create(workload: PerfWorkload) -> None:
        create_one(client, workload)
        recorder.created((workload.queue, workload.name), time.time())

    profiles = [
        _profile(pids[name], args.profile / f"{name}.txt")
        for name in ("muster", "muster-webhook")
        if args.profile is not None and name in pids
    ]
    before = {name: cpu_seconds(pid) or 0.0 for name, pid in pids.items()}
    before["muster"] = before["muster-webhook"] = 0.0  # all of muster's: Kueue's CPU is too
    client_before = time.process_time()
    pacer = Pacer(items, create)
    pool = ThreadPoolExecutor(args.creators, thread_name_prefix="kperf-create")
    run.began = time.time()
    creating = threading.Thread(target=pacer.run, args=(pool,), name="kperf-pacer", daemon=True)
    creating.start()
    try:
        _wait_for_finishes(recorder, len(items), muster, run.began + args.timeout, say)
    finally:
        # However the wait ended (all finished, the timeout, Ctrl-C): no create is left
        # queued, or the interpreter would wait for them all before it exits.
        pacer.stop()
        pool.shutdown(wait=False, cancel_futures=True)
        creating.join(timeout=60)
        for profile in profiles:
            # py-spy writes what it recorded when interrupted, as on Ctrl-C.
            stop_process(profile, signal.SIGINT, timeout=30)
    after = {name: cpu_seconds(pid) for name, pid in pids.items()}
    run.cpu_s = {k: round(v - before[k], 2) for k, v in after.items() if v is not None}
    run.cpu_s["bench"] = round(time.process_time() - client_before, 2)
    run.api = api_calls(muster)
    run.created = (pacer.first, pacer.last)
    run.errors = pacer.errors[-10:]
    run.load_end = os.getloadavg()[0]
    if not muster.alive():
        run.errors.append("muster run exited:\n" + muster.tail(20))


def _wait_for_finishes(
    recorder: Recorder,
    total: int,
    muster: MusterRun,
    deadline: float,
    say: Callable[[str], None],
) -> None:
    """Until every workload finished, the deadline passed or muster exited; progress every
    10 s."""
    began = shown = time.time()
    while time.time() < deadline and muster.alive():
        created, admitted, finished = recorder.counts()
        if finished >= total:
            return
        if time.time() - shown >= 10:
            shown = time.time()
            say(
                f"  {shown - began:5.0f} s: {created} created, {admitted} admitted now, "
                f"{finished} finished, {recorder.evictions} evictions"
            )
        time.sleep(0.2)


def _py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _profile(pid: int, out: Path) -> subprocess.Popen[str]:
    """py-spy recording `pid` into `out` (raw: one line per stack, folded) until interrupted.
    50 Hz, not 100: sampling a process of some 40 threads costs py-spy a good part of a core
    at 100 Hz, on the two cores the run needs."""
    out.parent.mkdir(parents=True, exist_ok=True)
    py_spy = _py_spy()
    assert py_spy is not None
    argv = [py_spy, "record", "-p", str(pid), "-r", "50", "-f", "raw", "--nonblocking", "--gil"]
    argv += ["-o", str(out)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)


def report(
    generator: Generator, source: str, recorder: Recorder, runner: Runner, run: Measured
) -> dict[str, Any]:
    """The run's figures: Kueue's, then muster's costs."""
    seen = list(recorder.seen.values())
    n = len(seen)
    ends = [s.finished for s in seen if s.finished is not None]
    last = max(ends) if ends else None
    first_created, last_created = run.created
    summary = figures(seen, queues(generator), run.began)
    muster_cpu = run.cpu_s.get("muster", 0.0) + run.cpu_s.get("muster-webhook", 0.0)
    admissions = sum(s.admissions for s in seen)
    writes = run.api.get("writes", 0.0)
    return {
        "bench": "kueue-perf",
        "generator": source,
        "workloads": n,
        "queues": len(queues(generator)),
        "cohorts": len(cohort_names(generator)),
        "finished": len(ends),
        "wall_s": _round(last - run.launched if last else None),
        "generation_s": _round(last_created - run.began if last_created is not None else None),
        "generation_due_s": round(max((w.due_ms for w in recorder.workloads), default=0) / 1000, 1),
        "create_to_last_finish_s": _round(
            last - first_created if last is not None and first_created is not None else None
        ),
        **summary,
        "evictions": sum(s.evictions for s in seen),
        "admissions": admissions,
        "latency": latencies(seen),
        "cpu_s": run.cpu_s,
        "muster_cpu_s": round(muster_cpu, 2),
        "muster_cpu_ms_per_workload": _round(1000 * muster_cpu / n if n else None),
        "muster_cpu_ms_per_admission": _round(
            1000 * muster_cpu / admissions if admissions else None
        ),
        "apiserver_cpu_ms_per_workload": _round(
            1000 * run.cpu_s.get("kube-apiserver", 0.0) / n if n else None
        ),
        "muster_api_per_workload": per_gang(run.api, n),
        "muster_writes_per_admission": _round(writes / admissions if admissions else None),
        "bench_writes_per_workload": _round((n + runner.patches) / n if n else None),
        "load_avg_1m_start": round(run.load_start, 2),
        "load_avg_1m_end": round(run.load_end, 2),
        "errors": run.errors + runner.errors[-10:],
    }


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def _print_table(result: dict[str, Any]) -> None:
    def line(label: str, value: object) -> None:
        print(f"{label:<44} {value}", file=sys.stderr)

    line("workloads finished", f"{result['finished']} of {result['workloads']}")
    line("wall (muster start to last finish), s", result["wall_s"])
    line("generation (start to last create), s", result["generation_s"])
    for name, q in result["queue_classes"].items():
        line(
            f"queue class {name}: usage / min / mean, %",
            f"{q['usage_pct']} / {q['min_queue_usage_pct']} / {q['mean_queue_usage_pct']}",
        )
    for name, c in result["classes"].items():
        line(
            f"{name}: to admission / to finish, s; evictions",
            f"{c['avg_time_to_admission_s']} / {c['avg_time_to_finish_s']}; {c['evictions']}",
        )
    line(
        "muster CPU s (ms per workload)",
        f"{result['muster_cpu_s']} ({result['muster_cpu_ms_per_workload']})",
    )
    line("muster writes per admission", result["muster_writes_per_admission"])
    for name, lag in result["latency"].items():
        line(f"latency {name} p50 / p90", f"{lag['p50']} / {lag['p90']}")
    line("CPU s by process", result["cpu_s"])
    line(
        "load average (1 min) at start / end",
        f"{result['load_avg_1m_start']} / {result['load_avg_1m_end']}",
    )
    for error in result["errors"]:
        line("error", error)


def main(argv: Sequence[str] | None = None) -> int:
    return bench_main("muster bench kueue-perf", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
