"""Properties of a queue's SmallestFirst ordering (policies/ordering.py), on generated
snapshots: the order is a deterministic permutation that keeps priority, puts aged gangs first
by submission and the rest by share; a gang that has waited the aging bound is overtaken by
nobody that has not: the oldest aged gang of the only queue with waiting gangs is admitted
whenever it would be admitted alone."""

from __future__ import annotations

import dataclasses
import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import Queue, QueueTree, Snapshot, plan
from policies.model import Ordering, Preemption
from policies.ordering import ordered_line
from policies.planstate import Entry
from tests.strategies import any_snapshots

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _smallest_first(snapshot: Snapshot, bound: float, preemption: bool = True) -> Snapshot:
    ordering = Ordering(by="SmallestFirst", aging_bound=bound)
    tree = QueueTree.build(
        dataclasses.replace(
            queue,
            ordering=ordering,
            size_ratio=None,
            preemption=queue.preemption if preemption else Preemption(),
        )
        for queue in snapshot.queues
    )
    return dataclasses.replace(snapshot, queues=tree)


def _one_queue(snapshot: Snapshot) -> Snapshot:
    """The snapshot with only the gangs of its first leaf queue with waiting gangs pending."""
    leaves = {queue.name for queue in snapshot.queues if not snapshot.queues.children(queue.name)}
    waiting = [gang for gang in snapshot.pending if gang.queue in leaves]
    if not waiting:
        return snapshot
    leaf = waiting[0].queue
    return dataclasses.replace(snapshot, pending=[g for g in snapshot.pending if g.queue == leaf])


@st.composite
def lines(draw: st.DrawFn) -> tuple[list[Entry], float, float]:
    """A queue line (entries in submission order), the plan's time and the aging bound."""
    from tests.unit.test_planner import gang

    count = draw(st.integers(0, 12))
    gangs = [
        gang(
            f"g{i}",
            1,
            draw(st.integers(1, 8)),
            t=draw(st.floats(0, 100, allow_nan=False)),
            priority=draw(st.sampled_from((0, 0, 1))),
        )
        for i in range(count)
    ]
    gangs.sort(key=lambda g: g.order_key)
    entries: list[Entry] = [
        (g.order_key, i, g, None, False, i)  # type: ignore[misc]
        for i, g in enumerate(gangs)
    ]
    return entries, draw(st.floats(0, 200, allow_nan=False)), draw(st.floats(0, 150))


def _share(entry: Entry) -> float:
    return float(entry[2].size)


@SETTINGS
@given(lines())
def test_the_order_is_a_deterministic_permutation_by_priority_age_and_share(
    line: tuple[list[Entry], float, float],
) -> None:
    entries, now, bound = line
    vkeys = [entry[5] for entry in entries]
    ordered, keys = ordered_line(entries, vkeys, now, bound, _share)
    assert (ordered, keys) == ordered_line(entries, vkeys, now, bound, _share)
    assert sorted(e[1] for e in ordered) == list(range(len(entries)))
    assert keys == [entry[5] for entry in ordered]  # verdict keys stay in step
    for first, second in itertools.pairwise(ordered):
        a, b = first[2], second[2]
        assert a.priority >= b.priority
        if a.priority != b.priority:
            continue
        aged_a, aged_b = now - a.submitted.time >= bound, now - b.submitted.time >= bound
        assert aged_a or not aged_b  # aged ones first
        if aged_a and aged_b:
            assert a.order_key < b.order_key  # by submission
        elif not aged_a and not aged_b:
            assert (a.size, a.order_key) < (b.size, b.order_key)  # smallest first


@SETTINGS
@given(any_snapshots(), st.floats(0, 400))
def test_decisions_are_deterministic(snapshot: Snapshot, bound: float) -> None:
    snapshot = _smallest_first(snapshot, bound)
    assert plan(snapshot) == plan(snapshot)


@SETTINGS
@given(any_snapshots(), st.floats(0, 400))
def test_no_gang_that_has_not_aged_overtakes_an_aged_gang_that_fits(
    snapshot: Snapshot, bound: float
) -> None:
    # "Fits": in the free capacity; preemption (which frees capacity) is left out.
    snapshot = _one_queue(_smallest_first(snapshot, bound, preemption=False))
    queues: dict[str, Queue] = dict(snapshot.queues.queues)
    aged = [
        gang
        for gang in snapshot.pending
        if gang.queue in queues and snapshot.now - gang.submitted.time >= bound
    ]
    if not aged:
        return
    top = max(gang.priority for gang in snapshot.pending)
    oldest = min(aged, key=lambda gang: gang.order_key)
    if oldest.priority < top:
        return  # a higher priority goes first whatever the ordering
    alone = plan(dataclasses.replace(snapshot, pending=[oldest]))
    if [a.gang_id for a in alone.admitted] != [oldest.id]:
        return  # it does not fit even alone
    assert oldest.id in {a.gang_id for a in plan(snapshot).admitted}
