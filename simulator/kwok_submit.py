"""What a kwok replay creates and deletes (`Submitter`): its namespaces (with `external`, the
`--namespace-manifest` objects in each, e.g. a Kueue LocalQueue, before any gang), each gang's
Job, MiniCluster, JobSet or pod group's pods at its trace time ÷ time scale, in arrival order,
by parallel submitters (with `none` without the `muster.dev/queue` label, so the default
scheduler alone places pods; with `external` suspended and with the `--label` labels, for a
controller muster does not run to admit), what makes the MiniClusters' Jobs (the real Flux
Operator, else its stand-in per namespace), and at the end the namespaces again, waiting until
their pods are gone.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from simulator.controlplane.minicluster import JobMaker, MiniClusterReconciler, job_maker
from simulator.kwok_devices import create_templates
from simulator.kwok_external import in_namespace
from simulator.kwok_objects import SIM_RUN, GangObject, PodClaims, gang_object, namespace_body
from simulator.kwok_settings import KwokError, KwokSettings, Log
from simulator.kwok_timeline import Timeline
from simulator.records import Admission
from simulator.trace import SubmittedGang


class Submitter:
    """The replay's namespaces and gang objects, created on the replay's clock."""

    def __init__(
        self,
        client: KubeClient,
        settings: KwokSettings,
        admission: Admission,
        run_id: str,
        arrivals: Sequence[SubmittedGang],
        namespaces: Mapping[str, str],
        timeline: Timeline,
        *,
        namespace_objects: Sequence[tuple[kubeapi.Resource, Mapping[str, Any]]],
        node_selector: Mapping[str, str] | None,
        flux_operator: bool = False,
        claims: Mapping[str, PodClaims] | None = None,
        templates: Sequence[tuple[str, Mapping[str, Any]]] = (),
    ) -> None:
        """``namespaces``: the replay's namespace of each trace namespace; ``node_selector``:
        the replay's own nodes, on a cluster that has others; ``flux_operator``: the cluster
        runs the real Flux Operator, which makes the MiniClusters' Jobs; ``claims``: how each
        job group's pods claim their DRA devices, from ``templates`` (replay namespace, claim
        template), created with the namespaces (`simulator.kwok_devices`)."""
        self.templates = templates
        self.client = client
        self.flux_operator = flux_operator
        self.admission = admission
        self.run_id = run_id
        self.arrivals = arrivals
        self.timeline = timeline
        self.namespaces = namespaces
        # Only an external replay gets the manifest's objects and hands its gangs over.
        self.namespace_objects = namespace_objects if admission == "external" else ()
        priority_shift = max(0, -min((a.gang.priority for a in arrivals), default=0))
        handed = settings.external.labels if admission == "external" else None
        self.objects: list[GangObject] = [
            gang_object(
                arrival,
                namespace=self.namespaces[arrival.gang.id.split("/", 1)[0]],
                admission=admission,
                scale=settings.time_scale,
                run=run_id,
                node_selector=node_selector,
                priority_shift=priority_shift,
                labels=handed,
                claims=(claims or {}).get(arrival.group),
            )
            for arrival in arrivals
        ]
        self.errors: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.stop = threading.Event()
        self.dispatched = threading.Event()
        self.reconcilers: dict[str, JobMaker] = {}

    # -- namespaces -----------------------------------------------------------------

    def create_namespaces(self) -> None:
        """The replay's namespaces, each with the namespace-manifest objects (external)."""
        client = self.client
        for namespace in self.namespaces.values():
            client.create(kubeapi.NAMESPACES.path(), namespace_body(namespace, self.run_id))
            for resource, body in self.namespace_objects:
                try:
                    client.create(resource.path(namespace), in_namespace(body, namespace))
                except ApiError as exc:
                    raise KwokError(
                        f"--namespace-manifest: cannot create {body['kind']} "
                        f"{body['metadata']['name']} in {namespace}: {exc.message}"
                    ) from None
        create_templates(client, [(ns, dict(body)) for ns, body in self.templates])

    def delete_namespaces(self) -> None:
        for namespace in self.namespaces.values():
            with contextlib.suppress(ApiError, OSError):
                self.client.delete(kubeapi.NAMESPACES.path(name=namespace))

    def clean_up(self, log: Log) -> None:
        """Delete the replay's namespaces and wait until its pods are gone (their nodes free)."""
        client = self.client
        self.delete_namespaces()
        deadline = time.monotonic() + 180
        selector = {"labelSelector": f"{SIM_RUN}={self.run_id}"}
        while time.monotonic() < deadline:
            if not client.get(kubeapi.PODS.path(), {**selector, "limit": "1"})["items"]:
                return
            time.sleep(0.5)
        log(f"warning: pods of {self.run_id} still present after 180 s")

    # -- what makes the MiniClusters' Jobs -----------------------------------------

    def start_reconcilers(self) -> None:
        """What makes the MiniClusters' Jobs, per namespace, when the trace has MiniClusters:
        the real Flux Operator where the cluster runs it, else the operator's stand-in; with
        `external` the stand-in creates their Jobs suspended, as the other controller's webhook
        would (with the real operator, that webhook must: Kueue's does)."""
        if not any(o.kind == "MiniCluster" for o in self.objects):
            return
        for namespace in self.namespaces.values():
            self.reconcilers[namespace] = job_maker(
                KubeClient(self.client.credentials),
                namespace,
                real=self.flux_operator,
                interval=2.0,
                suspend=self.admission == "external",
            ).start()

    def stop_reconcilers(self) -> None:
        for reconciler in self.reconcilers.values():
            reconciler.stop()
            if isinstance(reconciler, MiniClusterReconciler):
                reconciler.client.close()

    # -- submissions ----------------------------------------------------------------

    def dispatch(self, pool: ThreadPoolExecutor) -> None:
        """Hand each gang to the submitters at its (compressed) trace time, in arrival order."""
        timeline = self.timeline
        try:
            for index, arrival in enumerate(self.arrivals):
                due = timeline.wall_time(arrival.gang.submitted.time)
                delay = due - time.time()
                if delay > 0 and self.stop.wait(delay):
                    return
                if self.stop.is_set():
                    return
                pool.submit(self._submit, index)
        finally:
            self.dispatched.set()

    def _submit(self, index: int) -> None:
        if self.stop.is_set():
            return
        obj = self.objects[index]
        sent = time.time()
        try:
            body = self.client.create(obj.path, obj.body)
            for more in obj.more:  # a pod group's other pods, as its operator makes them
                self.client.create(obj.path, more)
        except (ApiError, OSError) as exc:
            message = exc.message if isinstance(exc, ApiError) else str(exc)
            self.errors.put(f"cannot create {obj.kind} {obj.namespace}/{obj.job_name}: {message}")
            return
        self.timeline.submitted(index, sent)
        if obj.kind == "MiniCluster":
            # The operator reacts to the create at once; the reconciler's loop catches misses.
            self.reconcilers[obj.namespace].reconcile(body)


def replay_namespaces(run_id: str, arrivals: Sequence[SubmittedGang]) -> dict[str, str]:
    """The replay's namespace of each namespace of the trace's gangs."""
    namespaces = sorted({a.gang.id.split("/", 1)[0] for a in arrivals})
    return {ns: f"{run_id}-{ns}"[:63].rstrip("-") for ns in namespaces}
