"""Node-aware gang fit: can all pods of a gang be placed on free node capacity, and where.

Nodes with identical labels and taints form a *node group*; whether a gang may use a node (node
selector, tolerations) is decided once per group. Gangs whose pods have the same request, the
same one-pod-per-node flag and the same eligible groups form a *fit class*; the planner asks
fit questions per class.

Placement is first-fit over one fixed node order: nodes sorted by free capacity at the start of
the plan, least free first, so pods fill partly used nodes before empty ones (first-fit over
that order is best-fit-like and keeps big holes for big gangs). Within one plan free capacity
only shrinks, so each fit class keeps a cursor: every node before it has no room for a pod of
the class and never will again in this plan. Finding room for a gang scans from the cursor and
stops as soon as enough pods are placed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from policies.model import Node, Taint, Toleration, tolerated

__all__ = ["UNLIMITED", "Cluster", "FitClass"]

# Free "pods" on a node that does not declare a pod limit, and "no limit" in counts.
UNLIMITED = 1 << 40


@dataclass(slots=True)
class NodeGroup:
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    nodes: list[int]  # node indices in the cluster's fit order


@dataclass(slots=True)
class FitClass:
    """Gangs whose pods fit the same nodes: same per-pod request, one-pod-per-node flag and
    eligible nodes."""

    request: tuple[int, ...]
    nonzero: tuple[int, ...]  # indices with request > 0
    one_pod_per_node: bool
    nodes: list[int]  # eligible node indices, in fit order
    restricted: bool  # a node selector or tolerations narrow the eligible nodes
    cursor: int = 0  # nodes[:cursor] have no room for a pod of this class
    room: int = -1  # pods of this class the free capacity holds, valid at room_version
    room_version: int = -1
    empty_room: int = -1  # pods of this class the empty cluster holds
    # The last successful fits(): (version, pods, where), reused by place() if still current.
    found: tuple[int, int, list[tuple[int, int]]] | None = None


class Cluster:
    """Free node capacity for one plan."""

    __slots__ = (
        "_eligible",
        "allocatable",
        "capacity",
        "free",
        "groups",
        "names",
        "node_names",
        "version",
    )

    def __init__(
        self,
        nodes: Sequence[Node],
        names: Sequence[str],
        held: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        """``held``: node name -> capacity held by gangs admitted before this plan."""
        self.names = names
        held = held or {}
        pods = names.index("pods") if "pods" in names else None
        self.capacity = [0] * len(names)  # total allocatable (DRF shares, size ratio)
        self.version = 0  # bumped on every placement
        self._eligible: dict[tuple[object, ...], list[int]] = {}
        rows: list[tuple[list[int], str, list[int], int]] = []
        group_of: dict[tuple[object, ...], int] = {}
        self.groups: list[NodeGroup] = []
        for node in nodes:
            key = (tuple(sorted(node.labels.items())), node.taints)
            gid = group_of.get(key)
            if gid is None:
                gid = group_of[key] = len(self.groups)
                self.groups.append(NodeGroup(dict(node.labels), node.taints, []))
            allocatable = [node.allocatable[name] for name in names]
            for i, amount in enumerate(allocatable):
                self.capacity[i] += amount
            if pods is not None and "pods" not in node.allocatable:
                allocatable[pods] = UNLIMITED
            free = [a - node.used[name] for a, name in zip(allocatable, names, strict=True)]
            taken = held.get(node.name)
            if taken is not None:
                free = [f - t for f, t in zip(free, taken, strict=True)]
            rows.append((free, node.name, allocatable, gid))
        # The fit order: least free first, then by name, so results do not depend on input order.
        rows.sort(key=lambda row: (row[0], row[1]))
        self.free: list[list[int]] = []
        node_names: list[str] = []
        self.allocatable: list[list[int]] = []
        for n, (free, name, allocatable, gid) in enumerate(rows):
            self.free.append(free)
            node_names.append(name)
            self.allocatable.append(allocatable)
            self.groups[gid].nodes.append(n)
        self.node_names = node_names

    def eligible(
        self, selector: Mapping[str, str], tolerations: tuple[Toleration, ...]
    ) -> list[int]:
        """Node indices (in fit order) a pod with this selector and these tolerations may use."""
        key: tuple[object, ...] = (tuple(sorted(selector.items())), tolerations)
        nodes = self._eligible.get(key)
        if nodes is None:
            nodes = sorted(
                n
                for group in self.groups
                if all(group.labels.get(k) == v for k, v in selector.items())
                and tolerated(group.taints, tolerations)
                for n in group.nodes
            )
            self._eligible[key] = nodes
        return nodes

    def empty_room(self, fit: FitClass) -> int:
        """How many pods of ``fit`` the whole cluster holds with nothing running."""
        if fit.empty_room < 0:
            fit.empty_room = self._count(fit, self.allocatable, 0, UNLIMITED)[0]
        return fit.empty_room

    def room(self, fit: FitClass) -> int:
        """How many pods of ``fit`` the free capacity holds now."""
        if fit.room_version != self.version:
            fit.room = self._count(fit, self.free, fit.cursor, UNLIMITED)[0]
            fit.room_version = self.version
        return fit.room

    def _count(
        self, fit: FitClass, capacity: list[list[int]], start: int, enough: int
    ) -> tuple[int, list[tuple[int, int]]]:
        """Pods of ``fit`` that ``capacity`` holds on fit.nodes[start:], stopping at ``enough``;
        and where (node index, pods)."""
        request = fit.request
        nonzero = fit.nonzero
        per_node_cap = 1 if fit.one_pod_per_node else UNLIMITED
        total = 0
        where: list[tuple[int, int]] = []
        for n in fit.nodes[start:]:
            free = capacity[n]
            most = per_node_cap
            for i in nonzero:
                count = free[i] // request[i]
                if count < most:
                    most = count
            if most > 0:
                if total + most >= enough:
                    where.append((n, enough - total))
                    return enough, where
                total += most
                where.append((n, most))
        return total, where

    def fits(self, fit: FitClass, pods: int) -> bool:
        """True if at least ``pods`` pods of ``fit`` fit now (stops counting there)."""
        if fit.room_version == self.version:
            return fit.room >= pods
        self._advance(fit)
        found, where = self._count(fit, self.free, fit.cursor, pods)
        if found < pods:
            fit.room = found
            fit.room_version = self.version
            return False
        fit.found = (self.version, pods, where)
        return True

    def place(self, fit: FitClass, want: int, at_least: int) -> dict[str, int] | None:
        """Place up to ``want`` pods of ``fit``, at least ``at_least``; None if fewer fit (then
        ``room(fit)`` is up to date). Returns node name -> pods."""
        if fit.room_version == self.version and fit.room < at_least:
            return None
        if fit.found is not None and fit.found[0] == self.version and fit.found[1] == want:
            found, where = want, fit.found[2]
        else:
            self._advance(fit)
            found, where = self._count(fit, self.free, fit.cursor, want)
        if found < at_least:
            fit.room = found
            fit.room_version = self.version
            return None
        request = fit.request
        nonzero = fit.nonzero
        names = self.node_names
        placement: dict[str, int] = {}
        for n, pods in where:
            free = self.free[n]
            for i in nonzero:
                free[i] -= request[i] * pods
            placement[names[n]] = pods
        self.version += 1
        return placement

    def _advance(self, fit: FitClass) -> None:
        """Move the cursor past nodes with no room for a pod of ``fit``."""
        request = fit.request
        nonzero = fit.nonzero
        nodes = fit.nodes
        free_of = self.free
        cursor = fit.cursor
        end = len(nodes)
        while cursor < end:
            free = free_of[nodes[cursor]]
            for i in nonzero:
                if free[i] < request[i]:
                    break
            else:
                break  # room for one pod here
            cursor += 1
        fit.cursor = cursor
