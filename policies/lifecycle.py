"""The lifecycle of an admitted gang, as functions of its state and the time: when it is clogged,
what an eviction does to it (backoff, requeue, failure).

One set of rules for the controller (`admission/loop.py`) and the in-process simulator
(`simulator/engine.py`): each keeps its own records and does its own I/O (PATCHes, or events in
a heap), and asks here what the rules say.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Final, Literal

from policies.decisions import Reason
from policies.durations import format_duration
from policies.model import Backoff, Queue

EvictReason = Literal["Clogged", "BelowMinimum", "Deadlock"]

DEFAULT_CLOG_TIMEOUT: Final = 300.0
"""Seconds, for a gang whose queue is gone (a Queue's own default is in `policies.model`)."""
DEFAULT_BACKOFF: Final = Backoff()
"""For a gang whose queue is gone."""
JITTER: Final = (0.75, 1.25)
"""A requeue delay is scaled by a uniform factor in this range, so gangs evicted together do
not all come back in the same cycle (the controller; the simulator runs without jitter)."""


REJECTED_GRACE: Final = 300.0
"""Seconds the controller lets a gang stay rejected before it marks it Failed."""
SIMULATED_REJECTED_GRACE: Final = 0.0
"""The in-process simulator's grace: its nodes and queues do not change during a run, so a
rejected gang fails at once."""


def fails_rejected(rejected_since: float, now: float, grace: float) -> bool:
    """A gang the planner rejects (NeverFits, SizeRatioRejected: it can never be admitted as
    things stand) fails once it has been rejected for `grace` seconds in a row, so a node
    briefly gone or a Queue being edited does not fail it. The simulator, whose nodes and
    queues do not change during a run, fails it at once (`SIMULATED_REJECTED_GRACE`)."""
    return now - rejected_since >= grace


def rejected_message(reason: Reason) -> str:
    """Why a rejected gang failed: the planner's reason, code first."""
    return f"{reason.code}: {reason.message}"


def clog_timeout(own: float | None, queue: Queue | None) -> float:
    """A gang's clog timeout: its own (`muster.dev/clog-timeout`), else its queue's."""
    if own is not None:
        return own
    return queue.clog_timeout if queue is not None else DEFAULT_CLOG_TIMEOUT


@dataclass(frozen=True, slots=True)
class Progress:
    """Where an admitted gang stands against its minimum (what the clog check keeps)."""

    reached_min: bool = False
    """It had its minimum ready (or succeeded) pods at some point since its admission."""
    below_min_since: float | None = None
    """Since when a gang that reached its minimum has been below it again."""


@dataclass(frozen=True, slots=True)
class ClogCheck:
    progress: Progress
    evict: EvictReason | None = None
    """Clogged (never reached its minimum) or BelowMinimum (fell below it), past the timeout."""
    why: str = ""


def check_clog(
    progress: Progress,
    *,
    admitted_at: float,
    ready: int,
    minimum: int,
    timeout: float,
    now: float,
) -> ClogCheck:
    """The clog rule: an admitted gang with fewer than `minimum` ready pods for `timeout`
    (counted from its admission, or from when it fell below a minimum it had reached) is
    evicted. Evicted at `since + timeout` itself: the in-process engine checks at exactly
    that instant, the controller at its next cycle after it."""
    if ready >= minimum:
        return ClogCheck(Progress(True, None))
    if progress.reached_min and progress.below_min_since is None:
        progress = Progress(True, now)
    since = progress.below_min_since if progress.reached_min else admitted_at
    assert since is not None
    if now < since + timeout:
        return ClogCheck(progress)
    reason: EvictReason = "BelowMinimum" if progress.reached_min else "Clogged"
    why = (
        f"{ready} of at least {minimum} pods ready after {format_duration(now - since)} "
        f"(clog timeout {format_duration(timeout)})"
    )
    return ClogCheck(progress, reason, why)


@dataclass(frozen=True, slots=True)
class Eviction:
    """What an eviction does to a gang: its count, and when it may come back or that it failed."""

    evictions: int
    failed: bool
    delay: float
    """Seconds until it is requeued (0 when failed)."""

    def message(self, reason: str, why: str) -> str:
        if self.failed:
            return f"evicted ({reason}): {why}; {self.evictions - 1} evictions before: failed"
        return f"evicted ({reason}): {why}; requeued in {format_duration(self.delay)}"


def evict(
    evictions_before: int, backoff: Backoff | None, *, jitter: random.Random | None = None
) -> Eviction:
    """The backoff rule: the n-th eviction requeues after ``backoff.delay(n)`` seconds (scaled
    by a factor from `JITTER` when a random source is given), and past ``backoff.limit``
    evictions the gang fails."""
    backoff = backoff if backoff is not None else DEFAULT_BACKOFF
    evictions = evictions_before + 1
    if evictions > backoff.limit:
        return Eviction(evictions, True, 0.0)
    delay = backoff.delay(evictions)
    if jitter is not None:
        delay *= jitter.uniform(*JITTER)
    return Eviction(evictions, False, delay)
