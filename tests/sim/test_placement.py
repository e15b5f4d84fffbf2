"""Placement "scheduler": admitted gangs are not pinned, the pod-level scheduler scores nodes
as kube-scheduler does, and what runs diverges from the plan (issue 18, point 3)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from muster.cli import main
from simulator.engine import FINISHED, STUCK, EngineConfig, node_score, simulate
from simulator.report import summarize
from simulator.trace import Trace, from_dict


def cluster(nodes: int, jobs: list[dict[str, Any]]) -> Trace:
    return from_dict(
        {
            "name": "placement",
            "cluster": {"nodes": [{"count": nodes, "allocatable": {"cpu": "4"}}]},
            "queues": [{"name": "q", "clogTimeout": "60s", "sizeRatio": None}],
            "jobs": jobs,
        }
    )


def job(name: str, size: int, cpu: str, at: str, **fields: Any) -> dict[str, Any]:
    # A gang of a trace (the simulator's input format), not a Job: tests/builders.py does not
    # build these.
    return {
        "name": name,
        "queue": "q",
        "size": size,
        "podRequests": {"cpu": cpu},
        "runtime": "100s",
        "submit": {"at": at},
        **fields,
    }


def same_cycle_pair() -> Trace:
    # Three 4-cpu nodes. "small" (2 pods of 2 cpu) and "wide" (2 pods of 4 cpu, one per
    # node) are admitted in one cycle: the plan packs small on node 0 and gives wide nodes
    # 1 and 2. Their pods interleave (small, wide, small, wide) and the scheduler spreads
    # small's second pod onto node 2, the emptiest, so wide's second pod fits nowhere.
    return cluster(
        3,
        [
            job("small", 2, "2", "0.1s"),
            job("wide", 2, "4", "0.2s", onePodPerNode=True),
        ],
    )


def test_pinned_runs_both_gangs_of_one_cycle_at_once() -> None:
    result = simulate(same_cycle_pair(), EngineConfig(admit_interval=1.0, check=True))
    summary = summarize(result)
    assert summary["placement"] == "pinned"
    assert summary["clogs"] == summary["evictions"] == summary["placement_misses"] == 0
    assert [(r.group, r.started, r.finished) for r in result.gangs] == [
        ("small", 3.0, 103.0),
        ("wide", 3.0, 103.0),
    ]


def test_unpinned_pods_spread_off_plan_and_the_wide_gang_holds_a_node_it_cannot_use() -> None:
    config = EngineConfig(admit_interval=1.0, placement="scheduler", check=True, horizon=50.0)
    result = simulate(same_cycle_pair(), config)
    small, wide = result.gangs
    assert small.bound == {0: 1, 2: 1}  # the plan had both on node 0
    assert wide.bound == {1: 1}
    assert wide.state == STUCK and wide.reason.startswith("Clogged: 1 of min 2 pods bound")
    assert result.placement_misses == 1


def test_unpinned_the_clog_timeout_evicts_the_partial_gang_and_it_runs_after() -> None:
    config = EngineConfig(admit_interval=1.0, placement="scheduler", check=True)
    result = simulate(same_cycle_pair(), config)
    small, wide = result.gangs
    assert [(i.time, i.kind, i.gang) for i in result.incidents] == [
        (61.0, "clog", wide.gang.id),
        (61.0, "evict", wide.gang.id),
    ]
    assert small.finished == 103.0
    # Requeued after its backoff, it fits again only once small's pods are gone.
    assert wide.state == FINISHED and wide.admitted_at == 103.0 and wide.finished == 205.0
    summary = summarize(result)
    assert summary["makespan_s"] == pytest.approx(204.9)
    assert (summary["clogs"], summary["evictions"]) == (1, 1)


def test_unpinned_the_planner_sees_where_the_pods_went_not_the_plan() -> None:
    # Two 4-cpu nodes. The plan packs "small" on node 0; the scheduler spreads it over both
    # nodes. "whole" (one pod of 4 cpu) comes a second later. Pinned, node 1 is free and it
    # runs at once. Unpinned, the planner sees small on both nodes, as the controller's cache
    # would, and keeps whole waiting instead of admitting it into a clog.
    trace = cluster(2, [job("small", 2, "2", "0s"), job("whole", 1, "4", "1s")])
    pinned = simulate(trace, EngineConfig(check=True))
    assert [r.first_admitted for r in pinned.gangs] == [0.0, 1.0]
    unpinned = simulate(trace, EngineConfig(placement="scheduler", check=True))
    small, whole = unpinned.gangs
    assert whole.first_admitted == small.finished == 102.0
    assert whole.clogs == 0 and whole.evictions == 0
    assert summarize(unpinned)["stuck_gangs"] == 0


def test_a_quota_only_queue_plans_no_nodes_so_no_pod_of_it_is_off_plan() -> None:
    trace = from_dict(
        {
            "name": "blind",
            "cluster": {"nodes": [{"count": 3, "allocatable": {"cpu": "4"}}]},
            "queues": [{"name": "q", "nodeFit": False, "sizeRatio": None}],
            "jobs": [job("a", 2, "2", "0s"), job("b", 2, "2", "0s")],
        }
    )
    result = simulate(trace, EngineConfig(placement="scheduler", check=True))
    assert all(r.state == FINISHED for r in result.gangs)
    assert result.placement_misses == 0


def test_node_score_is_kube_schedulers_least_allocated_plus_balanced_allocation() -> None:
    # A 32 cpu / 128 Gi node, empty, and a pod of 8 cpu / 24 Gi (units cancel out):
    # LeastAllocated: cpu 24*100//32 = 75, memory 104*100//128 = 81, mean 156//2 = 78.
    # BalancedAllocation: shares 0.25 and 0.1875, std 0.03125: int(96.875) = 96.
    assert node_score((32, 128), (8, 24), (32, 128)) == 78 + 96
    # The same node with 24 cpu already used: cpu 0, memory 81 -> 40; shares 1.0 and 0.1875.
    assert node_score((8, 128), (8, 24), (32, 128)) == 40 + int((1 - 0.8125 / 2) * 100)
    # A resource the node does not have is skipped; one resource alone is always balanced.
    assert node_score((4, 0), (2, 0), (4, 0)) == 50 + 100
    # Emptier scores higher: spreading.
    assert node_score((4,), (2,), (4,)) > node_score((2,), (2,), (4,))


def test_a_bad_placement_is_refused_with_the_choices() -> None:
    config = EngineConfig(placement="spread")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="placement 'spread' is not one of: pinned, scheduler"):
        simulate(same_cycle_pair(), config)


def test_sim_placement_flag(tmp_path: Path, capsys: Any) -> None:
    trace = tmp_path / "pair.yaml"
    document = {
        "name": "pair",
        "cluster": {"nodes": [{"count": 3, "allocatable": {"cpu": "4"}}]},
        "queues": [{"name": "q", "clogTimeout": "60s", "sizeRatio": None}],
        "jobs": [job("small", 2, "2", "0.1s"), job("wide", 2, "4", "0.2s", onePodPerNode=True)],
    }
    trace.write_text(json.dumps(document))
    base = ["sim", str(trace), "--admission", "muster", "--admit-interval", "1", "--quiet"]
    assert main([*base, "--placement", "scheduler", "--out", str(tmp_path / "s")]) == 0
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert summary["muster"]["placement"] == "scheduler"
    assert "placement scheduler" in (tmp_path / "s" / "report.html").read_text()
    assert summary["muster"]["evictions"] == 1 and summary["muster"]["placement_misses"] == 1
    assert main([*base, "--out", str(tmp_path / "p")]) == 0
    summary = json.loads((tmp_path / "p" / "summary.json").read_text())
    assert summary["muster"]["placement"] == "pinned" and summary["muster"]["evictions"] == 0
    capsys.readouterr()

    assert main([*base, "--placement", "scheduler", "--engine", "kwok"]) == 2
    assert "--placement is an in-process option" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main([*base, "--placement", "spread"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'spread'" in capsys.readouterr().err


@settings(max_examples=150, deadline=None)
@given(
    world=st.data(),
    one_pod_per_node=st.booleans(),
)
def test_bind_plan_binds_node_by_node_where_the_pods_still_fit(
    world: st.DataObject, one_pod_per_node: bool
) -> None:
    """`ClusterModel.bind_plan` binds a plan's pods on each of its nodes where they fit, as
    checking and binding node by node does (the reference below), and no more."""
    from policies import Gang, Node, Resources
    from simulator.podscheduler import ClusterModel
    from simulator.records import GangRecord

    count = world.draw(st.integers(1, 5))
    nodes = [
        Node(
            f"n{i}",
            Resources({"cpu": world.draw(st.sampled_from((1_000, 2_000, 4_000))), "pods": 4}),
            used=Resources({"cpu": world.draw(st.sampled_from((0, 500, 1_500)))}),
        )
        for i in range(count)
    ]
    gang = Gang(
        "ns/g",
        "q",
        Resources({"cpu": world.draw(st.sampled_from((250, 500, 1_000)))}),
        size=8,
        one_pod_per_node=one_pod_per_node,
    )
    model = ClusterModel(nodes, [gang.pod_requests], unpinned=False)
    request, pod_class = model.classify(gang)
    record = GangRecord(0, gang, 0, 60.0, "g", request, 600.0, pod_class=pod_class)
    already = world.draw(st.lists(st.integers(0, count - 1), max_size=2, unique=True))
    for node in already:  # pods bound before (a gang's pods bound by the scheduler)
        model.bind(record, node, 1)
    chosen = world.draw(st.lists(st.integers(0, count - 1), min_size=1, unique=True))
    placement = {f"n{n}": world.draw(st.integers(1, 3)) for n in chosen}

    expected_free = [list(vector) for vector in model.free]
    expected_bound = dict(record.bound)
    expected = 0
    for name, pods in placement.items():
        n = model.node_index[name]
        if one_pod_per_node and (pods > 1 or n in expected_bound):
            continue
        if all(expected_free[n][r] >= amount * pods for r, amount in request):
            for r, amount in request:
                expected_free[n][r] -= amount * pods
            expected_bound[n] = expected_bound.get(n, 0) + pods
            expected += pods
    before = record.bound_pods

    assert model.bind_plan(record, placement) == expected
    assert model.free == expected_free
    assert record.bound == expected_bound
    assert record.bound_pods == before + expected


@settings(max_examples=100, deadline=None)
@given(world=st.data())
def test_classify_answers_as_if_each_gang_were_asked_alone(world: st.DataObject) -> None:
    """`ClusterModel.classify` answers a gang whose screen key it met from that gang's class:
    the answer (request, and the class's eligible nodes) is the one a fresh model gives."""
    from simulator.podscheduler import ClusterModel
    from tests.strategies import gangs, nodes, queue_trees

    cluster = world.draw(nodes())
    pending = world.draw(
        gangs(world.draw(queue_trees()), "ns", unknown_queues=False, pod_sets=False)
    )
    requests = [gang.pod_requests for gang in pending]
    kept = ClusterModel(cluster, requests, unpinned=False)
    for gang in pending + pending[::-1]:
        request, pod_class = kept.classify(gang)
        fresh = ClusterModel(cluster, requests, unpinned=False)
        expected, fresh_class = fresh.classify(gang)
        assert request == expected
        assert kept.pod_classes[pod_class].nodes == fresh.pod_classes[fresh_class].nodes
        assert kept.pod_classes[pod_class].request == request
