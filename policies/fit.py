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

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import floordiv, ge, itemgetter

from policies.model import Node, Taint, Toleration, tolerated
from policies.resources import Resources

__all__ = ["UNLIMITED", "Cluster", "FitClass"]

# Free "pods" on a node that does not declare a pod limit, and "no limit" in counts.
UNLIMITED = 1 << 40


@dataclass(slots=True)
class NodeGroup:
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    nodes: list[int]  # node indices in the cluster's fit order


@dataclass(slots=True, eq=False)
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
    # The last successful fits(): (version, pods wanted, pods found, where), reused by place()
    # while no node in ``where`` changed: capacity only shrinks, so the nodes before and between
    # them still have no room and first-fit would choose the same.
    found: tuple[int, int, int, list[tuple[int, int]]] | None = None
    # pick(free) = the free amounts of the requested resources, need = their per-pod requests
    # (C-level per-node checks); pick is None when the class requests nothing.
    pick: Callable[[Sequence[int]], tuple[int, ...]] | None = field(init=False, default=None)
    need: tuple[int, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        nonzero = self.nonzero
        if nonzero:
            # itemgetter of one index returns a bare value: ask for it twice to get a tuple.
            picked = nonzero if len(nonzero) > 1 else nonzero * 2
            self.pick = itemgetter(*picked)
            self.need = tuple(self.request[i] for i in picked)


class Cluster:
    """Free node capacity for one plan."""

    __slots__ = (
        "_eligible",
        "_shapes",
        "capacity",
        "free",
        "groups",
        "names",
        "node_names",
        "shape_of",
        "touched",
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
        rows: list[tuple[list[int], str, int, int]] = []
        group_of: dict[tuple[object, ...], int] = {}
        self.groups: list[NodeGroup] = []
        # Nodes mostly share a few allocatable shapes: convert each distinct Resources once.
        # Resources -> (allocatable vector, "pods" unlimited when not declared; shape id).
        shape_of: dict[Resources, tuple[list[int], int]] = {}
        shapes: list[list[int]] = []
        per_shape: list[int] = []  # nodes of each shape
        declared: list[list[int]] = []  # allocatable as declared, per shape (for capacity)
        used_of: dict[Resources, list[int]] = {}
        for node in nodes:
            key = (tuple(sorted(node.labels.items())), node.taints)
            gid = group_of.get(key)
            if gid is None:
                gid = group_of[key] = len(self.groups)
                self.groups.append(NodeGroup(dict(node.labels), node.taints, []))
            shape = shape_of.get(node.allocatable)
            if shape is None:
                amounts = node.allocatable
                vector = [amounts[name] for name in names]
                declared.append(vector)
                if pods is not None and "pods" not in amounts:
                    vector = list(vector)
                    vector[pods] = UNLIMITED
                shape = shape_of[amounts] = (vector, len(shapes))
                shapes.append(vector)
                per_shape.append(0)
            allocatable, sid = shape
            per_shape[sid] += 1
            used = used_of.get(node.used)
            if used is None:
                amounts = node.used
                used = used_of[amounts] = [amounts[name] for name in names]
            free = [a - u for a, u in zip(allocatable, used, strict=True)]
            taken = held.get(node.name)
            if taken is not None:
                free = [f - t for f, t in zip(free, taken, strict=True)]
            rows.append((free, node.name, sid, gid))
        capacity = self.capacity
        for vector, count in zip(declared, per_shape, strict=True):
            for i, amount in enumerate(vector):
                capacity[i] += amount * count
        # The fit order: least free first, then by name, so results do not depend on input order.
        rows.sort(key=itemgetter(0, 1))
        self.free: list[list[int]] = [row[0] for row in rows]
        self.node_names = [row[1] for row in rows]
        self.shape_of = [row[2] for row in rows]  # node index -> shape id (for empty_room())
        self._shapes = shapes
        groups = self.groups
        for n, row in enumerate(rows):
            groups[row[3]].nodes.append(n)
        # touched[n]: the version at which node n's free capacity last changed.
        self.touched = [0] * len(rows)

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
            # Per node shape: pods of ``fit`` one such node holds, times such eligible nodes.
            shapes = self._shapes
            request = fit.request
            nonzero = fit.nonzero
            per_node_cap = 1 if fit.one_pod_per_node else UNLIMITED
            total = 0
            for sid, count in Counter(map(self.shape_of.__getitem__, fit.nodes)).items():
                allocatable = shapes[sid]
                most = per_node_cap
                for i in nonzero:
                    pods = allocatable[i] // request[i]
                    if pods < most:
                        most = pods
                if most > 0:
                    total += most * count
            fit.empty_room = min(total, UNLIMITED)
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
        """Pods of ``fit`` that ``capacity`` holds on fit.nodes[start:], stopping at ``enough``
        (at least 1); and where (node index, pods)."""
        pick = fit.pick
        need = fit.need
        nodes = fit.nodes
        total = 0
        where: list[tuple[int, int]] = []
        if pick is None:  # requests nothing: every node holds a pod, or unlimited pods
            most = 1 if fit.one_pod_per_node else UNLIMITED
            for k in range(start, len(nodes)):
                n = nodes[k]
                if total + most >= enough:
                    where.append((n, enough - total))
                    return enough, where
                total += most
                where.append((n, most))
            return total, where
        if fit.one_pod_per_node:
            for k in range(start, len(nodes)):
                n = nodes[k]
                if all(map(ge, pick(capacity[n]), need)):
                    where.append((n, 1))
                    total += 1
                    if total >= enough:
                        return enough, where
            return total, where
        for k in range(start, len(nodes)):
            n = nodes[k]
            most = min(map(floordiv, pick(capacity[n]), need))
            if most > 0:
                if most > UNLIMITED:
                    most = UNLIMITED
                if total + most >= enough:
                    where.append((n, enough - total))
                    return enough, where
                total += most
                where.append((n, most))
        return total, where

    def fits(self, fit: FitClass, pods: int, want: int) -> bool:
        """True if at least ``pods`` pods of ``fit`` fit now. Counts up to ``want`` (>= pods)
        and keeps where they would go for ``place(fit, want, ...)``."""
        if fit.room_version == self.version:
            return fit.room >= pods
        found, where = self._find(fit, want)
        if found < pods:
            fit.room = found
            fit.room_version = self.version
            return False
        fit.found = (self.version, want, found, where)
        return True

    def place(self, fit: FitClass, want: int, at_least: int) -> tuple[dict[str, int], int] | None:
        """Place up to ``want`` pods of ``fit``, at least ``at_least``; None if fewer fit (then
        ``room(fit)`` is up to date). Returns (node name -> pods, pods placed)."""
        if fit.room_version == self.version and fit.room < at_least:
            return None
        cached = fit.found
        if cached is not None and cached[1] == want and self._unchanged(cached[0], cached[3]):
            found, where = cached[2], cached[3]
        else:
            found, where = self._find(fit, want)
        if found < at_least:
            fit.room = found
            fit.room_version = self.version
            return None
        request = fit.request
        nonzero = fit.nonzero
        names = self.node_names
        placement: dict[str, int] = {}
        version = self.version = self.version + 1
        touched = self.touched
        free_of = self.free
        for n, pods in where:
            free = free_of[n]
            for i in nonzero:
                free[i] -= request[i] * pods
            placement[names[n]] = pods
            touched[n] = version
        return placement, found

    def _unchanged(self, version: int, where: list[tuple[int, int]]) -> bool:
        """True if no node in ``where`` lost capacity after ``version``."""
        touched = self.touched
        return all(touched[n] <= version for n, _ in where)

    def _find(self, fit: FitClass, enough: int) -> tuple[int, list[tuple[int, int]]]:
        """Like ``_count(fit, self.free, fit.cursor, enough)``, moving the cursor past the nodes
        with no room for a pod of ``fit`` on the way."""
        pick = fit.pick
        start = fit.cursor
        if pick is None:  # every node has room
            return self._count(fit, self.free, start, enough)
        need = fit.need
        nodes = fit.nodes
        free_of = self.free
        total = 0
        where: list[tuple[int, int]] = []
        end = len(nodes)
        if fit.one_pod_per_node:
            for k in range(start, end):
                n = nodes[k]
                if all(map(ge, pick(free_of[n]), need)):
                    if not total:
                        fit.cursor = k
                    where.append((n, 1))
                    total += 1
                    if total >= enough:
                        return enough, where
        else:
            for k in range(start, end):
                n = nodes[k]
                most = min(map(floordiv, pick(free_of[n]), need))
                if most > 0:
                    if not total:
                        fit.cursor = k
                    if most > UNLIMITED:
                        most = UNLIMITED
                    if total + most >= enough:
                        where.append((n, enough - total))
                        return enough, where
                    total += most
                    where.append((n, most))
        if not total:
            fit.cursor = end
        return total, where
