"""The one door to the Kubernetes API for code that is not kopf: a small JSON-over-HTTPS client.

Standard library only (`http.client` + `ssl`), one keep-alive connection per thread, so it is
cheap enough for benchmarks and bulk work (creating 1000 nodes) and easy to reason about.
Reads kubeconfigs with client certificates (file paths or inline `-data`), which is what the
local control plane writes.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode, urlsplit

import yaml

JSON: Final = "application/json"
MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"


class ApiError(RuntimeError):
    """A non-2xx answer from the apiserver, with its HTTP status and Kubernetes Status message."""

    def __init__(self, status: int, method: str, path: str, message: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.status = status
        self.method = method
        self.path = path
        self.message = message


class KubeconfigError(ValueError):
    """A kubeconfig we cannot use; the message says which file and what is wrong."""


@dataclass(frozen=True)
class Credentials:
    server: str
    ca_file: str | None
    cert_file: str | None
    key_file: str | None
    token: str | None = None
    insecure: bool = False


def _materialize(data_b64: str, suffix: str, keep: list[Any]) -> str:
    handle = tempfile.NamedTemporaryFile(prefix="muster-", suffix=suffix, delete=True)  # noqa: SIM115
    handle.write(base64.b64decode(data_b64))
    handle.flush()
    keep.append(handle)
    return handle.name


def load_kubeconfig(path: str | Path, context: str | None = None) -> tuple[Credentials, list[Any]]:
    """Read the current (or named) context of a kubeconfig into credentials.

    Returns the credentials and the temp files that back any inline `-data` fields (keep them
    alive as long as the credentials are used).
    """
    path = Path(path).expanduser()
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise KubeconfigError(f"cannot read kubeconfig {path}: {exc.strerror}") from exc
    if not isinstance(doc, dict):
        raise KubeconfigError(f"kubeconfig {path} is not a YAML mapping")
    name = context or doc.get("current-context")

    def find(kind: str, wanted: str | None) -> dict[str, Any]:
        for entry in doc.get(kind + "s") or []:
            if entry.get("name") == wanted:
                return dict(entry.get(kind) or {})
        raise KubeconfigError(f"kubeconfig {path}: no {kind} named {wanted!r}")

    ctx = find("context", name)
    cluster = find("cluster", ctx.get("cluster"))
    user = find("user", ctx.get("user"))
    keep: list[Any] = []

    def file_or_data(section: dict[str, Any], key: str, suffix: str) -> str | None:
        if section.get(key):
            return str(Path(section[key]).expanduser())
        if section.get(key + "-data"):
            return _materialize(section[key + "-data"], suffix, keep)
        return None

    creds = Credentials(
        server=str(cluster.get("server", "")),
        ca_file=file_or_data(cluster, "certificate-authority", ".crt"),
        cert_file=file_or_data(user, "client-certificate", ".crt"),
        key_file=file_or_data(user, "client-key", ".key"),
        token=user.get("token"),
        insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
    )
    if not creds.server.startswith("https://"):
        raise KubeconfigError(f"kubeconfig {path}: server {creds.server!r} is not an https URL")
    return creds, keep


@dataclass
class KubeClient:
    """A thread-safe JSON client; each thread keeps its own keep-alive HTTPS connection."""

    credentials: Credentials
    timeout: float = 30.0
    user_agent: str = "muster"
    _keep: list[Any] = field(default_factory=list, repr=False)
    _local: threading.local = field(default_factory=threading.local, repr=False)
    throttle_wait: float = 30.0
    """How long, in all, a request keeps retrying on HTTP 429 before raising."""
    requests_sent: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _connections: list[http.client.HTTPSConnection] = field(default_factory=list, repr=False)

    @classmethod
    def from_kubeconfig(cls, path: str | Path, context: str | None = None) -> KubeClient:
        creds, keep = load_kubeconfig(path, context)
        return cls(creds, _keep=keep)

    @classmethod
    def in_cluster(cls) -> KubeClient:
        """Credentials of the pod's service account (token and CA mounted by Kubernetes)."""
        import os

        root = Path("/var/run/secrets/kubernetes.io/serviceaccount")
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host or not (root / "token").exists():
            raise KubeconfigError(
                "no kubeconfig given and not running in a pod: pass --kubeconfig or set KUBECONFIG"
            )
        return cls(
            Credentials(
                server=f"https://{host}:{port}",
                ca_file=str(root / "ca.crt"),
                cert_file=None,
                key_file=None,
                token=(root / "token").read_text().strip(),
            )
        )

    def _context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.credentials.ca_file)
        if self.credentials.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.credentials.cert_file and self.credentials.key_file:
            ctx.load_cert_chain(self.credentials.cert_file, self.credentials.key_file)
        return ctx

    def _connection(self) -> http.client.HTTPSConnection:
        conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            url = urlsplit(self.credentials.server)
            conn = http.client.HTTPSConnection(
                url.hostname or "127.0.0.1",
                url.port or 443,
                context=self._context(),
                timeout=self.timeout,
            )
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | list[Any] | None = None,
        *,
        content_type: str = JSON,
        params: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Send one request; return the decoded JSON body, or raise ApiError on non-2xx."""
        if params:
            path = f"{path}?{urlencode(params)}"
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Accept": JSON, "User-Agent": self.user_agent}
        if payload is not None:
            headers["Content-Type"] = content_type
        if self.credentials.token:
            headers["Authorization"] = f"Bearer {self.credentials.token}"
        # 429 (throttled, or a new CRD's storage still initializing) is retried after the
        # server's Retry-After, for at most `throttle_wait` seconds in all.
        waited = 0.0
        while True:
            status, data, retry_after = self._send(method, path, payload, headers)
            if status != 429 or waited >= self.throttle_wait:
                break
            delay = min(retry_after, self.throttle_wait - waited)
            time.sleep(delay)
            waited += delay
        try:
            decoded: dict[str, Any] = json.loads(data) if data else {}
        except ValueError:
            # Not JSON: e.g. "404 page not found" for an API group that is not served.
            if status < 300:
                raise
            decoded = {"message": data[:200].decode(errors="replace").strip()}
        if status >= 300:
            message = decoded.get("message") if isinstance(decoded, dict) else None
            raise ApiError(status, method, path, str(message or data[:200]))
        return decoded

    def _send(
        self, method: str, path: str, payload: bytes | None, headers: dict[str, str]
    ) -> tuple[int, bytes, float]:
        """One request on this thread's connection, reconnecting once if it was dropped."""
        with self._lock:
            self.requests_sent += 1
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, path, body=payload, headers=headers)
                response = conn.getresponse()
                data = response.read()
            except (ConnectionError, http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
                continue
            try:
                retry_after = float(response.getheader("Retry-After") or 1)
            except ValueError:
                retry_after = 1.0
            return response.status, data, retry_after
        raise AssertionError("unreachable")

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        return self.request("GET", path, params=params)

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("POST", path, body)

    def patch(
        self, path: str, body: Mapping[str, Any], content_type: str = MERGE_PATCH
    ) -> dict[str, Any]:
        return self.request("PATCH", path, body, content_type=content_type)

    def delete(self, path: str) -> dict[str, Any]:
        return self.request("DELETE", path)

    def watch(
        self, path: str, params: Mapping[str, str], timeout_seconds: int = 300
    ) -> WatchStream:
        """A watch on `path` (see WatchStream); iterate it on a thread of its own."""
        with self._lock:
            self.requests_sent += 1
        return WatchStream(self, path, {**params, "timeoutSeconds": str(timeout_seconds)})

    def raw_get(self, path: str) -> tuple[int, bytes]:
        """GET a non-JSON endpoint (/readyz, /metrics); returns (status, body)."""
        conn = self._connection()
        try:
            conn.request("GET", path, headers={"User-Agent": self.user_agent})
            response = conn.getresponse()
            return response.status, response.read()
        except (ConnectionError, http.client.HTTPException, OSError):
            conn.close()
            self._local.conn = None
            raise

    def close(self) -> None:
        """Close every connection this client opened, from any thread."""
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
        self._local = threading.local()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class WatchStream:
    """One watch request: iterating yields each event (`{"type", "object"}`) until the server
    ends the stream (after `timeoutSeconds`) or `close()` is called from another thread.

    Blocking, on a connection of its own (a watch holds it for minutes). An HTTP error raises
    ApiError; an `ERROR` event (e.g. 410 Gone: the resourceVersion is too old) is yielded for
    the caller to act on.
    """

    def __init__(self, client: KubeClient, path: str, params: Mapping[str, str]) -> None:
        self.path = path
        self._query = {"watch": "1", **params}
        self._client = client
        self._conn: http.client.HTTPSConnection | None = None
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        client = self._client
        url = urlsplit(client.credentials.server)
        # The server ends the stream after timeoutSeconds; the socket timeout only guards
        # against a peer that vanished without closing.
        wait = float(self._query.get("timeoutSeconds", "300")) + 60
        conn = http.client.HTTPSConnection(
            url.hostname or "127.0.0.1", url.port or 443, context=client._context(), timeout=wait
        )
        self._conn = conn
        headers = {"Accept": JSON, "User-Agent": client.user_agent}
        if client.credentials.token:
            headers["Authorization"] = f"Bearer {client.credentials.token}"
        try:
            if self._closed.is_set():
                return
            conn.request("GET", f"{self.path}?{urlencode(self._query)}", headers=headers)
            response = conn.getresponse()
            if response.status >= 300:
                data = response.read()
                message = data[:200].decode(errors="replace")
                raise ApiError(response.status, "GET", self.path, message)
            while not self._closed.is_set():
                try:
                    line = response.readline()
                except (OSError, http.client.HTTPException, ValueError):
                    if self._closed.is_set():
                        return  # close() shut the socket under us
                    raise
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)
        finally:
            conn.close()

    def close(self) -> None:
        """End the stream now (from any thread): the iterating thread returns."""
        self._closed.set()
        conn = self._conn
        sock = conn.sock if conn is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
