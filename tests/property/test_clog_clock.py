"""Properties of the clog clock (policies.lifecycle.check_clog with `advanced`): a gang that is
slow to start because its pods keep advancing is not a clog; a gang that stops advancing is,
`timeout` after its last advance; without the measure the rule is the old one."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from policies.lifecycle import NOT_STARTED_LIMIT, EvictReason, Progress, check_clog

TIMEOUT = 30.0


@dataclass(frozen=True)
class Look:
    """One check of an admitted gang: when, its ready pods, its start measure."""

    at: float
    ready: int
    advanced: int


@st.composite
def looks(draw: st.DrawFn, minimum: int = 4) -> list[Look]:
    """Checks after an admission at 0: increasing times, any ready count below the minimum or
    not, a start measure that goes up and down (pods created, bound, deleted)."""
    gaps = draw(st.lists(st.floats(0.1, 20.0), min_size=1, max_size=40))
    at, out = 0.0, []
    for gap in gaps:
        at += gap
        ready = draw(st.integers(0, minimum + 1))
        out.append(Look(at, ready, draw(st.integers(0, 3 * (minimum + 1)))))
    return out


def replay(
    seen: list[Look], *, minimum: int = 4, use_measure: bool = True
) -> tuple[int, EvictReason] | None:
    """Run the checks in order as the controller does; (index, reason) of the eviction."""
    progress = Progress()
    for index, look in enumerate(seen):
        check = check_clog(
            progress,
            admitted_at=0.0,
            ready=look.ready,
            minimum=minimum,
            timeout=TIMEOUT,
            now=look.at,
            advanced=look.advanced if use_measure else None,
        )
        if check.evict is not None:
            return index, check.evict
        progress = check.progress
    return None


def old_rule(seen: list[Look], minimum: int = 4) -> tuple[int, EvictReason] | None:
    """The rule before the measure, written out: timed from the admission, or from falling
    below a minimum once reached."""
    reached, below = False, None
    for index, look in enumerate(seen):
        if look.ready >= minimum:
            reached, below = True, None
            continue
        if reached and below is None:
            below = look.at
        since = below if reached else 0.0
        assert since is not None
        if look.at - since >= TIMEOUT:
            return index, "BelowMinimum" if reached else "Clogged"
    return None


@given(looks())
def test_without_the_measure_the_rule_is_the_old_one(seen: list[Look]) -> None:
    assert replay(seen, use_measure=False) == old_rule(seen)


@given(looks())
def test_a_gang_that_advanced_within_the_timeout_is_never_evicted_as_clogged(
    seen: list[Look],
) -> None:
    evicted = replay(seen)
    if evicted is None or evicted[1] != "Clogged":
        return
    index = evicted[0]
    # The last rise of the measure above its highest so far, before the eviction (the first
    # look's value counts as at the admission).
    best, last_rise = seen[0].advanced, 0.0
    for look in seen[1 : index + 1]:
        if look.advanced > best:
            best, last_rise = look.advanced, look.at
    assert seen[index].at - last_rise >= TIMEOUT


@given(looks())
def test_a_clogged_gang_is_evicted_at_the_first_look_past_the_timeout_since_its_last_rise(
    seen: list[Look],
) -> None:
    """Exactly when: the first look that never reached the minimum and is at least the timeout
    after the last rise (the measure's clock never holds an eviction back further)."""
    best, last_rise, expected = None, 0.0, None
    for index, look in enumerate(seen):
        if look.ready >= 4:
            break  # reached: from here the BelowMinimum rule applies
        if best is None:
            best = look.advanced
        elif look.advanced > best:
            best, last_rise = look.advanced, look.at
        if look.at - last_rise >= TIMEOUT:
            expected = (index, "Clogged")
            break
    evicted = replay(seen)
    if expected is not None:
        assert evicted == expected
    elif evicted is not None:
        assert evicted[1] == "BelowMinimum"


@given(
    gaps=st.lists(st.floats(0.1, 20.0), min_size=1, max_size=60),
    stuck_at=st.integers(0, 12),
    ready=st.integers(0, 3),
)
def test_a_gang_whose_pods_stop_advancing_is_evicted_as_with_the_old_rule_from_then(
    gaps: list[float], stuck_at: int, ready: int
) -> None:
    """A truly clogged gang: its pods exist and wait (the measure stays put) below the
    minimum. It is evicted, Clogged, at the first look at least the timeout after the
    admission if it never advanced, else after its last advance."""
    at, seen = 0.0, []
    for gap in gaps:
        at += gap
        seen.append(Look(at, ready, stuck_at))
    evicted = replay(seen)
    first_past = next((i for i, look in enumerate(seen) if look.at >= TIMEOUT), None)
    assert evicted == (None if first_past is None else (first_past, "Clogged"))
    assert replay(seen) == old_rule(seen)


@given(size=st.integers(1, 20), gap=st.floats(0.5, TIMEOUT))
def test_a_trickle_delays_an_eviction_by_at_most_one_timeout_per_step_of_the_measure(
    size: int, gap: float
) -> None:
    """The worst case: the measure rises by one at every look. It can rise at most 3 x size
    times, each within a timeout (and the time to the look that sees it) of the last, so the
    gang is evicted no later than (3 x size + 1) x (timeout + look gap) after its
    admission."""
    seen = [Look(gap * (i + 1), 0, min(i, 3 * size)) for i in range(3 * size + 2 * int(TIMEOUT))]
    seen += [Look(seen[-1].at + TIMEOUT * k, 0, 3 * size) for k in range(1, 3)]
    evicted = replay(seen, minimum=size + 1)
    assert evicted is not None and evicted[1] == "Clogged"
    assert seen[evicted[0]].at <= (3 * size + 1) * (TIMEOUT + gap) + max(gap, TIMEOUT)


@given(looks(), st.integers(0, 39))
def test_a_restarted_controller_times_the_gang_from_its_admission(
    seen: list[Look], restart: int
) -> None:
    """A restarted controller forgets the clock: its first measure counts as at the admission,
    so it is never more lenient than without the measure at that look."""
    restart = min(restart, len(seen) - 1)
    after = seen[restart:]
    evicted = replay(after)
    if after[0].ready < 4 and after[0].at >= TIMEOUT:
        assert evicted == (0, "Clogged")


@given(
    gaps=st.lists(st.floats(0.1, 40.0), min_size=1, max_size=40),
    start_at=st.integers(0, 40),
    ready=st.integers(0, 3),
)
def test_the_clock_waits_for_the_start_but_not_past_the_limit(
    gaps: list[float], start_at: int, ready: int
) -> None:
    """A gang its Job controller has not started (no pods asked for) is not evicted until
    NOT_STARTED_LIMIT timeouts after its admission; once started and stuck, it is evicted at
    the first look at least a timeout after the last look that saw it waiting to start."""
    at, seen = 0.0, []
    for gap in gaps:
        at += gap
        seen.append(at)
    progress, evicted = Progress(), None
    for index, now in enumerate(seen):
        check = check_clog(
            progress,
            admitted_at=0.0,
            ready=ready,
            minimum=4,
            timeout=TIMEOUT,
            now=now,
            advanced=0,
            waiting=index < start_at,
        )
        if check.evict is not None:
            evicted = index
            break
        progress = check.progress
    limit = NOT_STARTED_LIMIT * TIMEOUT
    waited_until = seen[start_at - 1] if 0 < start_at <= len(seen) else 0.0
    expected = next(
        (
            i
            for i, now in enumerate(seen)
            if (i < start_at and now > limit) or (i >= start_at and now - waited_until >= TIMEOUT)
        ),
        None,
    )
    assert evicted == expected
