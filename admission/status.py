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
`GET /v1/gangs[?namespace=N]` → every gang (of namespace N) the caller may read, by key.
`GET /metrics` (on the metrics listener) → Prometheus text. `GET /healthz` → `{"synced": ...}`.
No request here makes an API call but the caller's TokenReview and SubjectAccessReviews under
`--status-auth kubernetes` (kubeport/statusauth.py, cached): then every request but /healthz
needs `Authorization: Bearer TOKEN` (401 without), a gang of a namespace the caller may not
`get` Jobs in is 403, lists and history hold only readable gangs, and every name of another
namespace's objects in an answer is redacted (admission/tenancy.py).
Until the cache is synced (a replica still loading, or a standby under kopf peering, whose watches
are paused) `/v1/*` answers `503` with `Retry-After`: never a partial or stale view.
JSON answers carry an `ETag` (a digest of the body); a GET with a matching `If-None-Match` is
answered `304 Not Modified` with no body, so a poller that has seen this state pays nothing.

A deliberately small HTTP/1.1 server on asyncio (one request per connection), in the
controller's event loop, so a thousand held long-polls cost a thousand futures, not threads.
It reads request heads as the webhook's endpoint does (`kubeport.httpwire`); a head it cannot
read is answered 400 (505 for a version other than HTTP/1.x), one over 16 KiB is dropped.
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

from admission.cache import Cache
from admission.estimates import estimate_body
from admission.queuebook import QueueView
from admission.tenancy import namespace_of, namespaces_named, readable_rows, redact
from kubeport.httpwire import END_OF_HEAD, REASONS, HttpError, parse_head
from kubeport.kubeapi import ApiError, ApiUnreachable
from kubeport.statusauth import Access, Caller, OpenAccess
from policies import Resources, format_quantity, gangstate
from policies.kinds.reading import format_time
from policies.preemption import preemption_spec

log = logging.getLogger("muster.status")

MAX_WAIT = 300.0
UNAUTHORIZED = (
    "send Authorization: Bearer TOKEN, a token the API server accepts (in a pod: the file "
    "/var/run/secrets/kubernetes.io/serviceaccount/token); docs/metrics.md shows a client"
)
CANNOT_CHECK = "cannot check the caller's token or rights with the API server now; retry"
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
        "requests": _amounts(record.gang.demand(record.gang.size)),  # every pod, full size
        "evictions": record.evictions,
        "preemptions": record.gang.preemptions,
        "version": cache.status.gang_versions.get(key, 0),
        "ready": record.ready,
        "podsBound": sum(
            cache.pods.gang_bound.get(f"{record.namespace}/{record.gang_label}", {}).values()
        ),
        "podsWaiting": cache.pods.gang_unbound.get(f"{record.namespace}/{record.gang_label}", 0),
    }
    admission = record.admission
    if admission is not None:
        body["admittedAt"] = format_time(admission[0])
        body["admittedSize"] = admission[1]
    if state in (gangstate.PENDING, gangstate.BACKING_OFF):
        body["position"] = cache.status.positions.get(key)
        reason = cache.status.reasons.get(key)
        if record.parse_error:
            body["reason"] = {"code": "Invalid", "message": record.parse_error}
        elif state == gangstate.BACKING_OFF:
            body["reason"] = {
                "code": gangstate.BACKING_OFF,  # the state is the reason
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
        if key in cache.status.rejected:
            body["rejected"] = True
        if not record.parse_error:
            body["estimate"] = estimate_body(cache, key, now)
    elif state == gangstate.FAILED and record.failed_reason:
        code, _, message = record.failed_reason.partition(": ")
        body["reason"] = {"code": code, "message": message or code}
    return body


def queue_positions(cache: Cache) -> dict[str, int]:
    """Each waiting gang's 1-based place in its queue (priority, then submission).

    The controller's loop recomputes this every cycle it can, on the event loop that serves
    the status service: at 10,000 waiting gangs it was the largest part of a cycle there, so it
    reads the fields behind `JobRecord.admission` and `.key` (the cache's own key) rather than
    the properties, and numbers each queue's line in C (docs/benchmarks.md, "Status service at
    scale")."""
    by_queue: dict[str, list[tuple[tuple[int, float, int, str], str]]] = defaultdict(list)
    for key, record in cache.jobs.unfinished_items():
        if (
            record.admitted_at is None
            and record.local_admit is None
            and not record.finished
            and not record.failed_state
        ):
            by_queue[record.queue].append((record.gang.order_key, key))
    positions: dict[str, int] = {}
    for entries in by_queue.values():
        entries.sort()
        keys = [key for _, key in entries]
        positions.update(zip(keys, range(1, len(keys) + 1), strict=True))
    return positions


def _summary(usage: Resources) -> str:
    return ", ".join(f"{r}: {format_quantity(r, a)}" for r, a in sorted(usage.items()) if a) or "0"


def gang_counts(cache: Cache, now: float) -> dict[tuple[str, str], int]:
    """(kind, state) -> gangs not ended (finished or failed), for `muster_gangs`."""
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for record in cache.jobs.unfinished_records():
        if record.finished or record.failed_state:
            continue
        counts[(record.kind, record.state(now))] += 1
    return dict(counts)


def queue_status(cache: Cache) -> dict[str, dict[str, object]]:
    """Per queue: pending, admitted, usage, share, usageSummary (the Queue status body)."""
    usage = cache.jobs.queue_usage()
    capacity = cache.nodes.capacity()
    pending: dict[str, int] = defaultdict(int)
    admitted: dict[str, int] = defaultdict(int)
    for record in cache.jobs.unfinished_records():
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
        condition = cache.queues.ready_condition(name)
        if condition is not None:
            out[name]["conditions"] = [condition]
    return out


def _amounts(resources: Resources | None) -> dict[str, str] | None:
    if resources is None:
        return None
    return {r: format_quantity(r, a) for r, a in sorted(resources.items())}


def queue_spec(view: QueueView) -> dict[str, object]:
    """The parts of a Queue's spec a reader of /v1/queues needs next to its usage: where it
    sits in the cohort tree, its quota and its preemption rules (None = not set)."""
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
        "preemption": preemption_spec(queue.preemption) if queue.preemption.enabled else None,
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
        access: Access | None = None,
    ) -> None:
        self.cache = cache
        self.access: Access = access if access is not None else OpenAccess()
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
            head = await asyncio.wait_for(reader.readuntil(END_OF_HEAD), 30)
            self.requests += 1
            headers: dict[str, str] = {}
            try:
                request = parse_head(head[: -len(END_OF_HEAD)])
                headers = request.headers
                status, ctype, payload = await self._route(
                    request.method, request.target, headers.get("authorization")
                )
            except HttpError as exc:  # a request line or header line it cannot read
                reason = f"{exc.status} {REASONS[exc.status]}"
                status, ctype, payload = _json(reason, {"error": str(exc)})
            except (ApiError, ApiUnreachable) as exc:
                log.warning("status service: TokenReview or SubjectAccessReview failed: %s", exc)
                status, ctype, payload = _json("503 Service Unavailable", {"error": CANNOT_CHECK})
            extra = "Retry-After: 1\r\n" if status.startswith("503") else ""
            if status.startswith("401"):
                extra = 'WWW-Authenticate: Bearer realm="muster"\r\n'
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

    async def _route(
        self, method: str, target: str, authorization: str | None
    ) -> tuple[str, str, bytes]:
        url = urlsplit(target)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if method != "GET":
            return _json("405 Method Not Allowed", {"error": "only GET is served"})
        if parts == ["healthz"]:
            return _json("200 OK", {"synced": self.cache.synced})
        access = self.access
        caller = await access.caller(authorization)
        if caller is None:
            return _json("401 Unauthorized", {"error": UNAUTHORIZED})
        if parts == ["metrics"] and self.metrics is not None:
            if not await access.may_scrape(caller, "/metrics"):
                return _json(
                    "403 Forbidden",
                    {"error": f"{caller.username} may not get /metrics (nonResourceURLs)"},
                )
            return "200 OK", "text/plain; version=0.0.4", self.metrics()
        if parts[:1] == ["v1"] and not self.cache.synced:
            return _json("503 Service Unavailable", {"error": NOT_SERVING, "synced": False})
        query = parse_qs(url.query)
        if parts == ["v1", "queues"]:
            queues = {"queues": queue_listing(self.cache, self.queues())}
            return _json("200 OK", await self._scoped(caller, queues))
        if parts == ["v1", "history"]:
            given = query.get("since")
            try:
                since = float(given[0]) if given else None
            except ValueError:
                return _json("400 Bad Request", {"error": "since must be a number of seconds"})
            history = history_body(self.cache, since, time.time())
            if access.enabled:
                readable = await self._readable(
                    caller, {namespace_of(row["gang"]) for row in history["gangs"]}
                )
                history["gangs"] = readable_rows(history["gangs"], readable.__contains__)
            return _json("200 OK", await self._scoped(caller, history))
        if parts == ["v1", "gangs"]:
            return await self._gangs(caller, query.get("namespace", [None])[0])
        if len(parts) == 4 and parts[:2] == ["v1", "gangs"]:
            try:
                wait = min(float(query.get("wait", ["0"])[0]), MAX_WAIT)
                since_version = int(query["since"][0]) if "since" in query else None
            except ValueError:
                return _json("400 Bad Request", {"error": "wait and since must be numbers"})
            if not await access.may_read(caller, parts[2]):
                return _json(
                    "403 Forbidden",
                    {
                        "error": f"{caller.username} may not get jobs.batch in namespace "
                        f"{parts[2]}: the status service shows a gang to whoever may read its Job"
                    },
                )
            return await self._gang(caller, f"{parts[2]}/{parts[3]}", wait, since_version)
        return _json(
            "404 Not Found",
            {
                "error": f"no route {url.path}; use /v1/gangs/NAMESPACE/NAME, /v1/gangs, "
                "/v1/queues or /v1/history"
            },
        )

    async def _readable(self, caller: Caller, namespaces: set[str]) -> set[str]:
        """Those of `namespaces` whose gangs `caller` may read."""
        names = sorted(namespaces)
        allowed = await asyncio.gather(*(self.access.may_read(caller, n) for n in names))
        return {n for n, ok in zip(names, allowed, strict=True) if ok}

    async def _scoped(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        """`body` with every name of an object in a namespace `caller` may not read redacted."""
        if not self.access.enabled:
            return body
        known = set(self.cache.queues.namespaces) | {r.namespace for r in self.cache.jobs.values()}
        named = namespaces_named(body, known)
        hidden = named - await self._readable(caller, named)
        return redact(body, hidden)

    async def _gangs(self, caller: Caller, namespace: str | None) -> tuple[str, str, bytes]:
        """Every gang (of `namespace`) the caller may read, by key."""
        cache, now = self.cache, time.time()
        keys = [k for k in cache.jobs if namespace is None or namespace_of(k) == namespace]
        readable = await self._readable(caller, {namespace_of(k) for k in keys})
        gangs = {}
        for key in sorted(keys):
            if namespace_of(key) in readable:
                body = gang_status(cache, key, now)
                if body is not None:
                    gangs[key] = body
        return _json("200 OK", await self._scoped(caller, {"gangs": gangs}))

    async def _gang(
        self, caller: Caller, key: str, wait: float, since: int | None
    ) -> tuple[str, str, bytes]:
        cache = self.cache
        if wait > 0 and since is not None and cache.status.gang_versions.get(key, 0) == since:
            future = cache.status.waiter(key)
            self.holding += 1
            try:
                await asyncio.wait_for(asyncio.shield(future), wait)
            except TimeoutError:
                pass
            finally:
                self.holding -= 1
                cache.status.drop_waiter(key, future)
        body = gang_status(cache, key, time.time())
        if body is None:
            return _json(
                "404 Not Found",
                {
                    "error": f"gang {key} not found: no Job labelled muster.dev/queue by that "
                    "name (it may be finished and deleted, or not managed by muster)",
                    "version": cache.status.gang_versions.get(key, 0),
                },
            )
        return _json("200 OK", await self._scoped(caller, body))


def _json(status: str, body: object) -> tuple[str, str, bytes]:
    return status, "application/json", json.dumps(body, sort_keys=True).encode()
