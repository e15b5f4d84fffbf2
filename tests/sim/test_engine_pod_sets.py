"""Gangs of several pod sets in the in-process engine (issue 27): each set's pods are created,
placed and counted with their own requests and selectors, and the gang lives as one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from muster.cli import main
from policies import Snapshot, plan
from simulator.engine import (
    FAILED,
    FINISHED,
    STUCK,
    Engine,
    EngineConfig,
    GangRecord,
    simulate,
)
from simulator.kwok_engine import replay
from simulator.kwok_settings import KwokError, KwokSettings
from simulator.report import summarize
from simulator.trace import Trace, from_dict, load
from tests.sim.strategies import pod_set_trace_documents


def world(jobs: list[dict[str, Any]], login_cpu: str = "2", **queue: Any) -> Trace:
    """One login node and four compute nodes of 8 cpu, each pool labelled."""
    return from_dict(
        {
            "name": "mpi",
            "cluster": {
                "nodes": [
                    {
                        "name": "login",
                        "allocatable": {"cpu": login_cpu},
                        "labels": {"pool": "login"},
                    },
                    {
                        "name": "compute",
                        "count": 4,
                        "allocatable": {"cpu": "8"},
                        "labels": {"pool": "compute"},
                    },
                ]
            },
            "queues": [{"name": "a", "clogTimeout": "60s", "sizeRatio": None, **queue}],
            "jobs": jobs,
        }
    )


def mpi(name: str, workers: int, **fields: Any) -> dict[str, Any]:
    """An MPI job: a launcher of 1 cpu on the login node, workers of 8 cpu on compute nodes."""
    job: dict[str, Any] = {
        "name": name,
        "queue": "a",
        "size": 1 + workers,
        "runtime": "100s",
        "podSets": [
            {
                "name": "launcher",
                "count": 1,
                "podRequests": {"cpu": "1"},
                "nodeSelector": {"pool": "login"},
            },
            {"name": "worker", "podRequests": {"cpu": "8"}, "nodeSelector": {"pool": "compute"}},
        ],
    }
    job.update(fields)
    return job


class PoolWatch:
    """Looks at every gang after every instant: which pool each pod set's pods are in."""

    def __init__(self) -> None:
        self.pools: dict[tuple[str, int], set[str]] = {}  # (gang, set index) -> pools seen
        self.launchers_running: set[str] = set()

    def submitted(self, record: GangRecord) -> None:
        pass

    def ended(self, record: GangRecord) -> None:
        pass

    def deciding(self, engine: Engine, now: float) -> None:
        pass

    def sampled(self, engine: Engine, now: float) -> None:
        nodes = engine.cluster.nodes
        for record in engine.gangs:
            for index, part in enumerate(record.sets):
                seen = self.pools.setdefault((record.gang.id, index), set())
                seen.update(nodes[n].labels["pool"] for n in part.bound)
            if record.sets and record.sets[1].running_pods:
                self.launchers_running.add(record.gang.id)


def run(trace: Trace, admission: str, **config: Any) -> tuple[Any, PoolWatch]:
    watch = PoolWatch()
    engine = Engine(trace, EngineConfig(admission=admission, check=True, **config), watch=watch)  # type: ignore[arg-type]
    return engine.run(), watch


def test_each_pod_set_goes_to_its_pool_and_muster_never_clogs() -> None:
    # Three gangs of a launcher and 3 workers on 4 compute nodes: any one fits, no two do.
    trace = world([mpi("m", 3, count=3)])
    none, none_watch = run(trace, "none")
    # Without gang admission the workers interleave: every gang holds nodes, none runs.
    assert summarize(none)["stuck_gangs"] == 3 and summarize(none)["clogs"] == 3
    muster, watch = run(trace, "muster")
    summary = summarize(muster)
    assert summary["finished"] == 3 and summary["clogs"] == 0 and summary["evictions"] == 0
    assert watch.launchers_running == {r.gang.id for r in muster.gangs}
    # Set 0 is the main set (the workers), set 1 the launcher. Under muster every set of every
    # gang ran in its pool; without gang admission the one login node took two launchers.
    pool = {0: "compute", 1: "login"}
    assert all(pools == {pool[index]} for (_, index), pools in watch.pools.items())
    assert all(pools <= {pool[index]} for (_, index), pools in none_watch.pools.items())
    assert sum(pools == {"login"} for (_, index), pools in none_watch.pools.items()) == 2


@pytest.mark.parametrize("admission", ["none", "muster"])
def test_a_gang_runs_only_once_its_other_pod_sets_run_whole(admission: str) -> None:
    # The login node holds one launcher. "elastic" may run with 1 worker of 3 (minSize counts
    # its launcher too), but not without its launcher: it waits for "first" to end.
    trace = world(
        [
            mpi("first", 1, runtime="1000s"),
            mpi("elastic", 3, minSize=2, submit={"at": "1s"}),
        ],
        login_cpu="1",
    )
    result, _ = run(trace, admission)
    first, elastic = result.gangs
    assert first.state == elastic.state == FINISHED
    assert first.finished is not None and elastic.started is not None
    assert elastic.started >= first.finished


def test_usage_counts_every_pod_sets_requests() -> None:
    result, _ = run(world([mpi("m", 3)]), "muster")
    (record,) = result.gangs
    running = [s for s in result.samples if s.running[0] == 1]
    assert running, "the gang never ran"
    # 1 cpu of its launcher and 3 x 8 of its workers, out of 2 + 4 x 8 cpu.
    assert {s.usage[0] for s in running} == {25.0}
    assert {s.utilization for s in running} == {25 / 34}
    assert record.admitted_size == 4


def test_a_clogged_gang_gives_back_every_pod_set_and_is_requeued() -> None:
    # A quota-only queue (nodeFit: false) admits "big" while "hog" holds two compute nodes:
    # its launcher is bound, 2 of its 3 workers are not, and it is evicted whole.
    trace = world(
        [
            mpi("hog", 2, runtime="10000s"),
            mpi("big", 3, submit={"at": "1s"}),
        ],
        nodeFit=False,
        backoff={"base": "10s", "max": "10s", "limit": 1},
    )
    result, watch = run(trace, "muster")
    hog, big = result.gangs
    assert hog.state == FINISHED
    assert big.state == FAILED and big.evictions == 2 and big.clogs == 2
    # Its launcher and 2 workers ran; the third worker found no node.
    assert big.reason.startswith("evicted (Clogged): 3 of at least 4 pods ready after 1m")
    assert watch.pools[big.gang.id, 1] == {"login"}  # its launcher was bound, then released


def test_unpinned_gangs_of_several_pod_sets_keep_the_planner_in_step() -> None:
    """Placement "scheduler": the planner is told where each pod set's pods land (the check
    compares the planner with `policies.plan` at every cycle and the pods it sees)."""
    result = simulate(load("mpi-launchers"), EngineConfig(placement="scheduler", check=True))
    summary = summarize(result)
    assert summary["finished"] == summary["gangs"]
    assert summary["placement_misses"] > 0  # the scheduler's spreading left the plan


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod_set_trace_documents())
def test_engines_hold_their_invariants_with_pod_sets(document: dict[str, Any]) -> None:
    """Random gangs of one to three pod sets: every invariant holds after every instant under
    both admissions and both placements; muster (pinned) never clogs, and every gang finishes,
    is rejected as never fitting, or is one the planner does not admit even alone on the empty
    cluster (its NeverFits screen looks at each pod set alone: sets that fit only one at a
    time wait as NoFit)."""
    trace = from_dict(document)
    for admission, placement in (("none", "pinned"), ("muster", "scheduler")):
        result = simulate(trace, EngineConfig(admission=admission, placement=placement, check=True))  # type: ignore[arg-type]
        assert {r.state for r in result.gangs} <= {FINISHED, FAILED, STUCK}
    result = simulate(trace, EngineConfig(admission="muster", check=True))
    assert summarize(result)["clogs"] == 0
    for record in result.gangs:
        if record.state == FINISHED or record.reason.startswith("NeverFits"):
            continue
        gang = record.gang
        late = gang.submitted.time + gang.elastic_after
        alone = plan(Snapshot(trace.nodes(), trace.queue_tree(), [], [gang], late))
        assert not alone.admitted, record.reason


def test_the_shipped_mpi_trace_runs_both_ways(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["sim", "mpi-launchers", "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["none"]["clogs"] > 0
    assert summary["muster"]["clogs"] == 0
    assert summary["muster"]["finished"] == summary["trace"]["gangs"]


def test_the_kwok_engine_refuses_pod_sets_before_anything() -> None:
    # No binaries are built here and no cluster runs: the refusal comes first.
    with pytest.raises(KwokError) as error:
        replay(load("mpi-launchers"), ["muster"], KwokSettings())
    assert str(error.value).startswith(
        "jobs mpi8: a Job gang of 2 pod sets (worker, launcher); the kwok engine replays a gang "
        "of several pod sets as a JobSet or a PodGroup"
    )
