"""Traces with topology domains (issue 31): node groups of blocks and racks, a job's request, the
cross-domain slowdown, and the shipped rack trace's acceptance: topology-aware muster at least
10% faster than topology-blind muster, every required gang within one rack, ahead of `none`."""

from __future__ import annotations

from typing import Any

import pytest

from policies.topology import TopologyRequest
from simulator.engine import simulate
from simulator.records import EngineConfig
from simulator.report import summarize
from simulator.trace import TraceError, from_dict, load


def document(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "t",
        "cluster": {
            "topology": ["block", "rack"],
            "nodes": [
                {
                    "name": "n",
                    "count": 2,
                    "topology": {"block": 2, "rack": 3},
                    "allocatable": {"cpu": "8"},
                }
            ],
        },
        "simulation": {"crossDomainSlowdown": {"level": "rack", "factor": 1.5}},
        "queues": [{"name": "q"}],
        "jobs": [
            {
                "name": "j",
                "queue": "q",
                "size": 2,
                "podRequests": {"cpu": "8"},
                "runtime": "10m",
                "topology": {"required": "rack"},
            }
        ],
    }
    doc.update(changes)
    return doc


def test_node_groups_expand_into_labelled_domains() -> None:
    trace = from_dict(document())
    nodes = trace.nodes()
    assert trace.node_count == len(nodes) == 12
    assert nodes[0].name == "n-block0-rack0-0"
    assert nodes[0].labels == {"block": "block0", "rack": "block0-rack0"}
    assert {node.labels["rack"] for node in nodes} == {
        f"block{b}-rack{r}" for b in range(2) for r in range(3)
    }
    assert trace.jobs[0].topology == TopologyRequest("rack", True)
    assert trace.slowdown is not None and trace.slowdown.factor == 1.5


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("cluster", "topology"), ["rack", "rack"], "same name 'rack'"),
        (
            ("simulation", "crossDomainSlowdown"),
            {"level": "row", "factor": 2},
            "'row' is not one of the cluster's levels: block, rack",
        ),
        (
            ("simulation", "crossDomainSlowdown"),
            {"level": "rack", "factor": 0.5},
            "factor: 0.5 is not a number >= 1",
        ),
    ],
)
def test_bad_topology_fields_are_refused_by_name(
    path: tuple[str, str], value: Any, message: str
) -> None:
    doc = document()
    doc[path[0]][path[1]] = value
    with pytest.raises(TraceError, match=message):
        from_dict(doc)


def test_a_bad_job_request_and_an_undeclared_level_are_refused() -> None:
    doc = document()
    doc["jobs"][0]["topology"] = {"wanted": "rack"}
    with pytest.raises(TraceError, match=r"jobs\[0\] \(j\)\.topology: 'wanted' is not required"):
        from_dict(doc)
    doc = document()
    doc["cluster"]["nodes"][0]["topology"] = {"row": 2}
    with pytest.raises(TraceError, match="'row' is not one of the cluster's levels"):
        from_dict(doc)


def test_spread_gangs_run_slower() -> None:
    # Two racks of one node each: a required gang of two pods waits forever, a preferred
    # one spreads and takes 1.5 times its runtime.
    doc = document()
    doc["cluster"]["nodes"][0].update(count=1, topology={"block": 1, "rack": 2})
    doc["jobs"][0]["topology"] = {"preferred": "rack"}
    result = simulate(from_dict(doc), EngineConfig(check=True))
    (record,) = result.gangs
    assert record.domains == 2
    assert record.finished is not None and record.started is not None
    assert record.finished - record.started == pytest.approx(900.0)


def test_rack_trace_rewards_topology_aware_placement() -> None:
    trace = load("racks")
    figures = {
        name: summarize(simulate(trace, config))
        for name, config in {
            "aware": EngineConfig(),
            "blind": EngineConfig(topology_blind=True),
            "none": EngineConfig(admission="none"),
        }.items()
    }
    aware, blind, none = figures["aware"], figures["blind"], figures["none"]
    assert aware["makespan_s"] <= 0.9 * blind["makespan_s"]
    assert aware["makespan_s"] < none["makespan_s"]
    assert aware["topology"]["required_within_one_domain_share"] == 1.0
    assert aware["clogs"] <= none["clogs"] and aware["wait_p95_s"] < none["wait_p95_s"]
