"""Publishing: each Queue's status (pending, admitted, usage, share, its Ready condition) to the
Queue object and the gauges, at a bounded rate and only when what they read moved."""

from __future__ import annotations

from admission.cache import Cache
from admission.metrics import ControllerMetrics
from admission.settings import ControllerSettings
from admission.status import gang_counts, queue_status
from admission.statusview import StateMark
from admission.writes import Spawn, Writer


class StatusPublisher:
    """Writes the Queues' status and sets the gauges; owns what it last wrote and when."""

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
        self._status_written: dict[str, tuple[float, dict[str, object]]] = {}
        self._published_at = 0.0
        self._published_mark: StateMark | None = None
        self._budget = 0.0
        """Queue status writes that may go out now (`status_writes_per_second`, saved up for
        at most two seconds)."""

    def queue_status(self) -> dict[str, dict[str, object]]:
        """Per queue: pending, admitted, usage, share, usageSummary (the Queue status body)."""
        return queue_status(self.cache)

    def publish(self, now: float) -> None:
        """Queue status (written at most every `status_interval` per queue, and at most
        `status_writes_per_second` in all, the queues written longest ago first) and the
        gauges, at most once a second, and only when their inputs moved (`Cache.mark`: a
        gang's visible state, the queues, the nodes' capacity); else the last figures stand (an
        idle cycle at 10,000 gangs spent a tenth of its time here). A status held back by the
        interval or the budget keeps the next publishes from being skipped until it is
        written."""
        if now - self._published_at < 1.0:
            return
        cache = self.cache
        if cache.same_mark(self._published_mark):
            return
        mark = cache.mark()
        rate = self.settings.status_writes_per_second
        self._budget = min(2 * rate, self._budget + rate * max(0.0, now - self._published_at))
        self._published_at = now
        deferred = False
        statuses = queue_status(cache)
        due: list[tuple[float, str]] = []  # (last written, queue): the oldest go first
        for name, status in statuses.items():
            self.metrics.pending.labels(name).set(float(status["pending"]))  # type: ignore[arg-type]
            self.metrics.admitted_gangs.labels(name).set(float(status["admitted"]))  # type: ignore[arg-type]
            self.metrics.share.labels(name).set(float(str(status["share"])))
            last = self._status_written.get(name)
            if last is not None and last[1] == status:
                continue
            if last is not None and now - last[0] < self.settings.status_interval:
                deferred = True  # for a later publish, which must not be skipped
                continue
            due.append((last[0] if last is not None else float("-inf"), name))
        due.sort()
        sent = min(len(due), int(self._budget))
        deferred = deferred or sent < len(due)
        self._budget -= sent
        for _, name in due[:sent]:
            status = statuses[name]
            self._status_written[name] = (now, status)
            self.spawn(self.writer.call(self.writer.patch_queue_status, name, status))
        nominal = {
            n: v.queue.nominal for n, v in cache.queues.items() if v.queue and v.queue.nominal
        }
        self.metrics.set_usage(cache.jobs.queue_usage(), cache.nodes.capacity(), nominal)
        self.metrics.set_gangs(gang_counts(cache, now))
        self._published_mark = None if deferred else mark
