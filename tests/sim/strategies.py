"""Hypothesis strategies for small simulator traces (valid by construction)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from simulator.trace import Trace, from_dict


@st.composite
def trace_documents(draw: st.DrawFn) -> dict[str, Any]:
    """A small trace: 1-6 nodes, 1-2 queues, 1-4 job groups of 1-3 gangs each."""
    nodes = draw(st.integers(1, 6))
    node_cpu = draw(st.integers(2, 8))
    queues = draw(st.sampled_from([["a"], ["a", "b"]]))
    groups = []
    for i in range(draw(st.integers(1, 4))):
        size = draw(st.integers(1, 4))
        groups.append(
            {
                "name": f"g{i}",
                "count": draw(st.integers(1, 3)),
                "kind": draw(st.sampled_from(["Job", "MiniCluster"])),
                "queue": draw(st.sampled_from(queues)),
                "size": size,
                "minSize": draw(st.integers(1, size)),
                "podRequests": {"cpu": str(draw(st.integers(1, node_cpu)))},
                "onePodPerNode": draw(st.booleans()),
                "runtime": f"{draw(st.integers(1, 100))}s",
                "submit": {
                    "at": f"{draw(st.integers(0, 50))}s",
                    "interval": f"{draw(st.sampled_from([0, 0, 1, 7]))}s",
                },
            }
        )
    return {
        "name": "hypothesis",
        "simulation": {"podStartDelay": f"{draw(st.sampled_from([0, 1, 2]))}s"},
        "cluster": {"nodes": [{"count": nodes, "allocatable": {"cpu": str(node_cpu)}}]},
        "queues": [
            {"name": q, "weight": draw(st.sampled_from([1, 2])), "clogTimeout": "30s"}
            for q in queues
        ],
        "jobs": groups,
    }


def traces() -> st.SearchStrategy[Trace]:
    return trace_documents().map(lambda doc: from_dict(doc, source="hypothesis"))
