"""The lifecycle rules the controller and the in-process simulator share (policies.lifecycle)."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from policies import Backoff, Queue
from policies.lifecycle import (
    JITTER,
    REJECTED_GRACE,
    Progress,
    check_clog,
    clog_timeout,
    evict,
    fails_rejected,
)


def test_a_gangs_own_clog_timeout_wins_over_its_queues() -> None:
    queue = Queue("q", clog_timeout=120.0)
    assert clog_timeout(30.0, queue) == 30.0
    assert clog_timeout(None, queue) == 120.0
    assert clog_timeout(None, None) == 300.0  # the queue is gone


def test_a_gang_that_never_reaches_its_minimum_clogs_after_the_timeout() -> None:
    start = Progress()
    kept = check_clog(start, admitted_at=0.0, ready=1, minimum=4, timeout=60.0, now=59.5)
    assert kept.evict is None and kept.progress == start
    # At the timeout itself: the instant the in-process engine checks.
    at = check_clog(start, admitted_at=0.5, ready=1, minimum=4, timeout=60.0, now=60.5)
    assert at.evict == "Clogged"
    clogged = check_clog(start, admitted_at=0.0, ready=1, minimum=4, timeout=60.0, now=61.0)
    assert clogged.evict == "Clogged"
    assert clogged.why == "1 of at least 4 pods ready after 1m1s (clog timeout 1m)"


def test_a_gang_that_falls_below_its_minimum_is_timed_from_then() -> None:
    ready = check_clog(Progress(), admitted_at=0.0, ready=4, minimum=4, timeout=60.0, now=10.0)
    assert ready.progress == Progress(True, None) and ready.evict is None
    fell = check_clog(ready.progress, admitted_at=0.0, ready=2, minimum=4, timeout=60.0, now=500.0)
    assert fell.evict is None and fell.progress == Progress(True, 500.0)
    late = check_clog(fell.progress, admitted_at=0.0, ready=2, minimum=4, timeout=60.0, now=561.0)
    assert late.evict == "BelowMinimum"
    back = check_clog(fell.progress, admitted_at=0.0, ready=4, minimum=4, timeout=60.0, now=530.0)
    assert back.progress == Progress(True, None)


def test_evictions_back_off_then_fail() -> None:
    backoff = Backoff(base=10.0, max=40.0, limit=3)
    delays = [evict(n, backoff) for n in range(4)]
    assert [(e.evictions, e.failed, e.delay) for e in delays] == [
        (1, False, 10.0),
        (2, False, 20.0),
        (3, False, 40.0),
        (4, True, 0.0),
    ]
    assert delays[0].message("Clogged", "why") == "evicted (Clogged): why; requeued in 10s"
    assert delays[3].message("Deadlock", "why") == (
        "evicted (Deadlock): why; 3 evictions before: failed"
    )


@given(
    before=st.integers(0, 20),
    base=st.floats(1.0, 100.0),
    cap=st.floats(1.0, 1000.0),
    limit=st.integers(0, 10),
    seed=st.integers(0, 2**32),
)
def test_jittered_delays_stay_in_their_band(
    before: int, base: float, cap: float, limit: int, seed: int
) -> None:
    backoff = Backoff(base=base, max=cap, limit=limit)
    plain = evict(before, backoff)
    jittered = evict(before, backoff, jitter=random.Random(seed))
    assert plain.failed == jittered.failed == (before + 1 > limit)
    low, high = JITTER
    assert plain.delay * low <= jittered.delay <= plain.delay * high


def test_a_rejected_gang_fails_only_once_rejected_for_the_whole_grace() -> None:
    assert not fails_rejected(100.0, 100.0 + REJECTED_GRACE - 0.1, REJECTED_GRACE)
    assert fails_rejected(100.0, 100.0 + REJECTED_GRACE, REJECTED_GRACE)
    assert fails_rejected(100.0, 100.0, 0.0)  # the simulator's: at once
