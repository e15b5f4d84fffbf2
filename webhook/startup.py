"""The webhook's side of a `muster run` process: its server, its TLS, its startup and cleanup.

`register_webhook` puts the webhook's server on kopf's registry: muster's lean HTTP/1.1
endpoint (`webhook.server`, the default) or kopf's `@kopf.on.mutate` handlers
(`webhook_server="kopf"`), with its metrics server. `serving_tls` says what it serves with:
with `--local` a fresh self-signed CA and certificate (or the given ones, signed by the given
CA), else the given files. `WebhookServing` starts and stops what serves beside it: its metrics
server, its readiness, and with `--local` the MutatingWebhookConfiguration (url + caBundle),
registered once the server accepts TLS connections and removed again on a clean exit. In a
cluster the static manifests carry the configuration and the certificate comes from a Secret.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import socket
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kubeport import kubeapi
from kubeport.kubeapi import SELF_SUBJECT_REVIEWS, ApiError, KubeClient
from kubeport.statusauth import StatusAuth, access_for
from policies.devices import NO_DEVICES, DeviceMapping
from policies.submitted import SubmissionClock
from webhook import handlers
from webhook.configuration import NAME as WEBHOOK_CONFIG_NAME
from webhook.configuration import build_configuration, own_identity
from webhook.decision import WebhookSettings
from webhook.metrics import MetricsServer
from webhook.review import WebhookState
from webhook.server import WebhookServer
from webhook.serving import ServingCertificate
from webhook.tls import create_webhook_tls

CONFIG_PATH = kubeapi.WEBHOOK_CONFIGURATIONS.path()


@dataclass(frozen=True)
class WebhookServe:
    """How a `muster run` process serves the webhook (its flags)."""

    decision: WebhookSettings
    addr: str = "127.0.0.1"
    port: int = 0
    """0: a free port, picked by the process."""
    server: Literal["lean", "kopf"] = "lean"
    local: bool = False
    """Serve on loopback and register the configuration (url + caBundle) here."""
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    metrics_addr: str = "127.0.0.1"
    metrics_port: int = 8083
    """The webhook's own /metrics; 0: a free port; -1: off."""
    status_auth: StatusAuth = "none"
    """Who may read the metrics (kubeport/statusauth.py)."""
    devices: DeviceMapping = NO_DEVICES
    """The DeviceClasses muster counts (`--device-class`): gangs' claims are read at create
    (`webhook.devices`)."""


def serving_tls(serve: WebhookServe, where: Path) -> tuple[str, str, bytes]:
    """(certificate file, key file, CA bundle) the webhook serves with: made in `where` for
    `local` (unless given with `tls_ca`), else the files given (the CA bundle is then the
    configuration's business)."""
    if serve.local and serve.tls_ca:
        return serve.tls_cert or "", serve.tls_key or "", Path(serve.tls_ca).read_bytes()
    if serve.local:
        tls = create_webhook_tls(where, [serve.addr])
        return str(tls.cert), str(tls.key), tls.ca_bundle
    return serve.tls_cert or "", serve.tls_key or "", b""


def register_webhook(
    registry: Any,
    serve: WebhookServe,
    client: KubeClient,
    state: WebhookState,
    port: int,
    tls: tuple[str, str],
) -> MetricsServer | None:
    """Put the webhook's server on `registry` (a kopf.OperatorRegistry: muster's lean server,
    or kopf's); return its metrics server, or None without one."""
    if serve.server == "kopf":
        # kopf serves the @kopf.on.mutate handlers with muster's certificate (kopf's own
        # self-signed path needs oscrypto); muster writes the configuration, not kopf.
        serving = (serve.addr, port, ServingCertificate(*tls))
        handlers.register_kopf_mutate(registry, state, serve.decision, SubmissionClock(), serving)
    else:
        server = WebhookServer(
            addr=serve.addr,
            port=port,
            certfile=tls[0],
            keyfile=tls[1],
            state=state,
            settings=serve.decision,
            clock=SubmissionClock(),
        )
        handlers.register(registry, server)
    if serve.metrics_port < 0:
        return None
    return MetricsServer(
        state,
        serve.metrics_addr,
        serve.metrics_port,
        access=access_for(serve.status_auth, client),
    )


def wait_for_tls(addr: str, port: int, timeout: float = 30) -> None:
    """Return once a TLS handshake with `addr:port` succeeds; TimeoutError after `timeout`."""
    deadline = time.monotonic() + timeout
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    while time.monotonic() < deadline:
        try:
            with (
                socket.create_connection((addr, port), timeout=1) as raw,
                ctx.wrap_socket(raw, server_hostname=addr),
            ):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"webhook server on {addr}:{port} did not start within {timeout:.0f}s")


def username_of(client: KubeClient) -> str | None:
    """Who the apiserver says ``client`` is (a SelfSubjectReview); None if it cannot say (an
    apiserver before 1.28, or no answer): muster's updates are then reviewed like anyone's."""
    try:
        review = client.create(
            SELF_SUBJECT_REVIEWS.path(),
            {"apiVersion": SELF_SUBJECT_REVIEWS.api_version, "kind": "SelfSubjectReview"},
        )
    except (ApiError, OSError) as exc:
        logging.info("cannot tell muster's own identity (%s); its updates are reviewed", exc)
        return None
    name = ((review.get("status") or {}).get("userInfo") or {}).get("username")
    return name if isinstance(name, str) and name else None


def register_configuration(client: KubeClient, configuration: dict[str, Any]) -> None:
    """Create or replace muster's MutatingWebhookConfiguration."""
    try:
        current = client.get(f"{CONFIG_PATH}/{WEBHOOK_CONFIG_NAME}")
    except ApiError as exc:
        if exc.status != 404:
            raise
        client.create(CONFIG_PATH, configuration)
        return
    body = dict(configuration)
    body["metadata"] = {
        **configuration["metadata"],
        "resourceVersion": current["metadata"]["resourceVersion"],
    }
    client.request("PUT", f"{CONFIG_PATH}/{WEBHOOK_CONFIG_NAME}", body)


def unregister_configuration(client: KubeClient, url: str) -> bool:
    """Delete muster's MutatingWebhookConfiguration if it still points at `url`.

    Another `muster run --local` may have registered its own server since (a restart racing the
    old process's shutdown); its configuration is left alone. Returns whether one was deleted.
    """
    path = f"{CONFIG_PATH}/{WEBHOOK_CONFIG_NAME}"
    try:
        current = client.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    urls = {
        str((hook.get("clientConfig") or {}).get("url") or "").rsplit("/", 1)[0]
        for hook in current.get("webhooks") or []
    }
    if urls != {url}:
        return False
    preconditions = {"resourceVersion": current["metadata"]["resourceVersion"]}
    try:
        client.request("DELETE", path, {"preconditions": preconditions})
    except ApiError as exc:
        if exc.status in (404, 409):
            return False
        raise
    return True


class WebhookServing:
    """The webhook's side of startup and cleanup: its metrics server, its readiness, and the
    configuration `--local` registers (and removes).

    Registering and unregistering the configuration never overlap, and nothing is registered
    once stopping began: a muster stopped while it started (SIGTERM a moment after launch) must
    not leave a configuration that points at a webhook that is gone, which with failurePolicy
    Fail would refuse every create in managed namespaces."""

    def __init__(
        self,
        serve: WebhookServe,
        client: KubeClient,
        port: int,
        ca_bundle: bytes,
        metrics: MetricsServer | None,
    ) -> None:
        self.serve, self.client = serve, client
        self.port, self.ca_bundle, self.metrics = port, ca_bundle, metrics
        self.registration = asyncio.Lock()
        self.stopping = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []  # held, so none is collected while it runs

    async def start(self) -> None:
        if self.metrics is not None:
            await self.metrics.start()
        loop = asyncio.get_running_loop()
        if self.serve.local:
            self.tasks.append(loop.create_task(self._register_when_serving()))
        elif self.metrics is not None:
            self.tasks.append(loop.create_task(self._ready_when_serving(self.metrics)))

    async def stop(self) -> None:
        self.stopping.set()  # nothing is registered from here on
        if self.metrics is not None:
            await self.metrics.stop()
        if self.serve.local:
            async with self.registration:
                await asyncio.to_thread(unregister_configuration, self.client, self.url)

    @property
    def url(self) -> str:
        return f"https://{self.serve.addr}:{self.port}"

    async def _register_when_serving(self) -> None:
        await asyncio.to_thread(wait_for_tls, self.serve.addr, self.port)
        own = own_identity(await asyncio.to_thread(username_of, self.client))
        configuration = build_configuration(
            self.serve.decision,
            url=self.url,
            ca_bundle=base64.b64encode(self.ca_bundle).decode(),
            own_user=own,
        )
        if own is not None:
            logging.info("updates by %s (muster itself) skip the update review", own)
        async with self.registration:
            if self.stopping.is_set():
                return
            await asyncio.to_thread(register_configuration, self.client, configuration)
        logging.info("webhook registered at %s", self.url)
        metrics = ""
        if self.metrics is not None:
            self.metrics.ready = True
            metrics = f" metrics={self.metrics.url}"
        print(f"muster: webhook ready at {self.url}{metrics}", flush=True)

    async def _ready_when_serving(self, metrics: MetricsServer) -> None:
        # In a cluster the configuration is the manifests' to register; serving TLS is ready.
        with contextlib.suppress(TimeoutError):  # not serving: never ready, /healthz says so
            await asyncio.to_thread(wait_for_tls, self.serve.addr, self.port)
            metrics.ready = True
