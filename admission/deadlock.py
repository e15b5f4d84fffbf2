"""Deadlock detection among partially placed gangs: a wait-for graph and the gangs to evict.

Pure: the controller passes what its cache knows. Gang A waits for gang B when some of A's pods
are not placed, none of them fits any node as things stand, and on some node A's pod would fit if
B's pods there were gone. A cycle of such waits never resolves by itself (each gang holds what the
next one needs), so it is broken at once by evicting its youngest gang (the latest submitted: it
has waited least).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import networkx as nx

from policies import Gang, Node, Resources
from policies.model import placeable


@dataclass(frozen=True, slots=True)
class PartialGang:
    """An admitted gang with some pods bound and some waiting for room."""

    gang: Gang
    waiting: int  # pods not bound yet
    bound: Mapping[str, int]  # node -> pods of this gang bound there


def _eligible(node: Node, gang: Gang) -> bool:
    return placeable(node.labels, node.taints, gang)


def wait_for_graph(
    nodes: Sequence[Node], used: Mapping[str, Resources], partial: Sequence[PartialGang]
) -> nx.DiGraph:
    """Edges A -> B (gang ids): A's waiting pods can only get room that B holds.

    `used` is what all bound pods request per node (muster's and others').
    """
    graph = nx.DiGraph()
    holders: dict[str, list[PartialGang]] = {}
    for p in partial:
        graph.add_node(p.gang.id)
        for name in p.bound:
            holders.setdefault(name, []).append(p)
    for a in partial:
        if a.waiting <= 0:
            continue
        request = a.gang.pod_requests + Resources(pods=1)
        blockers: set[str] = set()
        free_somewhere = False
        for node in nodes:
            if not _eligible(node, a.gang):
                continue
            if a.gang.one_pod_per_node and a.bound.get(node.name):
                continue
            free = node.allocatable - used.get(node.name, Resources())
            if request.fits_in(free):
                free_somewhere = True
                break
            for b in holders.get(node.name, ()):
                if b.gang.id == a.gang.id:
                    continue
                held = b.gang.pod_requests.scale(b.bound[node.name]) + Resources(
                    pods=b.bound[node.name]
                )
                if request.fits_in(free + held):
                    blockers.add(b.gang.id)
        if not free_somewhere:
            graph.add_edges_from((a.gang.id, b) for b in blockers)
    return graph


def gangs_to_evict(graph: nx.DiGraph, gangs: Mapping[str, Gang]) -> list[str]:
    """The youngest gang of each cycle, until no cycle is left."""
    graph = graph.copy()
    victims: list[str] = []
    while True:
        try:
            cycle = nx.find_cycle(graph)
        except nx.NetworkXNoCycle:
            return victims
        members = {edge[0] for edge in cycle}
        youngest = max(members, key=lambda g: (gangs[g].submitted, g))
        victims.append(youngest)
        graph.remove_node(youngest)
