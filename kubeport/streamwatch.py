"""A lean list-then-watch of one collection, on a thread of its own, without kopf.

For a busy kind whose reader is cheap and thread-safe: the webhook's count of pending gangs
(`webhook.backlog.Backlog`, fed every managed Job's events), and the controller's pod and Job
watches (`admission.cachewatch`, which hands the events to the event loop's thread). kopf's
per-event machinery (a worker task per object, cause detection, handler keyword arguments)
measured about 1 ms of the webhook's CPU per Job event, three times what its review of the
create cost; this stream parses each event and hands it over, nothing more.

The stream starts at the resourceVersion of the LIST the reader was loaded from, so nothing
between the two is missed. A 410 Gone (the history was compacted) LISTs the collection again
and hands the reader the whole list (`relist`), then watches on from there.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from http.client import HTTPException
from typing import Any

from kubeport.kubeapi import ApiError, KubeClient, WatchStream

log = logging.getLogger("muster.streamwatch")

Lister = Callable[[KubeClient, str, Mapping[str, str]], tuple[list[Any], int]]


def list_collection(
    client: KubeClient, path: str, params: Mapping[str, str] | None = None
) -> tuple[list[Any], int]:
    """Every item of a collection, in pages of 500, and the collection's resourceVersion."""
    items: list[Any] = []
    query = {"limit": "500", **(params or {})}
    version = 0
    while True:
        page = client.get(path, params=query)
        items.extend(page.get("items") or [])
        meta = page.get("metadata") or {}
        if not version:
            # Later pages of a chunked LIST are served at the first page's version.
            version = int(meta.get("resourceVersion") or 0)
        token = meta.get("continue")
        if not token:
            return items, version
        query["continue"] = token


class StreamWatch:
    """Calls `apply(event_type, body)` for each event of `path` (with `params`, e.g. a label
    selector) and `relist(items, version)` after a 410, both on the watch's thread; `start`,
    then `stop`."""

    def __init__(
        self,
        client: KubeClient,
        path: str,
        params: Mapping[str, str],
        *,
        apply: Callable[[str, Mapping[str, Any]], None],
        relist: Callable[[list[Any], int], None],
        lister: Lister,
        name: str,
        timeout_seconds: int = 300,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.path = path
        self.params = dict(params)
        self.apply = apply
        self.relist = relist
        self.lister = lister
        self.name = name
        self.timeout_seconds = timeout_seconds
        self.on_error = on_error
        self.events = 0  # applied so far (tests, logs)
        self._stopped = threading.Event()
        self._stream: WatchStream | None = None
        self._thread: threading.Thread | None = None

    def start(self, resource_version: int | None) -> None:
        """Follow the collection from `resource_version`; None: LIST it first (`relist`), then
        follow it from that list's version."""
        self._thread = threading.Thread(
            target=self._run, args=(resource_version,), name=f"muster-{self.name}", daemon=True
        )
        self._thread.start()

    def stop_soon(self) -> None:
        """Ask the stream to stop, without waiting (safe from any thread)."""
        self._stopped.set()

    def stop(self) -> None:
        """Stop the stream and wait for the thread (blocking)."""
        self._stopped.set()
        stream = self._stream
        if stream is not None:
            stream.close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self, resource_version: int | None) -> None:
        version = resource_version
        delay = 0.5
        while not self._stopped.is_set():
            try:
                version = self._relist() if version is None else self._stream_from(version)
                delay = 0.5
            except ApiError as exc:
                if exc.status == 410:
                    version = self._relist()
                    continue
                self._failed(exc, delay)
            except (OSError, ValueError, HTTPException) as exc:
                if self._stopped.is_set():
                    return
                self._failed(exc, delay)
            else:
                continue
            self._stopped.wait(delay)
            delay = min(delay * 2, 10.0)

    def _failed(self, exc: Exception, delay: float) -> None:
        log.warning("%s watch: %s; retrying in %.1fs", self.name, exc, delay)
        if self.on_error is not None:
            self.on_error(f"{self.name}: {exc}")

    def _stream_from(self, version: int) -> int:
        """Follow one watch request; return the resourceVersion to go on from."""
        stream = self.client.watch(
            self.path,
            {**self.params, "resourceVersion": str(version), "allowWatchBookmarks": "true"},
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
                raise ApiError(code or 500, "WATCH", self.path, str(body.get("message") or body))
            with contextlib.suppress(ValueError):
                version = int((body.get("metadata") or {}).get("resourceVersion") or version)
            if kind != "BOOKMARK":
                self.apply(kind, body)
                self.events += 1
        return version

    def _relist(self) -> int:
        items, version = self.lister(self.client, self.path, self.params)
        log.info("%s watch: listed %d (to begin, or history too old)", self.name, len(items))
        self.relist(items, version)
        return version
