"""The controller's guard on admissions: an admitted gang runs as muster admitted it, or its
admission is undone (issue 28).

Defence in depth behind the webhook's review of updates, which can be down (its failurePolicy
for updates is Ignore), bypassed, or younger than the object. The cache hands the guard the
gangs whose object or pods changed so that they may no longer run as admitted (`Cache.suspects`)
and the objects that left muster (`Cache.left`); each cycle the guard looks at those only:

- **outgrown**: the object asks for more pods than its admission
  (`JobRecord.live_size` against `muster.dev/admitted`), or it runs more members past
  muster's placement gate than admitted for `POD_GRACE` (`PodLedger.released_members`: a pod
  being replaced, or one of an earlier admission still going, is not a member more; nor is a
  member its kind's controller runs twice, which Kubernetes' Job controller may do by its own
  rules: one whose view of its pods lagged a kube-apiserver restart did in
  tests/cluster/test_faults.py, and evicting the gang for it admitted it twice; a pod more
  of a pinned gang waits at the gate anyway, as `Admitter.place_pods` releases no more than
  planned). Evicted as `Outgrown`, like a clog (counted, backed off), and requeued at
  what it asks for now (`policies.kinds.release.as_changed`): planned again honestly, at its
  new size, against quota and nodes.
- **suspended while admitted** (the way to change an admitted gang: the webhook allows any
  change in the update that suspends it): its admission is given up and it is requeued at once
  at its submission stamp, no eviction counted, at what it asks for now.
- **left muster** (its `muster.dev/queue` label or stamp removed): suspended if it held an
  admission (it ran on a queue's quota it left), and put back as it was before its release (no
  placement gate nor pin left behind), then no longer watched. Its quota is free at once, as
  at an eviction. (A watch by label reports a label removed as a deletion, with the object as
  it was: for an admitted or pinned gang, the guard reads the object to tell.)

Each undoing posts an Event and counts in `muster_admissions_undone_total{reason}`. A write
the apiserver refuses is tried again after a backoff (`Suspender.refused`), not every cycle.
"""

from __future__ import annotations

import logging
from typing import Final

from admission.cache import Cache
from admission.gangs import JobRecord
from admission.jobstore import Suspension
from admission.metrics import ControllerMetrics
from admission.suspender import Suspender
from admission.writes import JobRef, Spawn, Writer
from kubeport.kubeapi import ApiError
from policies.kinds.pinning import Original
from policies.kinds.release import as_changed
from policies.phase import is_managed
from policies.vocabulary import ADMITTED, RESTORE

log = logging.getLogger("muster.controller")

POD_GRACE: Final = 5.0
"""Seconds a gang may hold more live pods than admitted before it is taken as outgrown: the
pods of a gang suspended a moment ago are deleted by its kind's controller within seconds, and
a pod being replaced is marked terminating first. Extra pods of a pinned gang wait at muster's
placement gate meanwhile (`Admitter.place_pods` sends no more than planned)."""


class AdmissionGuard:
    """Undoes the admissions of gangs that no longer run as admitted (see the module)."""

    def __init__(
        self,
        cache: Cache,
        writer: Writer,
        metrics: ControllerMetrics,
        suspender: Suspender,
        spawn: Spawn,
    ) -> None:
        self.cache, self.writer, self.metrics = cache, writer, metrics
        self.suspender, self.spawn = suspender, spawn
        self._excess_since: dict[str, float] = {}

    def detect(self, now: float) -> None:
        """Look at the cache's suspects and the objects that left; undo what must be."""
        cache = self.cache
        while cache.left:
            record = cache.left.pop()
            self.spawn(self._let_go(record))
        for key in list(cache.suspects):
            if not self._check(key, now):
                cache.suspects.discard(key)
                self._excess_since.pop(key, None)

    def _check(self, key: str, now: float) -> bool:
        """Look at one suspect; True to look at it again next cycle."""
        record = self.cache.jobs.get(key)
        if record is None or record.finished:
            return False
        if key in self.suspender.evicting or self.suspender.holds(key, now):
            return True  # being written, or waiting out a refusal
        # Once undone, a suspect is looked at again until its write is through (then it is
        # no longer admitted), or refused (then after its backoff).
        if record.admitted_at is not None and record.suspended:
            self._requeue(record, now)
            return True
        admission = record.admission
        if admission is None or record.suspended:
            return False
        size = admission[1]
        if record.admitted_at is not None and record.live_size > size:
            self._outgrown(record, f"it asks for {record.live_size} pods now", now)
            return True
        pods = self.cache.pods
        released = pods.released_members(record, size)
        if released <= size:
            return False
        since = self._excess_since.setdefault(key, now)
        if now - since < POD_GRACE:
            return True
        what = f"{released} of its pods live past muster's gate ({pods.describe(record)})"
        self._outgrown(record, what, now)
        return True

    # -- outgrown ------------------------------------------------------------------------

    def _outgrown(self, record: JobRecord, what: str, now: float) -> None:
        """Evict a gang that runs (or asks for) more than its admission, requeued at its new
        size."""
        size = record.admitted_size or (record.admission or (0.0, 0))[1]
        why = (
            f"outgrew its admission: admitted at {size} pods, {what}; muster admits a gang "
            "whole, so it is planned again at what it asks for now"
        )
        restore = None
        if record.original is not None:
            restore = as_changed(record.object_kind, record.spec, record.original, size)
        self.metrics.undone.labels("Outgrown").inc()
        self.suspender.evict(record, "Outgrown", why, now, restore=restore)

    # -- suspended while admitted ----------------------------------------------------------

    def _requeue(self, record: JobRecord, now: float) -> None:
        """Give up the admission of a gang someone suspended; requeue it at its stamp."""
        message = (
            f"suspended while admitted (at {record.admitted_size} pods): its admission is "
            "given up and it is requeued at its submission time, no eviction counted; muster "
            "admits it again at what it asks for then"
        )
        restore = None
        if record.original is not None:
            restore = as_changed(
                record.object_kind, record.spec, record.original, record.admitted_size
            )
        log.info("%s %s", record.key, message)
        self.metrics.undone.labels("Suspended").inc()
        self.suspender.evicting.add(record.key)
        before = self.cache.assume_suspended(record)
        self.spawn(self._send_requeue(record, message, restore, before, now))

    async def _send_requeue(
        self,
        record: JobRecord,
        message: str,
        restore: Original | None,
        before: Suspension,
        now: float,
    ) -> None:
        writer, ref = self.writer, JobRef.of(record)
        try:
            outcome = await writer.call(
                lambda: writer.requeue(ref, reason="Suspended", restore=restore)
            )
            if outcome == "ok":
                self.suspender.refused.pop(record.key, None)
                writer.event(ref, "Requeued", message, "Normal")
                await self._refresh(record)
            elif outcome in ("refused", "conflict"):
                self.cache.forget_suspension(record, before)
                why = writer.refusal(ref) if outcome == "refused" else "the object changed"
                self.suspender.refused.refused(record.key, why, now)
        finally:
            self.suspender.evicting.discard(record.key)

    async def _refresh(self, record: JobRecord) -> None:
        """Read the object again after a requeue, so that the next plan sees what it asks
        for now (not the watch's older view of it) before it admits it again."""
        try:
            body = await self.writer.call(self.writer.get_object, JobRef.of(record))
        except (ApiError, OSError) as exc:
            log.info("requeue %s: reading it again failed: %s", record.key, exc)
            return
        if body is not None:
            self.cache.apply_gang(record.object_kind, "MODIFIED", body)

    # -- left muster ---------------------------------------------------------------------

    async def _let_go(self, record: JobRecord) -> None:
        """An admitted or pinned gang object the watch no longer reports: if it is still there
        but no longer muster's (its label or stamp removed), suspend it if it held an
        admission, and take back what its release changed. A watch by label cannot tell that
        from a deletion (both come as one, with the object as it was): the object says."""
        writer, ref = self.writer, JobRef.of(record)
        try:
            body = await writer.call(writer.get_object, ref)
        except (ApiError, OSError) as exc:
            log.info("%s: reading it after it left the watch failed: %s", record.key, exc)
            return
        meta = (body or {}).get("metadata") or {}
        if body is None or meta.get("uid") != record.uid or is_managed(body):
            return  # deleted; or another object of that name; or back in muster's watch
        annotations = meta.get("annotations") or {}
        admitted = ADMITTED in annotations
        if not admitted and RESTORE not in annotations:
            return
        message = (
            "left muster (its muster.dev/queue label or muster.dev/submitted stamp was removed)"
        )
        message += (
            " while admitted: suspended, and put back as it was before its admission; it is "
            "no longer in a queue: resume it yourself (spec.suspend: false) to run it outside "
            "muster, or label it again, suspended, to queue it"
            if admitted
            else ": put back as it was before its admission"
        )
        log.warning("%s %s", record.key, message)
        self.metrics.undone.labels("LeftQueue").inc()
        outcome = await writer.call(
            lambda: writer.leave(ref, reason="LeftQueue", admitted=admitted)
        )
        if outcome == "ok":
            writer.event(ref, "LeftQueue", message, "Warning")
        elif outcome != "gone":
            log.warning("%s: letting go of it: %s (%s)", record.key, outcome, writer.refusal(ref))
