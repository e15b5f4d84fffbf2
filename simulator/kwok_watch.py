"""Watch caches for the kwok engine: one LIST, then a watch stream, per kind it follows.

Polling the replay's Pods with LISTs costs the apiserver a full serialisation of every live
pod on each look (megabytes a second on a 1000-pod burst, on the same two cores the control
plane needs); a watch costs one event per change. `WatchCache` keeps the current objects of one
LIST+WATCH (`/api/v1/pods?labelSelector=...`) in memory through `KubeClient.watch`, relists
when the watch expires (410) or breaks, and hands out snapshots to the engine's look loop and
to the gang runner.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.client import HTTPException
from typing import Any

from admission.kubeapi import ApiError, KubeClient, WatchStream

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
    relists: int = 0
    _objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _synced: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _stream: WatchStream | None = None

    def start(self) -> WatchCache:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def stop(self) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.client.close()

    def snapshot(self) -> list[dict[str, Any]]:
        """The current objects (shared, never mutated: each event stores a new dict)."""
        with self._lock:
            return list(self._objects.values())

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                version = self._list()
                self._follow(version)
            except (ApiError, OSError, ValueError, HTTPException) as exc:
                if self._stop.is_set():
                    return
                self.errors.append(f"{self.name}: {exc}")
                del self.errors[:-20]
                self._stop.wait(0.5)

    def _list(self) -> str:
        listing = self.client.get(self.path, self.params)
        objects = {_uid(o): o for o in listing.get("items") or []}
        if self.on_object is not None:
            for obj in objects.values():
                self.on_object(obj)
        with self._lock:
            self._objects = objects
        self.relists += 1
        self._synced.set()
        return str((listing.get("metadata") or {}).get("resourceVersion") or "")

    def _follow(self, version: str) -> None:
        """Apply watch events from `version` until the watch must be relisted."""
        while not self._stop.is_set():
            params = {**self.params, "resourceVersion": version, "allowWatchBookmarks": "true"}
            self._stream = stream = self.client.watch(self.path, params, WATCH_SECONDS)
            if self._stop.is_set():
                return
            for event in stream:
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    return  # 410 Gone (expired version) and friends: relist
                meta = obj.get("metadata") or {}
                version = str(meta.get("resourceVersion") or version)
                if kind == "BOOKMARK":
                    continue
                with self._lock:
                    if kind == "DELETED":
                        self._objects.pop(_uid(obj), None)
                    else:
                        self._objects[_uid(obj)] = obj
                if kind != "DELETED" and self.on_object is not None:
                    self.on_object(obj)


def _uid(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
