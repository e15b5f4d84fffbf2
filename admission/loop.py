"""The admit loop and the clog and deadlock detectors.

One coroutine owns every decision. It wakes when the cache reports a change (coalescing
bursts of events into one cycle) and at least every `period` seconds, and never spins: a cycle
that changes nothing waits for the next change.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from admission.cache import Cache, StateMark, Suspension
from admission.deadlock import PartialGang, gangs_to_evict, wait_for_graph
from admission.estimates import EstimateRefresher
from admission.gangs import JobRecord
from admission.kubeapi import ApiError
from admission.metrics import ControllerMetrics
from admission.pinning import HOSTNAME, Original, elastic_fields
from admission.planfeed import PlanFeed
from admission.status import queue_positions, queue_status
from admission.writes import JobRef, Shape, Writer
from policies import Admission, Decisions, Planner, Reason
from policies.lifecycle import (
    REJECTED_GRACE,
    EvictReason,
    Progress,
    check_clog,
    clog_timeout,
    evict,
    fails_rejected,
    rejected_message,
)
from policies.resources import Resources

log = logging.getLogger("muster.controller")

_JITTER = random.Random()

PLACE_RETRY = 30.0
"""Seconds after which a gated pod the watch still shows gated is placed again."""

CLOG_CHECK_EVERY = 1.0
"""Least seconds between two passes of the clog detector. Under a burst a cycle comes every
0.2-0.6 s, and each pass looks again at every admitted gang whose pods have not all started
(the largest piece of a cycle's CPU in a burst); clog timeouts are minutes, and a pass a
second times them as well (an eviction comes at most this much later, a gang's progress is
noted at most this much later)."""

_TOLD_ONCE = frozenset({"QueueNotFound", "NamespaceNotAllowed"})
"""Reason codes that get a Warning Event on the Job the first time a gang waits for them."""


@dataclass(frozen=True)
class ControllerSettings:
    """How the controller runs (flags of `muster run`)."""

    policy: str = "drf"
    """Admission policy name (policies.get_policy)."""
    period: float = 2.0
    """Seconds between cycles when nothing changes."""
    coalesce: float = 0.2
    """Seconds to wait after a change so a burst of events makes one cycle (also the least
    time between cycles)."""
    pace: float = 2.0
    """Between two cycles, wait at least `pace` times as long as the last cycle took (at most
    `period`): a cycle walks every gang, so under a burst the loop takes at most 1/(1+pace)
    of the process and leaves the rest to the watches that feed it."""
    deadlock_grace: float = 10.0
    """Seconds a gang must be partially placed before the deadlock detector looks at it."""
    status_interval: float = 2.0
    """Least seconds between two writes of one Queue's status."""
    admit_events: bool = True
    """Post an Event for every admission (evictions and failures always get one)."""
    write_concurrency: int = 32
    estimate_interval: float = 5.0
    """Least seconds between two refreshes of the wait-time estimates (in the background;
    0: never estimate)."""
    pin: bool = True
    """Pin each admitted gang's pod template to the nodes the planner chose (off: the
    scheduler may place the pods anywhere they fit, and the plan may not be what runs)."""
    history_limit: int = 100_000
    """Gangs the history (/v1/history) keeps; the oldest go first (admission/history.py)."""
    clog_progress: bool = True
    """Time a clog from when the Job controller started the gang and from its pods' last
    progress (created, bound, ready), not from its admission (policies.lifecycle.check_clog,
    `started` and `advanced`): a gang a busy control plane is still starting is not evicted as
    clogged. Off: from the admission, as Kueue's waitForPodsReady."""
    fail_rejected_after: float = REJECTED_GRACE
    """Seconds a gang must stay rejected (NeverFits, SizeRatioRejected) before it is marked
    Failed (policies.lifecycle.fails_rejected)."""


def _job(record: JobRecord) -> JobRef:
    return JobRef(record.namespace, record.name, record.uid)


def _plan(planner: Planner, now: float) -> Decisions:
    """Plan at `now`, and build the waiting gangs' reasons (read by every cycle) here, in the
    plan's thread, rather than on the event loop that serves the status service."""
    decisions = planner.plan(now)
    decisions.pending.keys()
    return decisions


class Controller:
    def __init__(
        self, cache: Cache, writer: Writer, settings: ControllerSettings, metrics: ControllerMetrics
    ) -> None:
        self.cache = cache
        self.writer = writer
        self.settings = settings
        self.metrics = metrics
        self.inflight: set[asyncio.Task[Any]] = set()
        self.evicting: set[str] = set()
        self.failing: set[str] = set()  # marked Failed, the write in flight
        self._rejected_since: dict[str, float] = {}
        # gated pod uid -> (hostname it was sent to, when), until the watch shows it ungated
        self.placing: dict[str, tuple[str, float]] = {}
        self.cycles = 0
        self.last_decisions: Decisions | None = None
        self.feed = PlanFeed(settings.policy)
        self._status_written: dict[str, tuple[float, dict[str, object]]] = {}
        self._known_missing: set[str] = set()
        self._last_partial: tuple[object, ...] = ()
        self._positions_at = 0.0
        self._positions_version = -1
        self._published_at = 0.0
        self._published_mark: StateMark | None = None
        self._clogs_at = float("-inf")
        self.estimates = EstimateRefresher(
            cache, settings.policy, interval=settings.estimate_interval
        )

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
        arrived = self.cache.gated_arrived
        while True:
            await arrived.wait()
            await asyncio.sleep(0.05)  # the Job controller creates a gang's pods in a burst
            arrived.clear()
            if self.cache.synced:
                try:
                    self._place_pods()
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

    async def cycle(self) -> None:
        now = time.time()
        self.cycles += 1
        # 1. Heads: the pending gangs (suspended, not admitted, not backing off) are gathered by
        #    the snapshot; each queue's order is the planner's business.
        # 2. Sync: the planner's state follows the cache (what changed since the last cycle).
        #    Nothing below reads live state for the plan.
        started = time.perf_counter()
        refused = self.cache.refusals()
        self.cache.release_reservations(now)
        planner = self.feed.sync(self.cache, now, refused, self.evicting)
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
        if decisions.preempted and not await self._preempt(decisions.preempted):
            # No wake-up here: a victim refused for good would make a busy loop; the next
            # change or the period plans again.
            log.warning("a preemption victim was not suspended; admitting nothing this cycle")
            admissions = []
        # 5. Admit: optimistic cache update now, one PATCH each, rolled back if refused.
        for admission in admissions:
            self._admit(admission, now)
        # 5b. Place the gated pods of admitted gangs on their planned nodes.
        self._place_pods()
        # 6. Requeue the rest: remember why each waits (status service, explain, logs).
        self._record_reasons(decisions, now, refused)
        self._fail_rejected(decisions.rejected, now)
        # 7. Detectors: unsanctioned unsuspends, clogs, deadlocks.
        self._resuspend_unadmitted()
        self._detect_clogs(now)
        self._detect_deadlocks(now)
        # 8. Queue status and gauges, at a bounded rate.
        self._publish(now)
        # 9. Wait-time estimates: refreshed in the background when due, never awaited here.
        if self.settings.estimate_interval > 0:
            self.estimates.poke(self.evicting)

    # -- preempt -------------------------------------------------------------------------

    async def _preempt(self, victims: Mapping[str, Reason]) -> bool:
        """Suspend each victim (its pods go), all at once; True if every victim's capacity is
        free now (suspended here, finished, or gone)."""
        chosen: list[tuple[JobRecord, Reason]] = []
        for key, reason in victims.items():
            record = self.cache.jobs.get(key)
            if record is None or record.finished:
                continue  # its capacity is free already
            if record.admission is None or key in self.evicting:
                # Not what the plan saw (a watch event came in while it ran): touch nothing,
                # plan again.
                return False
            chosen.append((record, reason))
        outcomes = await asyncio.gather(*(self._send_preempt(r, why) for r, why in chosen))
        return all(outcomes)

    async def _send_preempt(self, record: JobRecord, reason: Reason) -> bool:
        """Suspend one victim and record the preemption on it; True if its capacity is free."""
        ref = _job(record)
        preemptions = record.gang.preemptions + 1
        self.evicting.add(record.key)
        try:
            outcome = await self.writer.call(
                lambda: self.writer.preempt(ref, preemptions=preemptions, message=reason.message)
            )
        finally:
            self.evicting.discard(record.key)
        if outcome == "gone":
            return True
        if outcome != "ok":
            log.warning("preempt %s: not suspended (%s)", record.key, outcome)
            if outcome == "conflict":
                # The Job is not what the plan saw: let the cache hold the truth. If this read
                # fails too, the watch brings it.
                try:
                    body = await self.writer.call(
                        self.writer.get_job, record.namespace, record.name
                    )
                except (ApiError, OSError) as exc:
                    log.info("preempt %s: re-reading the Job failed: %s", record.key, exc)
                    body = None
                if body is not None:
                    self.cache.apply_job("MODIFIED", body)
            return False
        current = self.cache.jobs.get(record.key)
        if current is not None and current.uid == record.uid and current.suspended is False:
            # The watch has not brought our write yet: show it now (the plan's capacity is
            # free for the next cycle, and the status service says why the gang waits).
            self.cache.assume_suspended(current, preemption=(preemptions, reason.message))
        else:
            self.cache.drop_reservation(record.key)
        self.metrics.preemptions.labels(record.queue).inc()
        log.info("%s %s", record.key, reason.message)
        self.writer.event(ref, "Preempted", reason.message, "Normal")
        return True

    # -- admit ---------------------------------------------------------------------------

    def _admit(self, admission: Admission, now: float) -> None:
        record = self.cache.jobs.get(admission.gang_id)
        if record is None or record.admission is not None:
            return
        self.cache.assume_admitted(record, now, admission.size, admission.placement)
        task = asyncio.get_running_loop().create_task(self._send_admit(record, admission, now))
        self.inflight.add(task)
        task.add_done_callback(self.inflight.discard)

    def _shape(self, record: JobRecord, admission: Admission) -> Shape:
        """What the admission sets besides unsuspending: the pin to the planned nodes (unless
        pinning is off) and, for an elastic gang admitted smaller, its size."""
        original = record.original or Original(record.gang.size, record.gang.size, None)
        placement = dict(admission.placement) if self.settings.pin else {}
        nodes = self.cache.nodes
        return Shape(
            original=original,
            placement=placement,
            fields=elastic_fields(original, record.indexed, admission.size),
            started=record.started,
            hostnames={
                name: nodes[name].labels.get(HOSTNAME) if name in nodes else name
                for name in placement
            },
            gate=self._needs_gate(record, placement),
        )

    def _needs_gate(self, record: JobRecord, placement: Mapping[str, int]) -> bool:
        """Whether the gang's pods must wait at the gate for muster to name each one's node.

        Not when the node affinity alone is exact: the plan names one node (a one-pod gang,
        or a gang packed on one node), or on every planned node the gang can fit no
        more pods than planned there (the gang fills what the node had free, one pod per node
        for a one-pod-per-node gang, a node that holds one pod): then the scheduler, held to
        those nodes, can only place them as planned, and the gang costs no pod writes. Free
        room is what bound pods leave (pods planned but not bound yet are not subtracted: that
        errs towards the gate)."""
        if len(placement) <= 1:
            return False  # one planned node (or none): every pod of the gang can only go there
        gang = record.gang
        request = gang.pod_requests
        cache = self.cache
        for name, planned in placement.items():
            node = cache.nodes.get(name)
            if node is None:
                return True
            used = cache.node_all.get(name) or Resources()
            room: int | None = 1 if gang.one_pod_per_node else None
            for resource in request:
                amount = request[resource]
                if amount > 0:
                    fits = max(0, (node.allocatable[resource] - used[resource]) // amount)
                    room = fits if room is None else min(room, fits)
            if room is None or room > planned:
                return True
        return False

    async def _send_admit(self, record: JobRecord, admission: Admission, now: float) -> None:
        ref = _job(record)
        shape = self._shape(record, admission)
        outcome = await self.writer.call(
            lambda: self.writer.admit(ref, now, admission.size, shape=shape)
        )
        if outcome == "conflict":
            # Someone changed the Job under us (admitted elsewhere, or not suspended). Read it
            # and let the cache hold the truth; a still-pending gang is planned again.
            body = await self.writer.call(self.writer.get_job, record.namespace, record.name)
            self.cache.forget_admission(record)
            if body is not None:
                self.cache.apply_job("MODIFIED", body)
            log.info("admit %s: the Job changed under us; re-reading it", record.key)
            return
        if outcome != "ok":
            self.cache.forget_admission(record)
            log.warning("admit %s rolled back (%s)", record.key, outcome)
            return
        self.cache.confirm_admission(record, now, admission.size)
        self.metrics.admitted.labels(admission.queue).inc()
        self.metrics.wait.observe(max(0.0, now - record.gang.submitted.time))
        where = f" on {len(admission.placement)} nodes" if admission.placement else ""
        message = (
            f"admitted {admission.size} of {record.gang.size} pods from queue "
            f"{admission.queue}{where}"
        )
        log.info("%s %s", record.key, message)
        if self.settings.admit_events:
            self.writer.event(ref, "Admitted", message, "Normal")

    def _place_pods(self) -> None:
        """Give each gated pod of an admitted gang a planned node with room left in the plan
        (planned pods minus the gang's live pods already sent there), and ungate it.

        The plan is the Job's muster.dev/placement (or, before the watch brings the admitted
        Job, this controller's reservation); which pods went where is read from the pods'
        nodeSelectors, so a restarted controller places the rest of a half-placed gang the
        same way. A pod is sent once (`placing`) until the watch shows it ungated, or again
        after PLACE_RETRY seconds if it does not."""
        cache = self.cache
        now = time.monotonic()
        for uid, (_, sent_at) in list(self.placing.items()):
            if uid not in cache.gated or now - sent_at > PLACE_RETRY:
                del self.placing[uid]
        waiting: dict[str, list[tuple[str, str]]] = {}
        for uid, pod in cache.gated.items():
            if uid not in self.placing and pod.gang is not None:
                waiting.setdefault(pod.gang, []).append((pod.ref, uid))
        if not waiting:
            return
        in_flight: dict[str, Counter[str]] = {}
        for uid, (sent_to, _) in self.placing.items():
            placed = cache.gated.get(uid)
            if placed is not None and placed.gang is not None and sent_to:
                in_flight.setdefault(placed.gang, Counter())[sent_to] += 1
        owners = {
            f"{r.namespace}/{r.gang_label}": r
            for r in cache.jobs.values()
            if r.admission is not None and not r.finished
        }
        nodes = cache.nodes
        for gang, pods in waiting.items():
            record = owners.get(gang)
            if record is None:
                continue  # not admitted (or suspended again): the Job controller deletes them
            plan = record.pinned or cache.reservations.get(record.key) or {}
            room = Counter[str]()
            for name, count in plan.items():
                node = nodes.get(name)
                # "": a node without a hostname label; its pods are only ungated.
                room[(node.labels.get(HOSTNAME) or "") if node is not None else name] += count
            room.subtract(cache.gang_sent.get(gang) or {})
            room.subtract(in_flight.get(gang) or {})
            for ref, uid in sorted(pods):
                free = [h for h, left in room.items() if left > 0]
                host = max(free, key=lambda h: (room[h], h)) if free else None
                if host is not None:
                    room[host] -= 1
                else:
                    log.warning("%s: no planned node left for pod %s; ungated unpinned", gang, ref)
                self.placing[uid] = (host or "", now)
                self._spawn(self._send_place(ref, host or None))

    async def _send_place(self, ref: str, host: str | None) -> None:
        outcome = await self.writer.call_place(ref, host)
        if outcome != "ok" and outcome != "gone":
            log.warning("place pod %s on %s: %s", ref, host, outcome)

    def _record_reasons(
        self, decisions: Decisions, now: float, refused: Mapping[str, Reason] | None = None
    ) -> None:
        cache = self.cache
        # Every waiting gang's reason, every cycle: merged and compared in C (`items()`: the
        # planner's lazy mapping hands over its dict), the changed ones looked at one by one.
        reasons: dict[str, Reason] = {}
        reasons.update(decisions.pending.items())
        reasons.update(decisions.rejected)
        reasons.update(refused or {})
        held = cache.reasons.get
        for key in [key for key, reason in reasons.items() if held(key) != reason]:
            reason = reasons[key]
            if key in decisions.rejected and key not in cache.rejected:
                log.warning("%s cannot be admitted: %s", key, reason.message)
            cache.touch(key)
            if reason.code in _TOLD_ONCE and key not in self._known_missing:
                record = cache.jobs.get(key)
                if record is not None:
                    # Waits a user must act on get one Event (not one per cycle).
                    self._known_missing.add(key)
                    log.warning("%s waits: %s", key, reason.message)
                    self.writer.event(_job(record), reason.code, reason.message, "Warning")
        # Positions are recomputed at once when a gang starts or stops waiting (a new gang never
        # reads a stale, missing, position), else at most once a second and only if a gang's
        # visible state changed (`Cache.version`): an idle cycle at 10,000 waiting gangs spent
        # most of its time on the event loop here, holding back the status service's answers.
        same_waiting = reasons.keys() == cache.reasons.keys()
        cache.reasons = reasons
        cache.rejected = dict(decisions.rejected)
        if self._known_missing:
            self._known_missing &= reasons.keys()
        if same_waiting and (
            now - self._positions_at < 1.0 or cache.version == self._positions_version
        ):
            return
        self._positions_at = now
        self._positions_version = cache.version
        cache.positions = queue_positions(cache)

    def _fail_rejected(self, rejected: Mapping[str, Reason], now: float) -> None:
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
            self._spawn(self._send_fail(record, message))

    async def _send_fail(self, record: JobRecord, message: str) -> None:
        ref = _job(record)
        try:
            outcome = await self.writer.call(self.writer.mark_failed, ref, message)
            if outcome == "ok":
                self.writer.event(ref, "Failed", message, "Warning")
            elif outcome == "refused":
                self.cache.forget_failure(record)
        finally:
            self.failing.discard(record.key)

    # -- detectors -----------------------------------------------------------------------

    def _resuspend_unadmitted(self) -> None:
        for record in list(self.cache.jobs.values()):
            if (
                record.suspended
                or record.finished
                or record.admission is not None
                or record.key in self.evicting
            ):
                continue
            self.evicting.add(record.key)
            message = (
                "unsuspended without admission by muster; suspended again. Jobs labelled "
                "muster.dev/queue start when muster admits them (see `muster explain`)"
            )
            log.warning("%s %s", record.key, message)
            self.metrics.resuspended.inc()
            self.cache.assume_resuspended(record)
            self._spawn(self._send_suspend(record, message))

    async def _send_suspend(self, record: JobRecord, message: str) -> None:
        try:
            outcome = await self.writer.call(self.writer.suspend, _job(record))
            if outcome == "ok":
                self.writer.event(_job(record), "NotAdmitted", message, "Warning")
        finally:
            self.evicting.discard(record.key)

    def _clog_timeout(self, record: JobRecord) -> float:
        tree = self.cache.tree
        queue = tree[record.queue] if tree is not None and record.queue in tree else None
        return clog_timeout(record.clog_timeout, queue)

    def _clog_clock(self, record: JobRecord) -> dict[str, Any]:
        """`check_clog`'s view of a gang's start (none with `clog_progress` off): whether it
        waits on the control plane (`Cache.gang_waits`) and how far its pods have come."""
        if not self.settings.clog_progress:
            return {}
        cache = self.cache
        return {"advanced": cache.start_measure(record), "waiting": cache.gang_waits(record)}

    def _detect_clogs(self, now: float) -> None:
        if 0.0 <= now - self._clogs_at < CLOG_CHECK_EVERY:
            return
        self._clogs_at = now
        cache = self.cache
        for record in list(cache.jobs.values()):
            if record.admitted_at is None or record.finished or record.key in self.evicting:
                continue
            ready = cache.ready_pods(record) + cache.succeeded_pods(record)
            if record.reached_min and record.below_min_since is None and ready >= record.gang.min:
                # Running at its minimum or above (most admitted gangs): `check_clog` would
                # change only the clock's measure, which no one reads once the minimum was
                # reached (a fall below it is timed from then: `below_min_since`).
                continue
            check = check_clog(
                Progress(
                    record.reached_min,
                    record.below_min_since,
                    record.advanced,
                    record.advanced_at,
                ),
                admitted_at=record.admitted_at,
                ready=ready,
                minimum=record.gang.min,
                timeout=self._clog_timeout(record),
                now=now,
                **self._clog_clock(record),
            )
            self.cache.note_progress(record, check.progress)
            if check.evict is not None:
                self.metrics.clogs.inc()
                self._evict(record, check.evict, f"{check.why}; {self._pods_seen(record)}", now)

    def _pods_seen(self, record: JobRecord) -> str:
        """What the cache holds of an evicted gang's pods, for the eviction's message."""
        cache = self.cache
        gang = f"{record.namespace}/{record.gang_label}"
        bound = sum((cache.gang_bound.get(gang) or {}).values())
        return (
            f"pods: {bound + cache.gang_unbound.get(gang, 0)} live, {bound} bound, "
            f"{cache.gang_ready.get(gang, 0)} ready, {cache.gang_waiting.get(gang, 0)} waiting on "
            f"the control plane; Job status: {record.ready} ready, {record.succeeded} succeeded"
        )

    def _detect_deadlocks(self, now: float) -> None:
        cache = self.cache
        partial: list[PartialGang] = []
        for record in cache.jobs.values():
            adm = record.admitted_at
            if adm is None or record.finished or record.reached_min or record.key in self.evicting:
                continue
            if now - adm < self.settings.deadlock_grace:
                continue
            gang_key = f"{record.namespace}/{record.gang_label}"
            bound = cache.gang_bound.get(gang_key)
            waiting = cache.gang_unbound.get(gang_key, 0)
            if bound and waiting:
                partial.append(PartialGang(record.gang, waiting, dict(bound)))
        if len(partial) < 2:
            return
        nodes = [cache.nodes[n] for n in cache.nodes]
        graph = wait_for_graph(nodes, cache.node_all, partial)
        shape = (tuple(sorted(p.gang.id for p in partial)), tuple(sorted(graph.edges)))
        if shape != self._last_partial:
            self._last_partial = shape
            log.info("partial gangs %s; waits %s", list(shape[0]), list(shape[1]))
        victims = gangs_to_evict(graph, {p.gang.id: p.gang for p in partial})
        for victim in victims:
            record = cache.jobs[victim]
            others = sorted(n for n in graph.successors(victim)) + sorted(
                n for n in graph.predecessors(victim)
            )
            self.metrics.deadlocks.inc()
            self._evict(
                record,
                "Deadlock",
                f"deadlock with {', '.join(sorted(set(others)))}: each holds nodes the other "
                "needs; evicting the youngest gang of the cycle",
                now,
            )

    def _evict(self, record: JobRecord, reason: EvictReason, why: str, now: float) -> None:
        tree = self.cache.tree
        backoff = tree[record.queue].backoff if tree is not None and record.queue in tree else None
        eviction = evict(record.evictions, backoff, jitter=_JITTER)
        evictions, failed = eviction.evictions, eviction.failed
        requeue_at = now + eviction.delay
        message = eviction.message(reason, why)
        self.evicting.add(record.key)
        self.metrics.evictions.labels(reason).inc()
        if failed:
            self.metrics.failed.inc()
        log.warning("%s %s", record.key, message)
        # Optimistic: quota and nodes are free for the next cycle at once.
        old = self.cache.assume_suspended(
            record, evictions=evictions, requeue_at=requeue_at, failed=failed
        )
        self._spawn(self._send_evict(record, reason, message, evictions, requeue_at, failed, old))

    async def _send_evict(
        self,
        record: JobRecord,
        reason: EvictReason,
        message: str,
        evictions: int,
        requeue_at: float,
        failed: bool,
        old: Suspension,
    ) -> None:
        ref = _job(record)
        try:
            outcome = await self.writer.call(
                lambda: self.writer.evict(
                    ref,
                    evictions=evictions,
                    requeue_at=requeue_at,
                    reason=reason,
                    failed=failed,
                )
            )
            if outcome == "ok":
                self.writer.event(ref, "Failed" if failed else "Evicted", message, "Warning")
            elif outcome == "refused":
                self.cache.forget_suspension(record, old)
        finally:
            self.evicting.discard(record.key)

    def _spawn(self, coro: Coroutine[Any, Any, object]) -> None:
        task: asyncio.Task[Any] = asyncio.get_running_loop().create_task(coro)
        self.inflight.add(task)
        task.add_done_callback(self.inflight.discard)

    # -- status --------------------------------------------------------------------------

    def queue_status(self) -> dict[str, dict[str, object]]:
        """Per queue: pending, admitted, usage, share, usageSummary (the Queue status body)."""
        return queue_status(self.cache)

    def _publish(self, now: float) -> None:
        """Queue status (written at most every `status_interval` per queue) and the gauges, at
        most once a second, and only when their inputs moved (`Cache.mark`: a gang's visible
        state, the queues, the nodes' capacity); else the last figures stand (an idle cycle
        at 10,000 gangs spent a tenth of its time here). A status held back by the interval
        keeps the next publishes from being skipped until it is written."""
        if now - self._published_at < 1.0:
            return
        cache = self.cache
        if cache.same_mark(self._published_mark):
            return
        mark = cache.mark()
        self._published_at = now
        deferred = False
        statuses = self.queue_status()
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
            self._status_written[name] = (now, status)
            self._spawn(self.writer.call(self.writer.patch_queue_status, name, status))
        self.metrics.set_usage(cache.queue_usage(), cache.capacity())
        self._published_mark = None if deferred else mark
