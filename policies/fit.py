"""Node-aware gang fit: can all pods of a gang be placed on free node capacity, and where.

Nodes with identical labels and taints form a *node group*; whether a gang may use a node (node
selector, tolerations) is decided once per group, and the nodes a gang may use form a *pool*.
Gangs whose pods have the same request, the same one-pod-per-node flag and the same pool form a
*fit class*; the planner asks fit questions per class.

Placement is first-fit over one fixed node order: nodes sorted by free capacity at the start of
the plan, least free first, then by name, so pods fill partly used nodes before empty ones
(first-fit over that order is best-fit-like and keeps big holes for big gangs).

A pool keeps its nodes in *buckets* of equal free capacity: the sorted list of distinct free
vectors is the fit order at bucket granularity, and within a bucket nodes go by name. So a fit
question skips a whole bucket that has no room for one pod of the class (most of a busy
cluster), counts room per bucket by arithmetic, and walks single nodes only where pods go.
Nodes a plan places pods on are *touched*: their plan-start bucket keeps them in place (the
order is fixed for the plan) and their current free capacity lives in a per-plan overlay.
Within one plan free capacity only shrinks, so each fit class keeps a cursor: every node before
it has no room for a pod of the class and never will again in this plan.

The cluster outlives a plan: between plans, `take` moves a node to the bucket of its new free
capacity (gangs admitted or finished, pods of other owners), in O(pools of the node), so an
incremental planner never rebuilds or re-sorts the node order.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import floordiv, ge, itemgetter, mul, sub

from policies.model import (
    Node,
    NodeTerm,
    PolicyError,
    Taint,
    Toleration,
    node_affinity_holds,
    tolerated,
)
from policies.resources import Resources

__all__ = ["UNLIMITED", "Cluster", "FitClass", "Pool"]

# Free "pods" on a node that does not declare a pod limit, and "no limit" in counts.
UNLIMITED = 1 << 40

Vector = tuple[int, ...]


@dataclass(slots=True)
class NodeGroup:
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    nodes: list[int]  # node ids


class _Bucket:
    """The nodes of one pool that have the same free capacity, by name (node id) on demand."""

    __slots__ = ("members", "order")

    def __init__(self) -> None:
        self.members: set[int] = set()
        self.order: list[int] | None = None  # sorted members; None until asked after a change

    def sorted(self) -> list[int]:
        order = self.order
        if order is None:
            order = self.order = sorted(self.members)
        return order


class Pool:
    """The nodes some gangs may use, grouped by free capacity (see the module docstring)."""

    __slots__ = ("buckets", "member", "orders", "plan", "shapes", "vectors")

    def __init__(
        self, member: bytes, nodes: Sequence[int], free: Sequence[Vector], shape_of: Sequence[int]
    ) -> None:
        self.member = member  # member[node id] == 1 if the node is in the pool
        self.buckets: dict[Vector, _Bucket] = {}
        # allocatable shape id -> nodes (empty_room)
        self.shapes: Counter[int] = Counter(map(shape_of.__getitem__, nodes))
        buckets = self.buckets
        for n in nodes:
            vector = free[n]
            bucket = buckets.get(vector)
            if bucket is None:
                bucket = buckets[vector] = _Bucket()
            bucket.members.add(n)
        self.vectors: list[Vector] = sorted(buckets)  # the fit order of the buckets
        # Per plan: each bucket's node order (None until a walk needs it), like vectors.
        self.plan = -1
        self.orders: list[list[int] | None] = []

    def move(self, n: int, old: Vector, new: Vector) -> None:
        buckets = self.buckets
        bucket = buckets[old]
        bucket.members.discard(n)
        bucket.order = None
        if not bucket.members:
            del buckets[old]
            vectors = self.vectors
            del vectors[bisect.bisect_left(vectors, old)]
        target = buckets.get(new)
        if target is None:
            target = buckets[new] = _Bucket()
            bisect.insort(self.vectors, new)
        target.members.add(n)
        target.order = None


@dataclass(slots=True, eq=False)
class FitClass:
    """Gangs whose pods fit the same nodes: same per-pod request, one-pod-per-node flag and
    pool."""

    request: tuple[int, ...]
    nonzero: tuple[int, ...]  # indices with request > 0
    one_pod_per_node: bool
    pool: Pool
    restricted: bool  # a node selector or tolerations narrow the eligible nodes
    serial: int = 0  # names the class in the planner's verdict keys
    empty_room: int = -1  # pods of this class the empty cluster holds
    # Per plan (reset when ``plan`` differs from the cluster's): the cursor is the bucket index
    # in pool.vectors and the position in that bucket's order of the first node that may have
    # room; every node before it has none for the rest of the plan.
    plan: int = -1
    cursor: int = 0
    offset: int = 0
    room: int = -1  # pods of this class the free capacity holds, valid at room_version
    room_version: int = -1
    # The last successful fits(): (plan, version, pods wanted, pods found, where), reused by
    # place() while no node in ``where`` changed: capacity only shrinks, so the nodes before
    # and between them still have no room and first-fit would choose the same.
    found: tuple[int, int, int, int, list[tuple[int, int]]] | None = None
    # Pods of this class one node with a given free vector holds (bounded cache), and per
    # plan the same for each bucket of the pool, like pool.vectors.
    per_vector: dict[Vector, int] = field(default_factory=dict)
    rooms: list[int] = field(default_factory=list)
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

    def pods_on(self, free: Sequence[int]) -> int:
        """Pods of this class a node with ``free`` capacity holds (<= 0: none)."""
        pick = self.pick
        if pick is None:  # requests nothing: every node holds a pod, or unlimited pods
            return 1 if self.one_pod_per_node else UNLIMITED
        if self.one_pod_per_node:
            return 1 if all(map(ge, pick(free), self.need)) else 0
        most = min(map(floordiv, pick(free), self.need))
        return UNLIMITED if most > UNLIMITED else most

    def per_node(self, vector: Vector) -> int:
        """`pods_on` for a bucket's vector, cached."""
        cache = self.per_vector
        pods = cache.get(vector)
        if pods is None:
            if len(cache) >= 4096:
                cache.clear()
            pods = cache[vector] = self.pods_on(vector)
        return pods


class Cluster:
    """Free node capacity: the state at the start of a plan (kept between plans) and, during a
    plan, an overlay of the nodes that plan placed pods on."""

    __slots__ = (
        "_kept",
        "_pools",
        "_reservation",
        "_shapes",
        "_steps",
        "_without",
        "capacity",
        "current",
        "free",
        "group_of",
        "groups",
        "index",
        "names",
        "node_names",
        "plan",
        "pools_of",
        "shape_of",
        "touched",
        "touched_nodes",
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
        self.version = 0  # bumped on every change of free capacity
        self.plan = 0  # bumped by begin()
        # Node ids follow names (ties in input order): within a bucket, id order is name order.
        ordered = sorted(range(len(nodes)), key=[node.name for node in nodes].__getitem__)
        self.node_names: list[str] = []
        self.index: dict[str, int] = {}  # name -> id (the first, were names repeated)
        group_of: dict[tuple[object, ...], int] = {}
        self.groups: list[NodeGroup] = []
        self.group_of: list[int] = []
        # Nodes mostly share a few allocatable shapes: convert each distinct Resources once.
        # Resources -> (allocatable vector, "pods" unlimited when not declared; shape id).
        shape_of: dict[Resources, tuple[list[int], int]] = {}
        shapes: list[list[int]] = []
        per_shape: list[int] = []  # nodes of each shape
        declared: list[list[int]] = []  # allocatable as declared, per shape (for capacity)
        used_of: dict[Resources, list[int]] = {}
        self.free: list[Vector] = []
        self.shape_of: list[int] = []  # node id -> shape id (for empty_room())
        for k in ordered:
            node = nodes[k]
            n = len(self.node_names)
            self.node_names.append(node.name)
            self.index.setdefault(node.name, n)
            key = (tuple(sorted(node.labels.items())), node.taints)
            gid = group_of.get(key)
            if gid is None:
                gid = group_of[key] = len(self.groups)
                self.groups.append(NodeGroup(dict(node.labels), node.taints, []))
            self.groups[gid].nodes.append(n)
            self.group_of.append(gid)
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
            self.free.append(tuple(free))
            self.shape_of.append(sid)
        for vector, count in zip(declared, per_shape, strict=True):
            self.capacity = [c + a * count for c, a in zip(self.capacity, vector, strict=True)]
        self._shapes = shapes
        self._pools: dict[tuple[object, ...] | bytes, Pool] = {}
        self._without: dict[tuple[int, int], Pool] = {}
        self._kept: set[int] = set()  # ids of the pools eligible() handed out (never dropped)
        self._reservation: Pool | None = None  # the nodes reserve() chose last
        self._steps: dict[Vector, dict[Vector, dict[int, Vector]]] = {}  # see take_placement
        self.pools_of: list[list[Pool]] = [[] for _ in self.free]
        # The overlay of the plan in progress (see begin()), indexed by node id: free capacity
        # now of the nodes the plan placed pods on (None: as at the start), and the version
        # of each one's last placement.
        self.current: list[list[int] | None] = [None] * len(self.free)
        self.touched: list[int] = [0] * len(self.free)
        self.touched_nodes: list[int] = []

    # --- between plans ---------------------------------------------------------------------

    def begin(self) -> None:
        """Start a plan: capacity as it is now is the plan's starting point and fit order."""
        self.plan += 1
        self.version += 1
        current = self.current
        touched = self.touched
        for n in self.touched_nodes:
            current[n] = None
            touched[n] = 0
        self.touched_nodes = []

    def take(self, n: int, request: Sequence[int], times: int) -> None:
        """Take ``times`` x ``request`` (a vector; negative ``times`` gives back) from node
        ``n``'s free capacity. Not during a plan."""
        old = self.free[n]
        new = tuple(map(sub, old, map(mul, request, repeat(times))))
        if new == old:
            return
        self.free[n] = new
        self.version += 1
        for pool in self.pools_of[n]:
            pool.move(n, old, new)

    def take_placement(self, placement: Mapping[str, int], request: Vector, sign: int) -> None:
        """`take` for every node of a gang's placement (node name -> pods; a name the cluster
        does not know is skipped): ``sign`` 1 takes the pods' requests, -1 gives them back. Not
        during a plan.

        One pass over the nodes, as a planner delta is one gang's whole placement: a node's
        new free vector comes from a table per request (free capacity takes few distinct
        values, so a step is looked up rather than computed; equal vectors are then one
        object), and the version moves once."""
        steps = self._steps.get(request)
        if steps is None:
            if len(self._steps) >= 256:
                self._steps.clear()
            steps = self._steps[request] = {}
        index = self.index
        free = self.free
        pools_of = self.pools_of
        changed = False
        for node, pods in placement.items():
            n = index.get(node)
            if n is None:
                continue
            old = free[n]
            by_times = steps.get(old)
            if by_times is None:
                if len(steps) >= 4096:
                    steps.clear()
                by_times = steps[old] = {}
            times = sign * pods
            new = by_times.get(times)
            if new is None:
                new = by_times[times] = tuple(map(sub, old, map(mul, request, repeat(times))))
            if new == old:
                continue
            free[n] = new
            changed = True
            for pool in pools_of[n]:
                pool.move(n, old, new)
        if changed:
            self.version += 1

    # --- pools -----------------------------------------------------------------------------

    def eligible(
        self,
        selector: Mapping[str, str],
        tolerations: tuple[Toleration, ...],
        terms: tuple[NodeTerm, ...] = (),
    ) -> Pool:
        """The pool of nodes a pod with this selector, these tolerations and this required node
        affinity may use."""
        key: tuple[object, ...] = (tuple(sorted(selector.items())), tolerations, terms)
        pool = self._pools.get(key)
        if pool is None:
            member = bytearray(len(self.free))
            for group in self.groups:
                if (
                    all(group.labels.get(k) == v for k, v in selector.items())
                    and node_affinity_holds(group.labels, terms)
                    and tolerated(group.taints, tolerations)
                ):
                    for n in group.nodes:
                        member[n] = 1
            pool = self._pools[key] = self._pool(bytes(member))
            self._kept.add(id(pool))
        return pool

    def reserve(self, fit: FitClass, pods: int) -> Pool:
        """The nodes of ``fit``'s pool set aside for a gang that needs ``pods`` pods of ``fit``
        and does not fit now: the nodes with the most free capacity (in fit order, from the
        end), as many as hold ``pods`` pods when empty. Those are the nodes it will fit on
        soonest, as far as free capacity tells. One reservation lives at a time: the previous
        one's pools are dropped (they would otherwise be kept up to date forever)."""
        pool = fit.pool
        shapes = self._shapes
        shape_of = self.shape_of
        room_of: dict[int, int] = {}
        # Nodes offering a resource the gang does not ask for (GPUs, for a CPU-only gang)
        # come last: reserving them would keep the gangs that need it off them too.
        wanted = set(fit.nonzero)
        plain: dict[int, bool] = {}
        member = bytearray(len(self.free))
        total = 0
        for second in (False, True):
            for vector in reversed(pool.vectors):
                for n in pool.buckets[vector].sorted():
                    sid = shape_of[n]
                    room = room_of.get(sid)
                    if room is None:
                        shape = shapes[sid]
                        room = room_of[sid] = max(fit.pods_on(shape), 0)
                        plain[sid] = all(
                            i in wanted or not amount or amount == UNLIMITED
                            for i, amount in enumerate(shape)
                        )
                    if room <= 0 or member[n] or plain[sid] == second:
                        continue
                    member[n] = 1
                    total += room
                    if total >= pods:
                        break
                if total >= pods:
                    break
            if total >= pods:
                break
        reserved = self._pool(bytes(member))
        old = self._reservation
        if old is not None and old is not reserved:
            self._drop(old)
        self._reservation = reserved
        return reserved

    def _drop(self, reserved: Pool) -> None:
        """Forget a reservation's pool and the pools derived from it (unless eligible())."""
        doomed = [reserved]
        for key in [key for key in self._without if key[1] == id(reserved)]:
            doomed.append(self._without.pop(key))
        for pool in doomed:
            if id(pool) in self._kept or self._pools.get(pool.member) is not pool:
                continue
            if any(p is pool for p in self._without.values()):
                continue
            del self._pools[pool.member]
            for n, inside in enumerate(pool.member):
                if inside:
                    self.pools_of[n].remove(pool)

    def without(self, pool: Pool, reserved: Pool) -> Pool:
        """``pool`` minus the nodes of ``reserved``."""
        key = (id(pool), id(reserved))
        found = self._without.get(key)
        if found is None:
            member = bytes(a & (b ^ 1) for a, b in zip(pool.member, reserved.member, strict=True))
            found = self._without[key] = self._pool(member)
        return found

    def _pool(self, member: bytes) -> Pool:
        # Pools with the same nodes are one object (kept up to date once).
        pool = self._pools.get(member)
        if pool is None:
            nodes = [n for n, inside in enumerate(member) if inside]
            pool = self._pools[member] = Pool(member, nodes, self.free, self.shape_of)
            pools_of = self.pools_of
            for n in nodes:
                pools_of[n].append(pool)
        return pool

    # --- fit questions -------------------------------------------------------------------

    def empty_room(self, fit: FitClass) -> int:
        """How many pods of ``fit`` the whole cluster holds with nothing running."""
        if fit.empty_room < 0:
            # Per node shape: pods of ``fit`` one such node holds, times such eligible nodes.
            shapes = self._shapes
            request = fit.request
            nonzero = fit.nonzero
            per_node_cap = 1 if fit.one_pod_per_node else UNLIMITED
            total = 0
            for sid, count in fit.pool.shapes.items():
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

    def _start(self, fit: FitClass) -> None:
        """Reset ``fit``'s per-plan state at its first question of a plan."""
        fit.plan = self.plan
        fit.offset = 0
        fit.found = None
        pool = fit.pool
        vectors = pool.vectors
        if pool.plan != self.plan:
            pool.plan = self.plan
            buckets = pool.buckets
            pool.orders = [buckets[vector].order for vector in vectors]
        fit.rooms = list(map(fit.per_node, vectors))
        first = fit.request[0] if fit.request else 0
        if first > 0 and fit.pick is not None:
            # Buckets are sorted by free capacity, first resource first: the ones with less
            # of it than one pod asks for come first and have no room.
            fit.cursor = bisect.bisect_left(vectors, (first,))
        else:
            fit.cursor = 0

    def room(self, fit: FitClass) -> int:
        """How many pods of ``fit`` the free capacity holds now."""
        if fit.room_version == self.version:
            return fit.room
        if fit.plan != self.plan:
            self._start(fit)
        pool = fit.pool
        vectors = pool.vectors
        cursor = fit.cursor
        total = 0
        # Untouched nodes by arithmetic: per bucket, pods per node times its nodes...
        if cursor < len(vectors):
            buckets = pool.buckets
            rooms = fit.rooms
            for v in range(cursor, len(vectors)):
                per_node = rooms[v]
                if per_node > 0:
                    total += per_node * len(buckets[vectors[v]].members)
            # ... then touched nodes one by one, instead of what their bucket promised. (A
            # touched node in a bucket before the cursor has no room and was not counted.)
            first = vectors[cursor]
            member = pool.member
            start_of = self.free
            current = self.current
            for n in self.touched_nodes:
                if member[n]:
                    start = start_of[n]
                    if start >= first:
                        per_node = fit.per_node(start)
                        if per_node > 0:
                            total -= per_node
                    now = current[n]
                    assert now is not None
                    pods = fit.pods_on(now)
                    if pods > 0:
                        total += pods
        fit.room = min(total, UNLIMITED)
        fit.room_version = self.version
        return fit.room

    def _find(self, fit: FitClass, enough: int) -> tuple[int, list[tuple[int, int]]]:
        """Pods of ``fit`` the free capacity holds, in fit order from the cursor, stopping at
        ``enough`` (at least 1); and where (node id, pods). Moves the cursor past the nodes with
        no room for a pod of ``fit`` on the way."""
        if fit.plan != self.plan:
            self._start(fit)
        pool = fit.pool
        orders = pool.orders
        rooms = fit.rooms
        current = self.current
        pick = fit.pick
        need = fit.need
        one_per_node = fit.one_pod_per_node
        total = 0
        where: list[tuple[int, int]] = []
        v = fit.cursor
        start = fit.offset
        leading = True  # no node with room seen yet: the cursor follows
        end = len(rooms)
        while v < end:
            per_node = rooms[v]
            if per_node > 0:
                order = orders[v]
                if order is None:
                    order = orders[v] = pool.buckets[pool.vectors[v]].sorted()
                if pick is None or one_per_node:
                    for k in range(start, len(order)):
                        n = order[k]
                        now = current[n]
                        if (
                            now is not None
                            and pick is not None
                            and not all(map(ge, pick(now), need))
                        ):
                            continue
                        if leading:
                            fit.cursor, fit.offset, leading = v, k, False
                        if total + per_node >= enough:
                            where.append((n, enough - total))
                            return enough, where
                        total += per_node
                        where.append((n, per_node))
                else:
                    # An untouched node holds per_node pods, a touched one what is left.
                    for k in range(start, len(order)):
                        n = order[k]
                        now = current[n]
                        pods = per_node if now is None else min(map(floordiv, pick(now), need))
                        if pods > 0:
                            if leading:
                                fit.cursor, fit.offset, leading = v, k, False
                            if total + pods >= enough:
                                where.append((n, enough - total))
                                return enough, where
                            total += pods
                            where.append((n, pods))
            v += 1
            start = 0
        if leading:
            fit.cursor, fit.offset = end, 0
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
        fit.found = (self.plan, self.version, want, found, where)
        return True

    def place(self, fit: FitClass, want: int, at_least: int) -> tuple[dict[str, int], int] | None:
        """Place up to ``want`` pods of ``fit``, at least ``at_least``; None if fewer fit (then
        ``room(fit)`` is up to date). Returns (node name -> pods, pods placed)."""
        if fit.room_version == self.version and fit.room < at_least:
            return None
        cached = fit.found
        if (
            cached is not None
            and cached[0] == self.plan
            and cached[2] == want
            and self._unchanged(cached[1], cached[4])
        ):
            found, where = cached[3], cached[4]
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
        current = self.current
        start = self.free
        first_touch = self.touched_nodes.append
        for n, pods in where:
            free = current[n]
            if free is None:
                free = current[n] = list(start[n])
                first_touch(n)
            for i in nonzero:
                free[i] -= request[i] * pods
            placement[names[n]] = pods
            touched[n] = version
        return placement, found

    def _unchanged(self, version: int, where: list[tuple[int, int]]) -> bool:
        """True if no node in ``where`` lost capacity after ``version``."""
        touched = self.touched
        return all(touched[n] <= version for n, _ in where)


def unique_names(nodes: Sequence[Node]) -> None:
    """Raise PolicyError if two nodes share a name (an incremental planner keys nodes by it)."""
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            raise PolicyError(f'node "{node.name}": duplicate name; node names must be unique')
        seen.add(node.name)
