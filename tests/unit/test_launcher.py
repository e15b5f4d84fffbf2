"""admission.launcher without a cluster: the ports it owns, and the readiness probe it polls
(the controller's `/healthz` says synced; the webhook's metrics port says ready)."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from admission.launcher import free_port, is_ready, launch
from webhook.metrics import MetricsServer
from webhook.review import WebhookState


def test_launch_owns_the_service_ports() -> None:
    with pytest.raises(ValueError, match="--status-port"):
        launch(None, "--status-port", "0")
    with pytest.raises(ValueError, match="--webhook-metrics-port=0"):
        launch(None, "--webhook-metrics-port=0")


@pytest.fixture
def healthz() -> Iterator[tuple[str, dict[str, Any]]]:
    """A /healthz that answers whatever the test puts in the dict."""
    body: dict[str, Any] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", body
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_ready_means_synced_or_ready_and_started_means_answering(
    healthz: tuple[str, dict[str, Any]],
) -> None:
    url, body = healthz
    body["synced"] = False  # a --peering standby
    assert not is_ready(url, synced=True)
    assert is_ready(url, synced=False)
    body["synced"] = True
    assert is_ready(url, synced=True)
    body.clear()
    body["ready"] = True  # the webhook's metrics port
    assert is_ready(url, synced=True)
    assert not is_ready(f"http://127.0.0.1:{free_port()}", synced=False)


def test_webhook_metrics_port_says_ready_once_told() -> None:
    async def probe() -> list[Any]:
        server = MetricsServer(WebhookState(), "127.0.0.1", 0)
        await server.start()
        try:
            seen = []
            for ready in (False, True):
                server.ready = ready
                seen.append(await asyncio.to_thread(_get, f"{server.url}/healthz"))
            return seen
        finally:
            await server.stop()

    assert asyncio.run(probe()) == [{"ready": False}, {"ready": True}]


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)
