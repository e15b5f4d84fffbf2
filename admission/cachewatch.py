"""The controller's lean watches: a `StreamWatch` per busy kind into the cache, without kopf.

Pods and Jobs are the busiest kinds the controller sees: each gang pod is created, bound,
started, made ready and finished, five events or more, and each Job changes with every pod. The
cache keeps little of each (where a pod is bound, what it requests, whose gang it is; a Job's
gang record), and kopf's per-event machinery (a worker task per object, cause detection,
handler keyword arguments) cost more than the cache's own reading. Nodes, Queues and
Namespaces change rarely and stay on kopf's watches.

The stream (`kubeport.streamwatch`, the one list-then-watch loop) starts at the
resourceVersion of the LIST the cache was loaded from, so nothing between the two is missed; a
410 Gone LISTs again, drops what disappeared, and watches on from there. Events are parsed on
the watch's thread and applied on the event loop's thread (the cache's only writer), in
batches: a burst of events costs one wake-up of the loop, not one each.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from admission.cache import Cache, cache_key
from kubeport.kubeapi import KubeClient
from kubeport.streamwatch import Lister, StreamWatch

log = logging.getLogger("muster.cachewatch")


class CacheWatch:
    """Keeps one kind of `cache` (``cache.apply_<kind>``) current from a watch on its own
    thread; `start`, then `stop`."""

    def __init__(
        self,
        client: KubeClient,
        cache: Cache,
        loop: asyncio.AbstractEventLoop,
        kind: str,
        path: str,
        params: Mapping[str, str] | None,
        lister: Lister,
        timeout_seconds: int = 300,
    ) -> None:
        self.cache = cache
        self.loop = loop
        self.kind = kind
        self._apply = cache.applier(kind)
        self.relists = 0
        self._pending: collections.deque[tuple[str, Any, int]] = collections.deque()
        self._scheduled = False
        self._lock = threading.Lock()
        self.stream = StreamWatch(
            client,
            path,
            params or {},
            apply=lambda event, body: self._hand_over(event, body, 0),
            relist=self._relisted,
            lister=lister,
            name=kind,
            timeout_seconds=timeout_seconds,
        )

    @property
    def events(self) -> int:
        """Events received so far (tests, logs)."""
        return self.stream.events

    def start(self, resource_version: int) -> None:
        self.stream.start(resource_version)

    def stop(self) -> None:
        """Stop the stream and wait for its thread (blocking: call it off the event loop)."""
        self.stream.stop()

    # -- the watch thread ------------------------------------------------------------------

    def _relisted(self, items: list[Any], version: int) -> None:
        self.relists += 1
        self._hand_over("RELIST", items, version)

    def _hand_over(self, kind: str, body: Any, version: int) -> None:
        self._pending.append((kind, body, version))
        with self._lock:
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: we are shutting down
            self.stream.stop_soon()

    # -- the event loop's thread -----------------------------------------------------------

    def _drain(self) -> None:
        with self._lock:
            self._scheduled = False
        cache = self.cache
        apply = self._apply
        pending = self._pending
        started = time.perf_counter()
        while pending:
            kind, body, version = pending.popleft()
            if kind == "RELIST":
                for item in body:
                    item.setdefault("metadata", {})
                    apply("ADDED", item)
                keys = {cache_key(self.kind, item) for item in body}
                dropped = cache.prune(self.kind, keys, version)
                if dropped:
                    log.info("%s watch: relist dropped %d gone", self.kind, dropped)
                continue
            apply(kind, body)
            if time.perf_counter() - started > 0.05 and pending:
                # Yield to the rest of the loop (the status service and kopf's watches share
                # it); the remainder drains on the next turn.
                with self._lock:
                    self._scheduled = True
                self.loop.call_soon(self._drain)
                return
