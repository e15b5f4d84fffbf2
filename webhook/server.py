"""The webhook's HTTPS endpoint: aiohttp, in the operator's event loop, calling `review_response`.

One route, `POST /{path}`; the body is an AdmissionReview, the answer is built by the pure
`webhook.review.review_response` from the in-memory `WebhookState`. TLS 1.2 or newer; a renewed
certificate is picked up without a restart (`webhook.tls.ServingCertificate`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass

from aiohttp import web

from policies.submitted import SubmissionClock
from webhook.decision import WebhookSettings
from webhook.review import WebhookState, review_response
from webhook.tls import RELOAD_INTERVAL, ServingCertificate

logger = logging.getLogger("muster.webhook")


@dataclass
class WebhookServer:
    addr: str
    port: int
    certfile: str
    keyfile: str
    state: WebhookState
    settings: WebhookSettings
    clock: SubmissionClock
    reload_interval: float = RELOAD_INTERVAL
    """Seconds between two looks at the certificate files (`ServingCertificate.watch`)."""
    certificate: ServingCertificate | None = None
    """TLS >= 1.2 and the certificate, reloaded in place; set by `start`."""
    _runner: web.AppRunner | None = None
    _reloads: asyncio.Task[None] | None = None

    async def _serve(self, request: web.Request) -> web.Response:
        try:
            review = json.loads(await request.read())
        except ValueError as exc:
            raise web.HTTPBadRequest(reason=f"not an AdmissionReview: {exc}") from None
        response = review_response(
            review,
            path=request.match_info["path"],
            state=self.state,
            settings=self.settings,
            stamp=self.clock.stamp,
        )
        return web.json_response(response)

    async def start(self) -> None:
        app = web.Application()
        app.add_routes([web.post("/{path}", self._serve)])
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        self.certificate = ServingCertificate(self.certfile, self.keyfile)
        site = web.TCPSite(self._runner, self.addr, self.port, ssl_context=self.certificate.context)
        await site.start()
        self._reloads = asyncio.get_running_loop().create_task(
            self.certificate.watch(self.reload_interval)
        )
        logger.info("webhook serving on https://%s:%d", self.addr, self.port)

    async def stop(self) -> None:
        if self._reloads is not None:
            self._reloads.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reloads
            self._reloads = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
