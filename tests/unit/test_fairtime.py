"""Fairness over time (policies/fairtime.py): the memory of released gangs, its properties, and
what it changes in the planner's order of queue heads."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies import (
    AdmittedGang,
    Gang,
    Node,
    Planner,
    PolicyError,
    Queue,
    QueueTree,
    Resources,
    SubmitStamp,
)
from policies.fairtime import Memory, decay, half_lives, memory_of
from policies.queuespec import parse_queue

CPU = 1000

released_gangs = st.lists(
    st.tuples(
        st.integers(0, 64 * CPU),  # demand (cpu)
        st.floats(0, 10_000, allow_nan=False),  # held from
        st.floats(0, 10_000, allow_nan=False),  # held for
    ),
    max_size=12,
)


def _tree(half_life: float | None, cohort: float | None = None) -> QueueTree:
    return QueueTree.build(
        [
            Queue("org", usage_half_life=cohort),
            Queue("a", parent="org", usage_half_life=half_life, size_ratio=None),
            Queue("b", parent="org", size_ratio=None),
        ]
    )


def _incremental(
    gangs: list[tuple[int, float, float]], now: float, half_life: float, order: list[int]
) -> float:
    memory = Memory(_tree(half_life))
    for i in order:
        demand, start, held = gangs[i]
        if start + held <= now:
            memory.release("a", {"cpu": demand}, start, start + held)
    return memory.at(now).get("a", {}).get("cpu", 0.0)


def _reference(gangs: list[tuple[int, float, float]], now: float, half_life: float) -> float:
    return memory_of([({"cpu": d}, s, s + h) for d, s, h in gangs], now, half_life).get("cpu", 0.0)


@settings(max_examples=200, deadline=None)
@given(
    gangs=released_gangs,
    half_life=st.floats(1, 5_000),
    data=st.data(),
)
def test_incremental_memory_matches_its_definition_in_any_order(
    gangs: list[tuple[int, float, float]], half_life: float, data: st.DataObject
) -> None:
    now = 20_000.0
    order = data.draw(st.permutations(range(len(gangs))))
    got = _incremental(gangs, now, half_life, list(order))
    assert got == pytest.approx(_reference(gangs, now, half_life), rel=1e-9, abs=1e-6)
    # deterministic: the same releases in the same order give the same bits
    assert got == _incremental(gangs, now, half_life, list(order))


@settings(max_examples=200, deadline=None)
@given(
    gangs=released_gangs,
    half_life=st.floats(1, 5_000),
    more=st.integers(0, 64 * CPU),
    longer=st.floats(0, 5_000, allow_nan=False),
)
def test_memory_is_monotone_in_usage(
    gangs: list[tuple[int, float, float]], half_life: float, more: int, longer: float
) -> None:
    now = 20_000.0
    base = _reference(gangs, now, half_life)
    # one more released gang never lowers it
    assert _reference([*gangs, (more, 0.0, longer)], now, half_life) >= base - 1e-9
    if gangs:
        demand, start, held = gangs[0]
        # more demand, or held longer (released at the same time), never lowers it
        bigger = [(demand + more, start, held), *gangs[1:]]
        assert _reference(bigger, now, half_life) >= base - 1e-9
        earlier = [(demand, max(start - longer, 0.0), held + min(longer, start)), *gangs[1:]]
        assert _reference(earlier, now, half_life) >= base - 1e-9


@settings(max_examples=100, deadline=None)
@given(gangs=released_gangs)
def test_a_zero_half_life_is_the_instant_share_and_a_small_one_tends_to_it(
    gangs: list[tuple[int, float, float]],
) -> None:
    now = 20_001.0  # after every release
    assert _reference(gangs, now, 0.0) == 0.0
    assert _reference(gangs, now, 1e-3) == pytest.approx(0.0, abs=1e-6)
    # and 0 tracks nothing: the planner keeps the instant share exactly
    assert half_lives(_tree(0.0)) == {}


def test_decay_halves_every_half_life() -> None:
    assert decay(0, 60) == 1.0
    assert decay(60, 60) == pytest.approx(0.5)
    assert decay(120, 60) == pytest.approx(0.25)
    assert decay(1, 0) == 0.0


def test_a_leaf_takes_its_cohorts_half_life_unless_it_sets_its_own() -> None:
    assert half_lives(_tree(None, cohort=600.0)) == {"a": 600.0, "b": 600.0}
    assert half_lives(_tree(0.0, cohort=600.0)) == {"b": 600.0}
    assert half_lives(_tree(60.0)) == {"a": 60.0}
    assert half_lives(_tree(None)) == {}


def test_queue_spec_reads_fair_sharing() -> None:
    queue = parse_queue("a", {"fairSharing": {"halfLife": "10m"}}, "spec")
    assert queue.usage_half_life == 600.0
    assert parse_queue("a", {}, "spec").usage_half_life is None
    with pytest.raises(PolicyError, match="fairSharing: unknown field 'weight'"):
        parse_queue("a", {"fairSharing": {"weight": 2}}, "spec")
    with pytest.raises(PolicyError, match="halfLife"):
        parse_queue("a", {"fairSharing": {"halfLife": "soon"}}, "spec")
    with pytest.raises(PolicyError, match="halfLife"):
        QueueTree.build([Queue("a", usage_half_life=-1.0)])


def _gang(name: str, queue: str, t: float) -> Gang:
    return Gang(
        f"ns/{name}", queue, Resources({"cpu": 4 * CPU}), 1, submitted=SubmitStamp(t, 0, name)
    )


def _first_admitted(half_life: float | None) -> str:
    """Queue a ran one gang for an hour and released it; now a and b each wait with one gang
    and one node is free: who goes first?"""
    tree = QueueTree.build(
        [
            Queue("a", usage_half_life=half_life, size_ratio=None),
            Queue("b", usage_half_life=half_life, size_ratio=None),
        ]
    )
    planner = Planner([Node("n0", Resources({"cpu": 4 * CPU}))], tree)
    ran = _gang("ran", "a", 0.0)
    planner.add_admitted(AdmittedGang(ran, 1, {"n0": 1}, 0.0))
    planner.plan(0.0)
    planner.remove_admitted(ran.id)
    # a's gang was submitted first: with the instant share (both hold nothing) it goes first
    planner.add_pending(_gang("a1", "a", 3000.0))
    planner.add_pending(_gang("b1", "b", 3001.0))
    decisions = planner.plan(3600.0)
    assert len(decisions.admitted) == 1
    return decisions.admitted[0].gang_id


def test_a_queue_that_ran_recently_goes_after_one_that_did_not() -> None:
    assert _first_admitted(None) == "ns/a1"
    assert _first_admitted(0.0) == "ns/a1"
    assert _first_admitted(600.0) == "ns/b1"


def test_a_replaced_record_is_not_a_release() -> None:
    tree = QueueTree.build([Queue("a", usage_half_life=60.0, size_ratio=None), Queue("b")])
    planner = Planner([Node("n0", Resources({"cpu": 8 * CPU}))], tree)
    gang = _gang("g", "a", 0.0)
    planner.add_admitted(AdmittedGang(gang, 1, {"n0": 1}, 0.0))
    planner.remove_admitted(gang.id)  # a caller replacing its record: removed, added again
    planner.add_admitted(AdmittedGang(gang, 1, {"n0": 1}, 0.0, running=True))
    planner.plan(600.0)
    assert planner._memory.at(600.0) == {}


def test_a_trace_queue_carries_its_half_life_to_the_planner_and_to_kwok() -> None:
    from simulator.kwok_objects import queue_body
    from simulator.trace import from_dict

    trace = from_dict(
        {
            "name": "t",
            "cluster": {"nodes": [{"count": 1, "allocatable": {"cpu": "4"}}]},
            "queues": [{"name": "a", "fairSharing": {"halfLife": "10m"}}],
            "jobs": [
                {"name": "j", "queue": "a", "size": 1, "runtime": "1s", "podRequests": {"cpu": "1"}}
            ],
        },
        source="test",
    )
    assert trace.queue_tree().queues["a"].usage_half_life == 600.0
    body = queue_body(trace.queues[0], 10.0, "run")["spec"]
    assert body["fairSharing"] == {"halfLife": "60s"}
