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


@st.composite
def pod_set_documents(draw: st.DrawFn, name: str, counted: bool) -> dict[str, Any]:
    """One pod set of a trace job (`podSets`), with ``count`` if ``counted``."""
    item: dict[str, Any] = {"name": name}
    if counted:
        item["count"] = draw(st.integers(1, 2))
    requests = {"cpu": draw(st.sampled_from(["500m", "1", "2", "4"]))}
    if draw(st.booleans()):
        requests["memory"] = draw(st.sampled_from(["1Gi", "1536Mi", "3G"]))
    item["podRequests"] = requests
    if draw(st.booleans()):
        item["nodeSelector"] = {"pool": draw(st.sampled_from(["login", "compute"]))}
    if draw(st.integers(0, 3)) == 0:
        item["tolerations"] = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
    if draw(st.booleans()):
        item["onePodPerNode"] = True
    return item


@st.composite
def pod_set_trace_documents(draw: st.DrawFn) -> dict[str, Any]:
    """A small trace of gangs of one to three pod sets (a main set and launcher-like ones) on
    two pools: one or two small login nodes, sometimes tainted, and a few compute nodes."""
    login: dict[str, Any] = {
        "name": "login",
        "count": draw(st.integers(1, 2)),
        "allocatable": {"cpu": "2", "memory": "4Gi"},
        "labels": {"pool": "login"},
    }
    if draw(st.booleans()):
        login["taints"] = [{"key": "dedicated", "value": "login"}]
    compute = {
        "name": "compute",
        "count": draw(st.integers(1, 5)),
        "allocatable": {"cpu": str(draw(st.sampled_from([4, 8]))), "memory": "16Gi"},
        "labels": {"pool": "compute"},
    }
    queues = draw(st.sampled_from([["a"], ["a", "b"]]))
    groups = []
    for i in range(draw(st.integers(1, 4))):
        others = [
            draw(pod_set_documents(f"launcher{k}", counted=True))
            for k in range(draw(st.integers(0, 2)))
        ]
        main = draw(pod_set_documents("main", counted=False))
        main_pods = draw(st.integers(1, 4))
        fixed = sum(other["count"] for other in others)
        size = fixed + main_pods
        sets = [*others, main] if draw(st.booleans()) else [main, *others]
        groups.append(
            {
                "name": f"g{i}",
                "count": draw(st.integers(1, 3)),
                "queue": draw(st.sampled_from(queues)),
                "size": size,
                "minSize": draw(st.integers(fixed + 1, size)),
                "elasticAfter": f"{draw(st.sampled_from([0, 5]))}s",
                "runtime": f"{draw(st.integers(1, 60))}s",
                "submit": {
                    "at": f"{draw(st.integers(0, 20))}s",
                    "interval": f"{draw(st.sampled_from([0, 1, 7]))}s",
                },
                "podSets": sets,
            }
        )
    return {
        "name": "pod-sets",
        "simulation": {"podStartDelay": f"{draw(st.sampled_from([0, 1, 2]))}s"},
        "cluster": {"nodes": [login, compute]},
        "queues": [{"name": q, "clogTimeout": "30s", "sizeRatio": None} for q in queues],
        "jobs": groups,
    }
