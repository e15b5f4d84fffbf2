"""Gang semantics for kwok pods: a gang's pods work only once all of its minimum members run.

kwok completes each pod on its own (Stage `muster-pod-complete`, after `muster.dev/runtime`), so
a gang that is only partly placed would still make progress, and clogs would never appear. Real
gangs (MPI ranks, a Flux MiniCluster) wait for their peers while holding their nodes. The
`GangRunner` models that: pods annotated `muster.dev/gang-runtime: "30s"` run until the gang's
minimum members (the pod's own `muster.dev/min-members` annotation, as a JobSet's and a pod
group's pods carry it, else its Job's, else the Job's parallelism) are all Running; then
it writes `muster.dev/complete-at` = now + runtime on each running member, and kwok (Stage
`muster-pod-complete-at`) completes them together at that time. A member that starts later in
the same run gets the same time. When every pod of a gang is gone (evicted), the next run starts
afresh. Pods that start after a gang's run completed (a Job running a second wave of pods) get
the runtime at once and are counted in `stragglers`: no replay waits on pods nobody completes.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from policies.durations import DurationError, parse_duration
from policies.kinds import JOB, FieldError, job_gang_size
from policies.vocabulary import COMPLETE_AT, GANG, GANG_RUNTIME, MIN_MEMBERS

JOB_NAME = "batch.kubernetes.io/job-name"

RunStarted = Callable[[tuple[str, str], float, float], None]
"""on_start((namespace, gang), started at, completes at): a gang run began (epoch seconds)."""
JobLookup = Callable[[str, str], Mapping[str, Any] | None]
"""job_lookup(namespace, name): the Job's body as last seen, or None if not seen yet."""


def rfc3339(seconds: float) -> str:
    """RFC3339 with nanosecond digits, as kwok's Stage delay parses it."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class GangRunner:
    """Polls gang pods and starts each gang's runtime once its minimum members run."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str | None = None,
        interval: float = 0.3,
        *,
        selector: str = "",
        live_only: bool = False,
        on_start: RunStarted | None = None,
        patch_workers: int = 1,
        job_lookup: JobLookup | None = None,
    ):
        self.client = client
        self.path = kubeapi.PODS.path(namespace or None)
        self.interval = interval
        # Extra label selector terms (the kwok engine keeps to its own run's pods) and, with
        # live_only, no finished pods in the LIST: they hold nothing and only make it longer.
        self.params = {"labelSelector": f"{GANG},{selector}" if selector else GANG}
        if live_only:
            self.params["fieldSelector"] = "status.phase!=Succeeded,status.phase!=Failed"
        self.on_start = on_start
        # Where a gang's Job is read from: a watch cache when the caller has one (a GET per new
        # Job on this thread stalls every gang behind it when the apiserver is slow).
        self.job_lookup = job_lookup
        # Pods patched with their completion time, and (patch_workers > 1) a pool that patches
        # in the background, so a slow apiserver delays the patches but never the next look:
        # a gang's run starts when its members run, not when earlier patches are through.
        self._stamped: set[str] = set()
        self._inflight: set[str] = set()
        self._lock = threading.Lock()
        self._patches: list[tuple[str, str, str]] = []
        self._pool = ThreadPoolExecutor(patch_workers) if patch_workers > 1 else None
        self.errors: list[str] = []
        self.started: dict[tuple[str, str], float] = {}  # gang -> its run's completion time
        self.runs = 0  # gang runs started (a gang evicted and re-admitted runs again)
        # Gangs whose run ended with every member gone, and pods that started after that: a
        # second wave (a Job running more pods than its gang). They are given the gang's runtime
        # at once, so a replay never waits on pods nobody completes, and are counted.
        self.completed: set[tuple[str, str]] = set()
        self.stragglers: dict[tuple[str, str], int] = {}
        self._minimum: dict[tuple[str, str], int] = {}  # (namespace, job name) -> min members
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gang-runner", daemon=True)

    def start(self) -> GangRunner:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> GangRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def run_once(self, now: float | None = None) -> None:
        self.observe(self.client.get(self.path, self.params)["items"], now)

    def observe(self, pods: list[dict[str, Any]], now: float | None = None) -> None:
        """Advance every gang given its pods as seen now (from a LIST, or a watch cache)."""
        self._patches = []
        gangs: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for pod in pods:
            meta = pod["metadata"]
            if GANG_RUNTIME in (meta.get("annotations") or {}):
                gangs[(meta["namespace"], meta["labels"][GANG])].append(pod)
        for key in set(self.started) - set(gangs):
            del self.started[key]
        for key, members in gangs.items():
            self._advance(key, members, time.time() if now is None else now)
        patches, self._patches = self._patches, []
        for patch in patches:
            if self._pool is None:
                self._patch(patch)
                continue
            with self._lock:
                if patch[0] in self._inflight:
                    continue
                self._inflight.add(patch[0])
            self._pool.submit(self._patch, patch)

    def _patch(self, patch: tuple[str, str, str]) -> None:
        uid, path, stamp = patch
        try:
            self.client.patch(path, {"metadata": {"annotations": {COMPLETE_AT: stamp}}})
        except ApiError as exc:
            if exc.status != 404:
                self.errors.append(exc.message)
        except OSError as exc:
            self.errors.append(str(exc))
        else:
            self._stamped.add(uid)
        finally:
            with self._lock:
                self._inflight.discard(uid)

    def _advance(self, key: tuple[str, str], members: list[dict[str, Any]], now: float) -> None:
        live = [
            p
            for p in members
            if "deletionTimestamp" not in p["metadata"]
            and (p.get("status") or {}).get("phase") in ("Pending", "Running")
        ]
        if not live:
            # A run whose completion time has come completed (its pods may be listed no more:
            # live_only); one whose pods went before it was evicted.
            ends = self.started.pop(key, None)
            if ends is not None and ends <= now:
                self.completed.add(key)
            return
        running = [p for p in live if p["status"].get("phase") == "Running"]
        at = self.started.get(key)
        if at is None and key in self.completed and running:
            # Pods of a gang whose run is over: a second wave, not a gang. Each gets the
            # gang's runtime from now.
            runtime = self._runtime(key, running[0])
            if runtime is None:
                return
            at = self.started[key] = now + runtime
            self.stragglers[key] = self.stragglers.get(key, 0) + len(running)
        if at is None:
            minimum = self._min_members(live[0])
            if minimum is None or len(running) < minimum:
                return
            runtime = self._runtime(key, live[0])
            if runtime is None:
                return
            at = self.started[key] = now + runtime
            self.runs += 1
            if self.on_start is not None:
                self.on_start(key, now, at)
        stamp = rfc3339(at)
        for pod in running:
            meta = pod["metadata"]
            uid = meta.get("uid") or f"{meta['namespace']}/{meta['name']}"
            if COMPLETE_AT in (meta.get("annotations") or {}) or uid in self._stamped:
                # Stamped already (a watch cache may not show our own patch yet).
                continue
            path = kubeapi.PODS.path(meta["namespace"], meta["name"])
            self._patches.append((uid, path, stamp))

    def _runtime(self, key: tuple[str, str], pod: dict[str, Any]) -> float | None:
        """The gang's runtime from a member's annotation; None (and an error kept) if bad."""
        try:
            return parse_duration(pod["metadata"]["annotations"][GANG_RUNTIME], field=GANG_RUNTIME)
        except DurationError as exc:
            self.errors.append(f"{key[0]}/{key[1]}: {exc}")
            return None

    def _min_members(self, pod: dict[str, Any]) -> int | None:
        meta = pod["metadata"]
        said = (meta.get("annotations") or {}).get(MIN_MEMBERS)
        if said is not None and said.isdigit():
            # The gang's minimum on its pods (a JobSet's, a pod group's: not their Job's).
            return int(said)
        job = (meta.get("labels") or {}).get(JOB_NAME)
        if job is None:
            return 1
        ref = (meta["namespace"], job)
        if ref not in self._minimum:
            if self.job_lookup is not None:
                found = self.job_lookup(ref[0], job)
                if found is None:
                    return None  # not seen yet: look again on the next pass
                body = dict(found)
            else:
                try:
                    body = self.client.get(kubeapi.JOBS.path(ref[0], job))
                except ApiError as exc:
                    if exc.status != 404:
                        self.errors.append(exc.message)
                    return None
            try:  # the gang's minimum as the controller reads it (policies.kinds)
                minimum = JOB.gang_fields(body)[1].minimum
            except FieldError:
                minimum = max(job_gang_size(body.get("spec") or {}), 1)
            self._minimum[ref] = minimum
        return self._minimum[ref]

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.run_once()
            except (ApiError, OSError) as exc:
                self.errors.append(str(exc))
