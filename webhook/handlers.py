"""kopf registration for the webhook: watches that keep `WebhookState` current, and the server.

Namespaces (their default-queue label), Queues (names, `spec.limits`, and the spec the planner
reads, for `webhook.neverfits`) and MiniClusters (their stamps, and their phase for
`webhook.backlog`: pending gangs per queue, for the limits) are watched with `@kopf.on.event`,
which writes nothing to the objects. Managed Jobs, far busier, reach the backlog through a lean
stream that `muster run` runs while some Queue sets `spec.limits` (`kubeport.streamwatch`;
the backlog serves nothing else); Nodes reach the never-fits check
through another. `muster run` fills the state with one LIST of each before the server starts,
so the first review already sees the whole cluster.

Two ways to serve the reviews, both calling the same pure decision (`webhook.decision`):
- `register` (default, `muster run --webhook-server lean`): muster's own small HTTP/1.1
  endpoint (`webhook.server`), which emits JSON patch ops only for the paths the decision sets;
- `register_kopf_mutate` (`--webhook-server kopf`): kopf's `@kopf.on.mutate` handlers on
  `kopf.WebhookServer`. kopf diffs a deep copy of the whole object to build its patch, which
  measured about twice the per-review CPU (docs/benchmarks.md), hence not the default.

Both serve TLS 1.2 or newer and reload a renewed certificate in place
(`webhook.serving.ServingCertificate`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, Literal

import kopf

from policies.kinds import Kind
from policies.kinds.registry import KINDS, made_by_operator
from policies.model import PolicyError
from policies.objects import queue_from
from policies.phase import NO_LIMITS, parse_queue_limits
from policies.submitted import SubmissionClock
from policies.vocabulary import SUBMITTED
from webhook.configuration import PATHS, UPDATE_PATHS
from webhook.decision import AdmissionRejected, WebhookSettings
from webhook.review import WebhookState, decide, decide_change
from webhook.server import WebhookServer
from webhook.serving import ServingCertificate

logger = logging.getLogger("muster.webhook")

QUEUE_RESOURCE = ("muster.dev", "v1alpha1", "queues")


def stamp_of(body: Mapping[str, Any]) -> str | None:
    return ((body.get("metadata") or {}).get("annotations") or {}).get(SUBMITTED)


def set_limits(state: WebhookState, queue: Mapping[str, Any]) -> None:
    """Keep a Queue's `spec.limits` in `state`. One the apiserver let through but muster cannot
    read (a CRD older than the field) is logged and enforced as no limit: the webhook fails
    open on its own configuration, never closed."""
    name = (queue.get("metadata") or {}).get("name") or ""
    try:
        limits = parse_queue_limits(
            (queue.get("spec") or {}).get("limits"), f'queue "{name}": spec.limits'
        )
    except PolicyError as exc:
        logger.warning("%s; the queue is not limited until it is fixed", exc)
        limits = NO_LIMITS
    if limits.unlimited:
        state.limits.pop(name, None)
    else:
        state.limits[name] = limits


def set_queue(state: WebhookState, queue: Mapping[str, Any]) -> None:
    """Keep a Queue in `state`: its `spec.limits` (`set_limits`) and the spec the planner reads
    (for the never-fits check; one muster cannot read is kept as not Ready, as the controller
    keeps it)."""
    set_limits(state, queue)
    name = (queue.get("metadata") or {}).get("name") or ""
    try:
        state.never_fits.set_queue(name, queue_from(queue))
    except PolicyError as exc:
        state.never_fits.set_queue(name, None, str(exc))


def register(registry: kopf.OperatorRegistry, server: WebhookServer) -> None:
    """Register the state-keeping watches and the lean server's start/stop on `registry`."""

    @kopf.on.startup(registry=registry)
    async def start_webhook_server(**_: Any) -> None:
        await server.start()

    @kopf.on.cleanup(registry=registry)
    async def stop_webhook_server(**_: Any) -> None:
        await server.stop()

    register_watches(registry, server.state)


def kopf_server(addr: str, port: int, certificate: ServingCertificate) -> kopf.WebhookServer:
    """kopf's webhook server on muster's TLS: the certificate's context (TLS >= 1.2), which
    `certificate.watch` reloads in place. kopf also loads the files into that context at start;
    its own look for changed files, which restarts the listener (refusing reviews meanwhile),
    is left asleep."""
    return kopf.WebhookServer(
        addr=addr,
        port=port,
        context=certificate.context,
        certfile=str(certificate.certfile),
        pkeyfile=str(certificate.keyfile),
        file_check_interval=_NEVER,
    )


_NEVER = 365 * 24 * 3600.0


def register_kopf_mutate(
    registry: kopf.OperatorRegistry,
    state: WebhookState,
    settings: WebhookSettings,
    clock: SubmissionClock,
    server: tuple[str, int, ServingCertificate],
) -> None:
    """Register `@kopf.on.mutate` handlers for every kind's CREATE and UPDATE, the watches, and
    kopf's server (`kopf_server` on `server`: address, port, certificate) with the
    certificate's reload.

    The handler ids are the URL paths the MutatingWebhookConfiguration names (kopf serves each
    handler at `/<id>`), so the configuration muster writes fits either server. muster, not
    kopf, owns the configuration (`settings.admission.managed = None`).
    """
    addr, port, certificate = server
    reloads: list[asyncio.Task[None]] = []

    @kopf.on.startup(registry=registry)
    async def serve_with_muster_tls(**kwargs: Any) -> None:
        operator: kopf.OperatorSettings = kwargs["settings"]
        operator.admission.server = kopf_server(addr, port, certificate)
        operator.admission.managed = None
        reloads.append(asyncio.get_running_loop().create_task(certificate.watch()))

    @kopf.on.cleanup(registry=registry)
    async def stop_reloading(**_: Any) -> None:
        for task in reloads:
            task.cancel()

    routes: tuple[tuple[Mapping[str, Kind], Literal["CREATE", "UPDATE"], bool], ...] = (
        (PATHS, "CREATE", False),
        (UPDATE_PATHS, "UPDATE", True),
    )
    for paths, operation, update in routes:
        for path, kind in paths.items():
            kopf.on.mutate(
                kind.api.group,
                kind.api.version,
                kind.api.plural,
                id=path,
                operation=operation,
                side_effects=False,
                registry=registry,
            )(_kopf_handler(path, state, settings, clock, update=update))

    register_watches(registry, state)


def _kopf_handler(
    path: str,
    state: WebhookState,
    settings: WebhookSettings,
    clock: SubmissionClock,
    *,
    update: bool,
) -> Callable[..., None]:
    """kopf's handler for the reviews at `/<path>`: a create's (`decide`) or, with ``update``,
    an update's (`decide_change`, with kopf's `old`)."""

    def handler(
        body: Mapping[str, Any],
        patch: kopf.Patch,
        warnings: list[str],
        old: Mapping[str, Any] | None = None,
        dryrun: bool = False,
        **_: Any,
    ) -> None:
        common: dict[str, Any] = {
            "namespace": (body.get("metadata") or {}).get("namespace") or "",
            "state": state,
            "settings": settings,
            "stamp": clock.stamp,
            "dry_run": dryrun,
        }
        try:
            if update:
                changed = decide_change(path, old or {}, body, **common)
            else:
                decision = decide(path, body, **common)
                changed = None if decision is None else (decision.patch, decision.warnings)
        except AdmissionRejected as exc:
            raise kopf.AdmissionError(str(exc), code=exc.code) from None
        assert changed is not None, path  # every path is muster's
        for key, value in changed[0].items():
            patch[key] = value
        warnings.extend(changed[1])

    return handler


def register_watches(registry: kopf.OperatorRegistry, state: WebhookState) -> None:
    """Keep `state` current from kopf's watches of namespaces, Queues and MiniClusters (managed
    Jobs: `muster run` streams them into `state.backlog` while some Queue sets limits)."""

    @kopf.on.event("namespaces", registry=registry)
    def watch_namespace(type: str | None, name: str, labels: Mapping[str, str], **_: Any) -> None:
        if type == "DELETED":
            state.namespace_labels.pop(name, None)
        else:
            state.namespace_labels[name] = dict(labels)

    if state.queues is not None:
        queues = state.queues

        @kopf.on.event(*QUEUE_RESOURCE, registry=registry)
        def watch_queue(type: str | None, name: str, body: Mapping[str, Any], **_: Any) -> None:
            if type == "DELETED":
                queues.discard(name)
                state.limits.pop(name, None)
                state.never_fits.drop_queue(name)
            else:
                queues.add(name)
                set_queue(state, body)
            state.note_limits_changed()

    for kind in KINDS.values():
        if made_by_operator(kind):
            register_owner_watch(registry, state, kind)


def register_owner_watch(registry: kopf.OperatorRegistry, state: WebhookState, kind: Kind) -> None:
    """Watch the objects of a kind whose operator makes their gang object (a MiniCluster): their
    stamps (the gang object gets its owner's) and, for the limits, that they are pending."""

    @kopf.on.event(kind.api.group, kind.api.version, kind.api.plural, registry=registry)
    def watch_owner(
        type: str | None, namespace: str | None, name: str, body: Mapping[str, Any], **_: Any
    ) -> None:
        key = (kind.name, namespace or "", name)
        state.backlog.observe_owner(kind, type, body)
        stamp = stamp_of(body)
        if type == "DELETED" or not stamp:
            state.owner_stamps.pop(key, None)
        else:
            state.owner_stamps[key] = stamp
