"""Fairness over time as the planner uses it (policies/fairtime.py through policies.Planner and
policies.shares.Shares): the decayed share is monotone in usage, is the instant share with a
zero half-life, and decides the same way every time.

Each example: queues a and b, one node; each queue ran some gangs and released them (demand,
held from, held for); then each waits with one gang that fills the node, a's submitted first.
Who is admitted tells which queue's share was lower."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from policies import AdmittedGang, Gang, Node, Planner, Queue, QueueTree, Resources, SubmitStamp
from policies.planstate import PlanState
from policies.shares import Shares

CPU = 1000
NOW = 20_000.0

releases = st.lists(
    st.tuples(
        st.integers(1, 8),  # cpu of the released gang
        st.floats(0, 9_000, allow_nan=False),  # admitted at
        st.floats(1, 9_000, allow_nan=False),  # held for
    ),
    max_size=6,
)


def _gang(name: str, queue: str, cpu: int, t: float) -> Gang:
    return Gang(
        f"ns/{name}", queue, Resources({"cpu": cpu * CPU}), 1, submitted=SubmitStamp(t, 0, name)
    )


def _planner(half_life: float | None, ran: dict[str, list[tuple[int, float, float]]]) -> Planner:
    tree = QueueTree.build(
        [
            Queue("a", usage_half_life=half_life, size_ratio=None),
            Queue("b", usage_half_life=half_life, size_ratio=None),
        ]
    )
    planner = Planner([Node("n0", Resources({"cpu": 8 * CPU}))], tree)
    events = []
    for queue, gangs in ran.items():
        for k, (cpu, start, held) in enumerate(gangs):
            events.append((start, "admit", queue, k, cpu))
            events.append((start + held, "release", queue, k, cpu))
    for time, what, queue, k, cpu in sorted(events):
        gang = _gang(f"{queue}-ran-{k}", queue, cpu, 0.0)
        if what == "admit":
            planner.add_admitted(AdmittedGang(gang, 1, {}, time, running=True))
        else:
            planner.remove_admitted(gang.id)
        planner.plan(time)  # each release is remembered at the next plan's time
    planner.add_pending(_gang("a-now", "a", 8, NOW - 2))
    planner.add_pending(_gang("b-now", "b", 8, NOW - 1))
    return planner


def _first(half_life: float | None, ran: dict[str, list[tuple[int, float, float]]]) -> str:
    decisions = _planner(half_life, ran).plan(NOW)
    assert len(decisions.admitted) == 1
    return decisions.admitted[0].gang_id


def _share(
    half_life: float | None, ran: dict[str, list[tuple[int, float, float]]], leaf: str
) -> float:
    planner = _planner(half_life, ran)
    state: PlanState = planner._ready()
    state.memory = planner._remembered(state, NOW)
    return Shares(state, keep=True).share_of(
        leaf, state.catalog.fit_class(_gang("x", leaf, 1, 0)), 0
    )


@settings(max_examples=60, deadline=None)
@given(ran_a=releases, ran_b=releases, half_life=st.floats(60, 6_000), more=st.integers(1, 8))
def test_the_decayed_share_is_monotone_in_usage(
    ran_a: list[tuple[int, float, float]],
    ran_b: list[tuple[int, float, float]],
    half_life: float,
    more: int,
) -> None:
    ran = {"a": ran_a, "b": ran_b}
    base = _share(half_life, ran, "a")
    # One more released gang, or a released gang asking for more, never lowers a's share.
    assert _share(half_life, {"a": [*ran_a, (more, 100.0, 500.0)], "b": ran_b}, "a") >= base - 1e-12
    if ran_a:
        cpu, start, held = ran_a[0]
        bigger = [(min(cpu + more, 8), start, held), *ran_a[1:]]
        assert _share(half_life, {"a": bigger, "b": ran_b}, "a") >= base - 1e-12
        # Held longer (admitted earlier, released at the same time): never lower either.
        earlier = min(start, 50.0 * more)
        longer = [(cpu, start - earlier, held + earlier), *ran_a[1:]]
        assert _share(half_life, {"a": longer, "b": ran_b}, "a") >= base - 1e-12
    # And the queue with the higher share does not go first.
    first = _first(half_life, ran)
    other = _share(half_life, ran, "b")
    if base > other + 1e-9:
        assert first == "ns/b-now"
    elif other > base + 1e-9:
        assert first == "ns/a-now"


@settings(max_examples=60, deadline=None)
@given(ran_a=releases, ran_b=releases)
def test_a_zero_half_life_is_the_instant_share(
    ran_a: list[tuple[int, float, float]], ran_b: list[tuple[int, float, float]]
) -> None:
    ran = {"a": ran_a, "b": ran_b}
    # Nothing is held at NOW: the instant share of both is 0, a's gang (older) goes first.
    assert _share(0.0, ran, "a") == _share(None, ran, "a") == 0.0
    assert _first(0.0, ran) == _first(None, ran) == "ns/a-now"
    # A half-life far below the time since the releases (at least 11,000 s): the same.
    assert _share(1.0, ran, "a") < 1e-9
    assert _first(1.0, ran) == "ns/a-now"


@settings(max_examples=40, deadline=None)
@given(ran_a=releases, ran_b=releases, half_life=st.floats(60, 6_000))
def test_the_decayed_share_decides_the_same_every_time(
    ran_a: list[tuple[int, float, float]],
    ran_b: list[tuple[int, float, float]],
    half_life: float,
) -> None:
    ran = {"a": ran_a, "b": ran_b}
    assert _share(half_life, ran, "a") == _share(half_life, ran, "a")
    first = _planner(half_life, ran).plan(NOW)
    again = _planner(half_life, ran).plan(NOW)
    assert first.admitted == again.admitted
    assert dict(first.pending) == dict(again.pending)
