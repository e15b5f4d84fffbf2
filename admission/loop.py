"""The admit loop: one coroutine that owns every decision, in numbered steps.

It wakes when the cache reports a change (coalescing bursts of events into one cycle) and at
least every `period` seconds, and never spins: a cycle that changes nothing waits for the next
change. Each step is one part's job, read top to bottom in `Controller.cycle`: the plan
(`PlanFeed`, `policies.Planner`), the suspensions (`Suspender`), the admissions and pod
placement (`Admitter`), the reasons (`WaitReasons`, `Rejections`), the detectors
(`ClogDetector`, `DeadlockDetector`), the queue status (`StatusPublisher`) and the wait-time
estimates (`EstimateRefresher`, in the background).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from functools import partial
from typing import Any

from admission.admitter import Admitter
from admission.cache import Cache
from admission.detectors import ClogDetector, DeadlockDetector
from admission.estimates import EstimateRefresher
from admission.guard import AdmissionGuard
from admission.metrics import ControllerMetrics
from admission.nativegangs import NativeGangs
from admission.planfeed import PlanFeed
from admission.publisher import StatusPublisher
from admission.reasons import Rejections, WaitReasons
from admission.settings import ControllerSettings
from admission.suspender import Suspender
from admission.writes import Writer
from policies import Admission, Decisions, Planner, Reason

log = logging.getLogger("muster.controller")


def _plan(planner: Planner, now: float) -> Decisions:
    """Plan at `now`, and build the waiting gangs' reasons (read by every cycle) here, in the
    plan's thread, rather than on the event loop that serves the status service."""
    decisions = planner.plan(now)
    decisions.pending.keys()
    return decisions


def _spawn(tasks: set[asyncio.Task[Any]], coro: Coroutine[Any, Any, object]) -> None:
    task: asyncio.Task[Any] = asyncio.get_running_loop().create_task(coro)
    tasks.add(task)
    task.add_done_callback(tasks.discard)


class Controller:
    """The admit loop and the parts each of its steps runs."""

    def __init__(
        self, cache: Cache, writer: Writer, settings: ControllerSettings, metrics: ControllerMetrics
    ) -> None:
        self.cache = cache
        self.writer = writer
        self.settings = settings
        self.metrics = metrics
        self.inflight: set[asyncio.Task[Any]] = set()
        """Writes in flight (every part spawns its writes here); awaited at stop."""
        spawn = partial(_spawn, self.inflight)
        self.cycles = 0
        self._told: tuple[str, int] | None = None
        """The refused victim and refusal the log last told of (`_held`)."""
        self.last_decisions: Decisions | None = None
        self.feed = PlanFeed(settings.policy, settings.topology, settings.packing)
        self.suspender = Suspender(cache, writer, metrics, spawn)
        self.native = NativeGangs(cache, writer, spawn)
        self.admitter = Admitter(cache, writer, settings, metrics, spawn, self.native)
        self.reasons = WaitReasons(cache, writer)
        self.rejections = Rejections(cache, writer, settings, metrics, spawn)
        self.guard = AdmissionGuard(cache, writer, metrics, self.suspender, spawn)
        self.clogs = ClogDetector(cache, settings, metrics, self.suspender)
        self.deadlocks = DeadlockDetector(cache, settings, metrics, self.suspender)
        self.publisher = StatusPublisher(cache, writer, settings, metrics, spawn)
        self.estimates = EstimateRefresher(
            cache, settings.policy, interval=settings.estimate_interval
        )
        # The first ask for an estimate after a quiet spell starts a cycle, which pokes them.
        cache.status.on_first_ask = cache.changed.set

    def queue_status(self) -> dict[str, dict[str, object]]:
        """Per queue: pending, admitted, usage, share, usageSummary (the Queue status body)."""
        return self.publisher.queue_status()

    async def run(self) -> None:
        """Cycle forever: on change (coalesced) and at least every `period` seconds; place
        gated pods as they arrive, between cycles."""
        placer = asyncio.get_running_loop().create_task(self._placer())
        try:
            await self._cycles()
        finally:
            placer.cancel()
            await asyncio.gather(placer, return_exceptions=True)
            await self.estimates.stop()

    async def _placer(self) -> None:
        """Place gated pods soon after they appear (a pod waits for this, not for a plan)."""
        arrived = self.cache.pods.gated_arrived
        while True:
            await arrived.wait()
            await asyncio.sleep(0.05)  # the Job controller creates a gang's pods in a burst
            arrived.clear()
            if self.cache.synced:
                try:
                    self.admitter.place_pods()
                except Exception:
                    log.exception("placing gated pods failed; retrying on the next cycle")

    async def _cycles(self) -> None:
        changed = self.cache.changed
        settings = self.settings
        took = 0.0  # how long the last cycle took
        ended = time.monotonic()
        while True:
            try:
                await asyncio.wait_for(changed.wait(), settings.period)
                gap = min(max(settings.coalesce, settings.pace * took), settings.period)
                await asyncio.sleep(max(settings.coalesce, gap - (time.monotonic() - ended)))
            except TimeoutError:
                pass
            changed.clear()
            if not self.cache.synced:
                continue
            started = time.monotonic()
            try:
                await self.cycle()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("admit cycle failed; retrying on the next change")
            ended = time.monotonic()
            took = ended - started

    def _held(self, admissions: list[Admission], now: float) -> dict[str, Reason]:
        """Why a plan's admissions wait when its preemption was not carried out: a victim's
        suspension the apiserver refused (for `muster explain`)."""
        held = self.suspender.held
        if held is None:
            return {}
        victim, hold = held
        self.metrics.preemptions_held.inc()
        if self._told != (victim, hold.refusals):  # once per refusal, not once per cycle
            self._told = (victim, hold.refusals)
            log.warning(
                "preempting %s: %s; admitting nothing of that plan", victim, hold.message(now)
            )
        reason = Reason(
            "PreemptionRefused",
            f"admission held: this cycle's plan also preempts {victim}, whose suspension the "
            f"API server {hold.message(now)}; nothing of the plan is admitted until it is",
        )
        return {admission.gang_id: reason for admission in admissions}

    async def cycle(self) -> None:
        """One admit cycle, step by step; each step's work is its part's."""
        now = time.time()
        self.cycles += 1
        # 1. Heads: the pending gangs (suspended, not admitted, not backing off) are gathered by
        #    the snapshot; each queue's order is the planner's business. Gangs being suspended,
        #    and native gangs whose last admission's pods are still there, sit this plan out.
        # 2. Sync: the planner's state follows the cache (what changed since the last cycle).
        #    Nothing below reads live state for the plan.
        started = time.perf_counter()
        cache = self.cache
        refused = cache.refusals()
        cache.reservations.release(now)
        busy = self.suspender.evicting
        if draining := self.native.draining():
            busy = busy | draining
        planner = self.feed.sync(cache, now, refused, busy)
        # 3. Plan: the incremental planner, synced from the cache's changes; in a thread so
        #    watches keep flowing while it runs (plan() leaves the planner's state alone, and
        #    only this coroutine syncs it).
        decisions = (
            await asyncio.to_thread(_plan, planner, now)
            if planner.pending
            else Decisions([], {}, {})
        )
        self.metrics.cycle.observe(time.perf_counter() - started)
        self.last_decisions = decisions
        # 4. Preempt: suspend the plan's victims and requeue them at their submission stamps,
        #    and wait for those writes: the preemptors among the admissions were placed on the
        #    victims' capacity. If a victim is still admitted afterwards (its write refused,
        #    or it changed under the plan), nothing of this plan is admitted: the next cycle
        #    plans again from what the cluster holds. Which admissions are preemptors the
        #    decisions do not say, and a cycle's delay costs less than an overcommitted quota.
        admissions = decisions.admitted
        held: dict[str, Reason] = {}
        if decisions.preempted and not await self.suspender.preempt(decisions.preempted):
            # No wake-up here: a victim refused for good would make a busy loop; the next
            # change or the period plans again, and a refused victim is written to again only
            # after its backoff (`Suspender.refused`).
            held = self._held(admissions, now)
            if self.suspender.held is None:
                log.warning("a preemption victim was not suspended; admitting nothing this cycle")
            admissions = []
        # 5. Admit: optimistic cache update now, one PATCH each, rolled back if refused.
        for admission in admissions:
            self.admitter.admit(admission, now)
        # 5b. Place the gated pods of admitted gangs on their planned nodes.
        self.admitter.place_pods()
        # 6. Requeue the rest: remember why each waits (status service, explain, logs); fail
        #    the gangs rejected for the grace, and those not whole in their time.
        self.reasons.record(decisions, now, {**refused, **held})
        self.rejections.fail(decisions.rejected, now)
        self.rejections.fail_incomplete(now)
        # 7. Detectors: gangs that no longer run as admitted (grown, suspended, gone from
        #    their queue), unsanctioned unsuspends, clogs, deadlocks.
        self.guard.detect(now)
        self.suspender.resuspend_unadmitted()
        self.suspender.restore_waiting(now)
        self.clogs.detect(now)
        self.deadlocks.detect(now)
        # 8. Queue status and gauges, at a bounded rate.
        self.publisher.publish(now)
        # 9. Wait-time estimates: refreshed in the background when due, never awaited here.
        if self.settings.estimate_interval > 0:
            self.estimates.poke(self.suspender.evicting)
