"""The controller's pod watch: one lean watch stream into the cache, without kopf.

Pods are the busiest kind the controller sees: each gang pod is created, bound, started, made
ready and finished, five events or more, and the cache keeps only where a pod is bound, what it
requests, whose gang it is and whether it is done. kopf's per-event machinery (a worker task per
object, cause detection, handler keyword arguments) cost about a fifth of the controller's CPU in
a burst for nothing the cache uses. Jobs, Nodes, Queues and Namespaces stay on kopf's watches.

The stream starts at the resourceVersion of the LIST the cache was loaded from, so nothing
between the two is missed. A 410 Gone (the history was compacted) LISTs pods again, drops what
disappeared, and watches on from there. Events are parsed on the watch's thread and applied on
the event loop's thread (the cache's only writer), in batches: a burst of events costs one
wake-up of the loop, not one each.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from admission.cache import Cache, cache_key
from admission.kubeapi import ApiError, KubeClient, WatchStream

log = logging.getLogger("muster.podwatch")

PODS = "/api/v1/pods"

Lister = Callable[[KubeClient, str], tuple[list[Any], int]]


class PodWatch:
    """Keeps `cache.pods` current from a watch on its own thread; `start`, then `stop`."""

    def __init__(
        self,
        client: KubeClient,
        cache: Cache,
        loop: asyncio.AbstractEventLoop,
        lister: Lister,
        timeout_seconds: int = 300,
    ) -> None:
        self.client = client
        self.cache = cache
        self.loop = loop
        self.lister = lister
        self.timeout_seconds = timeout_seconds
        self.events = 0  # applied so far (tests, logs)
        self.relists = 0
        self._pending: collections.deque[tuple[str, Any, int]] = collections.deque()
        self._scheduled = False
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._stream: WatchStream | None = None
        self._thread: threading.Thread | None = None

    def start(self, resource_version: int) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(resource_version,), name="muster-podwatch", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop the stream and wait for the thread (blocking: call it off the event loop)."""
        self._stopped.set()
        stream = self._stream
        if stream is not None:
            stream.close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    # -- the watch thread ------------------------------------------------------------------

    def _run(self, resource_version: int) -> None:
        version = resource_version
        delay = 0.5
        while not self._stopped.is_set():
            try:
                version = self._stream_from(version)
                delay = 0.5
            except ApiError as exc:
                if exc.status == 410:
                    version = self._relist()
                    continue
                log.warning("pod watch: %s; retrying in %.1fs", exc, delay)
            except (OSError, ValueError) as exc:
                if self._stopped.is_set():
                    return
                log.warning("pod watch: %s; retrying in %.1fs", exc, delay)
            else:
                continue
            self._stopped.wait(delay)
            delay = min(delay * 2, 10.0)

    def _stream_from(self, version: int) -> int:
        """Follow one watch request; return the resourceVersion to go on from."""
        stream = self.client.watch(
            PODS,
            {"resourceVersion": str(version), "allowWatchBookmarks": "true"},
            timeout_seconds=self.timeout_seconds,
        )
        self._stream = stream
        if self._stopped.is_set():
            return version
        for event in stream:
            kind = event.get("type") or ""
            body = event.get("object") or {}
            if kind == "ERROR":
                code = int(body.get("code") or 0)
                if code == 410:
                    return self._relist()
                raise ApiError(code or 500, "WATCH", PODS, str(body.get("message") or body))
            with contextlib.suppress(ValueError):
                version = int((body.get("metadata") or {}).get("resourceVersion") or version)
            if kind != "BOOKMARK":
                self._hand_over(kind, body, 0)
        return version

    def _relist(self) -> int:
        items, version = self.lister(self.client, PODS)
        self.relists += 1
        log.info("pod watch: history too old; listed %d pods again", len(items))
        self._hand_over("RELIST", items, version)
        return version

    def _hand_over(self, kind: str, body: Any, version: int) -> None:
        self._pending.append((kind, body, version))
        with self._lock:
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: we are shutting down
            self._stopped.set()

    # -- the event loop's thread -----------------------------------------------------------

    def _drain(self) -> None:
        with self._lock:
            self._scheduled = False
        cache = self.cache
        pending = self._pending
        started = time.perf_counter()
        while pending:
            kind, body, version = pending.popleft()
            if kind == "RELIST":
                for item in body:
                    cache.apply_pod("ADDED", item)
                cache.prune("pod", {cache_key("pod", item) for item in body}, version)
                continue
            cache.apply_pod(kind, body)
            self.events += 1
            if time.perf_counter() - started > 0.05 and pending:
                # Yield to the rest of the loop (webhook-free, but the status service and
                # kopf's watches share it); the remainder drains on the next turn.
                with self._lock:
                    self._scheduled = True
                self.loop.call_soon(self._drain)
                return
