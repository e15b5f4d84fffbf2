"""Property tests of both engines on generated traces."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from simulator.engine import (
    FAILED,
    FINISHED,
    HOLDING,
    STUCK,
    EngineConfig,
    EngineResult,
    simulate,
)
from simulator.report import summarize
from simulator.trace import Trace
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
        assert r.state != HOLDING
