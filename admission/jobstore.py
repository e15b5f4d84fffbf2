"""The controller's managed gang objects: one `JobRecord` per object (a Job, a JobSet), and what
the controller assumes of them.

The store is a dict of records by key ("namespace/name") and the only writer of every record
it holds: the Job watch's reading (`put`, `remove`), and the changes the controller makes
before the watch brings them back (assume an admission, a suspension or a failure; forget it if
the write is refused; Kueue's `assumeWorkload`/`forgetWorkload`). It also answers what the
planner asks of the records alone: which gangs wait, which back off, what each queue holds.
Where admitted gangs hold nodes is `admission.reservations`; their pods, `admission.podledger`.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Collection, ItemsView, Mapping, ValuesView
from dataclasses import dataclass, replace
from typing import Any

from admission.gangs import JobRecord, job_record
from policies import Gang, Reason, Resources
from policies.devices import DeviceCatalog
from policies.kinds.kind import Kind
from policies.lifecycle import Progress


@dataclass(frozen=True, slots=True)
class Suspension:
    """What an assumed suspension changed, to restore if its write is refused."""

    admitted_at: float | None
    admitted_size: int
    local_admit: tuple[float, int] | None
    evictions: int
    suspended: bool = False


class JobStore(dict[str, JobRecord]):
    """Managed Jobs' records by key, and the gang each Job runs (`gangs`)."""

    # Slots: a dict subclass's own attributes are read as fast as a plain object's only so.
    __slots__ = ("devices", "gangs", "incomplete", "restores", "unfinished")

    def __init__(self) -> None:
        super().__init__()
        self.unfinished: dict[str, JobRecord] = {}
        """The records not finished by key, in the store's order. The admit loop's passes over
        waiting and admitted gangs (every cycle, and the queue status every second) walk these:
        a cluster keeps finished Jobs by the thousand (50,000 in Kueue's large-scale benchmark),
        and each pass over them cost as much as the cycle's plan. A record is finished only as
        the watch reads it, so `__setitem__` and `remove` keep this whole."""
        self.devices: DeviceCatalog | None = None
        """What the cluster's DRA objects say (`admission.devicebook`): a gang's claims add
        their devices to its pods' requests; None: no DeviceClass is mapped."""
        self.gangs: dict[str, str] = {}
        """Gang ("namespace/gang label") -> the key of its Job."""
        self.restores: set[str] = set()
        """Keys of suspended objects whose restore is still to be done (`restore_pending`)."""
        self.incomplete: set[str] = set()
        """Keys of gang objects not whole yet (`JobRecord.incomplete`: a pod group waiting for
        its pods)."""

    def __setitem__(self, key: str, record: JobRecord) -> None:
        had = key in self
        super().__setitem__(key, record)
        unfinished = self.unfinished
        if record.finished:
            unfinished.pop(key, None)
        elif key in unfinished or not had:
            unfinished[key] = record
        else:  # a finished gang's key runs again (rare): keep the store's order
            self.unfinished = {k: r for k, r in self.items() if not r.finished}

    def unfinished_items(self) -> ItemsView[str, JobRecord]:
        """(key, record) of every record not finished, in the store's order (a view: copy it
        with list() to change the store while walking it)."""
        return self.unfinished.items()

    def unfinished_records(self) -> ValuesView[JobRecord]:
        """Every record not finished, in the store's order (a view, as `unfinished_items`)."""
        return self.unfinished.values()

    # -- the Job watch ---------------------------------------------------------------------

    def put(
        self, key: str, kind: Kind, body: Mapping[str, Any], old: JobRecord | None, now: float
    ) -> JobRecord:
        """Read an event's body of a gang object of ``kind`` at `now` into the record held
        under `key` (`old`, if any), keeping what the controller knows and the object does not
        say yet."""
        previous = old if old is None or old.object_kind is kind else None
        new = job_record(body, previous, kind, self.devices)
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
        self[key] = new
        self.gangs[f"{new.namespace}/{new.gang_label}"] = key
        if new.restore_pending:
            self.restores.add(key)
        else:
            self.restores.discard(key)
        if new.incomplete is not None:
            self.incomplete.add(key)
        else:
            self.incomplete.discard(key)
        return new

    def remove(self, key: str) -> JobRecord | None:
        """The Job is gone (or no longer managed): forget its record; return it."""
        old = self.pop(key, None)
        self.unfinished.pop(key, None)
        self.restores.discard(key)
        self.incomplete.discard(key)
        if old is not None:
            self.gangs.pop(f"{old.namespace}/{old.gang_label}", None)
        return old

    def started_by_pods(self, record: JobRecord, ready: int) -> None:
        """The pod watch sees `ready` pods of the gang of the Job of `record` (held here)
        ready: at its minimum, an admitted gang has started (for the history; the Job's
        status.ready says so later)."""
        if (
            record.started_at is None
            and not record.finished
            and (adm := record.admission) is not None
            and ready >= record.gang.min
        ):
            record.started_at = max(time.time(), adm[0])

    # -- optimistic changes (assume, then confirm or forget) --------------------------------

    def assume_admitted(self, record: JobRecord, now: float, size: int) -> None:
        """The controller sent an admission: hold the gang as admitted at once."""
        record.local_admit = (now, size)
        record.below_min_since = None
        record.reached_min = False
        record.advanced, record.advanced_at = None, None

    def confirm_admission(self, record: JobRecord, now: float, size: int) -> None:
        """The admission PATCH was accepted: hold it as the object will say."""
        current = self.get(record.key)
        if current is not None and current.uid == record.uid and current.admitted_at is None:
            current.admitted_at, current.admitted_size = now, size
            current.suspended = False

    def forget_admission(self, record: JobRecord) -> bool:
        """The admission PATCH was refused or conflicted: the gang is pending again. True if
        the record held is that Job's (its visible state changed back)."""
        current = self.get(record.key)
        if current is None or current.uid != record.uid:
            return False
        current.local_admit = None
        return True

    def assume_suspended(
        self,
        record: JobRecord,
        *,
        evictions: int | None,
        requeue_at: float,
        failed: bool,
        preemption: tuple[int, str] | None,
    ) -> Suspension:
        """The controller suspends an admitted gang (see `Cache.assume_suspended`); returns
        what `forget_suspension` restores."""
        before = Suspension(
            record.admitted_at,
            record.admitted_size,
            record.local_admit,
            record.evictions,
            record.suspended,
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
        return before

    def forget_suspension(self, record: JobRecord, before: Suspension) -> None:
        """The suspending write was refused: the gang is admitted as it was."""
        current = self.get(record.key)
        if current is not None and current.uid == record.uid:
            current.admitted_at, current.admitted_size = before.admitted_at, before.admitted_size
            current.local_admit = before.local_admit
            current.suspended = before.suspended
            current.evictions = before.evictions

    def assume_failed(self, record: JobRecord, reason: str) -> None:
        """The controller gives up on a waiting gang that can never be admitted."""
        record.failed_state, record.failed_reason = True, reason

    def forget_failure(self, record: JobRecord) -> bool:
        """The failing write was refused: the gang waits again. True if the record held is
        that Job's."""
        current = self.get(record.key)
        if current is None or current.uid != record.uid:
            return False
        current.failed_state, current.failed_reason = False, ""
        return True

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

    # -- what the planner reads of the records ----------------------------------------------

    def pending(
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
            for key, r in self.unfinished_items()
            if waiting(r) and r.requeue_at <= now and key not in refused and key not in busy
        ]

    def backing_off(self, now: float) -> list[tuple[Gang, float]]:
        """Gangs waiting out an eviction's backoff, with when they are planned again."""
        return [
            (r.gang, r.requeue_at)
            for r in self.unfinished_records()
            if waiting(r) and r.requeue_at > now
        ]

    def queue_usage(self) -> dict[str, Resources]:
        """Quota held per leaf queue: the demand of its admitted, unfinished gangs."""
        usage: dict[str, Resources] = defaultdict(Resources)
        for r in self.unfinished_records():
            adm = r.admission
            if adm is not None and not r.finished:
                usage[r.queue] = usage[r.queue] + r.gang.demand(adm[1])
        return usage


def waiting(r: JobRecord) -> bool:
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


def visible(r: JobRecord) -> tuple[object, ...]:
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
