"""Watch caches for the kwok engine: one LIST, then a watch stream, per kind it follows.

Polling the replay's Pods with LISTs costs the apiserver a full serialisation of every live
pod on each look (megabytes a second on a 1000-pod burst, on the same two cores the control
plane needs); a watch costs one event per change. `WatchCache` keeps the current objects of one
LIST+WATCH (`/api/v1/pods?labelSelector=...`) in memory and hands out snapshots to the engine's
look loop and to the gang runner. The list-then-watch loop itself (resume from the last
resourceVersion, relist after 410 Gone) is the controller's, `kubeport.streamwatch`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.client import HTTPException
from typing import Any, cast

from kubeport.kubeapi import ApiError, KubeClient
from kubeport.streamwatch import StreamWatch, list_collection

WATCH_SECONDS = 120
"""Server-side watch timeout; the watch is then resumed from its last resourceVersion."""


@dataclass
class WatchCache:
    """The live objects matching one LIST+WATCH, kept current by a background thread."""

    client: KubeClient
    path: str
    params: Mapping[str, str]
    name: str = "watch"
    on_object: Callable[[dict[str, Any]], None] | None = None
    """Called on the watch's thread with each object listed or changed (not deleted)."""
    errors: list[str] = field(default_factory=list)
    _objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _synced: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _stream: StreamWatch | None = None

    def start(self) -> WatchCache:
        self._thread = threading.Thread(target=self._list_then_watch, name=self.name, daemon=True)
        self._thread.start()
        return self

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._stream is not None:
            self._stream.stop()
        self.client.close()

    def snapshot(self) -> list[dict[str, Any]]:
        """The current objects (shared, never mutated: each event stores a new dict)."""
        with self._lock:
            return list(self._objects.values())

    def _list_then_watch(self) -> None:
        """LIST (retrying until it answers), then follow the watch from the LIST's version."""
        while not self._stop.is_set():
            try:
                items, version = list_collection(self.client, self.path, self.params)
            except (ApiError, OSError, ValueError, HTTPException) as exc:
                self._error(f"{self.name}: {exc}")
                self._stop.wait(0.5)
                continue
            self._load(items, version)
            self._synced.set()
            if self._stop.is_set():
                return
            self._stream = StreamWatch(
                self.client,
                self.path,
                self.params,
                apply=self._apply,
                relist=self._load,
                lister=list_collection,
                name=self.name,
                timeout_seconds=WATCH_SECONDS,
                on_error=self._error,
            )
            self._stream.start(version)
            return

    def _error(self, message: str) -> None:
        self.errors.append(message)
        del self.errors[:-20]

    def _load(self, items: list[Any], version: int) -> None:
        objects = {_uid(o): o for o in items}
        if self.on_object is not None:
            for obj in objects.values():
                self.on_object(obj)
        with self._lock:
            self._objects = objects

    def _apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        body = cast(dict[str, Any], obj)  # freshly decoded from the stream; nobody else holds it
        with self._lock:
            if kind == "DELETED":
                self._objects.pop(_uid(body), None)
            else:
                self._objects[_uid(body)] = body
        if kind != "DELETED" and self.on_object is not None:
            self.on_object(body)


def _uid(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
