"""Wait-time estimates: when each pending gang is expected to be admitted, with a range.

A fast-forward of the planner over the current state (issue #16): running gangs end at their
runtime estimate, pending gangs are admitted as the policy admits them, repeatedly, from now
until every pending gang is placed or nothing known is left to end.

Runtime of a gang, from its admission to its end (`RuntimeHistory.runtime`):

- its deadline (a Job's ``activeDeadlineSeconds``, a MiniCluster's ``deadlineSeconds``;
  ``Gang.runtime_limit``) is an upper bound: Kubernetes ends it then;
- the runtimes of finished gangs of the same queue and size class (sizes 1, 2-3, 4-7, 8-15, ...;
  the last `SAMPLES` of each class) give the expected runtime (their median) and a spread
  (their 10th and 90th percentiles);
- with neither, the runtime is unknown: the gang never ends in the fast-forward, and a gang
  that would start sooner if it ended at once (a fourth, counterfactual fast-forward, run only
  when there is such a gang) gets no estimate, naming it. No number is invented.

With a deadline and no history the expected runtime is the deadline and the low one 0 (the
gang may end at once): the range then says "between now and the latest". A running gang's
runtime is conditioned on what it already ran: only samples longer than its elapsed time
count (a gang that outran every sample ends at its deadline, or any moment without one, within
one more longest sample).

Range: three fast-forwards, with every runtime at its low, expected and high value. A gang's
expected start is the one of the expected fast-forward; its range spans the three (a plan is
not monotonic in runtimes, so the extremes are taken over all three rather than assumed).

Cost: one `Planner` per fast-forward, told what changes; ends close together are handled in
one step (within `RESOLUTION` of the time ahead of now, at least one second), so a
fast-forward costs a few hundred plans whatever the backlog, and every pending gang's estimate
comes from the same three fast-forwards. What the fast-forward does not model: timers other
than elastic gangs' ``elasticAfter`` and backing-off gangs' requeue (a starving big gang's
reservation takes effect at the next end), clogs and evictions, and pod start-up (admitted
gangs count as running at once).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from policies.decisions import Decisions, Reason
from policies.model import AdmittedGang, Gang, Snapshot
from policies.percentiles import percentile_of_sorted
from policies.planner import Planner
from policies.strategies import AdmissionPolicy

__all__ = [
    "HORIZON",
    "RESOLUTION",
    "SAMPLES",
    "Estimate",
    "Runtime",
    "RuntimeHistory",
    "estimate",
    "size_class",
]

SAMPLES = 64
"""Finished runtimes kept per (queue, size class): recent ones, so the estimate follows drift."""

HORIZON = 7 * 86400.0
"""Seconds ahead of now the fast-forward looks; a gang not placed by then gets no estimate."""

RESOLUTION = 0.02
"""Ends within this fraction of the time ahead of now (at least 1 s) are handled together."""

MAX_ROUNDS = 5000
"""Plans per fast-forward at most (a bound on cost; gangs left then get no estimate)."""


def size_class(size: int) -> tuple[int, int]:
    """The size class of a gang of ``size`` pods: (low, high), powers of two: 1, 2-3, 4-7..."""
    bits = max(size, 1).bit_length()
    return 1 << (bits - 1), (1 << bits) - 1


def describe_class(queue: str, size: int) -> str:
    low, high = size_class(size)
    sizes = f"size {low}" if low == high else f"size class {low}\u2013{high}"
    return f"queue {queue} {sizes}"


@dataclass(frozen=True, slots=True)
class Runtime:
    """Seconds a gang runs from admission to its end: low <= expected <= high; or unknown
    (``expected`` None) with ``why``."""

    low: float | None
    expected: float | None
    high: float | None
    why: str = ""

    @property
    def known(self) -> bool:
        return self.expected is not None


class RuntimeHistory:
    """Runtimes of finished gangs per (queue, size class): the last `SAMPLES` of each."""

    __slots__ = ("_samples", "limit")

    def __init__(self, limit: int = SAMPLES) -> None:
        self.limit = limit
        self._samples: dict[tuple[str, int], deque[float]] = {}

    def record(self, queue: str, size: int, seconds: float) -> None:
        """A gang of ``queue`` with ``size`` pods ran ``seconds`` from admission to its end."""
        if not math.isfinite(seconds) or seconds < 0:
            return
        key = (queue, size_class(size)[0])
        samples = self._samples.get(key)
        if samples is None:
            samples = self._samples[key] = deque(maxlen=self.limit)
        samples.append(seconds)

    def samples(self, queue: str, size: int) -> tuple[float, ...]:
        return tuple(self._samples.get((queue, size_class(size)[0]), ()))

    def copy(self) -> RuntimeHistory:
        """An independent copy (for a fast-forward in another thread)."""
        other = RuntimeHistory(self.limit)
        other._samples = {k: deque(v, maxlen=self.limit) for k, v in self._samples.items()}
        return other

    def __len__(self) -> int:
        return sum(len(v) for v in self._samples.values())

    def runtime(self, gang: Gang, elapsed: float = 0.0) -> Runtime:
        """Runtime of ``gang`` from its admission, given it has run ``elapsed`` seconds."""
        limit = gang.runtime_limit
        ordered = sorted(s for s in self.samples(gang.queue, gang.size) if s > elapsed)
        if ordered:
            low = percentile_of_sorted(ordered, 10)
            expected = percentile_of_sorted(ordered, 50)
            high = percentile_of_sorted(ordered, 90)
            if limit is not None:
                high = max(limit, elapsed)
                expected, low = min(expected, high), min(low, high)
            return Runtime(low, expected, high)
        if limit is not None:
            # Only the bound is known: it may end any moment, at the latest at its deadline.
            latest = max(limit, elapsed)
            return Runtime(elapsed, latest, latest)
        longest = max(self.samples(gang.queue, gang.size), default=None)
        if longest is not None:
            # It outran every finished gang of its class and has no deadline.
            return Runtime(elapsed, elapsed, elapsed + longest)
        return Runtime(
            None,
            None,
            None,
            f"no deadline (activeDeadlineSeconds) and no finished gang of "
            f"{describe_class(gang.queue, gang.size)} to learn from",
        )


@dataclass(frozen=True, slots=True)
class Estimate:
    """When a pending gang is expected to be admitted (seconds since the epoch), with a range
    (``latest`` None: later than the high fast-forward could see); or, ``start`` None, why it
    has none (``waits_for``: gangs without a runtime estimate whose room it needs)."""

    gang_id: str
    start: float | None
    earliest: float | None = None
    latest: float | None = None
    unknown: str = ""
    waits_for: tuple[str, ...] = ()

    @property
    def known(self) -> bool:
        return self.start is not None


@dataclass(slots=True)
class _Outcome:
    starts: dict[str, float]
    stalled: dict[str, str]  # gang id -> why it was not placed
    waits_for: dict[str, tuple[str, ...]]
    # Gangs with no runtime estimate held in the fast-forward: (since when, the gang, why).
    unknown: list[tuple[float, AdmittedGang, str]]


def _fast_forward(
    snapshot: Snapshot,
    runtimes: Mapping[str, Runtime],
    pick: int,
    later: Sequence[tuple[Gang, float]],
    policy: str | AdmissionPolicy,
    horizon: float,
    max_rounds: int,
    only: frozenset[str] | None = None,
    unknown_ends_at_once: bool = False,
) -> _Outcome:
    """Plan from ``snapshot.now`` on, ending each admitted gang at its runtime's value ``pick``
    (0 low, 1 expected, 2 high); return when each pending gang (of ``only``, if given) is
    admitted. A gang with an unknown runtime never ends (``unknown_ends_at_once``: it ends as
    soon as it is admitted, or now: the counterfactual that shows who depends on it)."""
    run = _FastForward(snapshot, runtimes, pick, later, policy, only, unknown_ends_at_once)
    run.run(horizon, max_rounds)
    return _Outcome(run.starts, run.stalled(horizon, max_rounds), run.waits_for, run.unknown_held)


class _FastForward:
    """One fast-forward of a `Planner` (`_fast_forward`): the gangs admitted in it and when
    they end, the gangs still waiting, and what became of them."""

    def __init__(
        self,
        snapshot: Snapshot,
        runtimes: Mapping[str, Runtime],
        pick: int,
        later: Sequence[tuple[Gang, float]],
        policy: str | AdmissionPolicy,
        only: frozenset[str] | None,
        unknown_ends_at_once: bool,
    ) -> None:
        self.snapshot = snapshot
        self.runtimes = runtimes
        self.pick = pick
        self.unknown_ends_at_once = unknown_ends_at_once
        self.now = now = snapshot.now
        self.planner = planner = Planner(
            snapshot.nodes, snapshot.queues, policy, snapshot.topology, snapshot.packing
        )
        self.ends: list[tuple[float, int, str]] = []  # (end time, admission number, gang id)
        self.admitted_at_round: dict[str, int] = {}
        self.unknown_running: dict[str, str] = {}  # gang id -> why its runtime is unknown
        self.unknown_held: list[tuple[float, AdmittedGang, str]] = []
        self.counter = 0
        for admitted in snapshot.admitted:
            # A gang still starting counts as running: the fast-forward assumes it reaches its
            # minimum (else no other big gang would ever be admitted after it).
            planner.add_admitted(admitted if admitted.running else replace(admitted, running=True))
            self._will_end(admitted, admitted.admitted_at, at_least=now, since=now)
        for gang in snapshot.pending:
            planner.add_pending(gang)
        self.arrivals = sorted(later, key=lambda item: item[1])
        self.arrivals_at = 0
        waiting = {gang.id for gang in snapshot.pending} | {gang.id for gang, _ in self.arrivals}
        if only is not None:
            waiting &= only  # the fast-forward ends when these are placed
        self.waiting = waiting
        # Elastic gangs may be admitted smaller once their elasticAfter has passed.
        self.wakes = sorted(
            gang.submitted.time + gang.elastic_after
            for gang in [*snapshot.pending, *(g for g, _ in later)]
            if gang.elastic and gang.elastic_after > 0
        )
        self.starts: dict[str, float] = {}
        self.rejected: dict[str, str] = {}
        self.waits_for: dict[str, tuple[str, ...]] = {}
        self.rounds = 0
        self.last_reasons: Mapping[str, Reason] = {}

    def _end_of(self, gang_id: str, start: float) -> float | None:
        runtime = self.runtimes.get(gang_id)
        if runtime is None or not runtime.known:
            if self.unknown_ends_at_once:
                return start
            self.unknown_running[gang_id] = (
                runtime.why if runtime is not None else "unknown runtime"
            )
            return None
        value = (runtime.low, runtime.expected, runtime.high)[self.pick]
        assert value is not None
        return start + value

    def _will_end(
        self, admitted: AdmittedGang, start: float, *, at_least: float, since: float
    ) -> None:
        """Schedule the end of ``admitted`` (started at ``start``, ending no sooner than
        ``at_least``), or hold it for good if its runtime is unknown (held ``since``)."""
        gang_id = admitted.gang.id
        end = self._end_of(gang_id, start)
        if end is not None:
            self.counter += 1
            heapq.heappush(self.ends, (max(end, at_least), self.counter, gang_id))
            self.admitted_at_round[gang_id] = self.counter
        elif gang_id in self.unknown_running:
            self.unknown_held.append((since, admitted, self.unknown_running[gang_id]))

    def run(self, horizon: float, max_rounds: int) -> None:
        """Plan, end gangs, plan again, until every waiting gang is placed, nothing is left
        to happen, ``max_rounds`` plans were made or the next event is past ``horizon``."""
        planner = self.planner
        arrivals = self.arrivals
        t = self.now
        end_of_time = self.now + horizon
        while self.waiting:
            while self.arrivals_at < len(arrivals) and arrivals[self.arrivals_at][1] <= t:
                planner.add_pending(arrivals[self.arrivals_at][0])
                self.arrivals_at += 1
            self.rounds += 1
            decisions = planner.plan(t)
            self._apply(decisions, t)
            if not self.waiting:
                break
            self.last_reasons = decisions.pending
            step = self._next_event(t)
            if step is None or self.rounds >= max_rounds:
                break
            if step > end_of_time:
                break
            t = self._end_gangs(max(t, step))

    def _apply(self, decisions: Decisions, t: float) -> None:
        planner = self.planner
        waiting = self.waiting
        for gang_id in decisions.preempted:
            victim = planner.remove_admitted(gang_id)
            self.admitted_at_round.pop(gang_id, None)
            self.unknown_running.pop(gang_id, None)
            planner.add_pending(replace(victim.gang, preemptions=victim.gang.preemptions + 1))
        for admission in decisions.admitted:
            gang = planner.remove_pending(admission.gang_id)
            record = AdmittedGang(
                gang, admission.size, admission.placement, t, True, admission.other_placements
            )
            planner.add_admitted(record)
            if gang.id in waiting and gang.id not in self.starts:
                self.starts[gang.id] = t
                waiting.discard(gang.id)
            self._will_end(record, t, at_least=-math.inf, since=t)
        for gang_id, reason in decisions.rejected.items():
            planner.remove_pending(gang_id)
            if gang_id in waiting:
                waiting.discard(gang_id)
                self.rejected[gang_id] = f"it can never be admitted as it is: {reason.message}"

    def _next_event(self, t: float) -> float | None:
        """Next: the next end (and every end close to it), a gang's requeue, an elastic
        timer; None when nothing is left to happen."""
        candidates = []
        if self.ends:
            candidates.append(self.ends[0][0])
        if self.arrivals_at < len(self.arrivals):
            candidates.append(self.arrivals[self.arrivals_at][1])
        at = bisect.bisect_right(self.wakes, t)
        if at < len(self.wakes):
            candidates.append(self.wakes[at])
        return min(candidates) if candidates else None

    def _end_gangs(self, t: float) -> float:
        """End every gang due by ``t`` (and those close after it); returns the time now."""
        ends = self.ends
        window = t + max(1.0, RESOLUTION * (t - self.now))
        while ends and ends[0][0] <= window:
            end, number, gang_id = heapq.heappop(ends)
            if self.admitted_at_round.get(gang_id) != number:
                continue  # preempted since
            del self.admitted_at_round[gang_id]
            self.planner.remove_admitted(gang_id)
            t = max(t, end)
        return t

    def stalled(self, horizon: float, max_rounds: int) -> dict[str, str]:
        """Why each gang still waiting was not placed (gang id -> why); fills ``waits_for``
        with the gangs of unknown runtime it waits for."""
        stalled = dict(self.rejected)
        snapshot = self.snapshot
        unknown_running = self.unknown_running
        running = {a.gang.id for a in snapshot.admitted}
        held = sorted(
            (a for a in self.planner.admitted.values() if a.gang.id in unknown_running),
            key=lambda a: (a.admitted_at, a.gang.id),
        )
        by_queue: dict[str, tuple[str, ...]] = {}
        for gang_id in self.waiting:
            if gang_id in stalled:
                continue
            if self.rounds >= max_rounds:
                stalled[gang_id] = f"not placed within {max_rounds} plans of the fast-forward"
                continue
            if self.ends or self.arrivals_at < len(self.arrivals):
                stalled[gang_id] = (
                    f"not admitted within {horizon / 3600:g}h of now in the fast-forward"
                )
                continue
            pending = self.planner.pending.get(gang_id)
            queue = pending.queue if pending is not None else ""
            blockers = by_queue.get(queue)
            if blockers is None:
                blockers = by_queue[queue] = _nearest(held, queue, snapshot)
            if blockers:
                first = blockers[0]
                who = f"running gang {first}" if first in running else f"gang {first}, ahead of it,"
                more = f" (and {len(blockers) - 1} more)" if len(blockers) > 1 else ""
                stalled[gang_id] = f"{who}{more} has {unknown_running[first]}"
                self.waits_for[gang_id] = blockers
            else:
                last = self.last_reasons.get(gang_id)
                why = last.message if last is not None else "nothing that ends lets it in"
                stalled[gang_id] = f"no gang that ends makes room for it: {why}"
        return stalled


def _nearest(held: Sequence[AdmittedGang], queue: str, snapshot: Snapshot) -> tuple[str, ...]:
    """The gangs without a runtime that a stalled gang of ``queue`` most likely waits for:
    those of its own queue (they hold its quota), else of its cohort tree, else all (they
    hold nodes)."""
    tree = snapshot.queues
    root = tree.root(queue) if queue in tree else None
    same = [a for a in held if a.gang.queue == queue]
    if not same and root is not None:
        same = [a for a in held if a.gang.queue in tree and tree.root(a.gang.queue) == root]
    return tuple(a.gang.id for a in (same or held))


def estimate(
    snapshot: Snapshot,
    history: RuntimeHistory,
    policy: str | AdmissionPolicy = "drf",
    *,
    later: Sequence[tuple[Gang, float]] = (),
    only: Iterable[str] | None = None,
    horizon: float = HORIZON,
    max_rounds: int = MAX_ROUNDS,
) -> dict[str, Estimate]:
    """Estimates for the snapshot's pending gangs (and ``later``: gangs that become pending at
    a time, e.g. backing off until their requeue), from three or four fast-forwards (see the
    module docstring). ``only``: the gangs to answer for (all by default); the fast-forwards
    end once those are placed."""
    now = snapshot.now
    runtimes: dict[str, Runtime] = {}
    for admitted in snapshot.admitted:
        elapsed = max(0.0, now - admitted.admitted_at)
        runtimes[admitted.gang.id] = history.runtime(admitted.gang, elapsed)
    for gang in snapshot.pending:
        runtimes[gang.id] = history.runtime(gang)
    for gang, _ in later:
        runtimes[gang.id] = history.runtime(gang)
    targets = frozenset(only) if only is not None else None
    outcomes = [
        _fast_forward(snapshot, runtimes, pick, later, policy, horizon, max_rounds, targets)
        for pick in (1, 0, 2)
    ]
    expected, low, high = outcomes
    # Who depends on a gang with an unknown runtime: those who would start sooner if such gangs
    # ended at once. They get no number (it would only be a bound, as if those never ended).
    sooner: _Outcome | None = None
    if expected.unknown:
        sooner = _fast_forward(
            snapshot, runtimes, 1, later, policy, horizon, max_rounds, targets, True
        )
    running = {a.gang.id for a in snapshot.admitted}
    queue_of = {g.id: g.queue for g in snapshot.pending} | {g.id: g.queue for g, _ in later}
    wanted = (
        set(only)
        if only is not None
        else {g.id for g in snapshot.pending} | {g.id for g, _ in later}
    )
    out: dict[str, Estimate] = {}
    for gang_id in wanted:
        start = expected.starts.get(gang_id)
        if start is None:
            why = expected.stalled.get(gang_id)
            if why is None:
                continue  # not a pending gang of this snapshot
            out[gang_id] = Estimate(
                gang_id, None, unknown=why, waits_for=expected.waits_for.get(gang_id, ())
            )
            continue
        if sooner is not None and sooner.starts.get(gang_id, start) < start - 1.0:
            held = [(a, why) for t, a, why in expected.unknown if t < start]
            held = held or [(a, why) for _, a, why in expected.unknown]
            blockers = _nearest([a for a, _ in held], queue_of.get(gang_id, ""), snapshot)
            first = blockers[0]
            why = next(w for a, w in held if a.gang.id == first)
            who = f"running gang {first}" if first in running else f"gang {first}, ahead of it,"
            more = f" (and {len(blockers) - 1} more)" if len(blockers) > 1 else ""
            out[gang_id] = Estimate(
                gang_id, None, unknown=f"{who}{more} has {why}", waits_for=blockers
            )
            continue
        seen = [start]
        for other in (low, high):
            if gang_id in other.starts:
                seen.append(other.starts[gang_id])
        latest: float | None = max(seen)
        if gang_id not in high.starts or gang_id not in low.starts:
            latest = None  # one extreme did not place it: later than it could see
        out[gang_id] = Estimate(gang_id, start, min(seen), latest)
    return out
