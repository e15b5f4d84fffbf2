"""Gang history: every gang the controller saw finish or fail, bounded, for `/v1/history`.

The cache feeds `GangHistory.observe` with each Job it applies; a gang enters the history once,
when its Job is first seen Complete or Failed (or muster marked it Failed, past its backoff
limit). Rows are `policies.history.HistoryRow`s in wall-clock seconds since the epoch.

State lives in the cluster: a restarted controller rebuilds the history from the Jobs still
there (a Job deleted, e.g. by its ttlSecondsAfterFinished, leaves the history at the next
restart). Seen live, a gang's start (its minimum of pods ready, from the Job's status) and end
(its last pod ended, else the Job Complete) are the times the cache saw them; rebuilt, they
come from the object: `status.startTime` (when the Job was unsuspended, a little before its
pods ran) and `status.completionTime` or the Complete/Failed condition's `lastTransitionTime`
(1-second resolution). Submission, admission, evictions and
preemptions are muster's annotations either way.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from admission.gangs import JobRecord
from policies.history import HistoryRow
from policies.kinds.job import status_time

DEFAULT_LIMIT = 100_000
"""Gangs the history keeps (the oldest entries go first)."""

LIVE_SLACK = 2.0
"""Seconds within which a finish the cache saw live is timed by the cache, not the object
(whose completion time has 1-second resolution). A later sighting (a standby replica's
resync) takes the object's time."""


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition  # type: ignore[no-any-return]
    return None


def history_row(
    record: JobRecord,
    body: Mapping[str, Any],
    now: float,
    *,
    live: bool,
    pods_ended: float | None = None,
) -> tuple[HistoryRow, float]:
    """The history row of a gang that has just ended, and when it ended (for `since`).

    `live`: the cache saw the Job before it ended, so `now` is (about) when it did;
    `pods_ended`: when the cache saw the gang's last pod end (its room free: the Job controller
    reports the Job Complete later, up to a second or so on a busy control plane)."""
    status = body.get("status") or {}
    gang = record.gang
    admission = record.admission
    failed = _condition(status, "Failed")
    completed = _condition(status, "Complete")
    ended_at: float | None = None
    if record.finished:
        stamped = status_time(status.get("completionTime")) or status_time(
            (completed or failed or {}).get("lastTransitionTime")
        )
        ended_at = now if live and (stamped is None or now - stamped < LIVE_SLACK) else stamped
        ended_at = now if ended_at is None else ended_at
        admitted_at = admission[0] if admission is not None else None
        if (
            live
            and pods_ended is not None
            and admitted_at is not None
            and admitted_at <= pods_ended <= ended_at
        ):
            ended_at = pods_ended
    started = record.started_at
    if started is None and admission is not None:
        # Rebuilt (or too quick to be seen ready): when the Job was unsuspended.
        start_time = status_time(status.get("startTime"))
        if start_time is not None and start_time >= admission[0] - 1.0:
            started = max(start_time, admission[0])
    if started is not None and ended_at is not None and started > ended_at:
        started = ended_at
    if failed is not None:
        state = "failed"
        reason = f"{failed.get('reason') or 'Failed'}: {failed.get('message') or ''}".rstrip(": ")
    elif record.failed_state and not record.finished and record.failed_reason:
        state, reason = "failed", record.failed_reason
    elif record.failed_state and not record.finished:
        state = "failed"
        reason = (
            f"BackoffLimit: evicted {record.evictions} times"
            + (f" (last: {record.evicted_reason})" if record.evicted_reason else "")
            + "; muster.dev/state Failed"
        )
    else:
        state, reason = "finished", ""
    row = HistoryRow(
        gang=record.key,
        queue=record.queue,
        kind=record.kind,
        size=gang.size,
        min_size=gang.min,
        submitted=gang.submitted.time,
        admitted=admission[0] if admission is not None else None,
        started=started if record.finished else None,
        finished=ended_at if state == "finished" else None,
        state=state,
        requests=gang.pod_requests,
        evictions=record.evictions,
        preemptions=gang.preemptions,
        clogs=None,
        admitted_size=admission[1] if admission is not None else None,
        reason=reason,
        one_pod_per_node=gang.one_pod_per_node,
        priority=gang.priority,
        runtime=(ended_at - started) if state == "failed" and started and ended_at else None,
    )
    if ended_at is None:
        # Failed by muster while suspended: now if seen live, else its last known time.
        ended_at = now if live else max(record.requeue_at, gang.submitted.time)
    return row, ended_at


class GangHistory:
    """The last `limit` gangs that ended, by Job uid (each enters once)."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        if limit < 1:
            raise ValueError(f"history limit must be at least 1, got {limit}")
        self.limit = limit
        self._rows: OrderedDict[str, tuple[float, HistoryRow]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._rows)

    def observe(
        self,
        old: JobRecord | None,
        new: JobRecord,
        body: Mapping[str, Any],
        now: float,
        pods_ended: float | None = None,
    ) -> None:
        """Record `new` if its gang has ended and was not recorded yet (`pods_ended`: when its
        last pod ended, as the cache saw it)."""
        if not (new.finished or new.failed_state) or new.uid in self._rows:
            return
        if not new.uid:
            return
        live = old is not None and old.uid == new.uid and not (old.finished or old.failed_state)
        row, ended = history_row(new, body, now, live=live, pods_ended=pods_ended)
        self._rows[new.uid] = (ended, row)
        while len(self._rows) > self.limit:
            self._rows.popitem(last=False)

    def rows(self, since: float | None = None) -> list[HistoryRow]:
        """Rows of gangs that ended at or after `since` (all if None), by submission."""
        picked = [row for ended, row in self._rows.values() if since is None or ended >= since]
        picked.sort(key=lambda r: (r.submitted, r.gang))
        return picked
