"""The queue controller's kopf registration: watches into the cache, the loop, status, metrics.

Nodes, Queues and Namespaces are watched with `@kopf.on.event`, Pods and Jobs by lean streams
(`admission.cachewatch`: the busiest kinds; kopf's per-event work bought nothing there).
kopf writes nothing to the watched objects (no progress or last-handled annotations, no
finalizers). Before the first cycle the controller LISTs every kind once
(`admission.listing.load_everything`), and starts the lean streams from those versions. Under
kopf peering only the active replica admits (`ensure_peering` makes the peering object).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from admission.cache import Cache
from admission.cachewatch import CacheWatch
from admission.history import GangHistory
from admission.listing import KINDS, LEAN_KINDS, load_everything
from admission.loop import Controller
from admission.metrics import ControllerMetrics
from admission.nativegangs import serves_pod_groups
from admission.settings import ControllerSettings
from admission.status import StatusServer
from admission.writes import Writer
from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from kubeport.statusauth import StatusAuth, access_for
from kubeport.streamwatch import list_collection

log = logging.getLogger("muster.controller")

PEERINGS_PATH = kubeapi.KOPF_PEERINGS.path()


@dataclass
class ServeSettings:
    """Where the status service and the metrics listen (port 0: any free port; None: off)."""

    status_addr: str = "127.0.0.1"
    status_port: int | None = 8081
    metrics_port: int | None = 8082
    status_auth: StatusAuth = "none"
    """`kubernetes`: both need a bearer token and are scoped (kubeport/statusauth.py)."""


@dataclass
class Runtime:
    """What `register` built, for callers that want to look inside (tests, benchmarks)."""

    cache: Cache
    metrics: ControllerMetrics
    controller: Controller | None = None
    status: StatusServer | None = None
    metrics_server: StatusServer | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


def ensure_peering(client: KubeClient, name: str) -> str | None:
    """Create the ClusterKopfPeering `name` if it is missing; a message if that cannot be."""
    body = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": name}}
    try:
        client.create(PEERINGS_PATH, body)
    except ApiError as exc:
        if exc.status == 409:
            return None
        if exc.status == 404:
            return (
                "--peering needs the ClusterKopfPeering CRD: "
                "kubectl apply -f manifests/crd/clusterkopfpeerings.kopf.dev.yaml"
            )
        return f"cannot create ClusterKopfPeering {name!r}: {exc.message}"
    return None


def register(
    registry: kopf.OperatorRegistry,
    client: KubeClient,
    settings: ControllerSettings | None = None,
    serve: ServeSettings | None = None,
    peering: str | None = None,
) -> Runtime:
    """Register the controller's watches and its startup/cleanup on `registry`.

    With ``peering`` (a ClusterKopfPeering name) only the replica kopf keeps active admits:
    the admit loop runs inside a kopf daemon on that peering object, and kopf stops every
    daemon of a replica it pauses because a peer of higher priority is alive. A replica that
    takes over LISTs everything again (its watches were paused) before its first cycle.
    """
    settings = settings or ControllerSettings()
    metrics = ControllerMetrics()
    metrics.track_requests(lambda: client.requests_sent)
    cache = Cache(history=GangHistory(settings.history_limit), devices=settings.devices)
    runtime = Runtime(cache, metrics)
    parts = _Registration(client, settings, serve or ServeSettings(), peering, runtime)
    parts.watch_rare_kinds(registry)
    kopf.on.startup(registry=registry)(parts.start)
    kopf.on.cleanup(registry=registry)(parts.stop)
    if peering is not None:
        parts.lead_when_active(registry, peering)
    return runtime


@dataclass
class _Registration:
    """The handlers `register` puts on a kopf registry, and what they share."""

    client: KubeClient
    settings: ControllerSettings
    serve: ServeSettings
    peering: str | None
    runtime: Runtime

    def watch_rare_kinds(self, registry: kopf.OperatorRegistry) -> None:
        """Nodes, Namespaces and Queues change rarely: kopf watches them into the cache (Jobs
        and Pods come through muster's lean streams, started in `sync_then_run`)."""
        cache = self.runtime.cache

        @kopf.on.event("", "v1", "nodes", registry=registry)
        async def watch_node(event: Mapping[str, Any], **_: Any) -> None:
            cache.apply_node(event.get("type"), event["object"])

        @kopf.on.event("", "v1", "namespaces", registry=registry)
        async def watch_namespace(event: Mapping[str, Any], **_: Any) -> None:
            cache.apply_namespace(event.get("type"), event["object"])

        @kopf.on.event("muster.dev", "v1alpha1", "queues", registry=registry)
        async def watch_queue(event: Mapping[str, Any], **_: Any) -> None:
            cache.apply_queue(event.get("type"), event["object"])

    async def start(self, **_: Any) -> None:
        """Startup: the writer, the controller, the status and metrics servers; then admit
        (or, under peering, stand by until kopf makes this replica active)."""
        runtime, settings, serve = self.runtime, self.settings, self.serve
        writer = Writer(
            self.client,
            concurrency=settings.write_concurrency,
            on_retry=lambda code: runtime.metrics.api_retries.labels(str(code)).inc(),
            on_event_dropped=runtime.metrics.events_dropped.inc,
            on_write=lambda kind: runtime.metrics.writes.labels(kind).inc(),
        )
        controller = Controller(runtime.cache, writer, settings, runtime.metrics)
        runtime.controller = controller
        access = access_for(serve.status_auth, self.client)
        runtime.metrics.track_reviews(lambda: access.reviews)
        if serve.status_port is not None:
            runtime.status = StatusServer(
                runtime.cache,
                controller.queue_status,
                runtime.metrics.exposition if serve.metrics_port == serve.status_port else None,
                addr=serve.status_addr,
                port=serve.status_port,
                access=access,
            )
            await runtime.status.start()
        if serve.metrics_port is not None and serve.metrics_port != serve.status_port:
            runtime.metrics_server = StatusServer(
                runtime.cache,
                controller.queue_status,
                runtime.metrics.exposition,
                addr=serve.status_addr,
                port=serve.metrics_port,
                access=access,
            )
            await runtime.metrics_server.start()
        if self.peering is None:
            task = asyncio.get_running_loop().create_task(self.sync_then_run(controller))
            runtime.tasks.append(task)
        else:
            print(f"muster: controller standby {self.where()} peering={self.peering}", flush=True)

    def where(self) -> str:
        runtime, serve = self.runtime, self.serve
        status = runtime.status.port if runtime.status else None
        metrics_port = (
            (runtime.metrics_server.port if runtime.metrics_server else status)
            if serve.metrics_port is not None
            else None
        )
        return f"status={serve.status_addr}:{status} metrics={serve.status_addr}:{metrics_port}"

    def lead_when_active(self, registry: kopf.OperatorRegistry, peering: str) -> None:
        """Run the admit loop in a kopf daemon on the peering object: kopf stops it when it
        pauses this replica for a peer of higher priority."""
        runtime = self.runtime

        def _is_ours(name: str, **_: Any) -> bool:
            return name == peering

        @kopf.daemon(
            "kopf.dev",
            "v1",
            "clusterkopfpeerings",
            when=_is_ours,
            registry=registry,
            cancellation_timeout=30.0,
        )
        async def lead(stopped: kopf.DaemonStopped, **_: Any) -> None:
            controller = runtime.controller
            assert controller is not None, "startup runs before any daemon"
            log.info("peering %s: this replica is active; admitting", peering)
            task = asyncio.get_running_loop().create_task(self.sync_then_run(controller))
            runtime.tasks.append(task)
            try:
                await stopped.wait()
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                runtime.tasks.remove(task)
                await asyncio.gather(*controller.inflight, return_exceptions=True)
                runtime.cache.synced = False
                log.info("peering %s: paused (%s); standing by", peering, stopped.reason)

    async def sync_then_run(self, controller: Controller) -> None:
        """LIST everything into the cache, start the lean Job and Pod streams from those
        versions, and run the admit loop until cancelled."""
        cache, client = self.runtime.cache, self.client
        while True:
            try:
                versions = await load_everything(cache, client)
                break
            except (ApiError, OSError) as exc:
                log.warning("initial LIST failed (%s); retrying in 2s", exc)
                await asyncio.sleep(2)
        # Pods and gang objects are watched from the version of the LIST just applied, by
        # lean streams (admission.cachewatch); the rarer kinds by kopf. A kind whose API is not
        # served (its LIST was not found) is not watched.
        loop = asyncio.get_running_loop()
        watches = [
            CacheWatch(client, cache, loop, kind, path, params, list_collection)
            for kind, path, params in KINDS
            if kind in LEAN_KINDS and kind in versions
        ]
        for watch in watches:
            watch.start(versions[watch.kind])
        controller.native.served = await asyncio.to_thread(serves_pod_groups, client)
        try:
            cache.synced = True
            await controller.native.repair()
            cache.changed.set()
            log.info(
                "controller synced: %d gangs, %d nodes, %d pods, %d queues",
                len(cache.jobs),
                len(cache.nodes),
                len(cache.pods),
                len(cache.queues),
            )
            print(f"muster: controller ready {self.where()}", flush=True)
            await controller.run()
        finally:
            for watch in watches:
                await asyncio.to_thread(watch.stop)

    async def stop(self, **_: Any) -> None:
        """Cleanup: cancel the loop, let writes in flight land, stop the servers."""
        runtime = self.runtime
        for task in runtime.tasks:
            task.cancel()
        await asyncio.gather(*runtime.tasks, return_exceptions=True)
        controller = runtime.controller
        if controller is not None:
            await asyncio.gather(*controller.inflight, return_exceptions=True)
            await asyncio.to_thread(controller.writer.close)
        for server in (runtime.status, runtime.metrics_server):
            if server is not None:
                await server.stop()
