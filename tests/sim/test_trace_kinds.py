"""JobSets and pod groups in traces (issue 29): `kind: JobSet` (its replicated Jobs are its pod
sets, admitted whole) and `kind: PodGroup` (plain pods its own operator makes, all at once), and
the shipped `ml-platform` trace that mixes them with Jobs and MiniClusters in three weighted
queues: muster does at least as well as the pod-level scheduler on every figure, without a
clog."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from muster.cli import main
from simulator.engine import EngineConfig, simulate
from simulator.podscheduler import pod_creation_order
from simulator.records import GangRecord
from simulator.trace import TraceError, from_dict, load


def _document(kind: str, **job: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "name": "g",
        "kind": kind,
        "queue": "a",
        "size": 5,
        "runtime": "60s",
        "podSets": [
            {"name": "head", "count": 1, "podRequests": {"cpu": "1"}},
            {"name": "worker", "podRequests": {"cpu": "4"}},
        ],
        **job,
    }
    return {
        "cluster": {"nodes": [{"count": 4, "allocatable": {"cpu": "8"}}]},
        "queues": [{"name": "a"}],
        "jobs": [fields],
    }


@pytest.mark.parametrize("kind", ["JobSet", "PodGroup"])
def test_jobsets_and_pod_groups_are_gangs_of_their_pod_sets(kind: str) -> None:
    trace = from_dict(_document(kind, count=2), default_name="t")
    (group,) = trace.jobs
    assert group.kind == kind and [s.count for s in group.pod_sets] == [4, 1]
    result = simulate(trace, EngineConfig(admission="muster", check=True))
    assert [r.gang.kind for r in result.gangs] == [kind, kind]
    assert all(r.finished is not None for r in result.gangs)


def test_a_jobset_below_its_size_is_refused_naming_the_field() -> None:
    with pytest.raises(TraceError) as error:
        from_dict(_document("JobSet", minSize=3))
    assert str(error.value).startswith("jobs[0] (g).minSize: 3 is below size 5, but a JobSet")
    from_dict(_document("PodGroup", minSize=3))  # a pod group may start at its minimum


def test_a_pod_group_with_a_runtime_limit_is_refused_naming_the_field() -> None:
    with pytest.raises(TraceError) as error:
        from_dict(_document("PodGroup", runtimeLimit="5m"))
    assert str(error.value).startswith("jobs[0] (g).runtimeLimit: a pod group has no runtime")
    from_dict(_document("JobSet", runtimeLimit="5m"))


def test_a_pod_group_s_pods_are_created_at_once_and_a_jobset_s_in_slow_start() -> None:
    """Without gang admission a Job's (and each replicated Job's) pods come in slow-start
    batches, interleaved with other gangs' of the same second; a pod group's all at once."""
    trace = from_dict(
        {
            **_document("PodGroup", count=1),
            "jobs": [
                {**_document("JobSet")["jobs"][0], "name": "js", "size": 9},
                {**_document("PodGroup")["jobs"][0], "name": "pg", "size": 9},
            ],
        }
    )
    result = simulate(trace, EngineConfig(admission="none"))
    gangs: list[GangRecord] = result.gangs
    by_kind = {r.gang.kind: r.index for r in gangs}
    order = pod_creation_order(
        [(0, by_kind["JobSet"], 8, 0), (0, by_kind["PodGroup"], 8, 0)], gangs
    )
    first_round = [index for _, index, _, _ in order[:9]]
    assert first_round == [by_kind["JobSet"], *([by_kind["PodGroup"]] * 8)]


def test_the_shipped_ml_platform_trace_muster_does_at_least_as_well_on_every_row(
    tmp_path: Path,
) -> None:
    trace = load("ml-platform")
    assert {group.kind for group in trace.jobs} == {"Job", "MiniCluster", "JobSet", "PodGroup"}
    assert len({group.queue for group in trace.jobs}) == 3
    out = tmp_path / "out"
    assert main(["sim", "ml-platform", "--admission", "both", "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    none, muster = summary["none"], summary["muster"]
    assert muster["clogs"] == 0 and none["clogs"] > 0
    assert muster["finished"] == none["finished"] == summary["trace"]["gangs"]
    lower = (
        "stuck_gangs failed makespan_s wait_mean_s wait_p50_s wait_p95_s wait_max_s "
        "evictions preemptions fairness_error"
    )
    for key in lower.split():
        assert muster[key] <= none[key], key
    assert muster["utilization_mean"] >= none["utilization_mean"]
    for name, queue in muster["queues"].items():
        for key in ("wait_mean_s", "wait_p50_s", "wait_p95_s", "wait_max_s", "stuck", "failed"):
            assert queue[key] <= none["queues"][name][key], (name, key)
