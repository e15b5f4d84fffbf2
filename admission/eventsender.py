"""Events posted in the background: a bounded backlog and two threads that create them.

An Event is worth less than the write it reports: when the backlog is full it is dropped (and
counted), never waited for, so a burst of admissions is not slowed by its Events.
"""

from __future__ import annotations

import logging
import queue as stdqueue
import threading
from collections.abc import Callable
from typing import Any

from kubeport.kubeapi import ApiError, KubeClient

log = logging.getLogger("muster.writes")


class EventSender:
    """Creates the Events queued with `put`, on background threads."""

    def __init__(
        self,
        client: KubeClient,
        *,
        backlog: int,
        on_write: Callable[[str], None],
        on_dropped: Callable[[], None],
        threads: int = 2,
    ) -> None:
        self.client = client
        self.on_write = on_write
        self.on_dropped = on_dropped
        self._events: stdqueue.Queue[tuple[str, dict[str, Any]] | None] = stdqueue.Queue(backlog)
        self._threads = [
            threading.Thread(target=self._send, name=f"muster-events-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def put(self, path: str, body: dict[str, Any]) -> None:
        """Queue an Event for the collection at ``path``; dropped if the backlog is full."""
        try:
            self._events.put_nowait((path, body))
        except stdqueue.Full:
            self.on_dropped()

    def close(self) -> None:
        for _ in self._threads:
            self._events.put(None)
        for thread in self._threads:
            thread.join(timeout=5)

    def _send(self) -> None:
        while True:
            item = self._events.get()
            if item is None:
                return
            path, body = item
            self.on_write("event")
            try:
                self.client.create(path, body)
            except (ApiError, OSError) as exc:
                log.debug("event not sent: %s", exc)
