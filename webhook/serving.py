"""The webhook server's TLS context: `ServingCertificate`, TLS 1.2 or newer, its certificate
reloaded without a restart. Standard library only (certificates are made in `webhook.tls`)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
from pathlib import Path
from typing import Final

MINIMUM_VERSION: Final = ssl.TLSVersion.TLSv1_2
"""The oldest TLS the webhook accepts (the apiserver speaks 1.2 and 1.3)."""
RELOAD_INTERVAL: Final = 10.0
"""Seconds between two looks at the certificate files (a renewed Secret reaches the pod's
volume within the kubelet's sync period, about a minute, so 10 s adds little)."""

logger = logging.getLogger("muster.webhook")


class ServingCertificate:
    """The webhook server's SSLContext: TLS 1.2 or newer, serving the certificate in `certfile`
    and `keyfile`, reloaded when they change, without a restart.

    cert-manager renews the certificate into the Secret the pod mounts, and the kubelet swaps
    the volume's `..data` symlink to the new files: `watch` notices (a hash of both files every
    `RELOAD_INTERVAL` seconds) and loads them into a fresh context; `context`, the one the
    server listens with, hands each new handshake to the latest one (its SNI callback, which
    OpenSSL calls for every ClientHello), so the listening socket stays open and connections
    already open keep the certificate they began with. A pair that cannot be loaded (read
    half-way through a swap, a key that does not match) is logged and tried again at the next
    look; the previous certificate is served meanwhile. (Loading into the live context instead
    would leave it half-changed by a failed load: the new certificate with the old key.)
    """

    def __init__(self, certfile: str | Path, keyfile: str | Path) -> None:
        self.certfile, self.keyfile = Path(certfile), Path(keyfile)
        self.loads = 0
        """How many times a certificate was loaded (1 after the first)."""
        self._digest = b""  # matches no file: the first `reload` loads
        self.context = self._load()
        self._serving = self.context
        self.context.sni_callback = self._select

    @staticmethod
    def _new_context() -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = MINIMUM_VERSION
        return context

    def _files_digest(self) -> bytes:
        digest = hashlib.sha256(self.certfile.read_bytes())
        digest.update(self.keyfile.read_bytes())
        return digest.digest()

    def _load(self) -> ssl.SSLContext:
        """A fresh context with the files' pair (raises OSError or ssl.SSLError)."""
        digest = self._files_digest()
        context = self._new_context()
        # Hashed before loading: a swap in between only makes the next look load once more.
        context.load_cert_chain(self.certfile, self.keyfile)
        self._digest = digest
        self.loads += 1
        return context

    def _select(self, connection: ssl.SSLObject, _server_name: str | None, context: object) -> None:
        if self._serving is not context:
            connection.context = self._serving

    def changed(self) -> bool:
        """Whether the files hold something else than the pair last loaded."""
        return self._files_digest() != self._digest

    def reload(self) -> bool:
        """Serve the files' pair from the next handshake on if they changed since the last
        load; True if loaded. Raises OSError or ssl.SSLError when they cannot be read or
        loaded (the previous pair is served still)."""
        if not self.changed():
            return False
        self._serving = self._load()
        return True

    def check(self) -> bool:
        """`reload`, logging instead of raising; True if a new certificate was loaded."""
        try:
            loaded = self.reload()
        except (OSError, ssl.SSLError) as exc:
            logger.warning(
                "cannot load the webhook certificate %s (key %s): %s; still serving the previous "
                "one, trying again in %.0fs",
                self.certfile,
                self.keyfile,
                exc,
                RELOAD_INTERVAL,
            )
            return False
        if loaded:
            logger.info("webhook certificate reloaded from %s", self.certfile)
        return loaded

    async def watch(self, interval: float = RELOAD_INTERVAL) -> None:
        """Look at the files every `interval` seconds, forever (cancel the task to stop)."""
        while True:
            await asyncio.sleep(interval)
            self.check()
