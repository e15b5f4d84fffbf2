"""Wait-time estimates in the controller: computed in the background, served from the cache.

`EstimateRefresher.poke` is called after each admit cycle. At most every `interval` seconds
(and never while one is running) it takes a snapshot of the cache, with the gangs backing off
and a copy of the learned runtimes, and runs `policies.estimate` in a thread: the admit loop
never waits for it, and the status service answers every gang from `StatusView.estimates`, a dict
lookup (issue #16: an answer costs the same with 10k pending gangs). The interval stretches to
`pace` times the last run's duration, so a long fast-forward never takes more than its share of
the process. When nothing the estimates read has changed, they are refreshed only every
`UNCHANGED_EVERY` seconds, and while nobody asked for one in the last
`admission.statusview.DEMAND_WINDOW` seconds, not at all: the first ask is answered "not
estimated yet" and starts a refresh at once. Estimates do not wake long-polls: a gang's version
changes with its state, not with time passing.

`estimate_body` is the JSON the status service (and `muster status`/`explain` reading the API)
give for one gang.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable, Collection
from typing import Any

from admission.cache import Cache
from admission.statusview import StateMark
from policies.estimate import estimate
from policies.kinds.reading import format_time

log = logging.getLogger("muster.estimates")

SWITCH_INTERVAL = 0.001
"""Seconds the refresh thread may hold the interpreter while the event loop waits for it."""

UNCHANGED_EVERY = 60.0
"""Seconds between two refreshes when no gang's visible state (`StatusView.version`), no queue and
no node's capacity changed since the last one: the estimates would be the same but for time
passing (a running gang outliving its expected end). At 10,000 waiting gangs a refresh costs a
few seconds of CPU, and an idle controller refreshing every 5 s spent a quarter of a core on
it, holding the interpreter from the status service's answers."""


def refresh_now(cache: Cache, now: float, policy: str, only: Collection[str] | None = None) -> None:
    """Compute the waiting gangs' estimates now (of ``only``, if given: cheaper, the
    fast-forwards end once those are placed), in this thread (`muster status` and `explain`
    reading the API; benches; tests)."""
    refused = cache.namespace_refusals()
    snapshot = cache.snapshot(now, refused)
    later = cache.jobs.backing_off(now)
    estimates = (
        estimate(snapshot, cache.runtimes, policy, later=later, only=only)
        if snapshot.pending or later
        else {}
    )
    cache.status.show_estimates(estimates, now)


class EstimateRefresher:
    """Keeps `StatusView.estimates` fresh, off the admit loop's path."""

    def __init__(
        self,
        cache: Cache,
        policy: str,
        *,
        interval: float = 5.0,
        pace: float = 4.0,
        unchanged_every: float = UNCHANGED_EVERY,
        clock: Callable[[], float] = time.time,
        on_demand: bool = True,
    ) -> None:
        self.cache = cache
        self.on_demand = on_demand
        """Refresh only while readers ask for estimates (`StatusView.estimates_wanted`)."""
        self.clock = clock
        self.policy = policy
        self.interval = interval
        self.pace = pace
        self.unchanged_every = unchanged_every
        self._mark: StateMark | None = None
        self.runs = 0
        self.took = 0.0
        self._task: asyncio.Task[None] | None = None
        self._last = 0.0

    def poke(self, busy: Collection[str] = ()) -> None:
        """Start a refresh if one is due and none runs (call from the event loop)."""
        if self._task is not None and not self._task.done():
            return
        started = time.monotonic()
        if started - self._last < max(self.interval, self.pace * self.took):
            return
        cache = self.cache
        if self.on_demand and not cache.status.estimates_wanted(started):
            return  # nobody reads them: none computed (the first ask starts one)
        if cache.same_mark(self._mark) and started - self._last < self.unchanged_every:
            return
        self._last = started
        self._mark = cache.mark()
        now = self.clock()
        refused = cache.namespace_refusals()
        snapshot = cache.snapshot(now, refused, busy)
        later = cache.jobs.backing_off(now)
        if not snapshot.pending and not later:
            cache.status.show_estimates({}, now)
            return
        history = cache.runtimes.copy()
        # While the refresh thread runs, the event loop (status answers, watches) waits for the
        # interpreter at most this long at each turn instead of the default 5 ms.
        switch = sys.getswitchinterval()
        sys.setswitchinterval(min(switch, SWITCH_INTERVAL))
        task = asyncio.get_running_loop().create_task(
            asyncio.to_thread(estimate, snapshot, history, self.policy, later=later)
        )

        async def store() -> None:
            try:
                cache.status.show_estimates(await task, now)
                self.runs += 1
            except Exception:
                log.exception("wait-time estimates failed; trying again later")
            finally:
                sys.setswitchinterval(switch)
                self.took = time.monotonic() - started

        self._task = asyncio.get_running_loop().create_task(store())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def estimate_body(cache: Cache, key: str, now: float) -> dict[str, Any]:
    """The `estimate` field of a waiting gang's status: times as RFC3339 and seconds from
    ``now``; or `unknown` saying why."""
    status = cache.status
    status.ask_estimate()
    computed = status.estimated_at
    found = status.estimates.get(key)
    reason = status.reasons.get(key)
    if found is None and reason is not None and reason.code == "NamespaceNotAllowed":
        return {"unknown": "not planned while its queue does not take gangs from its namespace"}
    if found is None or computed is None:
        return {
            "unknown": "not estimated yet: the controller estimates waiting gangs every few "
            "seconds; ask again"
        }
    body: dict[str, Any] = {"computedAt": format_time(computed)}
    if found.start is None:
        body["unknown"] = found.unknown
        if found.waits_for:
            body["waitsFor"] = list(found.waits_for[:10])
        return body
    earliest = found.earliest if found.earliest is not None else found.start
    body.update(
        {
            "expectedStart": format_time(found.start),
            "startsInSeconds": round(max(0.0, found.start - now), 1),
            "earliestStart": format_time(earliest),
            "earliestInSeconds": round(max(0.0, earliest - now), 1),
            "latestStart": format_time(found.latest) if found.latest is not None else None,
            "latestInSeconds": (
                round(max(0.0, found.latest - now), 1) if found.latest is not None else None
            ),
        }
    )
    return body
