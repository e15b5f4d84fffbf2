"""Property tests of both engines on generated traces."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.engine import (
    ADMITTED,
    FAILED,
    FINISHED,
    STUCK,
    EngineConfig,
    EngineResult,
    simulate,
)
from simulator.report import summarize
from simulator.trace import Trace, from_dict
from tests.sim.strategies import traces

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _fingerprint(result: EngineResult) -> list[tuple[object, ...]]:
    return [
        (r.gang.id, r.state, r.first_admitted, r.started, r.finished, r.evictions, r.clogs)
        for r in result.gangs
    ]


def _fits_alone(trace: Trace) -> bool:
    """Every gang's min pods fit the empty cluster (so a gang-aware admitter can run it)."""
    node = trace.node_groups[0]
    for group in trace.jobs:
        per_node = node.allocatable["cpu"] // group.pod_requests["cpu"]
        if group.one_pod_per_node:
            per_node = min(per_node, 1)
        if per_node * node.count < group.min:
            return False
    return True


@SETTINGS
@given(traces())
def test_every_gang_ends_finished_failed_or_stuck(trace: Trace) -> None:
    for admission in ("none", "muster"):
        result = simulate(trace, EngineConfig(admission=admission, check=True))
        states = {r.state for r in result.gangs}
        assert states <= {FINISHED, FAILED, STUCK}
        summary = summarize(result)
        assert summary["finished"] + summary["failed"] + summary["stuck_gangs"] == len(result.gangs)
        if admission == "none":
            assert summary["failed"] == 0  # nobody fails gangs without an admitter


@SETTINGS
@given(traces())
def test_muster_finishes_every_gang_that_fits_the_cluster(trace: Trace) -> None:
    result = simulate(trace, EngineConfig(admission="muster", check=True))
    if _fits_alone(trace):
        assert [r.gang.id for r in result.gangs if r.state != FINISHED] == []


@SETTINGS
@given(traces())
def test_time_never_goes_back(trace: Trace) -> None:
    for admission in ("none", "muster"):
        result = simulate(trace, EngineConfig(admission=admission))
        times = [s.time for s in result.samples]
        assert times == sorted(times)
        incidents = [i.time for i in result.incidents]
        assert incidents == sorted(incidents)
        for r in result.gangs:
            steps = [r.submitted, r.first_admitted, r.started, r.finished]
            known = [t for t in steps if t is not None]
            assert known == sorted(known), r
            if r.finished is not None:
                assert r.started is not None
                assert r.finished - r.started >= r.runtime - 1e-9


@SETTINGS
@given(traces())
def test_same_seed_same_outputs(trace: Trace) -> None:
    for admission in ("none", "muster"):
        config = EngineConfig(admission=admission, seed=11)
        first, second = simulate(trace, config), simulate(trace, config)
        assert _fingerprint(first) == _fingerprint(second)
        assert first.samples == second.samples
        assert summarize(first) | {"wall_s": 0, "plan_s": 0} == summarize(second) | {
            "wall_s": 0,
            "plan_s": 0,
        }


@SETTINGS
@given(traces())
def test_none_never_holds_a_clogged_gang_without_counting_it(trace: Trace) -> None:
    result = simulate(trace, EngineConfig(admission="none"))
    for r in result.gangs:
        if r.state == STUCK and r.bound_pods:
            assert r.clogs == 1
        assert r.state != ADMITTED


@st.composite
def busy_traces(draw: st.DrawFn) -> Trace:
    """Traces where the muster engine's lookahead window moves in every way: priorities put
    late gangs before earlier ones, a node-blind queue clogs and its gangs are evicted and
    requeued, elastic gangs wait for their timer, a StrictFIFO queue blocks."""
    groups = []
    queues = ["fifo", "blind", "elastic"]
    for i in range(draw(st.integers(2, 6))):
        queue = draw(st.sampled_from(queues))
        size = draw(st.integers(1, 5))
        group: dict[str, object] = {
            "name": f"g{i}",
            "count": draw(st.integers(1, 6)),
            "queue": queue,
            "size": size,
            "podRequests": {"cpu": str(draw(st.integers(1, 4)))},
            "priority": draw(st.integers(0, 2)),
            "runtime": f"{draw(st.integers(5, 80))}s",
            "submit": {
                "at": f"{draw(st.integers(0, 40))}s",
                "interval": f"{draw(st.sampled_from([0, 1, 3, 9]))}s",
            },
        }
        if queue == "elastic":
            group["minSize"] = draw(st.integers(1, size))
            group["elasticAfter"] = f"{draw(st.sampled_from([0, 5, 30]))}s"
        groups.append(group)
    document = {
        "name": "busy",
        "simulation": {"podStartDelay": "1s", "horizon": "2000s"},
        "cluster": {"nodes": [{"count": draw(st.integers(2, 6)), "allocatable": {"cpu": "4"}}]},
        "queues": [
            {"name": "fifo", "strategy": "StrictFIFO", "clogTimeout": "20s"},
            {
                "name": "blind",
                "nodeFit": False,
                "clogTimeout": "15s",
                "backoff": {"base": "5s", "max": "20s", "limit": 3},
            },
            {"name": "elastic", "clogTimeout": "20s", "sizeRatio": None},
        ],
        "jobs": groups,
    }
    return from_dict(document, source="hypothesis")


@SETTINGS
@given(busy_traces(), st.sampled_from([0, 1, 2, 5]), st.sampled_from(["drf", "fifo"]))
def test_muster_engine_plans_as_plan_does(trace: Trace, lookahead: int, policy: str) -> None:
    """check=True: at every decision the planner's window is each queue's first ``lookahead``
    pending gangs and its decisions equal policies.plan on that snapshot."""
    result = simulate(trace, EngineConfig(lookahead=lookahead, policy=policy, check=True))
    assert {r.state for r in result.gangs} <= {FINISHED, FAILED, STUCK}


# --- placement "scheduler" (admitted gangs not pinned) ----------------------------------------


@SETTINGS
@given(traces())
def test_unpinned_placement_keeps_every_invariant(trace: Trace) -> None:
    """check=True after every instant: no node overcommitted, counts agree, and the planner
    counts every bound pod where it is bound (and only those once a gang stops holding its
    plan). Every gang still ends finished, failed or stuck, and the run is deterministic."""
    for admission in ("none", "muster"):
        config = EngineConfig(admission=admission, placement="scheduler", check=True, seed=3)
        result = simulate(trace, config)
        assert {r.state for r in result.gangs} <= {FINISHED, FAILED, STUCK}
        assert result.placement == "scheduler"
        assert _fingerprint(simulate(trace, config)) == _fingerprint(result)


@SETTINGS
@given(busy_traces(), st.sampled_from([0, 2]), st.sampled_from([0.0, 3.0]))
def test_unpinned_muster_engine_plans_as_plan_does(
    trace: Trace, lookahead: int, admit_interval: float
) -> None:
    """The planner's incremental record of gangs whose placement follows their pods still
    decides as policies.plan does on a snapshot of the same moment."""
    config = EngineConfig(
        lookahead=lookahead, admit_interval=admit_interval, placement="scheduler", check=True
    )
    result = simulate(trace, config)
    assert {r.state for r in result.gangs} <= {FINISHED, FAILED, STUCK}
