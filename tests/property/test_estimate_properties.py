"""Properties of policies.estimate over random snapshots (tests/strategies.py)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import Snapshot, plan
from policies.estimate import RuntimeHistory, estimate
from tests.strategies import any_snapshots

SETTINGS = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def histories(draw: st.DrawFn, snapshot: Snapshot) -> RuntimeHistory:
    history = RuntimeHistory()
    gangs = [*snapshot.pending, *(a.gang for a in snapshot.admitted)]
    for gang in gangs:
        for _ in range(draw(st.integers(0, 2))):
            history.record(gang.queue, gang.size, float(draw(st.integers(1, 400))))
    return history


@SETTINGS
@given(st.data())
def test_estimates_are_never_before_now_and_ranges_hold(data: st.DataObject) -> None:
    snapshot = data.draw(any_snapshots())
    history = data.draw(histories(snapshot))
    found = estimate(snapshot, history)
    assert set(found) == {gang.id for gang in snapshot.pending}
    for item in found.values():
        if item.start is None:
            assert item.unknown
            continue
        assert item.earliest is not None
        assert snapshot.now <= item.earliest <= item.start
        assert item.latest is None or item.start <= item.latest


@SETTINGS
@given(st.data())
def test_a_gang_the_planner_admits_now_is_estimated_now(data: st.DataObject) -> None:
    snapshot = data.draw(any_snapshots())
    found = estimate(snapshot, data.draw(histories(snapshot)))
    for admission in plan(snapshot).admitted:
        assert found[admission.gang_id].start == snapshot.now


@SETTINGS
@given(any_snapshots())
def test_without_any_runtime_only_gangs_admitted_now_are_estimated(snapshot: Snapshot) -> None:
    """With no deadline and no history nothing ever ends, so a gang gets an estimate only if
    the planner admits it now or without anything ending (never a made-up number)."""
    snapshot = Snapshot(
        snapshot.nodes,
        snapshot.queues,
        [a for a in snapshot.admitted if a.gang.runtime_limit is None],
        [g for g in snapshot.pending if g.runtime_limit is None],
        snapshot.now,
    )
    for item in estimate(snapshot, RuntimeHistory()).values():
        if item.start is not None:
            assert item.start == snapshot.now or item.start in {
                g.submitted.time + g.elastic_after for g in snapshot.pending
            }


@SETTINGS
@given(st.data())
def test_asking_for_some_gangs_gives_their_estimates_of_all(data: st.DataObject) -> None:
    snapshot = data.draw(any_snapshots())
    history = data.draw(histories(snapshot))
    every = estimate(snapshot, history)
    asked = data.draw(st.lists(st.sampled_from(sorted(every)), unique=True)) if every else []
    some = estimate(snapshot, history, only=asked)
    assert set(some) == set(asked)
    for gang_id in asked:
        assert (some[gang_id].start, some[gang_id].earliest) == (
            every[gang_id].start,
            every[gang_id].earliest,
        )
