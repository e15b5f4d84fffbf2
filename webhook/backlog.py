"""The webhook's count of pending gangs per queue and per (queue, namespace), for `spec.limits`.

Pure (no kopf, no I/O): the webhook's watches of managed Jobs (a lean stream on its own thread,
`kubeport.streamwatch`) and MiniClusters (kopf) feed `observe_*`,
and each create the webhook allows is added by `allow` until the watch shows it. Without that,
a burst faster than the watch would overshoot a limit by everything created during the watch's
lag; with it, one webhook replica never lets a queue pass its limit. Several replicas each add
only their own creates, so together they may overshoot by the creates the *other* replicas
allowed that this one has not seen yet (docs/queue-reference.md, "Limits").

A gang is one Job, or one MiniCluster with its Job (the Job made by a MiniCluster is the same
gang, under the MiniCluster's name). It is pending while any of its objects is stored and its
Job, when seen, is pending (`policies.kinds.reading.gang_pending`: not admitted, not finished, not
Failed); a MiniCluster whose Job is not there yet is pending.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from policies.kinds import JOB, Kind, KindName
from policies.kinds.reading import gang_pending
from policies.kinds.registry import owner_of
from policies.phase import QueueLimits
from policies.vocabulary import SUBMITTED

GangKey = tuple[str, str, str]
"""(kind, namespace, name) of a gang: a MiniCluster's Job is keyed by its MiniCluster."""

UNSEEN_FOR: Final = 30.0
"""Seconds an allowed create counts while the watch has not shown it. The watch normally shows
it within a second; a create refused after the webhook allowed it (by another admission
plugin, or a timeout) keeps counting this long, which errs on the side of refusing."""

RefusalReason = Literal["MaxPending", "MaxPendingPerNamespace"]


def gang_key_of_job(body: Mapping[str, Any]) -> GangKey:
    """The gang a Job belongs to: its owner of a kind muster admits (a MiniCluster), else the
    Job itself."""
    meta = body.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    owner = owner_of(meta)
    if owner is not None:
        return (owner[0].name, namespace, owner[1])
    return (JOB.name, namespace, meta.get("name") or "")


def _queue_of(kind: Kind, body: Mapping[str, Any]) -> str | None:
    """The queue a managed object is stored in (`Kind.queue`, as the controller reads it: the
    label, which the webhook sets on every object it stamps); None for an object the webhook
    never stamped (not managed)."""
    annotations: Mapping[str, str] = (body.get("metadata") or {}).get("annotations") or {}
    if SUBMITTED not in annotations:
        return None
    return kind.queue(body) or None


@dataclass
class _Gang:
    queue: str
    namespace: str
    stored: set[KindName] = field(default_factory=set)
    job_pending: bool | None = None
    """Its Job's phase when last seen (kept when the Job goes while its MiniCluster stays, so a
    MiniCluster whose finished Job was cleaned up does not count as pending again)."""

    @property
    def pending(self) -> bool:
        return bool(self.stored) and self.job_pending is not False


@dataclass
class _Unseen:
    queue: str
    namespace: str
    expires: float


@dataclass(frozen=True)
class Refusal:
    """Why a new gang is refused, for the response (code 429) and the refusal metric."""

    queue: str
    reason: RefusalReason
    message: str


class Backlog:
    """Pending gangs per queue and per (queue, namespace), as one webhook replica sees them.

    Thread-safe: kopf runs the `--webhook-server kopf` handlers and the watches' sync handlers
    in threads; a check and the `allow` that follows it happen under one lock (`admit`)."""

    def __init__(self, clock: Callable[[], float], unseen_for: float = UNSEEN_FOR) -> None:
        self._clock = clock
        self._unseen_for = unseen_for
        self._lock = threading.Lock()
        self._gangs: dict[GangKey, _Gang] = {}
        self._stored: Counter[str] = Counter()
        self._stored_ns: Counter[tuple[str, str]] = Counter()
        # Creates this replica allowed and its watch has not shown yet, oldest first; an
        # anonymous one (generateName: the review has no name yet) is matched to the next new
        # gang the watch shows in its queue and namespace.
        self._unseen: OrderedDict[GangKey, _Unseen] = OrderedDict()
        self._anonymous: dict[tuple[str, str], deque[GangKey]] = {}
        self._unseen_count: Counter[str] = Counter()
        self._unseen_ns: Counter[tuple[str, str]] = Counter()
        self._tokens = itertools.count()
        self._refusals: Counter[tuple[str, RefusalReason]] = Counter()

    # -- the watch -----------------------------------------------------------------------

    def observe_job(self, event: str | None, body: Mapping[str, Any]) -> None:
        """A watch event of a Job labelled `muster.dev/queue` (DELETED, or any other)."""
        queue = None if event == "DELETED" else _queue_of(JOB, body)
        pending = None if queue is None else gang_pending(JOB, body)
        self._observe(gang_key_of_job(body), JOB.name, queue, pending)

    def relist_jobs(self, items: Iterable[Mapping[str, Any]]) -> None:
        """Every managed Job as a fresh LIST shows it: the ones missing from it are gone."""
        listed: set[GangKey] = set()
        for body in items:
            self.observe_job(None, body)
            listed.add(gang_key_of_job(body))
        with self._lock:
            gone = [k for k, g in self._gangs.items() if JOB.name in g.stored and k not in listed]
        for key in gone:
            self._observe(key, JOB.name, None, None)

    def observe_owner(self, kind: Kind, event: str | None, body: Mapping[str, Any]) -> None:
        """A watch event of an object of a kind whose operator makes its gang object (a
        MiniCluster): pending while stored, until its gang object says otherwise."""
        meta = body.get("metadata") or {}
        key: GangKey = (kind.name, meta.get("namespace") or "", meta.get("name") or "")
        queue = None if event == "DELETED" else _queue_of(kind, body)
        self._observe(key, kind.name, queue, None if queue is None else True)

    def _observe(
        self, key: GangKey, kind: KindName, queue: str | None, pending: bool | None
    ) -> None:
        """`kind`'s object of gang `key` is stored in `queue` (None: gone or not managed);
        `pending`: a Job's phase (None: gone), True for a MiniCluster."""
        with self._lock:
            gang = self._gangs.get(key)
            if gang is None and queue is None:
                return
            if gang is not None:
                self._count(gang, -1)
            else:
                gang = _Gang(queue or "", key[1])
                self._gangs[key] = gang
                self._seen(key, queue or "")
            if queue is None:
                gang.stored.discard(kind)
            else:
                gang.stored.add(kind)
                gang.queue = queue
                if kind == JOB.name:
                    gang.job_pending = pending
            if not gang.stored:
                del self._gangs[key]
                return
            self._count(gang, +1)

    def _count(self, gang: _Gang, sign: int) -> None:
        if gang.pending:
            self._stored[gang.queue] += sign
            self._stored_ns[(gang.queue, gang.namespace)] += sign

    def _seen(self, key: GangKey, queue: str) -> None:
        """A new gang in the watch: it stops counting as unseen."""
        unseen = key if key in self._unseen else None
        if unseen is None:
            waiting = self._anonymous.get((queue, key[1]))
            while waiting and unseen is None:
                token = waiting.popleft()
                unseen = token if token in self._unseen else None
        if unseen is not None:
            self._forget(unseen)

    def _forget(self, key: GangKey) -> None:
        entry = self._unseen.pop(key)
        self._unseen_count[entry.queue] -= 1
        self._unseen_ns[(entry.queue, entry.namespace)] -= 1

    def _expire(self, now: float) -> None:
        while self._unseen:
            key, entry = next(iter(self._unseen.items()))
            if entry.expires > now:
                break
            self._forget(key)
        for where in [w for w, keys in self._anonymous.items() if not keys]:
            del self._anonymous[where]

    # -- the webhook's creates -----------------------------------------------------------

    def pending(self, queue: str, namespace: str | None = None) -> int:
        """Pending gangs of `queue` (in `namespace`), counting allowed creates not seen yet."""
        with self._lock:
            self._expire(self._clock())
            return self._pending(queue, namespace)

    def _pending(self, queue: str, namespace: str | None) -> int:
        if namespace is None:
            return self._stored[queue] + self._unseen_count[queue]
        return self._stored_ns[(queue, namespace)] + self._unseen_ns[(queue, namespace)]

    def admit(
        self,
        kind: KindName,
        namespace: str,
        name: str,
        queue: str,
        limits: QueueLimits,
        *,
        count: bool = True,
    ) -> Refusal | None:
        """Check a new gang against its queue's limits; if it may be created, count it at once
        (unless not `count`: a dry run) so the next review sees it. Returns the refusal
        otherwise."""
        with self._lock:
            self._expire(self._clock())
            refusal = self._refusal(queue, namespace, limits)
            if refusal is None and count:
                self._allow(kind, namespace, name, queue)
            elif refusal is not None:
                self._refusals[(refusal.queue, refusal.reason)] += 1
            return refusal

    def _refusal(self, queue: str, namespace: str, limits: QueueLimits) -> Refusal | None:
        if limits.max_pending is not None:
            held = self._pending(queue, None)
            if held >= limits.max_pending:
                return Refusal(
                    queue, "MaxPending", _message(queue, held, limits.max_pending, "maxPending")
                )
        if limits.max_pending_per_namespace is not None:
            held = self._pending(queue, namespace)
            if held >= limits.max_pending_per_namespace:
                return Refusal(
                    queue,
                    "MaxPendingPerNamespace",
                    _message(
                        queue,
                        held,
                        limits.max_pending_per_namespace,
                        "maxPendingPerNamespace",
                        namespace,
                    ),
                )
        return None

    def _allow(self, kind: KindName, namespace: str, name: str, queue: str) -> None:
        key: GangKey = (kind, namespace, name)
        if not name:
            key = (kind, namespace, f"\0unnamed-{next(self._tokens)}")
            self._anonymous.setdefault((queue, namespace), deque()).append(key)
        elif key in self._gangs or key in self._unseen:
            return  # already counted (a retried create of an object that exists)
        self._unseen[key] = _Unseen(queue, namespace, self._clock() + self._unseen_for)
        self._unseen_count[queue] += 1
        self._unseen_ns[(queue, namespace)] += 1

    # -- metrics -------------------------------------------------------------------------

    def refusals(self) -> dict[tuple[str, RefusalReason], int]:
        """Creates refused so far, per (queue, reason): the refusal metric."""
        with self._lock:
            return dict(self._refusals)

    def depths(self) -> Iterator[tuple[str, int]]:
        """(queue, pending gangs) for every queue with a pending or unseen gang."""
        with self._lock:
            self._expire(self._clock())
            queues = {q for q, n in self._stored.items() if n} | {
                q for q, n in self._unseen_count.items() if n
            }
            counts = [(q, self._pending(q, None)) for q in sorted(queues)]
        return iter(counts)


def _message(queue: str, held: int, limit: int, field: str, namespace: str | None = None) -> str:
    fix = f"retry later or raise spec.limits.{field}"
    if limit == 0:
        scope = f" from namespace {namespace}" if namespace is not None else ""
        return f"queue {queue} takes no new gangs{scope} (spec.limits.{field} is 0); {fix}"
    gangs = "gang" if held == 1 else "gangs"
    where = f" from namespace {namespace}" if namespace is not None else ""
    if held == limit:
        its = "its limit per namespace" if namespace is not None else "its limit"
    else:
        per = " per namespace" if namespace is not None else ""
        its = f"above its limit{per} of {limit}"
    return f"queue {queue} holds {held} pending {gangs}{where}, {its}; {fix}"
