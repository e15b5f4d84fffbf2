"""`muster bench status`: the status service at scale, end to end. A thousand clients long-poll a
controller that holds ten thousand gangs; what do they wait for an answer, how soon are they
woken when their gang changes, and what do they cost the apiserver?

Steps:

1. A control plane (started here with --nodes kwok nodes, or --kubeconfig), the Queue CRD, a
   namespace and a Queue whose quota (100m cpu) holds one Job of 100m.
2. --gangs suspended one-pod Jobs of 100m cpu for that queue, created from --creators threads
   (progress on stderr), labelled and stamped (`muster.dev/submitted`, in name order) as the
   webhook would: the controller runs without its webhook (`--no-webhook`), which is not what is
   measured here. The first Job is admitted and runs (a kwok pod without a runtime runs until
   deleted); every other one waits, QuotaExhausted.
3. `muster run --local --no-webhook --status-auth none` (the status service on loopback; no
   token asked, so no TokenReview or SubjectAccessReview), ready when its status service counts
   every gang. With `--status-auth kubernetes`, a ServiceAccount that may get the namespace's
   Jobs and --tokens tokens of it (TokenRequest; default one per poller, as pods each have
   their own): the controller reviews each token and each caller's access with the apiserver,
   cached for a minute (kubeport/statusauth.py), which the apiserver's counter then shows.
4. Idle window (--window seconds), once the apiserver is quiet (below 2 requests/s over 5 s,
   twice: the Job controller posts an Event for each new suspended Job, a backlog that takes a
   while): the apiserver's `apiserver_request_total` (summed over every label) before and
   after, with nothing but the controller and the control plane running; and everyone's CPU.
5. Polling window (as long): --pollers clients start in another process
   (muster/bench/status_pollers.py), one per waiting gang, over --ramp seconds, each looping as
   the stdlib snippet of docs/metrics.md does: `GET /v1/gangs/NS/NAME?wait=W&since=V`. Once all
   hold a request, --answers GETs without `wait` (answered at once) of random waiting gangs go
   one after another, spread over the rest of the window: the answer latency while the pollers
   hold. The first GET of each poller (`since=0`, answered at once as it joins) is reported
   apart. `apiserver_request_total` before and after: requests added = this window's minus the
   idle window's (scaled to the same length). The bench itself sends the apiserver nothing in
   either window but the two scrapes of each.
6. Wake-ups: the bench changes --changes polled gangs one at a time, each after the last one's
   poller was woken, and times from the change sent (`time.monotonic()`, one clock for both
   processes) to its poller's answer. (a) Admissions: the Queue's quota raised by 100m, so the
   controller admits the next gang in order; this is the latency of an admission as much as of
   the status service (the Queue's watch event, the loop's coalescing of changes, 200 ms, and
   a plan cycle): reported apart, as `admit_wakeup_*`. (b) Deletions of Jobs: the DELETE, the
   Job's watch event, the cache, the held request answered: the status service's own path
   from a change in the cluster to the poller, `wakeup_*`. A woken poller whose gang was not
   changed counts as spurious.

Prints a summary and one JSON line (--json: only that line). Latencies are end to end over
loopback HTTP: connect, request, the whole answer, as a client in a pod would see them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import random
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from admission.launcher import LaunchError, MusterRun, launch, stop_process
from kubeport import kubeapi
from kubeport.kubeapi import ApiError, ApiUnreachable, KubeClient
from muster.bench import bench_main
from muster.bench.admit import create_jobs
from muster.bench.harness import BenchCluster, bench_cluster, job_body, latency_ms
from policies.submitted import format_stamp
from policies.vocabulary import SUBMITTED
from simulator.controlplane.cluster import controller_kubeconfig
from simulator.controlplane.processes import cpu_seconds

POD_CPU_MILLI = 100
FDS_PER_POLLER = 2
"""A poller's connection in the client process and its end in the controller's (each process
needs one descriptor per connection; the limit is per process, this is what one process needs
in the worst case, with a margin for connections not yet closed)."""
FD_MARGIN = 512


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pollers", type=int, default=1000, help="long-polling clients (1000)")
    parser.add_argument("--gangs", type=int, default=10_000, help="Jobs the controller holds")
    parser.add_argument("--nodes", type=int, default=4, help="kwok nodes when starting a cluster")
    parser.add_argument(
        "--window",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="length of the idle and of the polling window (60)",
    )
    parser.add_argument(
        "--ramp",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="the pollers start evenly over this time (10; 0: all at once)",
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="the pollers' ?wait= (60, as the documented snippet)",
    )
    parser.add_argument(
        "--answers", type=int, default=2000, help="GETs without wait while the pollers hold"
    )
    parser.add_argument(
        "--changes", type=int, default=100, help="admissions, and as many deletions, timed"
    )
    parser.add_argument(
        "--status-auth",
        choices=("none", "kubernetes"),
        default="none",
        help="the controller's --status-auth (none); kubernetes: each poller sends a token of "
        "its own (TokenRequest, a ServiceAccount that may get the namespace's Jobs), which the "
        "controller reviews with the apiserver (cached a minute)",
    )
    parser.add_argument(
        "--tokens",
        type=int,
        default=0,
        help="with --status-auth kubernetes: distinct tokens, used round robin (0: one per "
        "poller, as pods each have their own)",
    )
    parser.add_argument("--creators", type=int, default=16, help="threads creating Jobs (16)")
    parser.add_argument(
        "--estimate-interval",
        type=float,
        metavar="SECONDS",
        help="the controller's --estimate-interval (default: muster run's; 0: no wait-time "
        "estimates, to see what their background refresh costs the answers)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="record the controller with py-spy (raw, 100 Hz) over the polling window and the "
        "wake-ups, into DIR (py-spy must be installed)",
    )
    parser.add_argument(
        "--kubeconfig", type=Path, metavar="FILE", help="use this running control plane"
    )
    parser.add_argument(
        "--cluster-name",
        default="muster-bench-status",
        metavar="NAME",
        help="control plane to bring up and take down (default muster-bench-status)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line only")
    parser.epilog = (
        "examples:\n"
        "  muster bench status --pollers 1000 --gangs 10000 --json\n"
        "  muster bench status --pollers 50 --gangs 500 --window 10 --changes 10"
    )


def _check(args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments, or None."""
    if args.pollers < 1 or args.gangs < 2:
        return "--pollers must be >= 1 and --gangs >= 2"
    if args.pollers > args.gangs - 1:
        return (
            f"--pollers {args.pollers} needs --gangs {args.pollers + 1} at least: one poller per "
            "waiting gang, and one gang runs"
        )
    if args.changes < 0 or 2 * args.changes > args.pollers:
        return f"--changes must be between 0 and half of --pollers ({args.pollers // 2})"
    if args.window <= 0 or args.ramp < 0 or args.wait <= 0 or args.ramp >= args.window:
        return "--window and --wait must be positive, --ramp between 0 and --window"
    if args.answers < 1 or args.nodes < 1 or args.creators < 1:
        return "--answers, --nodes and --creators must be >= 1"
    if args.tokens < 0 or (args.tokens and args.status_auth != "kubernetes"):
        return "--tokens must be >= 0, and is for --status-auth kubernetes"
    if args.estimate_interval is not None and args.estimate_interval < 0:
        return "--estimate-interval must be >= 0"
    if args.profile is not None and _py_spy() is None:
        return "--profile needs py-spy: pip install py-spy (into muster's environment)"
    return None


def raise_fd_limit(pollers: int) -> str | None:
    """Raise this process's soft limit on open files (the controller and the pollers inherit
    it) towards what `pollers` connections need; why it cannot, or None."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = FDS_PER_POLLER * pollers + FD_MARGIN
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return None
    if hard != resource.RLIM_INFINITY and hard < needed:
        return (
            f"--pollers {pollers} needs about {needed} open files per process; the hard limit "
            f"is {hard} (ulimit -Hn): raise it, or use fewer pollers"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return None


def _py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


# -- the cluster's objects ---------------------------------------------------------------------


def stamped_job(name: str, queue_name: str, seq: int, base_ns: int) -> dict[str, Any]:
    """A suspended one-pod Job of 100m cpu for `queue_name`, stamped as the webhook stamps
    (sequence `seq`: the queue's order is the names' order); its pod tolerates kwok's nodes
    and, without `muster.dev/runtime`, runs until deleted."""
    stamp = format_stamp(base_ns + seq, seq)
    return job_body(name, queue_name, suspend=True, runtime=None, annotations={SUBMITTED: stamp})


def gang_name(i: int) -> str:
    return f"g-{i:05d}"


def create_gangs(
    client: KubeClient, namespace: str, count: int, threads: int, say: Callable[[str], None]
) -> float:
    """Create the `count` Jobs from `threads` threads (`muster.bench.admit.create_jobs`),
    saying how far it got every few seconds; the seconds it took."""
    base_ns = time.time_ns() - 3600 * 10**9
    bodies = [stamped_job(gang_name(i), namespace, i, base_ns) for i in range(count)]
    done = 0
    lock = threading.Lock()
    began = last_said = time.monotonic()

    def created() -> None:
        nonlocal done, last_said
        with lock:
            done += 1
            now = time.monotonic()
            if now - last_said >= 5 or done == count:
                last_said = now
                rate = done / max(now - began, 1e-9)
                say(f"  created {done}/{count} Jobs ({rate:.0f}/s)")

    create_jobs(client, namespace, bodies, threads, on_created=created)
    return time.monotonic() - began


def set_quota(client: KubeClient, queue_name: str, gangs: int) -> None:
    """The Queue's nominal quota: room for `gangs` Jobs."""
    body = {"spec": {"nominal": {"cpu": f"{POD_CPU_MILLI * gangs}m"}}}
    client.patch(f"{kubeapi.QUEUES.path()}/{queue_name}", body)


def requests_total(client: KubeClient) -> Counter[tuple[str, str]]:
    """The apiserver's `apiserver_request_total` now, summed per (verb, resource)."""
    status, data = client.raw_get("/metrics")
    if status != 200:
        raise RuntimeError(f"GET /metrics of the apiserver answered {status}")
    return parse_requests_total(data.decode())


def parse_requests_total(exposition: str) -> Counter[tuple[str, str]]:
    """`apiserver_request_total` of a Prometheus text exposition, summed per (verb, resource
    or resource/subresource; "(non-resource)" for URLs such as /metrics)."""
    totals: Counter[tuple[str, str]] = Counter()
    for line in exposition.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels, _, value = line.rpartition(" ")
        fields = dict(
            part.split("=", 1) for part in labels[labels.index("{") + 1 : -1].split('",') if part
        )
        verb = fields.get("verb", "").strip('"')
        what = fields.get("resource", "").strip('"') or "(non-resource)"
        subresource = fields.get("subresource", "").strip('"')
        totals[(verb, f"{what}/{subresource}" if subresource else what)] += int(float(value))
    return totals


SERVICE_ACCOUNTS = kubeapi.Resource("", "v1", "serviceaccounts")
ROLES = kubeapi.Resource("rbac.authorization.k8s.io", "v1", "roles")
ROLE_BINDINGS = kubeapi.Resource("rbac.authorization.k8s.io", "v1", "rolebindings")
READER = "status-reader"


def create_reader(client: KubeClient, namespace: str) -> None:
    """A ServiceAccount that may get the namespace's Jobs: what a pod needs to read its gang
    from a status service under `--status-auth kubernetes` (docs/metrics.md)."""
    client.create(SERVICE_ACCOUNTS.path(namespace), {"metadata": {"name": READER}})
    rule = {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]}
    client.create(ROLES.path(namespace), {"metadata": {"name": READER}, "rules": [rule]})
    client.create(
        ROLE_BINDINGS.path(namespace),
        {
            "metadata": {"name": READER},
            "roleRef": {"apiGroup": ROLES.group, "kind": "Role", "name": READER},
            "subjects": [{"kind": "ServiceAccount", "name": READER, "namespace": namespace}],
        },
    )


def mint_tokens(client: KubeClient, namespace: str, count: int, threads: int) -> list[str]:
    """`count` tokens of the reader (TokenRequest; each its own credential, as each pod's
    projected token is)."""
    path = f"{SERVICE_ACCOUNTS.path(namespace, READER)}/token"
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 7200},
    }

    def mint(_: int) -> str:
        return str(client.create(path, request)["status"]["token"])

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(mint, range(count)))


# -- the status service, from the bench ---------------------------------------------------------


def http_json(url: str, token: str | None, timeout: float = 10) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def wait_for_gangs(
    status_url: str, token: str | None, namespace: str, gangs: int, timeout: float
) -> float:
    """Until the controller counts every gang of the queue (one admitted, the rest pending)
    and the admitted one runs; the seconds it took."""
    began = time.monotonic()
    deadline = began + timeout
    seen: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            seen = http_json(f"{status_url}/v1/queues", token)["queues"].get(namespace) or {}
            holder = http_json(f"{status_url}/v1/gangs/{namespace}/{gang_name(0)}", token)
        except (OSError, urllib.error.URLError, ValueError, KeyError):
            time.sleep(0.5)
            continue
        if (
            seen.get("pending") == gangs - 1
            and seen.get("admitted") == 1
            and holder.get("state") == "Running"
        ):
            return time.monotonic() - began
        time.sleep(0.5)
    raise RuntimeError(
        f"the controller did not count {gangs} gangs ({gangs - 1} pending, 1 running) within "
        f"{timeout:.0f}s; its queue {namespace} shows {seen}"
    )


@dataclass
class PollerProcess:
    """The pollers' process (muster/bench/status_pollers.py) and the lines it printed."""

    proc: subprocess.Popen[str]
    events: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)
    wakes: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)
    _reader: threading.Thread | None = None

    @classmethod
    def start(cls, config: dict[str, Any]) -> PollerProcess:
        proc = subprocess.Popen(
            [sys.executable, "-m", "muster.bench.status_pollers"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        pollers = cls(proc)
        pollers._reader = threading.Thread(target=pollers._read, daemon=True)
        pollers._reader.start()
        pollers.send(config)
        return pollers

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            (self.wakes if event["event"] == "wake" else self.events).put(event)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def expect(self, kind: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if self.proc.poll() is not None and self.events.empty():
                raise RuntimeError(
                    f"the pollers' process exited ({self.proc.returncode}) before it said "
                    f"{kind!r}; its error is above"
                )
            if left <= 0:
                raise RuntimeError(f"the pollers' process did not say {kind!r} in {timeout:.0f}s")
            try:
                event = self.events.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            if event["event"] == kind:
                return event

    def stop(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        stop_process(self.proc, timeout=10, reader=self._reader)


# -- measuring ----------------------------------------------------------------------------------


@dataclass
class Window:
    """What one window cost: apiserver requests by (verb, resource), CPU seconds by process."""

    seconds: float
    requests: Counter[tuple[str, str]]
    cpu_s: dict[str, float]

    @property
    def total(self) -> int:
        return sum(self.requests.values())


class Meter:
    """Reads the apiserver's request counter and the processes' CPU at a window's two ends."""

    def __init__(self, client: KubeClient, pids: dict[str, int]) -> None:
        self.client = client
        self.pids = pids
        self._began = 0.0
        self._requests: Counter[tuple[str, str]] = Counter()
        self._cpu: dict[str, float] = {}

    def _cpu_now(self) -> dict[str, float]:
        out = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        return {name: value for name, value in out.items() if value is not None}

    def open(self) -> None:
        self._requests = requests_total(self.client)
        self._cpu = self._cpu_now()
        self._began = time.monotonic()

    def close(self) -> Window:
        seconds = time.monotonic() - self._began
        cpu = self._cpu_now()
        requests = requests_total(self.client)
        requests.subtract(self._requests)
        return Window(
            seconds,
            +requests,
            {k: round(v - self._cpu[k], 2) for k, v in cpu.items() if k in self._cpu},
        )


QUIET_PER_S = 2.0
"""The apiserver counts as quiet below this many requests a second (over 5 s; idle, a local
control plane serves about 0.2: the apiserver's own lease)."""


def settle(client: KubeClient, timeout: float, say: Callable[[str], None]) -> tuple[float, bool]:
    """Wait until the apiserver is quiet twice in a row: creating thousands of Jobs leaves the
    Job controller posting their `Suspended` Events for a while, which would count in the idle
    window. The seconds it took, and whether it got quiet before `timeout`."""
    began = time.monotonic()
    quiet = 0
    last = sum(requests_total(client).values())
    while time.monotonic() - began < timeout:
        time.sleep(5)
        now = sum(requests_total(client).values())
        rate = (now - last) / 5
        last = now
        quiet = quiet + 1 if rate <= QUIET_PER_S else 0
        if quiet >= 2:
            return time.monotonic() - began, True
        say(f"  waiting for the apiserver to settle: {rate:.0f} requests/s")
    return time.monotonic() - began, False


def time_changes(
    pollers: PollerProcess,
    targets: list[str],
    change: Callable[[int, str], object],
    changed: set[str],
    spurious: list[str],
    rng: random.Random,
) -> tuple[list[float], int]:
    """Change each gang of `targets` (`change(i, gang)`) a random 50-500 ms after the last
    one's poller woke (at random moments, not in step with the controller's 200 ms coalescing
    of changes or its cycles); the latencies from each change sent to its poller's answer, and
    how many never woke."""
    latencies: list[float] = []
    missed = 0
    for i, gang in enumerate(targets):
        time.sleep(rng.uniform(0.05, 0.5))
        changed.add(gang)
        sent = time.monotonic()
        change(i, gang)
        deadline = sent + 10
        while True:
            try:
                wake = pollers.wakes.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                missed += 1
                break
            if wake["gang"] == gang:
                latencies.append(wake["t"] - sent)
                break
            if wake["gang"] not in changed:
                spurious.append(wake["gang"])
    return latencies, missed


def _drain_spurious(pollers: PollerProcess, changed: set[str], spurious: list[str]) -> None:
    while True:
        try:
            wake = pollers.wakes.get_nowait()
        except queue.Empty:
            return
        if wake["gang"] not in changed:
            spurious.append(wake["gang"])


def _start_profile(pid: int, directory: Path, name: str, seconds: float) -> subprocess.Popen[str]:
    directory.mkdir(parents=True, exist_ok=True)
    py_spy = _py_spy()
    assert py_spy is not None
    argv = [py_spy, "record", "-p", str(pid), "-r", "100", "-f", "raw", "--nonblocking"]
    argv += ["-d", str(max(1, round(seconds))), "-o", str(directory / f"{name}.txt")]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)


# -- the run ------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    problem = _check(args) or raise_fd_limit(args.pollers)
    if problem:
        print(f"muster bench status: {problem}", file=sys.stderr)
        return 2

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    with bench_cluster(
        args.kubeconfig, name=args.cluster_name, nodes=args.nodes, log=say
    ) as cluster:
        return _run_on(cluster, args, say)


def _run_on(cluster: BenchCluster, args: argparse.Namespace, say: Callable[[str], None]) -> int:
    """Steps 1 (the objects) to 6 on `cluster`; prints the figures."""
    kubeconfig, observed = cluster.kubeconfig, cluster.local
    client = KubeClient.from_kubeconfig(kubeconfig)
    namespace = f"bench-status-{int(time.time())}"
    muster: MusterRun | None = None
    started: list[subprocess.Popen[str] | PollerProcess] = []
    try:
        from muster.bench.admit import create_namespaces_and_queues

        create_namespaces_and_queues(
            client, (namespace,), [(namespace, {"nominal": {"cpu": f"{POD_CPU_MILLI}m"}})]
        )
        say(f"creating {args.gangs} Jobs from {args.creators} threads ...")
        create_s = create_gangs(client, namespace, args.gangs, args.creators, say)
        tokens: list[str] = []
        if args.status_auth == "kubernetes":
            count = args.tokens or args.pollers
            say(f"minting {count} tokens of a ServiceAccount that may get the Jobs ...")
            create_reader(client, namespace)
            tokens = mint_tokens(client, namespace, count, args.creators)
        flags = ["--no-webhook", "--status-auth", args.status_auth]
        if args.estimate_interval is not None:
            flags += ["--estimate-interval", f"{args.estimate_interval:g}"]
        say(f"starting muster run --local {' '.join(flags)} ...")
        try:
            muster = launch(controller_kubeconfig(kubeconfig), *flags, timeout=600, keep_lines=200)
        except LaunchError as exc:
            raise RuntimeError(str(exc)) from exc
        assert muster.status_url is not None
        token = tokens[0] if tokens else None
        load_s = wait_for_gangs(muster.status_url, token, namespace, args.gangs, 600)
        say(f"the controller holds {args.gangs} gangs ({load_s:.1f}s after it was ready)")
        pids = dict(observed.component_pids()) if observed is not None else {}
        pids["muster"] = muster.pid
        meter = Meter(client, pids)
        out = measure(args, client, namespace, muster, meter, tokens, started, say)
        out["create_s"] = round(create_s, 1)
        out["controller_load_s"] = round(load_s, 1)
    except (RuntimeError, ApiError, ApiUnreachable) as exc:
        print(f"muster bench status: {exc}", file=sys.stderr)
        return 1
    finally:
        for process in reversed(started):
            if isinstance(process, PollerProcess):
                process.stop()
            else:
                stop_process(process, signal.SIGINT, timeout=30)
        if muster is not None:
            muster.stop(timeout=60)
        if not cluster.started:
            with contextlib.suppress(ApiError, OSError):
                client.delete(f"{kubeapi.QUEUES.path()}/{namespace}")
            with contextlib.suppress(ApiError, OSError):
                client.delete(kubeapi.NAMESPACES.path(name=namespace))
        client.close()
    if not args.json:
        _print(out)
    print(json.dumps(out), flush=True)
    return 0


def measure(
    args: argparse.Namespace,
    client: KubeClient,
    namespace: str,
    muster: MusterRun,
    meter: Meter,
    tokens: list[str],
    started: list[subprocess.Popen[str] | PollerProcess],
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Steps 4 to 6 of the module docstring; the figures. The processes it starts (the pollers,
    py-spy) go into `started`: the caller stops them."""
    assert muster.status_url is not None
    settle_s, settled = settle(client, 600, say)
    if not settled:
        say(f"the apiserver is still busy after {settle_s:.0f}s; measuring anyway")
    load_start = os.getloadavg()
    say(f"idle window: {args.window:g}s ...")
    meter.open()
    time.sleep(args.window)
    idle = meter.close()
    say(f"polling window: {args.pollers} pollers over {args.ramp:g}s, then {args.answers} GETs")
    pollers, polling, answers, held_s = polling_window(
        args, namespace, muster, meter, tokens, started
    )
    say(f"wake-ups: {args.changes} admissions, then {args.changes} deletions, one at a time")
    woken = wake_ups(args, client, namespace, muster, meter, pollers, started)
    pollers.send({"cmd": "stop"})
    done = pollers.expect("done", 60)
    by_what = Counter(polling.requests)
    by_what.subtract(idle.requests)
    return {
        "bench": "status",
        "pollers": args.pollers,
        "gangs": args.gangs,
        "status_auth": args.status_auth,
        "tokens": len(tokens),
        "estimate_interval_s": args.estimate_interval,
        "wait_s": args.wait,
        "settle_s": round(settle_s, 1),
        "settled": settled,
        "window_s": round(polling.seconds, 1),
        "ramp_s": args.ramp,
        "all_holding_after_s": round(held_s, 2),
        **_latencies("first_answer", done["first_answers"]),
        "answers": len(answers),
        **_latencies("answer", answers),
        "wakeups": len(woken.deletions),
        **_latencies("wakeup", woken.deletions),
        "admit_wakeups": len(woken.admissions),
        **_latencies("admit_wakeup", woken.admissions),
        "wakeups_missed": woken.missed,
        "wakeups_spurious": len(woken.spurious),
        "apiserver_requests_idle": idle.total,
        "apiserver_requests_polling": polling.total,
        "apiserver_requests_added": round(
            polling.total - idle.total * polling.seconds / idle.seconds, 1
        ),
        "apiserver_requests_added_by": {
            f"{verb} {what}": n for (verb, what), n in sorted(by_what.items()) if n
        },
        "controller_cpu_s": {
            "idle": idle.cpu_s.get("muster"),
            "polling": polling.cpu_s.get("muster"),
            "wakeups": woken.window.cpu_s.get("muster"),
        },
        "apiserver_cpu_s": {
            "idle": idle.cpu_s.get("kube-apiserver"),
            "polling": polling.cpu_s.get("kube-apiserver"),
        },
        "pollers_cpu_s": round(float(done["cpu_s"]), 2),
        "poll_timeouts": done["timeouts"],
        "poll_errors": done["errors"],
        "load_avg_start": [round(x, 2) for x in load_start],
        "load_avg_end": [round(x, 2) for x in os.getloadavg()],
    }


def _latencies(name: str, seconds: Sequence[float]) -> dict[str, float | None]:
    """`NAME_p50_ms`, `NAME_p99_ms` and `NAME_max_ms` of latencies in seconds."""
    return {
        f"{name}_p50_ms": latency_ms(seconds, 50),
        f"{name}_p99_ms": latency_ms(seconds, 99),
        f"{name}_max_ms": round(1000 * max(seconds), 2) if seconds else None,
    }


def polling_window(
    args: argparse.Namespace,
    namespace: str,
    muster: MusterRun,
    meter: Meter,
    tokens: list[str],
    started: list[subprocess.Popen[str] | PollerProcess],
) -> tuple[PollerProcess, Window, list[float], float]:
    """Step 5: the pollers started (one per waiting gang g-00001...), and once all hold, the
    GETs without wait spread over the rest of the window. The pollers (still holding), the
    window, the answers' latencies, and the seconds until all held."""
    config = {
        "url": muster.status_url,
        "gangs": [f"{namespace}/{gang_name(i)}" for i in range(1, args.pollers + 1)],
        "wait": args.wait,
        "ramp": args.ramp,
        "probe_gangs": [f"{namespace}/{gang_name(i)}" for i in range(1, args.gangs)],
        "tokens": tokens,
    }
    meter.open()
    began = time.monotonic()
    if args.profile is not None:
        started.append(_start_profile(muster.pid, args.profile, "polling", args.window))
    pollers = PollerProcess.start(config)
    started.append(pollers)
    pollers.expect("holding", args.ramp + 120)
    held_s = time.monotonic() - began
    over = max(began + args.window - time.monotonic() - 1.0, 1.0)
    pollers.send({"cmd": "probe", "count": args.answers, "over": over})
    answers: list[float] = pollers.expect("probed", over + 120)["latencies"]
    time.sleep(max(began + args.window - time.monotonic(), 0.0))
    return pollers, meter.close(), answers, held_s


@dataclass
class WakeUps:
    """Step 6's latencies (seconds) by kind of change, and what it cost."""

    admissions: list[float]
    deletions: list[float]
    missed: int
    spurious: list[str]
    window: Window


def wake_ups(
    args: argparse.Namespace,
    client: KubeClient,
    namespace: str,
    muster: MusterRun,
    meter: Meter,
    pollers: PollerProcess,
    started: list[subprocess.Popen[str] | PollerProcess],
) -> WakeUps:
    """Step 6: --changes admissions (the quota raised for one more gang), then as many Job
    deletions, each timed to its poller's answer."""
    changed: set[str] = set()
    spurious: list[str] = []
    rng = random.Random(17)
    _drain_spurious(pollers, changed, spurious)
    meter.open()
    profile = None
    if args.profile is not None:
        profile = _start_profile(muster.pid, args.profile, "wakeups", 8 * args.changes)
        started.append(profile)
    admits = [f"{namespace}/{gang_name(i)}" for i in range(1, args.changes + 1)]
    deletes = [f"{namespace}/{gang_name(args.pollers - i)}" for i in range(args.changes)]
    jobs = kubeapi.JOBS.path(namespace)
    admissions, admit_missed = time_changes(
        pollers,
        admits,
        lambda i, _gang: set_quota(client, namespace, i + 2),
        changed,
        spurious,
        rng,
    )
    deletions, delete_missed = time_changes(
        pollers,
        deletes,
        lambda _i, gang: client.delete(f"{jobs}/{gang.split('/', 1)[1]}"),
        changed,
        spurious,
        rng,
    )
    time.sleep(1.0)
    _drain_spurious(pollers, changed, spurious)
    window = meter.close()
    if profile is not None:
        # py-spy writes what it recorded when interrupted, as on Ctrl-C.
        stop_process(profile, signal.SIGINT, timeout=30)
    return WakeUps(admissions, deletions, admit_missed + delete_missed, spurious, window)


def _print(out: dict[str, Any]) -> None:
    print(
        f"{out['pollers']} pollers (wait={out['wait_s']:g}s, started over {out['ramp_s']:g}s), "
        f"{out['gangs']} gangs, status auth {out['status_auth']}"
    )
    print(
        f"  first answer (since=0, as each poller joins): p50 {out['first_answer_p50_ms']} ms, "
        f"p99 {out['first_answer_p99_ms']} ms"
    )
    print(
        f"  answers while all hold ({out['answers']} GETs): p50 {out['answer_p50_ms']} ms, "
        f"p99 {out['answer_p99_ms']} ms, max {out['answer_max_ms']} ms   (goal p99 <= 10 ms)"
    )
    print(
        f"  wake-ups after a Job's deletion ({out['wakeups']}): p50 {out['wakeup_p50_ms']} ms, "
        f"p99 {out['wakeup_p99_ms']} ms, max {out['wakeup_max_ms']} ms   (goal p99 <= 100 ms)"
    )
    print(
        f"  wake-ups after a quota raise, through a plan cycle ({out['admit_wakeups']}): p50 "
        f"{out['admit_wakeup_p50_ms']} ms, p99 {out['admit_wakeup_p99_ms']} ms; missed "
        f"{out['wakeups_missed']}, spurious {out['wakeups_spurious']}"
    )
    print(
        f"  apiserver requests in {out['window_s']:g}s: idle {out['apiserver_requests_idle']}, "
        f"polling {out['apiserver_requests_polling']}, added "
        f"{out['apiserver_requests_added']}   (goal 0)"
    )
    print(
        f"  controller CPU s: {out['controller_cpu_s']}; apiserver {out['apiserver_cpu_s']}; "
        f"pollers {out['pollers_cpu_s']}; load {out['load_avg_start']} -> {out['load_avg_end']}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    return bench_main("muster bench status", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
