"""The queue controller's kopf registration: watches into the cache, the loop, status, metrics.

Nodes, Queues and Namespaces are watched with `@kopf.on.event`, Pods and Jobs by lean streams
(`admission.cachewatch`: the busiest kinds; kopf's per-event work bought nothing there).
kopf writes nothing to the watched objects (no progress or last-handled annotations, no
finalizers). Before the first cycle the controller LISTs every kind once, so a restarted
controller plans from the whole cluster (admitted gangs included), never from a half-filled
cache; watch events older than what that LIST returned are ignored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from admission import kubeapi
from admission.cache import Cache, cache_key
from admission.cachewatch import CacheWatch
from admission.history import GangHistory
from admission.kubeapi import ApiError, KubeClient
from admission.loop import Controller, ControllerSettings
from admission.metrics import ControllerMetrics
from admission.status import StatusServer
from admission.statusauth import StatusAuth, access_for
from admission.streamwatch import list_collection
from admission.writes import Writer
from policies.vocabulary import QUEUE

log = logging.getLogger("muster.controller")

JOBS = kubeapi.JOBS.path()
PODS = kubeapi.PODS.path()
NODES = kubeapi.NODES.path()
QUEUES = kubeapi.QUEUES.path()
NAMESPACES = kubeapi.NAMESPACES.path()


@dataclass
class ServeSettings:
    """Where the status service and the metrics listen (port 0: any free port; None: off)."""

    status_addr: str = "127.0.0.1"
    status_port: int | None = 8081
    metrics_port: int | None = 8082
    status_auth: StatusAuth = "none"
    """`kubernetes`: both need a bearer token and are scoped (admission/statusauth.py)."""


@dataclass
class Runtime:
    """What `register` built, for callers that want to look inside (tests, benchmarks)."""

    cache: Cache
    metrics: ControllerMetrics
    controller: Controller | None = None
    status: StatusServer | None = None
    metrics_server: StatusServer | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


def list_all(client: KubeClient, path: str, params: Mapping[str, str] | None = None) -> list[Any]:
    """Every item of a collection, in pages of 500."""
    return list_collection(client, path, params)[0]


Listing = list[tuple[str, list[Any], int]]


KINDS: tuple[tuple[str, str, Mapping[str, str] | None], ...] = (
    ("queue", QUEUES, None),
    ("node", NODES, None),
    ("pod", PODS, None),
    ("job", JOBS, {"labelSelector": QUEUE}),
    ("namespace", NAMESPACES, None),
)
"""What the cache holds: (kind, collection path, LIST parameters)."""
LEAN_KINDS = frozenset({"pod", "job"})
"""Kinds watched by `admission.cachewatch` (busy: every gang pod changes each several times);
the others by kopf's `@on.event`."""


def _tolerated(kind: str, exc: ApiError) -> bool:
    """A LIST failure the controller works without (and logs); others are raised."""
    if exc.status == 404 and kind == "queue":
        log.warning("Queue CRD not installed: kubectl apply -f manifests/crd/")
        return True
    if exc.status == 403 and kind == "namespace":
        # Read-only views (muster explain) may lack it; queues' namespaceSelectors are then
        # not checked (the controller's ClusterRole grants it).
        log.warning("cannot list namespaces: queues' namespaceSelector not checked")
        return True
    return False


def list_everything(client: KubeClient) -> Listing:
    """One LIST of each kind the cache holds: (kind, items, collection version). Blocking."""
    out: Listing = []
    for kind, path, params in KINDS:
        try:
            items, version = list_collection(client, path, params)
        except ApiError as exc:
            if _tolerated(kind, exc):
                continue
            raise
        out.append((kind, items, version))
    return out


async def load_everything(cache: Cache, client: KubeClient) -> dict[str, int]:
    """LIST every kind into the cache page by page; return each collection's version.

    Like `list_everything` + `apply_listing`, but never holds more than one page of objects:
    the parsed bodies of 10k Jobs at once were the controller's memory peak, and CPython keeps
    much of such a peak as its resident size afterwards.
    """
    versions: dict[str, int] = {}
    for kind, path, params in KINDS:
        apply = getattr(cache, f"apply_{kind}")
        keys: set[str] = set()
        query = {"limit": "500", **(params or {})}
        version = 0
        try:
            while True:
                page = await asyncio.to_thread(client.get, path, query)
                meta = page.get("metadata") or {}
                # Later pages of a chunked LIST are served at the first page's version.
                version = version or int(meta.get("resourceVersion") or 0)
                for item in page.get("items") or []:
                    item.setdefault("metadata", {})
                    apply("ADDED", item)
                    keys.add(cache_key(kind, item))
                del page
                token = meta.get("continue")
                if not token:
                    break
                query["continue"] = token
        except ApiError as exc:
            if _tolerated(kind, exc):
                continue
            raise
        dropped = cache.prune(kind, keys, version)
        if dropped:
            log.info("resync dropped %d %s(s) deleted while unwatched", dropped, kind)
        versions[kind] = version
    return versions


def apply_listing(cache: Cache, listing: Listing) -> None:
    """Load a listing into the cache, on the event loop's thread (the cache's only writer).

    Also a resync: what the cache holds but the LIST no longer does is dropped (a standby
    replica's paused watches may have missed the deletion).
    """
    for kind, items, version in listing:
        apply = getattr(cache, f"apply_{kind}")
        for item in items:
            item.setdefault("metadata", {})
            apply("ADDED", item)
        dropped = cache.prune(kind, {cache_key(kind, item) for item in items}, version)
        if dropped:
            log.info("resync dropped %d %s(s) deleted while unwatched", dropped, kind)


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
    cache = Cache(history=GangHistory(settings.history_limit))
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
        # Pods and Jobs are watched from the version of the LIST just applied, by lean
        # streams (admission.cachewatch); the rarer kinds by kopf.
        loop = asyncio.get_running_loop()
        watches = [
            CacheWatch(client, cache, loop, kind, path, params, list_collection)
            for kind, path, params in KINDS
            if kind in LEAN_KINDS
        ]
        for watch in watches:
            watch.start(versions[watch.kind])
        try:
            cache.synced = True
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
