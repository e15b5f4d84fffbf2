"""The controller's cache: gangs (managed Jobs), pods, nodes and queues as the watches report them.

Everything the admit loop, the detectors and the status service read comes from here; nothing
here calls the API. Only the event loop thread mutates the cache; `snapshot()` returns an
immutable `policies.Snapshot` the planner may use from another thread.

Node usage of an admitted gang is where its pods are bound; until all are bound, the planner's
placement stays as a reservation so the next cycle does not give the same room away again. A
reservation lives only in memory: after a restart, a gang whose pods are not bound yet counts
only its bound pods until the scheduler binds the rest (seconds).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from admission.gangs import (
    JobRecord,
    PodRecord,
    format_time,
    job_record,
    namespace_selector_from,
    node_from,
    pod_record,
    queue_from,
)
from admission.history import GangHistory
from policies import (
    AdmittedGang,
    Gang,
    Node,
    PolicyError,
    Queue,
    QueueTree,
    Reason,
    Resources,
    Snapshot,
)
from policies.estimate import Estimate, RuntimeHistory
from policies.lifecycle import Progress
from policies.phase import NO_LIMITS, QueueLimits, is_managed_job, parse_queue_limits
from policies.readiness import Readiness, queue_readiness
from policies.reasons import namespace_not_allowed
from policies.selectors import LabelSelector
from policies.vocabulary import GANG

log = logging.getLogger("muster.cache")

RESERVATION_TTL = 60.0
"""Seconds after admission after which a gang's unbound reservation is dropped."""


def _rv(body: Mapping[str, Any]) -> int:
    try:
        return int((body.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


@dataclass
class QueueView:
    """A Queue as the status service shows it: its spec (parsed) or why it cannot be used."""

    name: str
    queue: Queue | None
    error: str | None = None
    namespace_selector: LabelSelector | None = None
    """Namespaces whose gangs may use the queue; None or empty: all."""
    limits: QueueLimits = NO_LIMITS
    """`spec.limits`, which the webhook enforces; shown by the status service only."""


def _limits(name: str, body: Mapping[str, Any]) -> QueueLimits:
    """A Queue's `spec.limits`; one muster cannot read is logged and shown as none (the
    planner does not use them, so it does not make the queue unusable)."""
    try:
        return parse_queue_limits(
            (body.get("spec") or {}).get("limits"), f'queue "{name}": spec.limits'
        )
    except PolicyError as exc:
        log.warning("%s", exc)
        return NO_LIMITS


@dataclass(frozen=True, slots=True)
class Suspension:
    """What an assumed suspension changed, to restore if its write is refused."""

    admitted_at: float | None
    admitted_size: int
    local_admit: tuple[float, int] | None
    evictions: int


@dataclass(slots=True)
class _AdmittedMemo:
    """What an admitted gang's `AdmittedGang` was made from at the last `admitted_gangs`."""

    record: JobRecord
    admission: tuple[float, int]
    running: bool
    pods: int
    reserved: dict[str, int] | None
    expired: bool | None
    """Whether the reservation's TTL had passed, when the placement depended on it (the gang
    not yet placed and ready: `Cache._plan_hold`); None when it did not."""
    node_set: int
    entry: AdmittedGang


@dataclass
class Cache:
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    pods: dict[str, PodRecord] = field(default_factory=dict)
    queues: dict[str, QueueView] = field(default_factory=dict)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> labels
    namespaces_known: bool = False  # a namespace was ever seen (else selectors are not checked)
    # Usage of bound pods per node: by pods muster does not manage, and by all pods.
    node_other: dict[str, Resources] = field(default_factory=lambda: defaultdict(Resources))
    node_all: dict[str, Resources] = field(default_factory=lambda: defaultdict(Resources))
    # Gang pods: bound ones per node, and how many are not bound yet.
    gang_bound: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    gang_unbound: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    gang_succeeded: dict[str, set[str]] = field(default_factory=dict)
    """Per gang, the uids of its succeeded pods (`succeeded_pods`)."""
    gang_waiting: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    """Per gang, its live pods waiting on the control plane (`gangs.pod_waits`)."""
    gated: dict[str, PodRecord] = field(default_factory=dict)
    gang_sent: dict[str, Counter[str]] = field(default_factory=dict)
    """Per gang, its live pods that are not gated, by the node they were sent to (their
    nodeSelector's hostname, else the node they are bound to): what placing counts as used."""
    """Pods (by uid) held by muster's scheduling gate: each waits for muster to name its node."""
    reservations: dict[str, dict[str, int]] = field(default_factory=dict)
    # From the last plan: why each pending gang waits, and its position in its queue.
    reasons: dict[str, Reason] = field(default_factory=dict)
    rejected: dict[str, Reason] = field(default_factory=dict)
    positions: dict[str, int] = field(default_factory=dict)
    # Wait-time estimates (admission/estimates.py computes them in the background) and the
    # runtimes of finished gangs they learn from.
    estimates: dict[str, Estimate] = field(default_factory=dict)
    estimated_at: float | None = None
    runtimes: RuntimeHistory = field(default_factory=RuntimeHistory)
    tree: QueueTree | None = None
    readiness: dict[str, Readiness] = field(default_factory=dict)
    """Each Queue's Ready condition (policies.readiness); the tree holds the Ready ones."""
    _ready_since: dict[str, tuple[bool, str, str]] = field(default_factory=dict)
    """Per Queue: (ready, reason, lastTransitionTime) of its condition as last written or
    read from the object, so the transition time changes only with the condition."""
    version: int = 0
    gang_versions: dict[str, int] = field(default_factory=dict)
    synced: bool = False
    _rvs: dict[str, int] = field(default_factory=dict)
    _waiters: dict[str, list[asyncio.Future[None]]] = field(default_factory=dict)
    _node_cache: dict[str, Node] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    gated_arrived: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when a gated pod appears: the controller places it without waiting for a plan."""
    _capacity: Resources | None = None
    history: GangHistory = field(default_factory=GangHistory)
    """Gangs seen finish or fail (admission/history.py), for /v1/history."""
    gang_ready: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    """Per gang ("namespace/gang label"): its live pods that are ready."""
    gang_jobs: dict[str, str] = field(default_factory=dict)
    """Gang ("namespace/gang label") -> the key of its Job in `jobs`."""
    pods_ended: dict[str, float] = field(default_factory=dict)
    """Per gang ("namespace/gang label"): when its last live pod ended or went (its room was
    free then; the Job's Complete condition follows later), until its Job leaves the cache."""
    _pod_events: int = 0
    _gang_pods_seen: dict[str, int] = field(default_factory=dict)
    """Per gang: the number of the last pod event of it (`_pod_events`), so `admitted_gangs`
    knows whose pods changed since the last cycle."""
    _node_set: int = 0
    """Bumped when a node comes or goes (a held plan names only nodes the cache holds)."""
    _admitted_memo: dict[str, _AdmittedMemo] = field(default_factory=dict)

    # -- change notification -------------------------------------------------------------

    def touch(self, key: str) -> None:
        """A gang's visible state changed: bump its version and wake its long-polls."""
        self.version += 1
        self.gang_versions[key] = self.version
        for waiter in self._waiters.pop(key, ()):
            if not waiter.done():
                waiter.set_result(None)

    def mark(self) -> StateMark:
        """What the queues' status and the wait-time estimates read of the cache, besides the
        time: the gangs' visible states (`version`), the queues (`tree`, rebuilt on each change)
        and the nodes' capacity. Equal marks (`same_mark`): the same inputs."""
        return StateMark(self.version, self.tree, self.capacity())

    def same_mark(self, mark: StateMark | None) -> bool:
        """Whether nothing `mark` covers changed since it was taken."""
        return (
            mark is not None
            and mark.version == self.version
            and mark.tree is self.tree
            and mark.capacity is self.capacity()
        )

    def waiter(self, key: str) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, []).append(future)
        return future

    def drop_waiter(self, key: str, future: asyncio.Future[None]) -> None:
        waiters = self._waiters.get(key)
        if waiters and future in waiters:
            waiters.remove(future)
            if not waiters:
                del self._waiters[key]

    def _fresh(self, kind: str, key: str, body: Mapping[str, Any]) -> bool:
        """False for an event older than what we already hold (a LIST raced the watch)."""
        rv = _rv(body)
        slot = f"{kind}:{key}"
        if rv and rv < self._rvs.get(slot, 0):
            return False
        self._rvs[slot] = rv
        return True

    # -- jobs ----------------------------------------------------------------------------

    def apply_job(self, event: str | None, body: Mapping[str, Any]) -> JobRecord | None:
        """Apply a Job event; return the record now held (None if gone or not managed)."""
        meta = body.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if not self._fresh("job", key, body):
            return self.jobs.get(key)
        old = self.jobs.get(key)
        if event == "DELETED" or not is_managed_job(body):
            if old is not None:
                del self.jobs[key]
                self.pods_ended.pop(f"{old.namespace}/{old.gang_label}", None)
                self.gang_jobs.pop(f"{old.namespace}/{old.gang_label}", None)
                self._gang_pods_seen.pop(f"{old.namespace}/{old.gang_label}", None)
                self.reservations.pop(key, None)
                self._rvs.pop(f"job:{key}", None)
                self.touch(key)
                self.changed.set()
            return None
        new = job_record(body, old)
        if old is not None and old.uid == new.uid:
            new.reached_min = old.reached_min
            new.below_min_since = old.below_min_since
            new.advanced, new.advanced_at = old.advanced, old.advanced_at
            # Our admission PATCH may still be in flight (or this event predates it).
            if new.admitted_at is None and old.local_admit is not None and new.suspended:
                new.local_admit = old.local_admit
            # The start seen under this admission (not one before an eviction).
            adm = new.admission
            if old.started_at is not None and adm is not None and old.started_at >= adm[0] - 1:
                new.started_at = old.started_at
        now = time.time()
        if (
            old is not None
            and new.started_at is None
            and not new.finished
            and (adm := new.admission) is not None
            and new.ready >= new.gang.min
        ):
            # The Job says its minimum is ready (the pod watch usually said so first). Not
            # from `succeeded`: pods that ended already say when it stopped, not started.
            new.started_at = max(now, adm[0])
        self.jobs[key] = new
        self.gang_jobs[f"{new.namespace}/{new.gang_label}"] = key
        self.history.observe(
            old, new, body, now, self.pods_ended.get(f"{new.namespace}/{new.gang_label}")
        )
        if new.finished and (old is None or not old.finished or old.uid != new.uid):
            self._learn_runtime(new)
        if new.finished or (new.admitted_at is None and new.local_admit is None):
            self.reservations.pop(key, None)
        if old is None or _visible(old) != _visible(new):
            self.touch(key)
            self.changed.set()
        return new

    # -- optimistic admission (assume, then confirm or forget) ----------------------------

    def assume_admitted(
        self, record: JobRecord, now: float, size: int, placement: Mapping[str, int]
    ) -> None:
        """The controller sent an admission: count it (quota, nodes: the plan's placement) at
        once, before the watch brings the admitted Job; `forget_admission` undoes it."""
        record.local_admit = (now, size)
        record.below_min_since = None
        record.reached_min = False
        record.advanced, record.advanced_at = None, None
        if placement:
            self.reservations[record.key] = dict(placement)
        self.reasons.pop(record.key, None)
        self.touch(record.key)

    def confirm_admission(self, record: JobRecord, now: float, size: int) -> None:
        """The admission PATCH was accepted: hold it as the object will say."""
        current = self.jobs.get(record.key)
        if current is not None and current.uid == record.uid and current.admitted_at is None:
            current.admitted_at, current.admitted_size = now, size
            current.suspended = False

    def forget_admission(self, record: JobRecord) -> None:
        """The admission PATCH was refused or conflicted: the gang is pending again."""
        current = self.jobs.get(record.key)
        if current is not None and current.uid == record.uid:
            current.local_admit = None
            self.touch(record.key)
        self.reservations.pop(record.key, None)
        self.changed.set()

    def assume_suspended(
        self,
        record: JobRecord,
        *,
        evictions: int | None = None,
        requeue_at: float = 0.0,
        failed: bool = False,
        preemption: tuple[int, str] | None = None,
    ) -> Suspension:
        """The controller suspends an admitted gang (evicted, or preempted: `preemption` =
        (its preemption count, the preemptor's message)): its quota and nodes are free for the
        next cycle at once. Returns what `forget_suspension` restores if the write fails."""
        before = Suspension(
            record.admitted_at, record.admitted_size, record.local_admit, record.evictions
        )
        record.admitted_at, record.local_admit = None, None
        record.suspended = True
        if evictions is not None:
            record.evictions = evictions
        record.requeue_at = requeue_at
        record.failed_state = failed
        if preemption is not None:
            record.gang = replace(record.gang, preemptions=preemption[0])
            record.evicted_reason, record.preempted_by = "Preempted", preemption[1]
        record.reached_min = False
        record.below_min_since = None
        record.advanced, record.advanced_at = None, None
        self.reservations.pop(record.key, None)
        self.touch(record.key)
        self.changed.set()
        return before

    def assume_failed(self, record: JobRecord, reason: str) -> None:
        """The controller gives up on a waiting gang that can never be admitted: it leaves the
        planner's view at once (`forget_failure` undoes this if the write is refused)."""
        record.failed_state, record.failed_reason = True, reason
        self.touch(record.key)
        self.changed.set()

    def forget_failure(self, record: JobRecord) -> None:
        """The failing write was refused: the gang waits again."""
        current = self.jobs.get(record.key)
        if current is not None and current.uid == record.uid:
            current.failed_state, current.failed_reason = False, ""
            self.touch(current.key)
        self.changed.set()

    def forget_suspension(self, record: JobRecord, before: Suspension) -> None:
        """The suspending write was refused: the gang is admitted as it was."""
        current = self.jobs.get(record.key)
        if current is not None and current.uid == record.uid:
            current.admitted_at, current.admitted_size = before.admitted_at, before.admitted_size
            current.local_admit = before.local_admit
            current.suspended = False
            current.evictions = before.evictions
        self.changed.set()

    def drop_reservation(self, key: str) -> None:
        """A gang's capacity is free without the watch having said so yet (a preemption victim
        suspended, finished or gone): stop holding its plan, and plan again."""
        self.reservations.pop(key, None)
        self.touch(key)
        self.changed.set()

    def assume_resuspended(self, record: JobRecord) -> None:
        """The controller suspends again a Job unsuspended without muster's admission: held
        as suspended at once, so the next cycle does not suspend it twice (the watch brings
        the written Job)."""
        record.suspended = True

    def note_progress(self, record: JobRecord, progress: Progress) -> None:
        """Where an admitted gang stands against its minimum, as the clog check last found it
        (`policies.lifecycle.check_clog`)."""
        record.reached_min = progress.reached_min
        record.below_min_since = progress.below_min_since
        record.advanced, record.advanced_at = progress.advanced, progress.advanced_at

    def release_reservations(self, now: float) -> None:
        """Drop the plans gangs no longer need held (`_holds_plan`)."""
        for key in [k for k in self.reservations if not self._holds_plan(k, now)]:
            del self.reservations[key]

    def _holds_plan(self, key: str, now: float) -> bool:
        """An admitted gang holds its planned nodes until its minimum is ready and every pod
        it was admitted with is bound (its pods then show where it is: an elastic gang
        admitted above its minimum still has pods coming to the nodes it was pinned to), or
        RESERVATION_TTL after its admission unless its pods are still on their way
        (`gang_waits`: a busy Job controller or scheduler; the clog clock bounds that wait)."""
        record = self.jobs.get(key)
        if record is None:
            return False
        return self._plan_hold(record, now)[0]

    def _plan_hold(self, record: JobRecord, now: float) -> tuple[bool, bool | None]:
        """`_holds_plan` of `record`, and what of `now` it depended on: None for nothing,
        else whether the reservation's TTL had passed (the answer can change with time alone
        when that changes; after it, only with its pods or its Job)."""
        admission = record.admission
        gang = f"{record.namespace}/{record.gang_label}"
        size = admission[1] if admission is not None else record.gang.size
        succeeded = self.succeeded_pods(record)
        placed = sum((self.gang_bound.get(gang) or {}).values()) + succeeded >= size
        ready = record.reached_min or self.ready_pods(record) + succeeded >= record.gang.min
        if ready and placed:
            return False, None
        expired = admission is not None and now - admission[0] > RESERVATION_TTL
        return not expired or self.gang_waits(record), expired

    def _learn_runtime(self, record: JobRecord) -> None:
        """A finished gang's runtime, start (the Job's startTime, else its admission) to end,
        for the wait-time estimates of its queue and size class."""
        start = record.start_time if record.start_time is not None else record.admitted_at
        if start is not None and record.end_time is not None and record.end_time >= start:
            self.runtimes.record(record.queue, record.gang.size, record.end_time - start)

    # -- pods ----------------------------------------------------------------------------

    def apply_pod(self, event: str | None, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        uid = meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"
        if not self._fresh("pod", uid, body):
            return
        label = (meta.get("labels") or {}).get(GANG)
        gang = f"{meta.get('namespace')}/{label}" if label else None
        if gang is not None:
            self._pod_events += 1
            self._gang_pods_seen[gang] = self._pod_events
            self._note_succeeded(event, uid, gang, body)
        old = self.pods.pop(uid, None)
        new = None if event == "DELETED" else pod_record(body)
        if new is not None and new.gated and new.gang is not None:
            if uid not in self.gated:
                self.gated_arrived.set()  # a pod to place
            self.gated[uid] = new
        else:
            self.gated.pop(uid, None)
        if old == new:
            if new is not None:
                self.pods[uid] = new
            return
        if old is not None:
            self._account(old, -1)
        if new is not None:
            self.pods[uid] = new
            self._account(new, +1)
        else:
            self._rvs.pop(f"pod:{uid}", None)
        changed = new if new is not None else old
        if changed is not None and changed.gang is not None:
            self._gang_pods_changed(changed.gang)
        # Freed room matters to the planner; a newly bound pod only moves room around.
        if old is not None and old.node and (new is None or new.node != old.node):
            self.changed.set()

    def _note_succeeded(
        self, event: str | None, uid: str, gang: str, body: Mapping[str, Any]
    ) -> None:
        """Keep each gang's succeeded pods (the pod records drop them: they hold nothing)."""
        done = event != "DELETED" and (body.get("status") or {}).get("phase") == "Succeeded"
        if done:
            self.gang_succeeded.setdefault(gang, set()).add(uid)
        elif uid in self.gang_succeeded.get(gang, ()):
            self.gang_succeeded[gang].discard(uid)
            if not self.gang_succeeded[gang]:
                del self.gang_succeeded[gang]

    def _gang_pods_changed(self, gang: str) -> None:
        """For the history: when an admitted gang's minimum of pods is ready (its start; the
        Job's status.ready says so a moment later) and when its last live pod ends."""
        key = self.gang_jobs.get(gang)
        if key is None:
            return  # not a gang the cache holds (its Job gone: nothing to keep for it)
        if gang not in self.gang_bound and gang not in self.gang_unbound:
            self.pods_ended[gang] = time.time()
            return
        record = self.jobs.get(key)
        if (
            record is not None
            and record.started_at is None
            and not record.finished
            and (adm := record.admission) is not None
            and self.gang_ready.get(gang, 0) >= record.gang.min
        ):
            record.started_at = max(time.time(), adm[0])

    def ready_pods(self, record: JobRecord) -> int:
        """An admitted gang's ready pods: its Job's status.ready, or more if the pods say so
        (the Job controller, busy, may update the Job's status long after its pods are ready;
        a gang must not be evicted for that)."""
        return max(record.ready, self.gang_ready.get(f"{record.namespace}/{record.gang_label}", 0))

    def succeeded_pods(self, record: JobRecord) -> int:
        """An admitted gang's succeeded pods: its Job's status.succeeded, or more if the pods
        say so (the Job controller counts a finished pod only after removing its finalizer;
        busy, it took over 30 s, and the gang looked below its minimum meanwhile)."""
        gang = f"{record.namespace}/{record.gang_label}"
        return max(record.succeeded, len(self.gang_succeeded.get(gang, ())))

    def gang_waits(self, record: JobRecord) -> bool:
        """Whether an admitted gang waits on the control plane: its Job not started since the
        admission (status.startTime, to the second) and no pod of it yet, or a pod of it
        waiting (`gangs.pod_waits`)."""
        gang = f"{record.namespace}/{record.gang_label}"
        if self.gang_waiting.get(gang, 0) > 0:
            return True
        start, admitted = record.start_time, record.admitted_at
        has_pods = (
            gang in self.gang_bound or gang in self.gang_unbound or gang in self.gang_succeeded
        )
        started = start is not None and admitted is not None and start >= admitted - 1
        return not (started or has_pods)

    def start_measure(self, record: JobRecord) -> int:
        """How far an admitted gang's pods have come towards running, for the clog clock
        (`policies.lifecycle.check_clog`'s `advanced`): each live pod counts once, once more
        when bound, once more when ready; each succeeded pod three times."""
        gang = f"{record.namespace}/{record.gang_label}"
        bound = sum((self.gang_bound.get(gang) or {}).values())
        unbound = self.gang_unbound.get(gang, 0)
        return unbound + 2 * bound + self.gang_ready.get(gang, 0) + 3 * self.succeeded_pods(record)

    def _account(self, pod: PodRecord, sign: int) -> None:
        if pod.gang is not None and not pod.gated and (pod.target or pod.node):
            sent = self.gang_sent.get(pod.gang)
            if sent is None:
                sent = self.gang_sent[pod.gang] = Counter()
            where = pod.target or pod.node
            sent[where] += sign
            if sent[where] <= 0:
                del sent[where]
                if not sent:
                    del self.gang_sent[pod.gang]
        if pod.gang is not None:
            if pod.node:
                bound = self.gang_bound[pod.gang]
                bound[pod.node] = bound.get(pod.node, 0) + sign
                if not bound[pod.node]:
                    del bound[pod.node]
                if not bound:
                    del self.gang_bound[pod.gang]
            else:
                self.gang_unbound[pod.gang] += sign
                if not self.gang_unbound[pod.gang]:
                    del self.gang_unbound[pod.gang]
            if pod.ready:
                self.gang_ready[pod.gang] += sign
                if not self.gang_ready[pod.gang]:
                    del self.gang_ready[pod.gang]
            if pod.waiting:
                self.gang_waiting[pod.gang] += sign
                if not self.gang_waiting[pod.gang]:
                    del self.gang_waiting[pod.gang]
        if not pod.node:
            return
        add = pod.requests if sign > 0 else None
        if add is not None:
            self.node_all[pod.node] = self.node_all[pod.node] + add
            if pod.gang is None:
                self.node_other[pod.node] = self.node_other[pod.node] + add
        else:
            self.node_all[pod.node] = self.node_all[pod.node] - pod.requests
            if pod.gang is None:
                self.node_other[pod.node] = self.node_other[pod.node] - pod.requests
        if pod.gang is None:
            self._node_cache.pop(pod.node, None)

    # -- nodes and queues ----------------------------------------------------------------

    def apply_node(self, event: str | None, body: Mapping[str, Any]) -> None:
        name = (body.get("metadata") or {}).get("name") or ""
        if not self._fresh("node", name, body):
            return
        node = None if event == "DELETED" else node_from(body)
        old = self.nodes.pop(name, None)
        if node is not None:
            self.nodes[name] = node
        self._node_cache.pop(name, None)
        if (old is None) != (node is None):
            self._node_set += 1
        if old != node:
            self._capacity = None
            self.changed.set()

    def apply_queue(self, event: str | None, body: Mapping[str, Any]) -> None:
        name = (body.get("metadata") or {}).get("name") or ""
        if not self._fresh("queue", name, body):
            return
        if event == "DELETED":
            self.queues.pop(name, None)
            self._ready_since.pop(name, None)
        else:
            self._seed_ready_since(name, body)
            try:
                selector = namespace_selector_from(body)
                self.queues[name] = QueueView(
                    name,
                    queue_from(body),
                    namespace_selector=selector if selector.requirements else None,
                    limits=_limits(name, body),
                )
            except ValueError as exc:
                log.warning("queue %s ignored: %s", name, exc)
                self.queues[name] = QueueView(name, None, str(exc))
        self._rebuild_tree()
        self.changed.set()

    def apply_namespace(self, event: str | None, body: Mapping[str, Any]) -> None:
        """Namespace labels decide which queues a namespace's gangs may use."""
        name = (body.get("metadata") or {}).get("name") or ""
        if not self._fresh("namespace", name, body):
            return
        self.namespaces_known = True
        meta = body.get("metadata") or {}
        labels = None if event == "DELETED" else dict(meta.get("labels") or {})
        if labels is None:
            self.namespaces.pop(name, None)
        elif self.namespaces.get(name) != labels:
            self.namespaces[name] = labels
        else:
            return
        if any(view.namespace_selector for view in self.queues.values()):
            self.changed.set()

    def namespace_refusals(self) -> dict[str, Reason]:
        """Waiting gangs whose queue does not take gangs from their namespace, and why."""
        selective = {
            name: view.namespace_selector
            for name, view in self.queues.items()
            if view.namespace_selector is not None and view.namespace_selector.requirements
        }
        if not selective or not self.namespaces_known:
            return {}
        out: dict[str, Reason] = {}
        for r in self.jobs.values():
            selector = selective.get(r.queue)
            if (
                selector is not None
                and r.admission is None
                and not r.finished
                and not selector.matches(self.namespaces.get(r.namespace, {}))
            ):
                out[r.key] = namespace_not_allowed(r.queue, r.namespace, selector.describe())
        return out

    def _rebuild_tree(self) -> None:
        """Plan with the Ready queues (a valid spec, a parent chain that reaches a root)."""
        readiness = queue_readiness(
            {name: view.queue for name, view in self.queues.items()},
            {name: view.error for name, view in self.queues.items() if view.error},
        )
        for name, ready in readiness.items():
            if not ready.ready and self.readiness.get(name) != ready:
                log.warning("queue %s not ready (%s): %s", name, ready.reason, ready.message)
        self.readiness = readiness
        queues = [
            view.queue
            for name, view in self.queues.items()
            if view.queue is not None and readiness[name].ready
        ]
        try:
            self.tree = QueueTree.build(queues)
        except PolicyError as exc:  # pragma: no cover - readiness checks what build does
            log.warning("queue tree invalid: %s", exc)
            self.tree = _largest_valid_tree(queues)

    def refusals(self) -> dict[str, Reason]:
        """Waiting gangs the controller keeps out of the plan, and why: their Queue is not
        Ready, or does not take gangs from their namespace."""
        return {**self.namespace_refusals(), **self.queue_refusals()}

    def queue_refusals(self) -> dict[str, Reason]:
        """Waiting gangs whose Queue exists but is not Ready, and why (not "not found")."""
        broken = {name: r for name, r in self.readiness.items() if not r.ready}
        if not broken:
            return {}
        return {
            r.key: broken[r.queue].gang_reason(r.queue)
            for r in self.jobs.values()
            if r.queue in broken and r.admission is None and not r.finished and not r.failed_state
        }

    def ready_condition(self, name: str) -> dict[str, str] | None:
        """The Queue's `Ready` condition as `status.conditions` holds it (None: unknown)."""
        ready = self.readiness.get(name)
        if ready is None:
            return None
        since = self._ready_since.get(name)
        if since is None or since[:2] != (ready.ready, ready.reason):
            since = (ready.ready, ready.reason, format_time(time.time()))
            self._ready_since[name] = since
        return {
            "type": "Ready",
            "status": "True" if ready.ready else "False",
            "reason": ready.reason,
            "message": ready.message,
            "lastTransitionTime": since[2],
        }

    def _seed_ready_since(self, name: str, body: Mapping[str, Any]) -> None:
        """A restarted controller keeps the transition time the object already shows."""
        if name in self._ready_since:
            return
        for condition in (body.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "Ready" and condition.get("lastTransitionTime"):
                self._ready_since[name] = (
                    condition.get("status") == "True",
                    str(condition.get("reason") or ""),
                    str(condition["lastTransitionTime"]),
                )

    # -- resync --------------------------------------------------------------------------

    def prune(self, kind: str, listed: set[str], list_rv: int) -> int:
        """Forget what a fresh LIST (at collection version ``list_rv``) no longer holds.

        Watch events can be missed while a replica stands by (kopf pauses its watches); a
        LIST then says what exists. An entry absent from the LIST is gone unless a watch event
        newer than the LIST put it here. Returns how many entries were dropped.
        """
        stores: dict[str, Mapping[str, object]] = {
            "job": self.jobs,
            "pod": self.pods,
            "node": self.nodes,
            "queue": self.queues,
            "namespace": self.namespaces,
        }
        store = stores[kind]
        gone = [
            key
            for key in store
            if key not in listed and self._rvs.get(f"{kind}:{key}", 0) <= list_rv
        ]
        for key in gone:
            self._rvs.pop(f"{kind}:{key}", None)
            getattr(self, f"apply_{kind}")("DELETED", _tombstone(kind, key))
        return len(gone)

    # -- what the planner sees -----------------------------------------------------------

    def node_view(self, name: str) -> Node:
        node = self._node_cache.get(name)
        if node is None:
            base = self.nodes[name]
            node = replace(base, used=self.node_other.get(name, Resources()))
            self._node_cache[name] = node
        return node

    def placement(self, record: JobRecord, now: float) -> dict[str, int]:
        """Where an admitted gang holds room: bound pods, plus its planned nodes while young.

        The plan is this controller's reservation, or after a restart the pin on the Job
        (muster.dev/placement): a restarted controller holds the same nodes. While young the
        planned nodes stay held even where a pod is bound (a pod may be counted twice): the
        pin fixes the nodes, not how many of the gang's pods each one gets, and that slack
        keeps room for the plan until the gang's minimum is ready. A gang whose minimum is
        ready holds just its bound pods (so a preemption frees what it really holds)."""
        return self._placement(record, now)[0]

    def _placement(self, record: JobRecord, now: float) -> tuple[dict[str, int], bool | None]:
        """`placement`, and what of `now` it depended on (`_plan_hold`)."""
        bound = dict(self.gang_bound.get(f"{record.namespace}/{record.gang_label}", {}))
        admission = record.admission
        reserved = self.reservations.get(record.key)
        if reserved is None and admission is not None and record.pinned:
            reserved = record.pinned
        if reserved is None:
            return bound, None
        holds, expired = self._plan_hold(record, now)
        if holds:
            for node, pods in reserved.items():
                if node in self.nodes:
                    bound[node] = max(bound.get(node, 0), pods)
        return bound, expired

    def pending_gangs(
        self,
        now: float,
        refused: Mapping[str, Reason] | None = None,
        busy: Collection[str] = (),
    ) -> list[Gang]:
        """Gangs to plan: waiting, readable, not backing off, allowed into their queue, and not
        ``busy`` (being suspended and restored: admitting one then would race its restore)."""
        refused = refused or {}
        # Every cycle reads every record: the dict's key is the record's key (no new string).
        return [
            r.gang
            for key, r in self.jobs.items()
            if _waiting(r) and r.requeue_at <= now and key not in refused and key not in busy
        ]

    def admitted_gangs(self, now: float) -> list[AdmittedGang]:
        """Every admitted, unfinished gang as the planner holds it: its size and where it holds
        room (`placement`).

        Called every cycle, with thousands of gangs admitted: a gang whose record, pods and
        reservation are as at the last call, and whose reservation has not expired since (its
        placement depends on the time and on which nodes exist only through `_plan_hold`, and
        then on no node having come or gone), gets the same `AdmittedGang` object again (the
        planner skips it: `Planner.add_admitted`), without working out its placement."""
        memo = self._admitted_memo
        kept: dict[str, _AdmittedMemo] = {}
        out: list[AdmittedGang] = []
        seen, node_set = self._gang_pods_seen, self._node_set
        for key, r in self.jobs.items():
            if r.finished or (r.admitted_at is None and r.local_admit is None):
                continue  # most records, every cycle: `r.admission is None` without the property
            adm = r.admission
            assert adm is not None
            pods = seen.get(f"{r.namespace}/{r.gang_label}", 0)
            reserved = self.reservations.get(key)
            hit = memo.get(key)
            if (
                hit is None
                or (hit.expired is not None and (now - adm[0] > RESERVATION_TTL) != hit.expired)
                or hit.record is not r
                or hit.admission != adm
                or hit.running != r.reached_min
                or hit.pods != pods
                or hit.reserved is not reserved
                or (hit.expired is not None and hit.node_set != node_set)
            ):
                placement, expired = self._placement(r, now)
                entry = AdmittedGang(
                    gang=r.gang,
                    size=adm[1],
                    placement=placement,
                    admitted_at=adm[0],
                    running=r.reached_min,
                )
                hit = _AdmittedMemo(r, adm, r.reached_min, pods, reserved, expired, node_set, entry)
            kept[key] = hit
            out.append(hit.entry)
        self._admitted_memo = kept
        return out

    def snapshot(
        self, now: float, refused: Mapping[str, Reason] | None = None, busy: Collection[str] = ()
    ) -> Snapshot:
        """A private, immutable copy of what the planner needs (step 2 of a cycle).

        Gangs in `refused` (see `namespace_refusals`) are left out of the plan."""
        nodes = [self.node_view(name) for name in self.nodes]
        admitted = self.admitted_gangs(now)
        tree = self.tree if self.tree is not None else QueueTree.build([])
        return Snapshot(
            nodes=nodes,
            queues=tree,
            admitted=admitted,
            pending=self.pending_gangs(now, refused, busy),
            now=now,
        )

    def backing_off(self, now: float) -> list[tuple[Gang, float]]:
        """Gangs waiting out an eviction's backoff, with when they are planned again."""
        return [
            (r.gang, r.requeue_at) for r in self.jobs.values() if _waiting(r) and r.requeue_at > now
        ]

    def queue_usage(self) -> dict[str, Resources]:
        """Quota held per leaf queue: the demand of its admitted, unfinished gangs."""
        usage: dict[str, Resources] = defaultdict(Resources)
        for r in self.jobs.values():
            adm = r.admission
            if adm is not None and not r.finished:
                usage[r.queue] = usage[r.queue] + r.gang.demand(adm[1])
        return usage

    def capacity(self) -> Resources:
        if self._capacity is None:
            total = Resources()
            for node in self.nodes.values():
                total = total + node.allocatable
            self._capacity = total
        return self._capacity


def _waiting(r: JobRecord) -> bool:
    """Suspended, not admitted, not finished or failed, readable: waits to be planned (now, or
    after its backoff)."""
    return (
        r.admitted_at is None  # `r.admission is None`, without the property: every record,
        and r.local_admit is None  # every cycle
        and r.suspended
        and not r.finished
        and not r.failed_state
        and r.parse_error is None
    )


def _tombstone(kind: str, key: str) -> dict[str, Any]:
    """The smallest body a DELETED event of this cache key needs."""
    if kind == "job":
        namespace, _, name = key.partition("/")
        return {"metadata": {"namespace": namespace, "name": name}}
    if kind == "pod":
        return {"metadata": {"uid": key}}
    return {"metadata": {"name": key}}


def cache_key(kind: str, body: Mapping[str, Any]) -> str:
    """The key under which the cache holds an object of this kind."""
    meta = body.get("metadata") or {}
    if kind == "job":
        return f"{meta.get('namespace')}/{meta.get('name')}"
    if kind == "pod":
        return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
    return str(meta.get("name") or "")


class StateMark(NamedTuple):
    """`Cache.mark`: compared by identity for the tree and the capacity (each object is
    replaced, never changed in place)."""

    version: int
    tree: QueueTree | None
    capacity: Resources


def _visible(r: JobRecord) -> tuple[object, ...]:
    """What a gang's status and its plan depend on: a change bumps its version (long-polls
    wake) and starts a cycle. `gang` is what the planner reads of it (queue, size, priority,
    requests, placement rules)."""
    return (
        r.gang,
        r.parse_error,
        r.suspended,
        r.admission,
        r.evictions,
        r.failed_state,
        r.finished,
        r.ready + r.succeeded >= r.gang.min,
        r.requeue_at,
    )


def _largest_valid_tree(queues: Iterable[Queue]) -> QueueTree:
    """Drop queues one at a time (offenders first) until the rest validate."""
    remaining = list(queues)
    while remaining:
        try:
            return QueueTree.build(remaining)
        except PolicyError as exc:
            text = str(exc)
            offender = next((q for q in remaining if f'"{q.name}"' in text), remaining[-1])
            remaining.remove(offender)
    return QueueTree.build([])
