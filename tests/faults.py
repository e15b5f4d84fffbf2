"""The fault tests' shared parts: a burst of one-pod gangs that is followed change by change
while a fault is injected, its checks and its figures; and a loopback TCP pass-through that
partitions a process from the apiserver.

The burst is watched, not sampled: a `JobLedger` applies every event of the namespace's Jobs in
order (the view at each resourceVersion is one the apiserver really held), so "quota never
exceeded", "never stored unmutated" and "admitted once" are checked at every change the
apiserver made, not at a few instants. The watch is the same list-then-watch loop muster uses
(`kubeport.streamwatch`): it resumes from its last version after the apiserver or etcd comes
back, and LISTs again after a 410.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubeport.kubeapi import ApiError, KubeClient
from kubeport.streamwatch import StreamWatch, list_collection
from policies.vocabulary import ADMITTED, EVICTED_REASON, EVICTIONS, SUBMITTED
from tests import builders
from tests.controller_helpers import create_queue, delete_queue, finished, jobs_path
from tests.kube import job_condition

WEBHOOK_DOWN = "failed calling webhook"
"""What the apiserver says when it cannot reach a webhook whose failurePolicy is Fail."""


def _millicores(cpu: str) -> int:
    return int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)


@dataclass
class _JobView:
    admitted: str | None = None
    held_m: int = 0
    finished: bool = False
    running: bool = False  # seen unsuspended


def muster_annotations(annotations: Mapping[str, str]) -> dict[str, str]:
    """A Job's muster.dev annotations, for a failure's message."""
    return {k: v for k, v in annotations.items() if k.startswith("muster.dev/")}


@dataclass
class JobLedger:
    """The namespace's Jobs as the watch delivers them, checked at every event.

    `held_m` is the cpu the apiserver shows held at the current version (admitted and not
    finished, as muster counts quota); `max_held_m` the most it ever showed."""

    pod_cpu_m: int
    jobs: dict[str, _JobView] = field(default_factory=dict)
    admissions: Counter[str] = field(default_factory=Counter)
    """Per Job: how often it went from not admitted to admitted (1 is right)."""
    unmutated: list[str] = field(default_factory=list)
    """Jobs seen unsuspended without muster's admission: stored past the webhook."""
    unstamped: list[str] = field(default_factory=list)
    """Jobs seen without muster.dev/submitted: stored without the webhook's stamp."""
    suspended_again: list[str] = field(default_factory=list)
    """Jobs seen suspended after they were seen unsuspended (evicted or preempted)."""
    held_m: int = 0
    max_held_m: int = 0
    revisions: int = 0
    relists: int = 0
    admitted_at: list[float] = field(default_factory=list)
    """time.monotonic() at which each admission was seen (for the time to recover)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def apply(self, kind: str, body: Mapping[str, Any]) -> None:
        with self.lock:
            self._apply(kind, body)

    def relist(self, items: list[Any], _version: int) -> None:
        with self.lock:
            self.relists += 1
            names = {item["metadata"]["name"] for item in items}
            for gone in set(self.jobs) - names:
                self._apply("DELETED", {"metadata": {"name": gone}})
            for item in items:
                self._apply("MODIFIED", item)

    def _apply(self, kind: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        name = str(meta.get("name"))
        old = self.jobs.get(name, _JobView())
        self.held_m -= old.held_m
        if kind == "DELETED":
            self.jobs.pop(name, None)
            return
        annotations = meta.get("annotations") or {}
        spec = body.get("spec") or {}
        admitted = annotations.get(ADMITTED)
        done = finished(body)
        if not spec.get("suspend") and admitted is None and name not in self.unmutated:
            self.unmutated.append(name)
        if SUBMITTED not in annotations and name not in self.unstamped:
            self.unstamped.append(name)
        if admitted is not None and admitted != old.admitted:
            self.admissions[name] += 1
            self.admitted_at.append(time.monotonic())
        running = not spec.get("suspend")
        if old.running and not running and name not in self.suspended_again:
            self.suspended_again.append(name)
        size = int(admitted.rsplit("/", 1)[1]) if admitted else 0
        view = _JobView(admitted, 0 if done else size * self.pod_cpu_m, done, running)
        self.jobs[name] = view
        self.held_m += view.held_m
        self.max_held_m = max(self.max_held_m, self.held_m)
        self.revisions += 1

    def finished_count(self) -> int:
        with self.lock:
            return sum(1 for view in self.jobs.values() if view.finished)

    def admitted_count(self) -> int:
        """Jobs seen admitted so far (finished ones included)."""
        with self.lock:
            return len(self.admissions)

    def admitted_between(self, start: float, end: float) -> int:
        """Admissions seen between two moments (time.monotonic())."""
        with self.lock:
            return sum(1 for t in self.admitted_at if start <= t <= end)

    def admitted_after(self, moment: float) -> float | None:
        """The first admission seen after `moment` (time.monotonic()), or None."""
        with self.lock:
            return next((t for t in self.admitted_at if t > moment), None)


@dataclass
class Refusals:
    """Creates the apiserver refused, by kind of answer, and when the last of each came."""

    counts: Counter[str] = field(default_factory=Counter)
    messages: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, message: str) -> None:
        with self.lock:
            self.counts[kind] += 1
            self.messages.setdefault(kind, message)


def _kind_of(exc: Exception) -> str:
    if isinstance(exc, ApiError):
        if WEBHOOK_DOWN in exc.message:
            return "webhook unreachable"
        return f"HTTP {exc.status}"
    return "no connection"


class Burst:
    """`jobs` one-pod gangs of `cpu` in a fresh queue of nominal `quota_cpu`, created by
    `submitters` threads that retry a refused create until it is stored (a 409 means an
    earlier attempt was stored), watched by a `JobLedger` from before the first create.

    Use as a context manager (it creates the queue and starts the watch), `start()` the
    submitters, inject the fault, then `finish()` and `check()`."""

    def __init__(
        self,
        kube: KubeClient,
        namespace: str,
        *,
        jobs: int,
        quota_cpu: int,
        cpu: str = "1",
        runtime: str = "1s",
        submitters: int = 8,
        queue_spec: Mapping[str, Any] | None = None,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.queue = f"{namespace}-q"
        self.names = [f"j-{i:05d}" for i in range(jobs)]
        self.quota_m = quota_cpu * 1000
        self.cpu = cpu
        self.runtime = runtime
        self.submitters = submitters
        self.queue_spec = {"nominal": {"cpu": str(quota_cpu)}, **(queue_spec or {})}
        self.ledger = JobLedger(_millicores(cpu))
        self.refusals = Refusals()
        self.created = 0
        self.stored_at: list[float] = []
        """time.monotonic() at which each create was answered: stored."""
        self._created_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._watch_client = KubeClient(kube.credentials)
        self._watch: StreamWatch | None = None
        self.started = 0.0
        self.seconds = 0.0
        self.miscounted: list[str] = []
        """Jobs whose status.succeeded is not the number of their pods (all succeeded)."""
        self.extra_pods: dict[str, int] = {}
        """Jobs the Job controller ran more than one pod for (see `check`)."""
        self.clog_evicted: list[str] = []
        """Jobs muster evicted as Clogged and admitted again (see `check`)."""

    def __enter__(self) -> Burst:
        create_queue(self.kube, self.queue, self.queue_spec)
        path = jobs_path(self.namespace)
        _, version = list_collection(self._watch_client, path)
        self._watch = StreamWatch(
            self._watch_client,
            path,
            {},
            apply=self.ledger.apply,
            relist=self.ledger.relist,
            lister=list_collection,
            name="fault-test-jobs",
        )
        self._watch.start(version)
        return self

    def __exit__(self, *exc: object) -> None:
        for thread in self._threads:
            thread.join(timeout=60)
        if self._watch is not None:
            self._watch.stop()
        self._watch_client.close()
        delete_queue(self.kube, self.queue)

    # -- submitting ----------------------------------------------------------------------

    def start(self) -> None:
        self.started = time.monotonic()
        for i in range(self.submitters):
            part = self.names[i :: self.submitters]
            thread = threading.Thread(target=self._submit, args=(part,), name=f"submit-{i}")
            thread.start()
            self._threads.append(thread)

    def _submit(self, part: list[str]) -> None:
        with KubeClient(self.kube.credentials) as own:
            for name in part:
                body = builders.job(name, self.queue, pods=1, cpu=self.cpu, runtime=self.runtime)
                while not self._create(own, body):
                    time.sleep(0.2)

    def _create(self, client: KubeClient, body: dict[str, Any]) -> bool:
        try:
            client.create(jobs_path(self.namespace), body)
        except ApiError as exc:
            if exc.status != 409:
                self.refusals.add(_kind_of(exc), exc.message)
                return False
        except OSError as exc:
            self.refusals.add(_kind_of(exc), str(exc))
            return False
        with self._created_lock:
            self.created += 1
            self.stored_at.append(time.monotonic())
        return True

    def stored_after(self, moment: float) -> float | None:
        """When the first create after `moment` (time.monotonic()) was stored, or None."""
        with self._created_lock:
            return next((t for t in self.stored_at if t > moment), None)

    def wait_created(self, count: int, timeout: float = 600) -> None:
        """Until `count` Jobs are stored (the fault is then injected mid-burst)."""
        deadline = time.monotonic() + timeout
        while self.created < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {self.created} of {count} Jobs created in {timeout}s")
            time.sleep(0.1)

    # -- the end -------------------------------------------------------------------------

    def finish(self, timeout: float) -> None:
        """Wait until every Job is stored and the watch has seen every one finish."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(timeout=max(deadline - time.monotonic(), 1))
            if thread.is_alive():
                raise AssertionError(f"{self.created} of {len(self.names)} Jobs created")
        while self.ledger.finished_count() < len(self.names):
            if time.monotonic() > deadline:
                left = [n for n, v in sorted(self.ledger.jobs.items()) if not v.finished]
                raise AssertionError(
                    f"{len(self.names) - self.ledger.finished_count()} of {len(self.names)} "
                    f"Jobs not finished after {timeout:.0f}s: {left[:10]}"
                )
            time.sleep(1)
        self.seconds = time.monotonic() - self.started

    def check(self, *, control_plane_faulted: bool = False) -> None:
        """Every Job stored once, mutated by the webhook, admitted exactly once, never
        suspended again, and run to success; the quota never exceeded at any version the
        watch saw.

        With `control_plane_faulted` (the apiserver or etcd was killed: every component lost
        its writes in flight) two things the components around muster do are allowed, and
        counted in the figures instead:

        - the Job controller may run a Job's pod twice ("the same program may sometimes be
          started twice", Kubernetes' Job documentation): allowed for a Job muster admitted
          once and never suspended again, so the second pod cannot be a second admission
          (`extra_pods`);
        - kwok may drop a pod's status update cut by the kill and never send it again, so the
          pod never becomes ready: muster then does what it must with a gang that does not
          reach its minimum, evicts it as Clogged after the queue's clog timeout and admits it
          again. Allowed only for a Job whose every admission but the first follows one such
          eviction (`clog_evicted`)."""
        ledger = self.ledger
        jobs = self.kube.get(jobs_path(self.namespace))["items"]
        annotations_of = {
            j["metadata"]["name"]: (j["metadata"].get("annotations") or {}) for j in jobs
        }
        self.clog_evicted = sorted(
            name
            for name, annotations in annotations_of.items()
            if control_plane_faulted
            and annotations.get(EVICTED_REASON) == "Clogged"
            and ledger.admissions[name] == int(annotations.get(EVICTIONS, "0")) + 1
        )
        assert not ledger.unmutated, f"stored unsuspended, past the webhook: {ledger.unmutated}"
        assert not ledger.unstamped, f"stored without {SUBMITTED}: {ledger.unstamped[:10]}"
        twice = {
            n: c for n, c in ledger.admissions.items() if c != 1 and n not in self.clog_evicted
        }
        assert not twice, f"admitted more than once: {twice}; " + "; ".join(
            f"{n}: {muster_annotations(annotations_of.get(n, {}))}" for n in sorted(twice)
        )
        again = sorted(set(ledger.suspended_again) - set(self.clog_evicted))
        assert not again, f"suspended again: {again[:10]}"
        assert ledger.max_held_m <= self.quota_m, (
            f"{ledger.max_held_m}m cpu held > quota {self.quota_m}m"
        )
        # The quota was reached at some revision, so the check above had something to check.
        assert ledger.max_held_m == self.quota_m, (
            f"at most {ledger.max_held_m}m cpu held: the quota {self.quota_m}m never bound"
        )
        assert sorted(j["metadata"]["name"] for j in jobs) == self.names
        pods = self.kube.get(f"/api/v1/namespaces/{self.namespace}/pods")["items"]
        per_job: dict[str, list[str]] = defaultdict(list)
        for pod in pods:
            job_name = (pod["metadata"].get("labels") or {}).get("job-name", "")
            per_job[job_name].append((pod.get("status") or {}).get("phase", ""))
        assert sorted(per_job) == self.names, "a Job without its pod, or a pod of no Job"
        failed = {n: phases for n, phases in per_job.items() if set(phases) != {"Succeeded"}}
        assert not failed, f"Jobs with a pod that did not succeed: {failed}"
        self.extra_pods = {n: len(p) - 1 for n, p in sorted(per_job.items()) if len(p) > 1}
        if not control_plane_faulted:
            assert not self.extra_pods, f"Jobs that ran more than one pod: {self.extra_pods}"
        self.miscounted = []
        for job in jobs:
            name = job["metadata"]["name"]
            annotations = job["metadata"].get("annotations") or {}
            if name not in self.clog_evicted:
                assert ledger.admissions[name] == 1, f"{name}: admitted {ledger.admissions[name]}"
                assert annotations.get(EVICTIONS, "0") == "0", f"{name} was evicted"
            assert job_condition(job, "Complete"), (name, job.get("status"))
            if (job.get("status") or {}).get("succeeded") != len(per_job[name]):
                # The Job controller's own count of finished pods, retried across the fault.
                self.miscounted.append(name)

    def figures(self, fault: str, **extra: Any) -> dict[str, Any]:
        """What the run measured, printed by `report`: docs/reliability.md quotes it."""
        return {
            "fault": fault,
            "jobs": len(self.names),
            "burst_seconds": round(self.seconds, 1),
            "revisions_checked": self.ledger.revisions,
            "watch_relists": self.ledger.relists,
            "max_held_cpu": self.ledger.max_held_m / 1000,
            "quota_cpu": self.quota_m / 1000,
            "refused_creates": dict(self.refusals.counts),
            "max_admissions_per_job": max(self.ledger.admissions.values(), default=0),
            "job_status_miscounts": self.miscounted,
            "extra_pods_by_job_controller": self.extra_pods,
            "clog_evicted_then_admitted_again": self.clog_evicted,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            **extra,
        }

    def report(self, fault: str, **extra: Any) -> None:
        """Print the figures as one JSON line (run pytest with -s to see it)."""
        print(f"\nFAULT {json.dumps(self.figures(fault, **extra))}", flush=True)


def wait_until(probe: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll `probe` until true; the seconds it took. Fails with `what` after `timeout`."""
    began = time.monotonic()
    while not probe():
        if time.monotonic() - began > timeout:
            raise AssertionError(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.1)
    return time.monotonic() - began


class LoopbackPartition:
    """A TCP pass-through on 127.0.0.1 in front of `upstream` (host, port): two pump threads
    per connection, bytes untouched (TLS passes through: the apiserver's certificate names
    127.0.0.1). `partition(seconds)` cuts every live connection and refuses new ones (the
    listening socket is closed) for that long, then listens on the same port again."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = self._listen(0)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._live: set[socket.socket] = set()
        self._closed = threading.Event()
        self._refusing = threading.Event()
        self.connections = 0
        self.cut = 0
        self._acceptor = self._serve(self._listener)

    @staticmethod
    def _listen(port: int) -> socket.socket:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(128)
        return listener

    def _serve(self, listener: socket.socket) -> threading.Thread:
        thread = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        thread.start()
        return thread

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed: partitioned or stopped
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                if self._refusing.is_set():  # accepted just before the cut: cut it too
                    client.close()
                    server.close()
                    continue
                self._live.update((client, server))
                self.connections += 1
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        with self._lock:
            self._live.discard(sock)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()

    def _cut_all(self) -> int:
        with self._lock:
            live = list(self._live)
        for sock in live:
            self._drop(sock)
        return len(live) // 2

    @contextlib.contextmanager
    def cut_off(self) -> Iterator[None]:
        """While the block runs: no connection through (live ones cut, new ones refused)."""
        self._refusing.set()
        self._listener.close()
        self.cut += self._cut_all()
        try:
            yield
        finally:
            self._refusing.clear()
            if not self._closed.is_set():
                self._listener = self._listen(self.port)
                self._acceptor = self._serve(self._listener)

    def partition(self, seconds: float) -> None:
        with self.cut_off():
            time.sleep(seconds)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        self._cut_all()
