"""What one plan placed, and the fit questions it asks: can k pods of a fit class be placed
now, how many, and where (first fit over the cluster's fixed node order; see `policies.fit`).

The `PlanOverlay` holds, per node the plan placed pods on, its free capacity now; the rest of
the nodes are as the `policies.fit.Cluster` holds them at the start of the plan. `begin` starts a
plan afresh. Within a plan free capacity only shrinks (a `release` starts every fit class's
questions afresh), so each fit class keeps a cursor before which no node has room for it.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from operator import floordiv, ge

from policies.fit import UNLIMITED, Cluster, FitClass

__all__ = ["PlanOverlay"]


class PlanOverlay:
    """The plan in progress over a `Cluster` (see the module docstring)."""

    __slots__ = ("cluster", "current", "plan", "touched", "touched_nodes", "version")

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.version = 0  # bumped on every change of free capacity the plan sees
        self.plan = 0  # bumped by begin() (and by release())
        size = len(cluster.free)
        # Indexed by node id: free capacity now of the nodes the plan placed pods on (None: as
        # at the start), and the version of each one's last placement.
        self.current: list[list[int] | None] = [None] * size
        self.touched: list[int] = [0] * size
        self.touched_nodes: list[int] = []

    def begin(self) -> None:
        """Start a plan: the cluster's capacity as it is now is the plan's starting point and
        fit order (whatever changed since the last plan)."""
        self.plan += 1
        self.version += 1
        current = self.current
        touched = self.touched
        for n in self.touched_nodes:
            current[n] = None
            touched[n] = 0
        self.touched_nodes = []

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
        if first > 0 and fit.pick is not None and pool.key is None:
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
            if pool.key is not None:
                total += self._touched_in_order(fit, cursor)
            else:
                first = vectors[cursor]
                member = pool.member
                start_of = self.cluster.free
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

    def _touched_in_order(self, fit: FitClass, cursor: int) -> int:
        """`room`'s correction for touched nodes in a pool ordered by a packing's key: what
        they hold now, less what their bucket promised if it is at or after the cursor."""
        pool = fit.pool
        key = pool.key
        assert key is not None
        first = key(pool.vectors[cursor])
        member = pool.member
        start_of = self.cluster.free
        current = self.current
        total = 0
        for n in self.touched_nodes:
            if member[n]:
                start = start_of[n]
                if key(start) >= first:
                    total -= max(fit.per_node(start), 0)
                now = current[n]
                assert now is not None
                total += max(fit.pods_on(now), 0)
        return total

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
        names = self.cluster.node_names
        placement: dict[str, int] = {}
        version = self.version = self.version + 1
        touched = self.touched
        current = self.current
        start = self.cluster.free
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

    def release(self, fit: FitClass, placement: Mapping[str, int]) -> None:
        """Give back pods of ``fit`` this plan placed (node name -> pods): a what-if, or a gang
        of several pod sets whose other sets did not fit. Free capacity grows again, which the
        per-plan cursors and caches assume it never does within a plan, so every fit class
        starts its next question afresh (as at a new plan), on the same overlay."""
        index = self.cluster.index
        current = self.current
        request = fit.request
        for node, pods in placement.items():
            free = current[index[node]]
            assert free is not None  # placed by this plan: on the overlay
            for i in fit.nonzero:
                free[i] += request[i] * pods
        self.version += 1
        self.plan += 1

    def _unchanged(self, version: int, where: list[tuple[int, int]]) -> bool:
        """True if no node in ``where`` lost capacity after ``version``."""
        touched = self.touched
        return all(touched[n] <= version for n, _ in where)
