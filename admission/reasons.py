"""Why each gang waits, after each plan; and the gangs that never will start, failed.

`WaitReasons.record` keeps the plan's reasons for the status service, `muster explain` and
the logs (a changed reason wakes the gang's long-polls), with each waiting gang's place in its
queue, and posts one Warning Event on a Job that waits for something its user must fix.
`Rejections.fail` marks Failed a gang the planner rejected for the grace
(`policies.lifecycle.fails_rejected`): it would otherwise wait forever; `fail_incomplete` one
whose gang object did not come whole in its time (a pod group whose pods did not all come).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial

from admission.cache import INCOMPLETE, Cache
from admission.gangs import JobRecord
from admission.metrics import ControllerMetrics
from admission.settings import ControllerSettings
from admission.status import queue_positions
from admission.writes import JobRef, Spawn, Writer
from policies import Decisions, Reason
from policies.lifecycle import fails_rejected, rejected_message

log = logging.getLogger("muster.controller")

_TOLD_ONCE = frozenset({"QueueNotFound", "NamespaceNotAllowed"})
"""Reason codes that get a Warning Event on the Job the first time a gang waits for them."""


class WaitReasons:
    """Records the plan's reasons and the queue positions in the cache's status view."""

    def __init__(self, cache: Cache, writer: Writer) -> None:
        self.cache, self.writer = cache, writer
        self._known_missing: set[str] = set()
        """Gangs told (one Event) that they wait for a user's fix (`_TOLD_ONCE`)."""
        self._positions_at = 0.0
        self._positions_version = -1

    def record(
        self, decisions: Decisions, now: float, refused: Mapping[str, Reason] | None = None
    ) -> None:
        """Hold why each gang waits after a plan (and touch the gangs whose reason changed),
        tell once the ones a user must act on, and work out the queue positions again when
        they may have moved."""
        cache, status = self.cache, self.cache.status
        # Every waiting gang's reason, every cycle: merged and compared in C (`items()`: the
        # planner's lazy mapping hands over its dict), the changed ones looked at one by one.
        reasons: dict[str, Reason] = {}
        reasons.update(decisions.pending.items())
        reasons.update(decisions.rejected)
        reasons.update(refused or {})
        held = status.reasons.get
        for key in [key for key, reason in reasons.items() if held(key) != reason]:
            reason = reasons[key]
            if key in decisions.rejected and key not in status.rejected:
                log.warning("%s cannot be admitted: %s", key, reason.message)
            status.touch(key)
            if reason.code in _TOLD_ONCE and key not in self._known_missing:
                record = cache.jobs.get(key)
                if record is not None:
                    # Waits a user must act on get one Event (not one per cycle).
                    self._known_missing.add(key)
                    log.warning("%s waits: %s", key, reason.message)
                    self.writer.event(JobRef.of(record), reason.code, reason.message, "Warning")
        # Positions are recomputed at once when a gang starts or stops waiting (a new gang never
        # reads a stale, missing, position), else at most once a second and only if a gang's
        # visible state changed (`StatusView.version`): an idle cycle at 10,000 waiting gangs spent
        # most of its time on the event loop here, holding back the status service's answers.
        same_waiting = reasons.keys() == status.reasons.keys()
        status.show_reasons(reasons, decisions.rejected)
        if self._known_missing:
            self._known_missing &= reasons.keys()
        if same_waiting and (
            now - self._positions_at < 1.0 or status.version == self._positions_version
        ):
            return
        self._positions_at = now
        self._positions_version = status.version
        status.positions_moved(partial(queue_positions, cache))


class Rejections:
    """Marks Failed the gangs rejected for the grace; owns `failing` (writes in flight)."""

    def __init__(
        self,
        cache: Cache,
        writer: Writer,
        settings: ControllerSettings,
        metrics: ControllerMetrics,
        spawn: Spawn,
    ) -> None:
        self.cache, self.writer, self.settings = cache, writer, settings
        self.metrics, self.spawn = metrics, spawn
        self.failing: set[str] = set()
        """Gangs marked Failed, the write in flight."""
        self._rejected_since: dict[str, float] = {}

    def fail(self, rejected: Mapping[str, Reason], now: float) -> None:
        """Mark Failed (with the reason, and an Event) each gang rejected for the grace: it
        would otherwise wait forever. The grace restarts with the controller (rejection is
        the planner's answer over the current state, which the restarted controller reads)."""
        since = self._rejected_since
        for key in [k for k in since if k not in rejected]:
            del since[key]
        for key, reason in rejected.items():
            first = since.setdefault(key, now)
            if key in self.failing or not fails_rejected(
                first, now, self.settings.fail_rejected_after
            ):
                continue
            record = self.cache.jobs.get(key)
            if record is None or record.failed_state or record.admission is not None:
                continue
            message = rejected_message(reason)
            log.warning("%s failed: %s", key, message)
            self.failing.add(key)
            self.metrics.failed.inc()
            self.cache.assume_failed(record, message)
            self.spawn(self._send_fail(record, message))

    def fail_incomplete(self, now: float) -> None:
        """Mark Failed each gang whose gang object is still not whole past its time (a pod
        group whose pods did not all come: `JobRecord.incomplete_until`). The time is the
        object's own (its first pod's stamp + its timeout), so it survives a restart."""
        cache = self.cache
        for key in list(cache.jobs.incomplete):
            record = cache.jobs.get(key)
            if (
                record is None
                or key in self.failing
                or record.incomplete is None
                or record.incomplete_until is None
                or record.incomplete_until > now
                or record.failed_state
                or record.admission is not None
                or record.finished
            ):
                continue
            message = f"{INCOMPLETE}: {record.incomplete}; it did not come whole in time"
            log.warning("%s failed: %s", key, message)
            self.failing.add(key)
            self.metrics.failed.inc()
            cache.assume_failed(record, message)
            self.spawn(self._send_fail(record, message))

    async def _send_fail(self, record: JobRecord, message: str) -> None:
        ref = JobRef.of(record)
        try:
            outcome = await self.writer.call(self.writer.mark_failed, ref, message)
            if outcome == "ok":
                self.writer.event(ref, "Failed", message, "Warning")
            elif outcome == "refused":
                self.cache.forget_failure(record)
        finally:
            self.failing.discard(record.key)
