"""The lifecycle of an admitted gang, as functions of its state and the time: when it is clogged,
what an eviction does to it (backoff, requeue, failure).

One set of rules for the controller (`admission/loop.py`) and the in-process simulator
(`simulator/engine.py`): each keeps its own records and does its own I/O (PATCHes, or events in
a heap), and asks here what the rules say.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Final, Literal

from policies.decisions import Reason
from policies.durations import format_duration
from policies.model import Backoff, Queue

EvictReason = Literal["Clogged", "BelowMinimum", "Deadlock", "Outgrown"]

DEFAULT_CLOG_TIMEOUT: Final = 300.0
"""Seconds, for a gang whose queue is gone (a Queue's own default is in `policies.model`)."""
DEFAULT_BACKOFF: Final = Backoff()
"""For a gang whose queue is gone."""
JITTER: Final = (0.75, 1.25)
"""A requeue delay is scaled by a uniform factor in this range, so gangs evicted together do
not all come back in the same cycle (the controller; the simulator runs without jitter)."""


NOT_STARTED_LIMIT: Final = 10
"""Clog timeouts after its admission during which a gang that waits on the control plane is
not timed (`check_clog`'s `waiting`); past them the clock runs from the admission."""


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
    advanced: int | None = None
    """The highest start measure seen (`check_clog`'s `advanced`); None: never measured."""
    advanced_at: float | None = None
    """When that measure last rose (its first measure counts as at the admission)."""


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
    advanced: int | None = None,
    waiting: bool = False,
) -> ClogCheck:
    """The clog rule: an admitted gang with fewer than `minimum` ready pods for
    `timeout` (counted from its admission, or from when it fell below a minimum it had
    reached) is evicted. Evicted at `since + timeout` itself: the in-process engine checks at
    exactly that instant, the controller at its next cycle after it.

    Two keywords make the clock tell a slow control plane from a clog (the controller passes
    both; the defaults are the rule above, which is Kueue's waitForPodsReady: from admission):

    - `waiting`: the gang waits on the control plane, not on capacity: its Job controller has
      not acted on the admission yet (no `status.startTime` for it, no pod), or a pod of it
      has not been looked at by the scheduler yet (gated, or queued), or is bound and not yet
      reported on by its kubelet. While it waits the clock does not run: a control plane busy
      with a burst of a thousand Jobs takes its time, and that is not a clog. For at most
      `NOT_STARTED_LIMIT` timeouts after the admission: a gang that waits forever (its Job
      controller down, its pods refused, its node gone) must not hold an admission forever.
    - `advanced`: how far the gang's pods have come towards running (the controller counts
      each live pod once, once more when bound, once more when ready, each succeeded pod
      three times: at most 3 x size). The clock of a gang that has not reached its minimum
      then runs from the last time this measure rose above its highest so far: a gang whose
      pods a busy control plane is still creating, binding and starting is slow, not clogged.
      A clogged gang stops advancing (its pods exist and wait, unschedulable, behind others)
      and is evicted `timeout` after its last advance; the measure counts only new highs, so
      that is at most (3 x size + 1) timeouts (each plus the time between two checks) after
      the start.

    The first measure counts as taken at the last check that saw the gang waiting (or, if
    none did, at the admission): a restarted controller times a gang from its admission
    again, as without the keywords."""
    overdue = waiting and now - admitted_at > NOT_STARTED_LIMIT * timeout
    if waiting and not overdue and not progress.reached_min and ready < minimum:
        return ClogCheck(replace(progress, advanced=None, advanced_at=now))
    if advanced is not None and (progress.advanced is None or advanced > progress.advanced):
        first = progress.advanced_at if progress.advanced_at is not None else admitted_at
        at = first if progress.advanced is None else now
        progress = replace(progress, advanced=advanced, advanced_at=at)
    if ready >= minimum:
        return ClogCheck(replace(progress, reached_min=True, below_min_since=None))
    if progress.reached_min and progress.below_min_since is None:
        progress = replace(progress, below_min_since=now)
    if progress.reached_min:
        since = progress.below_min_since
    elif progress.advanced_at is not None and not overdue:
        since = max(admitted_at, progress.advanced_at)
    else:
        since = admitted_at
    assert since is not None
    if now < since + timeout:
        return ClogCheck(progress)
    reason: EvictReason = "BelowMinimum" if progress.reached_min else "Clogged"
    why = (
        f"{ready} of at least {minimum} pods ready after {format_duration(now - since)} "
        f"(clog timeout {format_duration(timeout)})"
    )
    if reason == "Clogged" and since > admitted_at:
        why = (
            f"{ready} of at least {minimum} pods ready {format_duration(now - admitted_at)} "
            f"after admission, none advancing for {format_duration(now - since)} "
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
