"""The cluster's topology domains (`policies.topology`) as sets of node ids, per level.

Built from the cluster's node groups (nodes with equal labels and taints) on first use of a
level, and kept with the `policies.fit.Cluster` (nodes' labels do not change without a new
one). A domain's nodes are a byte mask over node ids, as a `policies.fit.Pool`'s are, so the
pool of a fit class within a domain is one AND of two masks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from policies.topology import Topology

__all__ = ["Domain", "DomainIndex"]


@dataclass(frozen=True, slots=True)
class Domain:
    """One domain of a level: its path of label values (``("b1", "b1-r3")`` for a rack of
    block b1), its place in the level's list and its nodes (``member[node id] == 1``)."""

    path: tuple[str, ...]
    index: int
    member: bytes

    @property
    def name(self) -> str:
        return "/".join(self.path)


class DomainIndex:
    """The domains of every level of the cluster's topology, each level's sorted by path."""

    __slots__ = ("_groups", "_levels", "_size", "topology")

    def __init__(
        self,
        topology: Topology,
        groups: Sequence[tuple[Mapping[str, str], Sequence[int]]],
        size: int,
    ) -> None:
        """``groups``: (labels, node ids) of each node group; ``size``: the number of nodes."""
        self.topology = topology
        self._groups = groups
        self._size = size
        self._levels: dict[int, tuple[Domain, ...]] = {}

    def at(self, level: str) -> tuple[Domain, ...] | None:
        """The domains of ``level`` (a whole key or its name part); None if it is not one of
        the cluster's levels."""
        depth = self.topology.depth(level)
        if not depth:
            return None
        found = self._levels.get(depth)
        if found is None:
            found = self._levels[depth] = self._build(depth)
        return found

    def _build(self, depth: int) -> tuple[Domain, ...]:
        members: dict[tuple[str, ...], bytearray] = {}
        for labels, nodes in self._groups:
            path = self.topology.domain_of(labels, depth)
            if path is None:
                continue
            member = members.get(path)
            if member is None:
                member = members[path] = bytearray(self._size)
            for n in nodes:
                member[n] = 1
        return tuple(
            Domain(path, i, bytes(members[path])) for i, path in enumerate(sorted(members))
        )
