"""Node-aware gang fit: can all pods of a gang be placed on free node capacity, and where.

Nodes with identical labels and taints form a *node group*; whether a gang may use a node (node
selector, tolerations) is decided once per group, and the nodes a gang may use form a *pool*.
Gangs whose pods have the same request, the same one-pod-per-node flag and the same pool form a
*fit class*; the planner asks fit questions per class.

Placement is first-fit over one fixed node order: nodes sorted by free capacity at the start of
the plan, then by name. By default (the ``lexicographic`` packing strategy) least free first,
compared resource by resource, so pods fill partly used nodes before empty ones (first-fit over
that order is best-fit-like and keeps big holes for big gangs); `policies.packing` orders by a
score instead when the cluster asks for another strategy.

A pool keeps its nodes in *buckets* of equal free capacity: the sorted list of distinct free
vectors is the fit order at bucket granularity, and within a bucket nodes go by name. So a fit
question skips a whole bucket that has no room for one pod of the class (most of a busy
cluster), counts room per bucket by arithmetic, and walks single nodes only where pods go.
Nodes a plan places pods on are *touched*: their plan-start bucket keeps them in place (the
order is fixed for the plan) and their current free capacity lives in the plan's overlay
(`policies.overlay.PlanOverlay`, which asks the fit questions). Within one plan free capacity
only shrinks, so each fit class keeps a cursor: every node before it has no room for a pod of the
class and never will again in this plan.

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

from policies.domains import Domain, DomainIndex
from policies.model import (
    Node,
    NodeTerm,
    PolicyError,
    Taint,
    Toleration,
    node_affinity_holds,
    tolerated,
)
from policies.packing import DEFAULT_PACKING, OrderKey, Packing
from policies.resources import Resources
from policies.topology import NO_TOPOLOGY, Topology, TopologyRequest

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

    __slots__ = ("buckets", "key", "member", "orders", "plan", "shapes", "vectors")

    def __init__(
        self,
        member: bytes,
        nodes: Sequence[int],
        free: Sequence[Vector],
        shape_of: Sequence[int],
        key: OrderKey | None = None,
    ) -> None:
        self.member = member  # member[node id] == 1 if the node is in the pool
        # The packing strategy's sort key of a free vector (None: the vector itself).
        self.key = key
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
        self.vectors: list[Vector] = sorted(buckets, key=key)  # the fit order of the buckets
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
            key = self.key
            if key is None:
                del vectors[bisect.bisect_left(vectors, old)]
            else:
                del vectors[bisect.bisect_left(vectors, key(old), key=key)]
        target = buckets.get(new)
        if target is None:
            target = buckets[new] = _Bucket()
            bisect.insort(self.vectors, new, key=self.key)
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
    # A gang's topology request (policies.topology): its own class, placed by domain
    # (policies.domainfit); None for every other class, and for a class within one domain.
    topology: TopologyRequest | None = None
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
    """Free node capacity as a plan starts from it (kept between plans), the node groups and
    pools, and the reservation's nodes; what one plan places lives in its
    `policies.overlay.PlanOverlay`."""

    __slots__ = (
        "_kept",
        "_order",
        "_pools",
        "_reservation",
        "_shapes",
        "_steps",
        "_within",
        "_without",
        "capacity",
        "domains",
        "free",
        "group_of",
        "groups",
        "index",
        "names",
        "node_names",
        "pools_of",
        "shape_of",
    )

    def __init__(
        self,
        nodes: Sequence[Node],
        names: Sequence[str],
        held: Mapping[str, Sequence[int]] | None = None,
        topology: Topology = NO_TOPOLOGY,
        packing: Packing = DEFAULT_PACKING,
    ) -> None:
        """``held``: node name -> capacity held by gangs admitted before this plan;
        ``topology``: the cluster's topology levels (`domains` answers for them);
        ``packing``: the order in which gangs are offered nodes (`policies.packing`)."""
        self.names = names
        held = held or {}
        pods = names.index("pods") if "pods" in names else None
        self.capacity = [0] * len(names)  # total allocatable (DRF shares, size ratio)
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
        self._order = packing.order_key(names, shapes, UNLIMITED)
        self._pools: dict[tuple[object, ...] | bytes, Pool] = {}
        self._without: dict[tuple[int, int], Pool] = {}
        self._kept: set[int] = set()  # ids of the pools eligible() handed out (never dropped)
        self._reservation: Pool | None = None  # the nodes reserve() chose last
        self._steps: dict[Vector, dict[Vector, dict[int, Vector]]] = {}  # see take_placement
        self.pools_of: list[list[Pool]] = [[] for _ in self.free]
        self._within: dict[tuple[int, int, int], Pool] = {}  # see within()
        self.domains = DomainIndex(
            topology, [(group.labels, group.nodes) for group in self.groups], len(self.free)
        )

    # --- between plans ---------------------------------------------------------------------

    def take(self, n: int, request: Sequence[int], times: int) -> None:
        """Take ``times`` x ``request`` (a vector; negative ``times`` gives back) from node
        ``n``'s free capacity. Not during a plan."""
        old = self.free[n]
        new = tuple(map(sub, old, map(mul, request, repeat(times))))
        if new == old:
            return
        self.free[n] = new
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
            for pool in pools_of[n]:
                pool.move(n, old, new)

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
        and does not fit now: the nodes with the most free capacity (compared resource by
        resource, whatever the packing), as many as hold ``pods`` pods when empty. Those are
        the nodes it will fit on soonest, as far as free capacity tells. One reservation lives
        at a time: the previous one's pools are dropped (they would otherwise be kept up to
        date forever)."""
        pool = fit.pool
        shapes = self._shapes
        shape_of = self.shape_of
        # Least free first, whatever the packing (walked from the end: most free first).
        by_free = pool.vectors if pool.key is None else sorted(pool.buckets)
        room_of: dict[int, int] = {}
        # Nodes offering a resource the gang does not ask for (GPUs, for a CPU-only gang)
        # come last: reserving them would keep the gangs that need it off them too.
        wanted = set(fit.nonzero)
        plain: dict[int, bool] = {}
        member = bytearray(len(self.free))
        total = 0
        for second in (False, True):
            for vector in reversed(by_free):
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

    def within(self, pool: Pool, domain: Domain) -> Pool:
        """The nodes of ``pool`` in ``domain`` (kept, as `eligible` pools are: a topology
        gang's fit class asks of few pools and domains)."""
        key = (id(pool), len(domain.path), domain.index)
        found = self._within.get(key)
        if found is None:
            member = bytes(a & b for a, b in zip(pool.member, domain.member, strict=True))
            found = self._within[key] = self._pool(member)
            self._kept.add(id(found))
        return found

    def _pool(self, member: bytes) -> Pool:
        # Pools with the same nodes are one object (kept up to date once).
        pool = self._pools.get(member)
        if pool is None:
            nodes = [n for n, inside in enumerate(member) if inside]
            pool = self._pools[member] = Pool(member, nodes, self.free, self.shape_of, self._order)
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


def unique_names(nodes: Sequence[Node]) -> None:
    """Raise PolicyError if two nodes share a name (an incremental planner keys nodes by it)."""
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            raise PolicyError(f'node "{node.name}": duplicate name; node names must be unique')
        seen.add(node.name)
