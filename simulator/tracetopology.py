"""A trace's topology: the cluster's levels (`cluster.topology`), each node group's domains
(`topology: {block: 4, rack: 4}`: 4 blocks of 4 racks of `count` nodes), a job's request
(`topology: {required: rack}` or `{preferred: rack}`) and the slowdown of gangs spread over
more than one domain (`simulation.crossDomainSlowdown: {level: rack, factor: 1.3}`). Levels are
checked by `policies.topology`, the planner's reader; a bad field raises `TraceError` naming
it. Documented in docs/simulator.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from policies.topology import (
    NO_TOPOLOGY,
    Topology,
    TopologyError,
    TopologyRequest,
    check_level,
)
from simulator.tracemodel import DomainSlowdown, NodeGroup, Trace, TraceError

__all__ = ["check_topology", "cluster_topology", "job_topology", "node_topology", "slowdown"]


def cluster_topology(value: object) -> Topology:
    """`cluster.topology`: the levels, outermost first (absent: none)."""
    if value is None:
        return NO_TOPOLOGY
    if not isinstance(value, list) or not all(isinstance(level, str) for level in value):
        raise TraceError("cluster.topology: must be a list of node label keys, e.g. [block, rack]")
    try:
        return Topology.parse(value, "cluster.topology")
    except TopologyError as exc:
        raise TraceError(str(exc)) from None


def node_topology(value: object, where: str) -> tuple[tuple[str, int], ...]:
    """A node group's `topology`: level -> how many domains of it, outermost first."""
    if value is None:
        return ()
    if not isinstance(value, Mapping) or not value:
        raise TraceError(f"{where}: must map levels to counts, e.g. {{block: 4, rack: 4}}")
    out: list[tuple[str, int]] = []
    for level, count in value.items():
        try:
            key = check_level(str(level), where)
        except TopologyError as exc:
            raise TraceError(str(exc)) from None
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise TraceError(f"{where}.{key}: {count!r} is not a whole number >= 1")
        out.append((key, count))
    return tuple(out)


def job_topology(value: object, where: str) -> TopologyRequest | None:
    """A job's `topology`: {required: LEVEL} or {preferred: LEVEL}."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or len(value) != 1:
        raise TraceError(f"{where}: must be {{required: LEVEL}} or {{preferred: LEVEL}}")
    ((how, level),) = value.items()
    if how not in ("required", "preferred"):
        raise TraceError(f"{where}: {how!r} is not required or preferred")
    try:
        return TopologyRequest(check_level(str(level), f"{where}.{how}"), how == "required")
    except TopologyError as exc:
        raise TraceError(str(exc)) from None


def slowdown(value: object, topology: Topology) -> DomainSlowdown | None:
    """`simulation.crossDomainSlowdown`: {level: LEVEL, factor: >= 1}."""
    where = "simulation.crossDomainSlowdown"
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) != {"level", "factor"}:
        raise TraceError(f"{where}: must be {{level: LEVEL, factor: NUMBER}}, e.g. 1.3")
    level, factor = value["level"], value["factor"]
    if not isinstance(level, str) or not topology.depth(level):
        known = ", ".join(topology.levels) or "none (set cluster.topology)"
        raise TraceError(f"{where}.level: {level!r} is not one of the cluster's levels: {known}")
    if (
        isinstance(factor, bool)
        or not isinstance(factor, int | float)
        or not math.isfinite(factor)
        or factor < 1
    ):
        raise TraceError(f"{where}.factor: {factor!r} is not a number >= 1")
    return DomainSlowdown(level, float(factor))


def check_topology(trace: Trace) -> None:
    """Node groups declare levels of the cluster's topology, in its order."""
    levels = trace.topology.levels
    for i, group in enumerate(trace.node_groups):
        _check_group(group, i, levels)


def _check_group(group: NodeGroup, index: int, levels: tuple[str, ...]) -> None:
    declared = [level for level, _ in group.topology]
    where = f"cluster.nodes[{index}].topology"
    unknown = [level for level in declared if level not in levels]
    if unknown:
        known = ", ".join(levels) or "none (set cluster.topology)"
        raise TraceError(f"{where}: {unknown[0]!r} is not one of the cluster's levels: {known}")
    if declared != sorted(declared, key=levels.index):
        raise TraceError(f"{where}: levels must come outermost first: {', '.join(levels)}")
