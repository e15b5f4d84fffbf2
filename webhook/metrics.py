"""The webhook's Prometheus metrics, served by the webhook's own process on `/metrics`.

The webhook usually runs in a child process of `muster run` (its own interpreter), so its
figures cannot join the controller's registry; it serves them on `--webhook-metrics-port`
(default 8083) instead. Read at scrape time from `WebhookState`: nothing is updated per review
but the refusal and warning counts. Documented in docs/metrics.md.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kubeport.kubeapi import ApiError, ApiUnreachable
from kubeport.statusauth import Access, OpenAccess
from webhook.review import WebhookState

logger = logging.getLogger("muster.webhook")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _WebhookCollector(Collector):
    def __init__(self, state: WebhookState) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            "muster_webhook_pending_gangs",
            "Pending gangs per queue with spec.limits as the webhook counts them against the "
            "limits: stored, not admitted, not finished, plus creates it allowed that its watch "
            "has not shown.",
            labels=["queue"],
        )
        depths = dict(self.state.backlog.depths())
        # Only the limited queues: the webhook follows managed Jobs only while some Queue sets
        # limits (webhook.loading.ManagedJobs); muster_pending_gangs counts every queue.
        for queue in sorted(self.state.limits):
            depth.add_metric([queue], float(depths.get(queue, 0)))
        yield depth
        refusals = CounterMetricFamily(
            "muster_webhook_refusals",
            "Creates refused: the queue held as many pending gangs as spec.limits allows "
            "(MaxPending, MaxPendingPerNamespace), or the gang can never run in its queue and "
            "the queue has spec.neverFits: Reject (NeverFits).",
            labels=["queue", "reason"],
        )
        counts: dict[tuple[str, str], int] = {
            key: count for key, count in self.state.backlog.refusals().items()
        }
        for queue, count in self.state.never_fits.refusals().items():
            counts[(queue, "NeverFits")] = count
        for (queue, reason), count in sorted(counts.items()):
            refusals.add_metric([queue, reason], float(count))
        yield refusals
        warnings = CounterMetricFamily(
            "muster_webhook_warnings",
            "Creates allowed with a warning: the gang can never run in its queue and the queue "
            "has spec.neverFits: Warn (NeverFits).",
            labels=["queue", "reason"],
        )
        for queue, count in sorted(self.state.never_fits.warnings().items()):
            warnings.add_metric([queue, "NeverFits"], float(count))
        yield warnings


def registry_for(state: WebhookState) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(_WebhookCollector(state))
    return registry


class MetricsServer:
    """Plain-HTTP `/metrics` of one webhook process (port 0: a free one; `port` says which),
    behind the same bearer-token check as the controller's (`access`), and its
    readiness probe `/healthz` (open): `{"ready": true}` once the webhook serves reviews (and,
    with `muster run --local`, once its configuration is registered)."""

    def __init__(
        self, state: WebhookState, addr: str, port: int, access: Access | None = None
    ) -> None:
        self.registry = registry_for(state)
        self.access: Access = access if access is not None else OpenAccess()
        self.addr = addr
        self.port = port
        self.ready = False
        self._runner: web.AppRunner | None = None

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"ready": self.ready})

    async def _metrics(self, request: web.Request) -> web.Response:
        # The same rule as the controller's /metrics (kubeport/statusauth.py): a bearer token
        # whose user may get the non-resource URL /metrics.
        try:
            caller = await self.access.caller(request.headers.get("Authorization"))
            if caller is None:
                return web.json_response({"error": "send Authorization: Bearer TOKEN"}, status=401)
            if not await self.access.may_scrape(caller, "/metrics"):
                return web.json_response(
                    {"error": f"{caller.username} may not get /metrics (nonResourceURLs)"},
                    status=403,
                )
        except (ApiError, ApiUnreachable):
            return web.json_response({"error": "cannot check the token now; retry"}, status=503)
        return web.Response(
            body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE}
        )

    async def start(self) -> None:
        app = web.Application()
        app.add_routes([web.get("/metrics", self._metrics), web.get("/healthz", self._healthz)])
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        # Bound here, not by aiohttp, so port 0 tells which free port it got.
        sock = socket.socket(socket.AF_INET6 if ":" in self.addr else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.addr, self.port))
        self.port = int(sock.getsockname()[1])
        await web.SockSite(self._runner, sock).start()
        logger.info("webhook metrics on http://%s:%d/metrics", self.addr, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self.port}"
