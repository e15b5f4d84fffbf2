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

from policies.decisions import Reason
from policies.model import AdmittedGang, Gang, Snapshot
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


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of a sorted, non-empty sequence."""
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


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
            low = _quantile(ordered, 0.1)
            expected = _quantile(ordered, 0.5)
            high = _quantile(ordered, 0.9)
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
    now = snapshot.now
    planner = Planner(snapshot.nodes, snapshot.queues, policy)
    ends: list[tuple[float, int, str]] = []  # (end time, admission number, gang id)
    admitted_at_round: dict[str, int] = {}
    unknown_running: dict[str, str] = {}  # gang id -> why its runtime is unknown
    unknown_held: list[tuple[float, AdmittedGang, str]] = []
    counter = 0

    def end_of(gang_id: str, start: float) -> float | None:
        runtime = runtimes.get(gang_id)
        if runtime is None or not runtime.known:
            if unknown_ends_at_once:
                return start
            unknown_running[gang_id] = runtime.why if runtime is not None else "unknown runtime"
            return None
        value = (runtime.low, runtime.expected, runtime.high)[pick]
        assert value is not None
        return start + value

    for admitted in snapshot.admitted:
        # A gang still starting counts as running: the fast-forward assumes it reaches its
        # minimum (else no other big gang would ever be admitted after it).
        planner.add_admitted(admitted if admitted.running else replace(admitted, running=True))
        end = end_of(admitted.gang.id, admitted.admitted_at)
        if end is not None:
            counter += 1
            heapq.heappush(ends, (max(end, now), counter, admitted.gang.id))
            admitted_at_round[admitted.gang.id] = counter
        elif admitted.gang.id in unknown_running:
            unknown_held.append((now, admitted, unknown_running[admitted.gang.id]))
    for gang in snapshot.pending:
        planner.add_pending(gang)
    arrivals = sorted(later, key=lambda item: item[1])
    arrivals_at = 0
    waiting = {gang.id for gang in snapshot.pending} | {gang.id for gang, _ in arrivals}
    if only is not None:
        waiting &= only  # the fast-forward ends when these are placed
    # Elastic gangs may be admitted smaller once their elasticAfter has passed.
    wakes = sorted(
        gang.submitted.time + gang.elastic_after
        for gang in [*snapshot.pending, *(g for g, _ in later)]
        if gang.elastic and gang.elastic_after > 0
    )
    starts: dict[str, float] = {}
    stalled: dict[str, str] = {}
    waits_for: dict[str, tuple[str, ...]] = {}
    t = now
    rounds = 0
    last_reasons: Mapping[str, Reason] = {}
    end_of_time = now + horizon
    while waiting:
        while arrivals_at < len(arrivals) and arrivals[arrivals_at][1] <= t:
            planner.add_pending(arrivals[arrivals_at][0])
            arrivals_at += 1
        rounds += 1
        decisions = planner.plan(t)
        for gang_id in decisions.preempted:
            victim = planner.remove_admitted(gang_id)
            admitted_at_round.pop(gang_id, None)
            unknown_running.pop(gang_id, None)
            planner.add_pending(replace(victim.gang, preemptions=victim.gang.preemptions + 1))
        for admission in decisions.admitted:
            gang = planner.remove_pending(admission.gang_id)
            record = AdmittedGang(gang, admission.size, admission.placement, t, True)
            planner.add_admitted(record)
            if gang.id in waiting and gang.id not in starts:
                starts[gang.id] = t
                waiting.discard(gang.id)
            end = end_of(gang.id, t)
            if end is not None:
                counter += 1
                heapq.heappush(ends, (end, counter, gang.id))
                admitted_at_round[gang.id] = counter
            elif gang.id in unknown_running:
                unknown_held.append((t, record, unknown_running[gang.id]))
        for gang_id, reason in decisions.rejected.items():
            planner.remove_pending(gang_id)
            if gang_id in waiting:
                waiting.discard(gang_id)
                stalled[gang_id] = f"it can never be admitted as it is: {reason.message}"
        if not waiting:
            break
        last_reasons = decisions.pending
        # Next: the next end (and every end close to it), a gang's requeue, an elastic timer.
        candidates = []
        if ends:
            candidates.append(ends[0][0])
        if arrivals_at < len(arrivals):
            candidates.append(arrivals[arrivals_at][1])
        at = bisect.bisect_right(wakes, t)
        if at < len(wakes):
            candidates.append(wakes[at])
        if not candidates or rounds >= max_rounds:
            break
        step = min(candidates)
        if step > end_of_time:
            break
        t = max(t, step)
        window = t + max(1.0, RESOLUTION * (t - now))
        while ends and ends[0][0] <= window:
            end, number, gang_id = heapq.heappop(ends)
            if admitted_at_round.get(gang_id) != number:
                continue  # preempted since
            del admitted_at_round[gang_id]
            planner.remove_admitted(gang_id)
            t = max(t, end)
    running = {a.gang.id for a in snapshot.admitted}
    held = sorted(
        (a for a in planner.admitted.values() if a.gang.id in unknown_running),
        key=lambda a: (a.admitted_at, a.gang.id),
    )
    by_queue: dict[str, tuple[str, ...]] = {}
    for gang_id in waiting:
        if gang_id in stalled:
            continue
        if rounds >= max_rounds:
            stalled[gang_id] = f"not placed within {max_rounds} plans of the fast-forward"
            continue
        if ends or arrivals_at < len(arrivals):
            stalled[gang_id] = f"not admitted within {horizon / 3600:g}h of now in the fast-forward"
            continue
        pending = planner.pending.get(gang_id)
        queue = pending.queue if pending is not None else ""
        blockers = by_queue.get(queue)
        if blockers is None:
            blockers = by_queue[queue] = _nearest(held, queue, snapshot)
        if blockers:
            first = blockers[0]
            who = f"running gang {first}" if first in running else f"gang {first}, ahead of it,"
            more = f" (and {len(blockers) - 1} more)" if len(blockers) > 1 else ""
            stalled[gang_id] = f"{who}{more} has {unknown_running[first]}"
            waits_for[gang_id] = blockers
        else:
            last = last_reasons.get(gang_id)
            why = last.message if last is not None else "nothing that ends lets it in"
            stalled[gang_id] = f"no gang that ends makes room for it: {why}"
    return _Outcome(starts, stalled, waits_for, unknown_held)


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
