"""The controller's cache: gangs (managed gang objects: Jobs, JobSets), pods, nodes and queues as
the watches report them.

Everything the admit loop, the detectors and the status service read comes from here; nothing
here calls the API. Only the event loop thread mutates the cache; `snapshot()` returns an
immutable `policies.Snapshot` the planner may use from another thread.

The cache owns its parts, each the one writer of its facts, and routes each watch event to them
(dropping one older than what it holds), and each optimistic change of the controller to every
part it concerns:

- `jobs` (`admission.jobstore.JobStore`): a record per managed Job, and what the controller
  assumes of them before the watch confirms it;
- `pods` (`admission.podledger.PodLedger`): live pods, counted per gang and per node;
- `nodes` (`admission.nodetable.NodeTable`): nodes, and their capacity;
- `queues` (`admission.queuebook.QueueBook`): Queues, the tree of the Ready ones, namespaces;
- `reservations` (`admission.reservations.Reservations`): where admitted gangs hold room;
- `status` (`admission.statusview.StatusView`): gangs' versions and long-polls, and why each
  waiting gang waits, its position and its estimate;
- `devices` (`admission.devicebook.DeviceBook`): the DRA objects, when a DeviceClass is
  mapped: nodes' devices as resources, and gangs' claims;
- `members` (`admission.members.MemberGangs`): the pods and records of gangs whose gang object
  is a set of pods (a pod group), made into virtual gang objects the cache applies as any;
- `history` and `runtimes`: gangs seen finish or fail, and how long finished gangs ran.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Mapping
from functools import partial
from typing import Any, Final

from admission.devicebook import DEVICE_KINDS, DeviceBook
from admission.gangs import JobRecord
from admission.history import GangHistory
from admission.jobstore import JobStore, Suspension, visible
from admission.members import MemberGangs
from admission.nodetable import NodeTable
from admission.podledger import PodLedger
from admission.queuebook import QueueBook
from admission.reservations import Reservations
from admission.statusview import StateMark, StatusView
from policies import QueueTree, Reason, Snapshot
from policies.devices import NO_DEVICES, DeviceMapping
from policies.estimate import RuntimeHistory
from policies.kinds import JOB, KINDS, Kind
from policies.kinds.members import RECORDS
from policies.kinds.registry import POD_GANGS
from policies.phase import is_managed


def _rv(body: Mapping[str, Any]) -> int:
    try:
        return int((body.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class Cache:
    """What the watches report, in parts; the facade the controller and the status read."""

    def __init__(
        self, history: GangHistory | None = None, devices: DeviceMapping = NO_DEVICES
    ) -> None:
        self.jobs = JobStore()
        self.nodes = NodeTable()
        self.pods = PodLedger(self.nodes)
        self.queues = QueueBook()
        self.reservations = Reservations(self.jobs, self.pods, self.nodes)
        self.status = StatusView()
        self.devices = DeviceBook(devices, self.jobs, self.nodes, self.pods, self.status)
        """The DRA objects, when a DeviceClass is mapped (`admission.devicebook`)."""
        self.members = MemberGangs()
        self.history = history if history is not None else GangHistory()
        """Gangs seen finish or fail (admission/history.py), for /v1/history."""
        self.runtimes = RuntimeHistory()
        """Runtimes of finished gangs, which the wait-time estimates learn from."""
        self.suspects: set[str] = set()
        """Admitted gangs whose object or pods changed so that they may no longer run as
        admitted: the guard looks at them (`admission.guard`)."""
        self.left: list[JobRecord] = []
        """Admitted or pinned gang objects the watch no longer reports (deleted, or no longer
        muster's: a watch by label reports a label removed as a deletion, with the object as
        it was), for the guard to look at (`AdmissionGuard` lets go of one that is still
        there)."""
        self.synced = False
        """Every kind was LISTed in (a replica still loading, or a standby, is not)."""
        self.changed = asyncio.Event()
        """Set when the planner must look again: the admit loop waits on it."""
        self._rvs: dict[str, int] = {}

    def _fresh(self, kind: str, key: str, body: Mapping[str, Any]) -> bool:
        """False for an event older than what we already hold (a LIST raced the watch)."""
        rv = _rv(body)
        slot = f"{kind}:{key}"
        if rv and rv < self._rvs.get(slot, 0):
            return False
        self._rvs[slot] = rv
        return True

    # -- watch events --------------------------------------------------------------------

    def apply_job(self, event: str | None, body: Mapping[str, Any]) -> JobRecord | None:
        """Apply a Job event; return the record now held (None if gone or not managed)."""
        return self.apply_gang(JOB, event, body)

    def applier(self, kind: str) -> Callable[[str | None, Mapping[str, Any]], object]:
        """What applies a watch event of a cache kind (`cache_kind`: "pod", "node", ..., or a
        gang object kind's, "job", "jobset")."""
        gang_kind = GANG_OBJECTS.get(kind)
        if gang_kind is not None:
            return partial(self.apply_gang, gang_kind)
        if kind in DEVICE_KINDS:
            return partial(self.apply_device, kind)
        return getattr(self, f"apply_{kind}")  # type: ignore[no-any-return]

    def apply_gang(
        self, kind: Kind, event: str | None, body: Mapping[str, Any]
    ) -> JobRecord | None:
        """Apply an event of a gang object of ``kind``; return the record now held (None if
        gone or not managed). For a kind whose gang object is a set of pods, the event may be
        of its record (what `Writer.get_object` read again after a conflict)."""
        if kind.name in POD_GANGS and body.get("kind") == RECORDS.kind:
            self.apply_gangrecord(event, body)
            meta = body.get("metadata") or {}
            return self.jobs.get(f"{meta.get('namespace')}/{body.get('spec', {}).get('gang')}")
        meta = body.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        jobs = self.jobs
        slot = cache_kind(kind)
        if not self._fresh(slot, key, body):
            return jobs.get(key)
        old = jobs.get(key)
        if old is not None and old.object_kind is not kind and event == "DELETED":
            return old  # another kind's object of the same name went; this one stays
        if event == "DELETED" or not is_managed(body):
            if old is not None:
                if not old.finished and (old.admission is not None or old.pinned):
                    self.left.append(old)
                jobs.remove(key)
                self.pods.forget_gang(f"{old.namespace}/{old.gang_label}")
                self.reservations.pop(key, None)
                self._rvs.pop(f"{slot}:{key}", None)
                self.status.touch(key)
                self.changed.set()
            return None
        now = time.time()
        new = jobs.put(key, kind, body, old, now)
        gang = f"{new.namespace}/{new.gang_label}"
        self.history.observe(old, new, body, now, self.pods.ended.get(gang))
        if new.finished and (old is None or not old.finished or old.uid != new.uid):
            self._learn_runtime(new)
        if new.finished or (new.admitted_at is None and new.local_admit is None):
            self.reservations.pop(key, None)
        elif new.admitted_at is not None and (new.suspended or new.live_size > new.admitted_size):
            self.suspects.add(key)
        if old is None or visible(old) != visible(new):
            self.status.touch(key)
            self.changed.set()
        return new

    def _learn_runtime(self, record: JobRecord) -> None:
        """A finished gang's runtime, start (the Job's startTime, else its admission) to end,
        for the wait-time estimates of its queue and size class."""
        start = record.start_time if record.start_time is not None else record.admitted_at
        if start is not None and record.end_time is not None and record.end_time >= start:
            self.runtimes.record(record.queue, record.gang.size, record.end_time - start)

    def apply_pod(self, event: str | None, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        uid = meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"
        if not self._fresh("pod", uid, body):
            return
        change = self.pods.apply(event, uid, meta, body)
        if self.devices.pod_changed(uid):  # the claims made for it: its gang's, or not
            self.changed.set()
        member = self.members.apply_pod(event, uid, meta, body)
        if member is not None:
            self.apply_gang(*member)  # its gang's virtual gang object changed
        if change is None:
            return
        gang, freed = change
        if event == "DELETED":
            self._rvs.pop(f"pod:{uid}", None)
        if gang is not None:
            self._gang_pods_changed(gang)
        if freed:
            self.changed.set()

    def _gang_pods_changed(self, gang: str) -> None:
        """For the history: when an admitted gang's minimum of pods is ready (its start; the
        Job's status.ready says so a moment later) and when its last live pod ends."""
        jobs, pods = self.jobs, self.pods
        key = jobs.gangs.get(gang)
        if key is None:
            return  # not a gang the cache holds (its Job gone: nothing to keep for it)
        if gang not in pods.gang_bound and gang not in pods.gang_unbound:  # none live
            pods.note_ended(gang, time.time())
            return
        record = jobs.get(key)
        if record is None:
            return
        if record.started_at is None:  # checked here: every pod event
            jobs.started_by_pods(record, pods.gang_ready.get(gang, 0))
        admission = record.admission
        if admission is not None and pods.gang_live.get(gang, 0) > admission[1]:
            self.suspects.add(key)

    def apply_gangrecord(self, event: str | None, body: Mapping[str, Any]) -> None:
        """A GangRecord event: its gang's virtual gang object changes with it."""
        meta = body.get("metadata") or {}
        if not self._fresh("gangrecord", f"{meta.get('namespace')}/{meta.get('name')}", body):
            return
        change = self.members.apply_record(event, body)
        if change is not None:
            self.apply_gang(*change)

    def apply_node(self, event: str | None, body: Mapping[str, Any]) -> None:
        name = (body.get("metadata") or {}).get("name") or ""
        if not self._fresh("node", name, body):
            return
        changed = self.nodes.apply(event, name, body)
        self.pods.forget_view(name)
        if changed:
            self.changed.set()

    def apply_device(self, kind: str, event: str | None, body: Mapping[str, Any]) -> None:
        """A DRA object's event (`DEVICE_KINDS`): nodes' devices, gangs' claims."""
        if self._fresh(kind, cache_key(kind, body), body) and self.devices.apply(kind, event, body):
            self.changed.set()

    def apply_queue(self, event: str | None, body: Mapping[str, Any]) -> None:
        name = (body.get("metadata") or {}).get("name") or ""
        if not self._fresh("queue", name, body):
            return
        if self.queues.apply(event, name, body):
            self.changed.set()

    def apply_namespace(self, event: str | None, body: Mapping[str, Any]) -> None:
        """Namespace labels decide which queues a namespace's gangs may use."""
        name = (body.get("metadata") or {}).get("name") or ""
        if self._fresh("namespace", name, body) and self.queues.apply_namespace(event, name, body):
            self.changed.set()

    def prune(self, kind: str, listed: set[str], list_rv: int) -> int:
        """Forget what a fresh LIST (at collection version ``list_rv``) no longer holds.

        Watch events can be missed while a replica stands by (kopf pauses its watches); a
        LIST then says what exists. An entry absent from the LIST is gone unless a watch event
        newer than the LIST put it here. Returns how many entries were dropped.
        """
        stores: dict[str, Mapping[str, object]] = {
            "pod": self.pods,
            "node": self.nodes,
            "queue": self.queues,
            "namespace": self.queues.namespaces,
            "gangrecord": self.members.records,
        }
        gang_kind = GANG_OBJECTS.get(kind)
        store: Mapping[str, object]
        if gang_kind is not None:
            store = {k: r for k, r in self.jobs.items() if r.object_kind is gang_kind}
        elif kind in DEVICE_KINDS:
            store = dict.fromkeys(self.devices.keys(kind))
        else:
            store = stores[kind]
        gone = [
            key
            for key in store
            if key not in listed and self._rvs.get(f"{kind}:{key}", 0) <= list_rv
        ]
        apply = self.applier(kind)
        for key in gone:
            self._rvs.pop(f"{kind}:{key}", None)
            apply("DELETED", _tombstone(kind, key))
        return len(gone)

    # -- the controller's optimistic changes (assume, then confirm or forget) -------------

    def assume_admitted(
        self,
        record: JobRecord,
        now: float,
        size: int,
        placements: Mapping[str, Mapping[str, int]],
    ) -> None:
        """The controller sent an admission: count it (quota, nodes: the plan's placement of
        each pod set) at once, before the watch brings the admitted object; `forget_admission`
        undoes it."""
        self.jobs.assume_admitted(record, now, size)
        self.reservations.hold(record.key, placements)
        self.status.forget_reason(record.key)
        self.status.touch(record.key)

    def confirm_admission(self, record: JobRecord, now: float, size: int) -> None:
        """The admission PATCH was accepted: hold it as the object will say."""
        self.jobs.confirm_admission(record, now, size)

    def forget_admission(self, record: JobRecord) -> None:
        """The admission PATCH was refused or conflicted: the gang is pending again."""
        if self.jobs.forget_admission(record):
            self.status.touch(record.key)
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
        before = self.jobs.assume_suspended(
            record, evictions=evictions, requeue_at=requeue_at, failed=failed, preemption=preemption
        )
        self.reservations.pop(record.key, None)
        self.status.touch(record.key)
        self.changed.set()
        return before

    def forget_suspension(self, record: JobRecord, before: Suspension) -> None:
        """The suspending write was refused: the gang is admitted as it was."""
        self.jobs.forget_suspension(record, before)
        self.changed.set()

    def assume_failed(self, record: JobRecord, reason: str) -> None:
        """The controller gives up on a waiting gang that can never be admitted: it leaves the
        planner's view at once (`forget_failure` undoes this if the write is refused)."""
        self.jobs.assume_failed(record, reason)
        self.status.touch(record.key)
        self.changed.set()

    def forget_failure(self, record: JobRecord) -> None:
        """The failing write was refused: the gang waits again."""
        if self.jobs.forget_failure(record):
            self.status.touch(record.key)
        self.changed.set()

    def drop_reservation(self, key: str) -> None:
        """A gang's capacity is free without the watch having said so yet (a preemption victim
        suspended, finished or gone): stop holding its plan, and plan again."""
        self.reservations.pop(key, None)
        self.status.touch(key)
        self.changed.set()

    # -- what the planner and the status read across parts --------------------------------

    def refusals(self) -> dict[str, Reason]:
        """Waiting gangs the controller keeps out of the plan, and why: their Queue is not
        Ready, or does not take gangs from their namespace, or their gang object is not whole
        yet (`Incomplete`: a pod group waiting for its pods)."""
        refused = self.queues.refusals(self.jobs.unfinished_records())
        jobs = self.jobs
        for key in jobs.incomplete:
            record = jobs[key]
            if record.incomplete is not None and record.admission is None:
                refused[key] = Reason(INCOMPLETE, record.incomplete)
        return refused

    def namespace_refusals(self) -> dict[str, Reason]:
        """Waiting gangs whose queue does not take gangs from their namespace, and why."""
        return self.queues.namespace_refusals(self.jobs.unfinished_records())

    def snapshot(
        self, now: float, refused: Mapping[str, Reason] | None = None, busy: Collection[str] = ()
    ) -> Snapshot:
        """A private, immutable copy of what the planner needs (step 2 of a cycle).

        Gangs in `refused` (see `refusals`) are left out of the plan."""
        view = self.pods.node_view
        nodes = [view(name) for name in self.nodes]
        admitted = self.reservations.admitted(now)
        tree = self.queues.tree if self.queues.tree is not None else QueueTree.build([])
        return Snapshot(
            nodes=nodes,
            queues=tree,
            admitted=admitted,
            pending=self.jobs.pending(now, refused, busy),
            now=now,
        )

    def mark(self) -> StateMark:
        """What the queues' status and the wait-time estimates read of the cache, besides the
        time: the gangs' visible states (`StatusView.version`), the queues (`QueueBook.tree`,
        rebuilt on each change) and the nodes' capacity. Equal marks (`same_mark`): the same
        inputs."""
        return StateMark(self.status.version, self.queues.tree, self.nodes.capacity())

    def same_mark(self, mark: StateMark | None) -> bool:
        """Whether nothing `mark` covers changed since it was taken."""
        return (
            mark is not None
            and mark.version == self.status.version
            and mark.tree is self.queues.tree
            and mark.capacity is self.nodes.capacity()
        )


INCOMPLETE: Final = "Incomplete"
"""The reason a gang whose gang object is not whole yet waits (`JobRecord.incomplete`)."""

GANG_OBJECTS: Final[Mapping[str, Kind]] = {
    kind.name.lower(): kind for kind in KINDS.values() if kind.holds_itself
}
"""The kinds of gang object the cache holds records of, by cache kind ("job", "jobset")."""


NAMESPACED: Final = frozenset(
    {*GANG_OBJECTS, "gangrecord", *(k for k, r in DEVICE_KINDS.items() if r.namespaced)}
)
"""Cache kinds held by "namespace/name" (pods: by uid; the others by name)."""


def cache_kind(kind: Kind) -> str:
    """The cache kind of a gang object kind: "job", "jobset"."""
    return kind.name.lower()


def _tombstone(kind: str, key: str) -> dict[str, Any]:
    """The smallest body a DELETED event of this cache key needs."""
    if kind in NAMESPACED:
        namespace, _, name = key.partition("/")
        return {"metadata": {"namespace": namespace, "name": name}}
    if kind == "pod":
        return {"metadata": {"uid": key}}
    return {"metadata": {"name": key}}


def cache_key(kind: str, body: Mapping[str, Any]) -> str:
    """The key under which the cache holds an object of this kind."""
    meta = body.get("metadata") or {}
    if kind in NAMESPACED:
        return f"{meta.get('namespace')}/{meta.get('name')}"
    if kind == "pod":
        return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
    return str(meta.get("name") or "")
