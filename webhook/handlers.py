"""kopf registration for the webhook: watches that keep `WebhookState` current, and the server.

Namespaces (their default-queue label), Queue names and MiniCluster stamps are watched with
`@kopf.on.event`, which writes nothing to the objects. `muster run` fills the state with one
LIST of each before the server starts, so the first review already sees the whole cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from policies.vocabulary import SUBMITTED
from webhook.server import WebhookServer

QUEUE_RESOURCE = ("muster.dev", "v1alpha1", "queues")
MINICLUSTER_RESOURCE = ("flux-framework.org", "v1alpha2", "miniclusters")


def stamp_of(body: Mapping[str, Any]) -> str | None:
    return ((body.get("metadata") or {}).get("annotations") or {}).get(SUBMITTED)


def register(registry: kopf.OperatorRegistry, server: WebhookServer) -> None:
    """Register the state-keeping watches and the server's start/stop on `registry`."""
    state = server.state

    @kopf.on.startup(registry=registry)
    async def start_webhook_server(**_: Any) -> None:
        await server.start()

    @kopf.on.cleanup(registry=registry)
    async def stop_webhook_server(**_: Any) -> None:
        await server.stop()

    @kopf.on.event("namespaces", registry=registry)
    def watch_namespace(type: str | None, name: str, labels: Mapping[str, str], **_: Any) -> None:
        if type == "DELETED":
            state.namespace_labels.pop(name, None)
        else:
            state.namespace_labels[name] = dict(labels)

    if state.queues is not None:
        queues = state.queues

        @kopf.on.event(*QUEUE_RESOURCE, registry=registry)
        def watch_queue(type: str | None, name: str, **_: Any) -> None:
            if type == "DELETED":
                queues.discard(name)
            else:
                queues.add(name)

    @kopf.on.event(*MINICLUSTER_RESOURCE, registry=registry)
    def watch_minicluster(
        type: str | None, namespace: str | None, name: str, body: Mapping[str, Any], **_: Any
    ) -> None:
        key = (namespace or "", name)
        stamp = stamp_of(body)
        if type == "DELETED" or not stamp:
            state.minicluster_stamps.pop(key, None)
        else:
            state.minicluster_stamps[key] = stamp
