"""The status service: where each gang stands, as HTTP JSON served from the cache.

`GET /v1/gangs/{namespace}/{name}` → state, queue, position, admitted-at, evictions,
preemptions, reason (a gang waiting again after a preemption: code Preempted, naming the
preemptor, with the planner's current reason in `waitingFor`), and while it waits its expected
start with a range, or why there is none (`estimate`, from the cache: admission/estimates.py).
With `?wait=SECONDS&since=VERSION` the request is held until the gang's version differs from
VERSION (or SECONDS pass): a pod with only the standard library can wait for its gang cheaply.
`GET /v1/queues` → per-queue pending, admitted, usage, share, and the spec's parent and quota.
`GET /v1/history[?since=SECONDS]` → the gangs seen finish or fail (in the last SECONDS), one row
each in the columns of the simulator's gangs.csv (admission/history.py).
`GET /metrics` (on the metrics listener) → Prometheus text. No request here makes an API call.
Until the cache is synced (a replica still loading, or a standby under kopf peering, whose watches
are paused) `/v1/*` answers `503` with `Retry-After`: never a partial or stale view.
JSON answers carry an `ETag` (a digest of the body); a GET with a matching `If-None-Match` is
answered `304 Not Modified` with no body, so a poller that has seen this state pays nothing.

A deliberately small HTTP/1.1 server on asyncio (one request per connection), in the
controller's event loop, so a thousand held long-polls cost a thousand futures, not threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from admission.cache import Cache, QueueView
from admission.estimates import estimate_body
from admission.gangs import format_time
from policies import Resources, format_quantity, gangstate

log = logging.getLogger("muster.status")

MAX_WAIT = 300.0
NOT_SERVING = (
    "this muster replica does not serve status now: it is still loading the cluster, or it is "
    "a standby replica (kopf peering) whose view is paused; retry, or ask the active replica"
)


def gang_status(cache: Cache, key: str, now: float) -> dict[str, Any] | None:
    record = cache.jobs.get(key)
    if record is None:
        return None
    state = record.state(now)
    body: dict[str, Any] = {
        "gang": key,
        "kind": record.kind,
        "queue": record.queue,
        "state": state,
        "size": record.gang.size,
        "min": record.gang.min,
        "evictions": record.evictions,
        "preemptions": record.gang.preemptions,
        "version": cache.gang_versions.get(key, 0),
        "ready": record.ready,
        "podsBound": sum(
            cache.gang_bound.get(f"{record.namespace}/{record.gang_label}", {}).values()
        ),
        "podsWaiting": cache.gang_unbound.get(f"{record.namespace}/{record.gang_label}", 0),
    }
    admission = record.admission
    if admission is not None:
        body["admittedAt"] = format_time(admission[0])
        body["admittedSize"] = admission[1]
    if state in (gangstate.PENDING, gangstate.BACKING_OFF):
        body["position"] = cache.positions.get(key)
        reason = cache.reasons.get(key)
        if record.parse_error:
            body["reason"] = {"code": "Invalid", "message": record.parse_error}
        elif state == gangstate.BACKING_OFF:
            body["reason"] = {
                "code": "BackingOff",
                "message": f"evicted {record.evictions} times; requeued at "
                f"{format_time(record.requeue_at)}",
            }
        elif record.evicted_reason == "Preempted" and record.preempted_by:
            # Waiting again after a preemption: that is why it is not running; what it waits
            # for now is the planner's reason.
            message = record.preempted_by
            if reason is not None:
                body["waitingFor"] = {"code": reason.code, "message": reason.message}
                message = f"{message}; waits now: {reason.message}"
            body["reason"] = {"code": "Preempted", "message": message}
        elif reason is not None:
            body["reason"] = {"code": reason.code, "message": reason.message}
        if key in cache.rejected:
            body["rejected"] = True
        if not record.parse_error:
            body["estimate"] = estimate_body(cache, key, now)
    elif state == gangstate.FAILED and record.failed_reason:
        code, _, message = record.failed_reason.partition(": ")
        body["reason"] = {"code": code, "message": message or code}
    return body


def queue_positions(cache: Cache) -> dict[str, int]:
    """Each waiting gang's 1-based place in its queue (priority, then submission)."""
    by_queue: dict[str, list[tuple[tuple[int, float, int, str], str]]] = defaultdict(list)
    for record in cache.jobs.values():
        if record.admission is None and not record.finished and not record.failed_state:
            by_queue[record.queue].append((record.gang.order_key, record.key))
    positions: dict[str, int] = {}
    for entries in by_queue.values():
        entries.sort()
        for i, (_, key) in enumerate(entries, 1):
            positions[key] = i
    return positions


def _summary(usage: Resources) -> str:
    return ", ".join(f"{r}: {format_quantity(r, a)}" for r, a in sorted(usage.items()) if a) or "0"


def queue_status(cache: Cache) -> dict[str, dict[str, object]]:
    """Per queue: pending, admitted, usage, share, usageSummary (the Queue status body)."""
    usage = cache.queue_usage()
    capacity = cache.capacity()
    pending: dict[str, int] = defaultdict(int)
    admitted: dict[str, int] = defaultdict(int)
    for record in cache.jobs.values():
        if record.finished or record.failed_state:
            continue
        if record.admission is not None:
            admitted[record.queue] += 1
        else:
            pending[record.queue] += 1
    out: dict[str, dict[str, object]] = {}
    for name, view in cache.queues.items():
        used = usage.get(name, Resources())
        weight = view.queue.weight if view.queue is not None else 1.0
        share = max((used[r] / capacity[r] for r in used if capacity[r] > 0), default=0.0) / max(
            weight, 1e-9
        )
        out[name] = {
            "pending": pending.get(name, 0),
            "admitted": admitted.get(name, 0),
            "usage": {r: format_quantity(r, a) for r, a in sorted(used.items()) if a},
            "share": f"{share:.3f}",
            "usageSummary": _summary(used),
        }
        if view.error:
            out[name]["error"] = view.error
        condition = cache.ready_condition(name)
        if condition is not None:
            out[name]["conditions"] = [condition]
    return out


def _amounts(resources: Resources | None) -> dict[str, str] | None:
    if resources is None:
        return None
    return {r: format_quantity(r, a) for r, a in sorted(resources.items())}


def queue_spec(view: QueueView) -> dict[str, object]:
    """The parts of a Queue's spec a reader of /v1/queues needs next to its usage: where it
    sits in the cohort tree and its quota (None = not set)."""
    queue = view.queue
    if queue is None:
        return {}
    return {
        "parent": queue.parent,
        "weight": queue.weight,
        "nominal": _amounts(queue.nominal),
        "borrowingLimit": _amounts(queue.borrowing_limit),
        "lendingLimit": _amounts(queue.lending_limit),
        "strategy": queue.strategy,
        "nodeFit": queue.node_fit,
        "limits": None
        if view.limits.unlimited
        else {
            "maxPending": view.limits.max_pending,
            "maxPendingPerNamespace": view.limits.max_pending_per_namespace,
        },
    }


def queue_listing(
    cache: Cache, statuses: dict[str, dict[str, object]]
) -> dict[str, dict[str, object]]:
    """The /v1/queues body: each queue's status with its `spec` (only here: the Queue objects'
    own status stays as small as the printer columns need)."""
    listing = dict(statuses)
    for name, status in statuses.items():
        if name in cache.queues:
            listing[name] = {**status, "spec": queue_spec(cache.queues[name])}
    return listing


def history_body(cache: Cache, since: float | None, now: float) -> dict[str, Any]:
    """The /v1/history body: rows of gangs that ended in the last `since` seconds (all: None),
    by submission; times in wall-clock seconds since the epoch."""
    rows = cache.history.rows(None if since is None else now - since)
    return {
        "gangs": [row.as_dict() for row in rows],
        "held": len(cache.history),
        "limit": cache.history.limit,
    }


class StatusServer:
    """Serves /v1/gangs, /v1/queues, /v1/history and /metrics on one listener."""

    def __init__(
        self,
        cache: Cache,
        queues: Callable[[], dict[str, dict[str, object]]],
        metrics: Callable[[], bytes] | None,
        *,
        addr: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.cache = cache
        self.queues = queues
        self.metrics = metrics
        self.addr = addr
        self.port = port
        self.requests = 0
        self.holding = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(
            self._handle, self.addr, self.port, backlog=2048, limit=16384
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            line, *header_lines = head.decode("latin-1").split("\r\n")
            method, target, _ = (line.split(" ") + ["", ""])[:3]
            headers = {
                name.strip().lower(): value.strip()
                for name, _, value in (h.partition(":") for h in header_lines if h)
            }
            self.requests += 1
            status, ctype, payload = await self._route(method, target)
            extra = "Retry-After: 1\r\n" if status.startswith("503") else ""
            if ctype == "application/json" and status.startswith("200"):
                etag = f'"{hashlib.blake2b(payload, digest_size=12).hexdigest()}"'
                extra = f"ETag: {etag}\r\n"
                if etag in {t.strip() for t in headers.get("if-none-match", "").split(",")}:
                    status, payload = "304 Not Modified", b""
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n{extra}"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _route(self, method: str, target: str) -> tuple[str, str, bytes]:
        url = urlsplit(target)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if method != "GET":
            return _json("405 Method Not Allowed", {"error": "only GET is served"})
        if parts == ["metrics"] and self.metrics is not None:
            return "200 OK", "text/plain; version=0.0.4", self.metrics()
        if parts == ["healthz"]:
            return _json("200 OK", {"synced": self.cache.synced})
        if parts[:1] == ["v1"] and not self.cache.synced:
            return _json("503 Service Unavailable", {"error": NOT_SERVING, "synced": False})
        if parts == ["v1", "queues"]:
            return _json("200 OK", {"queues": queue_listing(self.cache, self.queues())})
        if parts == ["v1", "history"]:
            given = parse_qs(url.query).get("since")
            try:
                since = float(given[0]) if given else None
            except ValueError:
                return _json("400 Bad Request", {"error": "since must be a number of seconds"})
            return _json("200 OK", history_body(self.cache, since, time.time()))
        if len(parts) == 4 and parts[:2] == ["v1", "gangs"]:
            query = parse_qs(url.query)
            try:
                wait = min(float(query.get("wait", ["0"])[0]), MAX_WAIT)
                since = int(query["since"][0]) if "since" in query else None
            except ValueError:
                return _json("400 Bad Request", {"error": "wait and since must be numbers"})
            return await self._gang(f"{parts[2]}/{parts[3]}", wait, since)
        return _json(
            "404 Not Found",
            {
                "error": f"no route {url.path}; use /v1/gangs/NAMESPACE/NAME, /v1/queues or "
                "/v1/history"
            },
        )

    async def _gang(self, key: str, wait: float, since: int | None) -> tuple[str, str, bytes]:
        cache = self.cache
        if wait > 0 and since is not None and cache.gang_versions.get(key, 0) == since:
            future = cache.waiter(key)
            self.holding += 1
            try:
                await asyncio.wait_for(asyncio.shield(future), wait)
            except TimeoutError:
                pass
            finally:
                self.holding -= 1
                cache.drop_waiter(key, future)
        body = gang_status(cache, key, time.time())
        if body is None:
            return _json(
                "404 Not Found",
                {
                    "error": f"gang {key} not found: no Job labelled muster.dev/queue by that "
                    "name (it may be finished and deleted, or not managed by muster)",
                    "version": cache.gang_versions.get(key, 0),
                },
            )
        return _json("200 OK", body)


def _json(status: str, body: object) -> tuple[str, str, bytes]:
    return status, "application/json", json.dumps(body, sort_keys=True).encode()
