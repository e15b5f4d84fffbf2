"""`muster bench admit`: gangs admitted per second by `muster run` from a burst, next to the
apiserver's raw PATCH rate measured in the same run, and the controller's memory.

Steps: (1) a control plane (started here, or --kubeconfig); (2) raw PATCH/s of that apiserver
(`muster.bench.apiserver.measure_patches`, before muster runs); (3) `muster run --local` as a
subprocess; (4) --jobs labelled one-pod Jobs created from --submitters threads into an unlimited
queue; gangs/s = jobs / (last `muster.dev/admitted` time - first create); (5) optionally a
--backlog of Jobs created while only the webhook runs, then the controller started: admission
from when it is ready (/healthz synced) to the last admission, bound by the controller and its
PATCHes, not by Job creation; (6) optionally --rss-pending N Jobs left pending in a queue with
room for one of them, and the controller's RSS then: in the controller that ran the burst, and
in a fresh one started over the same objects. Prints a table and one JSON line.

On a 2-core machine the burst is bound by CPU shared by every component, so the bench also
reports the CPU seconds each process used during the burst (from /proc: the control plane's
components when the cluster is a local one, muster, and this client): a figure that, unlike
wall time, does not move much when other work shares the cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

from admission.crd import queue_crd
from admission.launcher import LaunchError, MusterRun, launch
from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from muster.bench.harness import BenchCluster, bench_cluster, job_body
from policies.vocabulary import ADMITTED
from simulator.controlplane.cluster import LocalCluster, controller_kubeconfig
from simulator.kwok_watch import WatchCache

QUEUES = kubeapi.QUEUES.path()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--submitters", type=int, default=16, help="threads creating Jobs")
    parser.add_argument("--patches", type=int, default=3000, help="raw PATCHes to time")
    parser.add_argument("--concurrency", type=int, default=32, help="raw PATCH threads")
    parser.add_argument(
        "--backlog",
        type=int,
        default=0,
        help="also time admitting N Jobs created while no controller ran (controller-bound)",
    )
    parser.add_argument("--rss-pending", type=int, default=0, help="also measure RSS at N pending")
    parser.add_argument("--kubeconfig", help="use this cluster instead of starting one")
    parser.add_argument("--name", default="bench-admit", help="cluster name when starting one")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    parser.epilog = (
        "examples:\n"
        "  muster bench admit --jobs 5000 --nodes 1000 --json\n"
        "  muster bench admit --jobs 2000 --backlog 5000 --rss-pending 10000"
    )


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def child_pids(pid: int) -> list[int]:
    """Pids of the direct children of `pid` (muster's webhook process)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def api_calls(run: MusterRun) -> dict[str, float]:
    """The controller's API calls so far (`MusterRun.api_figures` without its admissions):
    `requests`, `writes` and `writes:KIND`. Empty if the metrics cannot be read."""
    figures = run.api_figures()
    figures.pop("admitted", None)
    return figures


def per_gang(calls: dict[str, float], gangs: int) -> dict[str, float]:
    """`api_calls` figures divided by the gangs they served (rounded)."""
    return {k: round(v / gangs, 3) for k, v in sorted(calls.items())} if gangs else {}


def cpu_of(pids: dict[str, int]) -> dict[str, float]:
    from simulator.controlplane.processes import cpu_seconds

    out = {}
    for name, pid in pids.items():
        value = cpu_seconds(pid)
        if value is not None:
            out[name] = value
    out["bench-client"] = time.process_time()
    return out


def _create_many(
    client: KubeClient,
    namespace: str,
    names: list[str],
    queue: str,
    threads: int,
    runtime: str = "2s",
) -> float:
    """Create one-pod Jobs named `names` for `queue`; return when the first create was sent."""
    bodies = [job_body(name, queue, runtime=runtime) for name in names]
    sent = create_jobs(client, namespace, bodies, threads)
    return min(created.sent for created in sent.values())


class Created(NamedTuple):
    """One Job created by `create_jobs`: when its create was sent, and the annotations of the
    stored object (what the webhook stamped; None when a retried create found it created)."""

    sent: float
    annotations: dict[str, str] | None


def create_jobs(
    client: KubeClient,
    namespace: str,
    bodies: list[dict[str, Any]],
    threads: int,
    on_created: Callable[[], None] | None = None,
) -> dict[str, Created]:
    """Create the Jobs `bodies` from `threads` threads, retrying what the apiserver throttles or
    fails; each Job's create time and stored annotations, by name. `on_created` is called
    after each one (from the creating thread), e.g. to show progress."""
    path = kubeapi.JOBS.path(namespace)

    def create(body: dict[str, Any]) -> tuple[str, Created]:
        created = _create_one(client, path, body)
        if on_created is not None:
            on_created()
        return body["metadata"]["name"], created

    with ThreadPoolExecutor(threads) as pool:
        return dict(pool.map(create, bodies))


def _create_one(client: KubeClient, path: str, body: dict[str, Any]) -> Created:
    sent = time.time()
    for attempt in range(20):
        try:
            stored = client.create(path, body)
            return Created(sent, stored["metadata"].get("annotations") or {})
        except ApiError as exc:
            if exc.status == 409:
                return Created(sent, None)
            if (exc.status < 500 and exc.status != 429) or attempt == 19:
                raise
            time.sleep(0.2)
    raise AssertionError("unreachable")


def start_muster(kubeconfig: Path, *flags: str) -> tuple[MusterRun, float]:
    """Start `muster run --local` with `flags` (no status service); return it once it is
    ready, and when."""
    try:
        run = launch(controller_kubeconfig(kubeconfig), *flags, status=False)
    except LaunchError as exc:
        raise RuntimeError(str(exc)) from exc
    return run, time.time()


class AdmissionWatch:
    """Records when each Job of a namespace is first seen admitted (its `muster.dev/admitted`
    annotation arrives on a watch): the time the admission landed in the API, not the decision
    time the annotation carries (a cycle stamps all its admissions with one time)."""

    def __init__(self, client: KubeClient, namespace: str) -> None:
        self.seen: dict[str, float] = {}
        self._cache = WatchCache(
            KubeClient(client.credentials),  # the watch cache closes its client when stopped
            kubeapi.JOBS.path(namespace),
            {},
            name=f"admissions-{namespace}",
            on_object=self._saw,
        )

    def _saw(self, job: dict[str, Any]) -> None:
        meta = job.get("metadata") or {}
        if ADMITTED in (meta.get("annotations") or {}):
            self.seen.setdefault(meta.get("name", ""), time.time())

    def start(self) -> AdmissionWatch:
        self._cache.start()
        return self

    def wait(self, count: int, timeout: float) -> list[float]:
        """Times at which Jobs were first seen admitted, once `count` were (or at the timeout)."""
        deadline = time.time() + timeout
        while len(self.seen) < count and time.time() < deadline:
            time.sleep(0.1)
        return sorted(self.seen.values())

    def stop(self) -> None:
        self._cache.stop()


def run(args: argparse.Namespace) -> int:
    def say(message: str) -> None:
        if not args.json:
            print(message, file=sys.stderr, flush=True)

    with bench_cluster(args.kubeconfig, name=args.name, nodes=args.nodes, log=say) as cluster:
        return _run_on(cluster, args, say)


def _run_on(cluster: BenchCluster, args: argparse.Namespace, say: Callable[[str], None]) -> int:
    """Steps 2 to 6 on the cluster of step 1."""
    kubeconfig, observed = cluster.kubeconfig, cluster.local
    client = KubeClient.from_kubeconfig(kubeconfig)
    procs: list[MusterRun] = []
    watches: list[AdmissionWatch] = []
    stamp = int(time.time())
    ns, raw_ns, backlog_ns = f"bench-admit-{stamp}", f"bench-raw-{stamp}", f"bench-backlog-{stamp}"
    # The pending Jobs' queue has room for one of them (100m cpu): the first runs for an hour,
    # the others wait behind it (QuotaExceeded), as gangs in a busy queue do. (A quota smaller
    # than one Job would have them rejected as never fitting, and later failed.)
    queues = [(ns, {}), (f"{ns}-full", {"nominal": {"cpu": "100m"}}), (backlog_ns, {})]
    try:
        create_namespaces_and_queues(client, (ns, raw_ns, backlog_ns), queues)
        # 2. Raw PATCH/s of this apiserver, before muster adds load.
        raw_rate = _raw_patch_rate(client, raw_ns, args)
        say(f"raw PATCH/s: {raw_rate:.0f}")
        # 3. muster run --local (webhook in a child process, controller in the parent).
        proc, _ = start_muster(kubeconfig)
        procs.append(proc)
        # 4. The burst: from the first create to the last admission.
        result = _burst(args, client, ns, proc, observed, watches, raw_rate, say)
        ok = result["admitted"] >= args.jobs
        # 5. A backlog: Jobs created (suspended, stamped by the webhook alone) while no
        #    controller runs; then the controller starts and admits them. From when it is ready
        #    to the last admission, admission is bound by the controller and PATCHes only.
        if args.backlog:
            proc.stop(timeout=60)
            proc, figures = _backlog(
                args, client, kubeconfig, backlog_ns, procs, watches, raw_rate, say
            )
            result.update(figures)
            ok = ok and result["backlog_admitted"] >= args.backlog
        # 6. RSS with N gangs pending.
        if args.rss_pending:
            result.update(_rss_at_pending(args, client, kubeconfig, ns, proc, procs, say))
        print(json.dumps(result), flush=True)
        return 0 if ok else 1
    finally:
        for w in watches:
            w.stop()
        for process in procs:
            process.stop(timeout=60)
        for name, _spec in queues:
            with contextlib.suppress(ApiError, OSError):
                client.delete(f"{QUEUES}/{name}")
        for name in (ns, raw_ns, backlog_ns):
            with contextlib.suppress(ApiError, OSError):
                client.delete(kubeapi.NAMESPACES.path(name=name))
        client.close()


def create_namespaces_and_queues(
    client: KubeClient, namespaces: tuple[str, ...], queues: list[tuple[str, dict[str, Any]]]
) -> None:
    """Step 1's objects: the Queue CRD, the bench's namespaces and its queues."""
    from simulator.controlplane.minicluster import apply_crd

    apply_crd(client, queue_crd())
    for name in namespaces:
        client.create(kubeapi.NAMESPACES.path(), {"metadata": {"name": name}})
    for queue, spec in queues:
        client.create(
            QUEUES,
            {
                "apiVersion": "muster.dev/v1alpha1",
                "kind": "Queue",
                "metadata": {"name": queue},
                "spec": spec,
            },
        )


def _raw_patch_rate(client: KubeClient, raw_ns: str, args: argparse.Namespace) -> float:
    """Step 2: PATCH/s of the apiserver on 64 unqueued Jobs, before muster runs."""
    from muster.bench.apiserver import measure_patches

    raw_jobs = [f"raw-{i}" for i in range(64)]
    for name in raw_jobs:
        client.create(kubeapi.JOBS.path(raw_ns), job_body(name, None, suspend=True))
    raw = measure_patches(client, raw_ns, raw_jobs, args.patches, args.concurrency)
    return float(raw["patch_per_s"])


def _burst(
    args: argparse.Namespace,
    client: KubeClient,
    ns: str,
    proc: MusterRun,
    observed: LocalCluster | None,
    watches: list[AdmissionWatch],
    raw_rate: float,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Step 4: create --jobs Jobs and time them to their admission; the result's figures."""
    pids = observed.component_pids() if observed is not None else {}
    pids["muster"] = proc.pid
    for child in child_pids(proc.pid):
        pids["muster-webhook"] = child
    cpu_before = cpu_of(pids)
    names = [f"g-{i:05d}" for i in range(args.jobs)]
    say(f"creating {args.jobs} Jobs from {args.submitters} threads ...")
    watch = AdmissionWatch(client, ns).start()
    watches.append(watch)
    first = _create_many(client, ns, names, ns, args.submitters)
    created = time.time()
    times = watch.wait(args.jobs, 600)
    last = max(times) if times else time.time()
    cpu_after = cpu_of(pids)
    cpu = {k: round(cpu_after[k] - v, 1) for k, v in cpu_before.items() if k in cpu_after}
    gangs_per_s = len(times) / max(last - first, 1e-9)
    rss = _rss_mb(proc.pid)
    muster_cpu = cpu.get("muster", 0.0) + cpu.get("muster-webhook", 0.0)
    result: dict[str, Any] = {
        "jobs": args.jobs,
        "admitted": len(times),
        "nodes": args.nodes,
        "create_s": round(created - first, 2),
        "admit_s": round(last - first, 2),
        "gangs_per_s": round(gangs_per_s, 1),
        "raw_patch_per_s": round(raw_rate, 1),
        "ratio": round(gangs_per_s / raw_rate, 3),
        "controller_rss_mb": round(rss, 1),
        "cpu_s": cpu,
        "muster_cpu_ms_per_gang": round(1000 * muster_cpu / max(len(times), 1), 2),
        "api_per_gang": per_gang(api_calls(proc), len(times)),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    if not args.json:
        say(f"burst CPU seconds (first create to last admit, {last - first:.1f} s wall):")
        for name, seconds in sorted(cpu.items(), key=lambda kv: -kv[1]):
            say(f"  {name:<24} {seconds:7.1f}")
    return result


def _backlog(
    args: argparse.Namespace,
    client: KubeClient,
    kubeconfig: Path,
    backlog_ns: str,
    procs: list[MusterRun],
    watches: list[AdmissionWatch],
    raw_rate: float,
    say: Callable[[str], None],
) -> tuple[MusterRun, dict[str, Any]]:
    """Step 5: the backlog's figures, and the controller that admitted it (it runs on)."""
    webhook, _ = start_muster(kubeconfig, "--no-controller")
    procs.append(webhook)
    backlog = [f"b-{i:05d}" for i in range(args.backlog)]
    say(f"creating a backlog of {args.backlog} Jobs with no controller running ...")
    _create_many(client, backlog_ns, backlog, backlog_ns, args.submitters)
    bwatch = AdmissionWatch(client, backlog_ns).start()
    watches.append(bwatch)
    started = time.time()
    controller, ready = start_muster(kubeconfig, "--no-webhook")
    procs.append(controller)
    cpu_start = cpu_of({"muster": controller.pid})["muster"]
    btimes = bwatch.wait(args.backlog, 600)
    blast = max(btimes) if btimes else time.time()
    bcpu = (cpu_of({"muster": controller.pid}).get("muster") or 0.0) - cpu_start
    # The controller admits before (or as) it is seen ready; count from its start.
    backlog_rate = len(btimes) / max(blast - min(ready, btimes[0] if btimes else ready), 1e-9)
    figures = {
        "backlog": args.backlog,
        "backlog_admitted": len(btimes),
        "backlog_start_s": round(ready - started, 2),
        "backlog_admit_s": round(blast - ready, 2),
        "backlog_gangs_per_s": round(backlog_rate, 1),
        "backlog_ratio": round(backlog_rate / raw_rate, 3),
        "backlog_controller_cpu_s": round(bcpu, 1),
    }
    say(
        f"backlog: {len(btimes)} admitted in {blast - ready:.1f} s after the controller "
        f"was ready ({ready - started:.1f} s to start): {backlog_rate:.0f} gangs/s"
    )
    return controller, figures


def _rss_at_pending(
    args: argparse.Namespace,
    client: KubeClient,
    kubeconfig: Path,
    ns: str,
    proc: MusterRun,
    procs: list[MusterRun],
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Step 6: the controller's (and its webhook's) RSS with --rss-pending Jobs pending: in the
    controller that ran the burst (it also holds the burst's finished Jobs), then in a fresh
    `muster run` started over the same objects (what a restarted or new replica holds)."""
    pending = [f"p-{i:05d}" for i in range(args.rss_pending)]
    say(f"creating {args.rss_pending} pending Jobs ...")
    _create_many(client, ns, pending, f"{ns}-full", args.submitters, runtime="1h")
    time.sleep(10)
    figures: dict[str, Any] = {
        "pending": args.rss_pending,
        "controller_rss_mb_at_pending": round(_rss_mb(proc.pid), 1),
    }
    for child in child_pids(proc.pid):
        figures["webhook_rss_mb_at_pending"] = round(_rss_mb(child), 1)
    say("a fresh controller over them ...")
    # Stopping `proc` stops its webhook child with it, if it has one; creates are done.
    proc.stop(timeout=60)
    fresh, _ = start_muster(kubeconfig, "--no-webhook")
    procs.append(fresh)
    time.sleep(10)  # a few plan cycles and an estimate refresh over the backlog
    figures["controller_rss_mb_at_pending_fresh"] = round(_rss_mb(fresh.pid), 1)
    say(
        f"RSS with {args.rss_pending} pending: controller {figures['controller_rss_mb_at_pending']}"
        f" MB after the burst, {figures['controller_rss_mb_at_pending_fresh']} MB freshly started"
    )
    return figures
