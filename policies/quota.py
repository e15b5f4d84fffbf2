"""Hierarchical quota: nominal, borrowing and lending over the cohort tree.

The rules follow Kueue's hierarchical cohorts (facts from its docs and resource_node.go; the code
is ours). Per queue q and quota-governed resource r:

- ``subtree(q)`` = nominal(q) + sum over children c of (subtree(c) - guaranteed(c)): what q's
  subtree brings to the tree.
- ``guaranteed(q)`` = subtree(q) - lendingLimit(q), floored at 0, when q has a lending limit for
  r, else 0. This part is never lent: siblings cannot use it even when q is idle.
- ``usage(leaf)`` = demand of its admitted gangs; ``usage(cohort)`` = sum over children of the
  part of their usage above their guaranteed quota (what they draw from the cohort).
- ``available(root)`` = subtree - usage; ``available(q)`` = max(0, guaranteed - usage) +
  min(available(parent), subtree - guaranteed - max(0, usage - guaranteed) + borrowingLimit):
  a queue can hold at most subtree + borrowingLimit.

Resources that no queue of a tree names in ``nominal`` are not limited in that tree. All vectors
are lists indexed like the planner's resource names; amounts are ints, "unlimited" is ``inf``.
Integers keep the accounting exact whatever the order of additions and removals, which an
incremental planner that adds and removes gangs for hours relies on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import networkx as nx

from policies.model import QueueTree

__all__ = ["INF", "QuotaState"]

INF = math.inf


class QuotaState:
    """Mutable quota accounting: admitting a gang adds its demand to its leaf queue and rolls
    the part above each level's guaranteed quota up the tree; a negative demand gives it back."""

    __slots__ = (
        "_available_cache",
        "_down",
        "_plain",
        "_root",
        "_up",
        "borrowing",
        "governed",
        "guaranteed",
        "path",
        "subtree",
        "usage",
        "version",
    )

    def __init__(self, tree: QueueTree, names: Sequence[str]) -> None:
        width = len(names)
        # governed[root] = indices of resources some queue of that tree names in nominal.
        self.governed: dict[str, list[int]] = {}
        self.path: dict[str, list[str]] = {}  # queue -> [queue, parent, ..., root]
        self.subtree: dict[str, list[int]] = {}
        self.guaranteed: dict[str, list[int]] = {}
        self.borrowing: dict[str, list[float]] = {}  # int, or INF when not limited
        self.usage: dict[str, list[int]] = {}
        self.version: dict[str, int] = {}  # per root: bumped when any usage in the tree changes
        self._available_cache: dict[str, tuple[int, list[float]]] = {}

        for name in tree.queues:
            self.path[name] = tree.ancestors(name)
        named: dict[str, set[str]] = {}
        for queue in tree:
            root = self.path[queue.name][-1]
            named.setdefault(root, set()).update(queue.nominal or (), queue.quota_names)
        for root in named:
            self.governed[root] = [i for i, r in enumerate(names) if r in named[root]]
            self.version[root] = 0

        self._sum_subtrees(tree, names)
        self._index_paths(width)
        self._root = {name: path[-1] for name, path in self.path.items()}

    def _sum_subtrees(self, tree: QueueTree, names: Sequence[str]) -> None:
        """Each queue's subtree quota, guaranteed (unlent) quota and borrowing limit."""
        width = len(names)
        # Children before parents, so subtree quotas can be summed bottom-up.
        for name in reversed(list(nx.topological_sort(tree.graph))):
            queue = tree[name]
            nominal = queue.nominal
            lending = queue.lending_limit
            borrowing = queue.borrowing_limit
            subtree = [nominal[r] if nominal is not None else 0 for r in names]
            for child in tree.children(name):
                child_subtree = self.subtree[child]
                child_guaranteed = self.guaranteed[child]
                for i in range(width):
                    subtree[i] += child_subtree[i] - child_guaranteed[i]
            self.subtree[name] = subtree
            self.guaranteed[name] = [
                max(0, subtree[i] - lending[r]) if lending is not None and r in lending else 0
                for i, r in enumerate(names)
            ]
            self.borrowing[name] = [
                borrowing[r] if borrowing is not None and r in borrowing else INF for r in names
            ]
            self.usage[name] = [0] * width

    def _index_paths(self, width: int) -> None:
        """Per queue, the lists `available` and `add` walk along its path to the root."""
        # Per queue, what available() reads: per governed resource i, the root's subtree quota,
        # the root's usage list, and top-down for each level below the root: (its subtree minus
        # guaranteed quota, guaranteed quota, usage list, borrowing limit) for resource i.
        # And for add(): bottom-up (usage list, guaranteed quota vector) of the whole path.
        self._down: dict[
            str,
            list[tuple[int, int, list[int], list[tuple[int, int, list[int], float]]]],
        ] = {}
        self._up: dict[str, list[tuple[list[int], list[int]]]] = {}
        self._plain: dict[str, tuple[list[list[int]], bytes]] = {}
        for name, path in self.path.items():
            root = path[-1]
            below = list(reversed(path[:-1]))
            self._down[name] = [
                (
                    i,
                    self.subtree[root][i],
                    self.usage[root],
                    [
                        (
                            self.subtree[q][i] - self.guaranteed[q][i],
                            self.guaranteed[q][i],
                            self.usage[q],
                            self.borrowing[q][i],
                        )
                        for q in below
                    ],
                )
                for i in self.governed.get(root, ())
            ]
            self._up[name] = [(self.usage[q], self.guaranteed[q]) for q in path]
            # Resources nothing on the path guarantees: usage (never negative) is all above
            # guaranteed, so a change rolls up whole.
            self._plain[name] = (
                [self.usage[q] for q in path],
                bytes(all(self.guaranteed[q][i] == 0 for q in path) for i in range(width)),
            )

    def add(self, queue: str, demand: Iterable[tuple[int, int]]) -> None:
        """Account ``demand`` ((resource index, amount) pairs) to ``queue`` and roll the
        borrowed part up to the root."""
        up = self._up[queue]
        chain, plain = self._plain[queue]
        for i, amount in demand:
            if not amount:
                continue
            if plain[i]:
                for usage in chain:
                    usage[i] += amount
                continue
            delta = amount
            for usage, guaranteed_of in up:
                before = usage[i]
                after = before + delta
                usage[i] = after
                guaranteed = guaranteed_of[i]
                # What this level draws from its parent changes by the part above guaranteed.
                above_after = after - guaranteed if after > guaranteed else 0
                above_before = before - guaranteed if before > guaranteed else 0
                delta = above_after - above_before
                if not delta:
                    break
        root = self._root[queue]
        self.version[root] = self.version.get(root, 0) + 1

    def available(self, queue: str) -> list[float]:
        """What ``queue`` can still take, per resource (``inf`` where not limited).

        The list is shared and must not be changed; it is the same list until some usage in
        the queue's tree changes (callers may cache by identity)."""
        path = self.path[queue]
        root = path[-1]
        version = self.version.get(root, 0)
        cached = self._available_cache.get(queue)
        if cached is not None and cached[0] == version:
            return cached[1]
        result: list[float] = [INF] * len(self.usage[queue])
        for i, root_subtree, root_usage, levels in self._down[queue]:
            left: float = root_subtree - root_usage[i]
            for in_parent, guaranteed, usage_of, limit in levels:
                usage = usage_of[i]
                if limit != INF:
                    used_in_parent = usage - guaranteed if usage > guaranteed else 0
                    most = in_parent - used_in_parent + limit
                    if most < left:
                        left = most
                left = (guaranteed - usage if guaranteed > usage else 0) + left
            result[i] = left
        self._available_cache[queue] = (version, result)
        return result

    def within_nominal(self, queue: str, demand: Iterable[tuple[int, int]] = ()) -> bool:
        """True if leaf ``queue``, with ``demand`` ((resource index, amount) pairs) added,
        holds no more than its own nominal quota of every resource its tree's quota governs
        (a queue without nominal quota has 0 of them; in a tree that governs none, True)."""
        usage = self.usage[queue]
        nominal = self.subtree[queue]  # a leaf's subtree quota is its nominal quota
        asked = dict(demand)
        governed = self.governed.get(self._root[queue], ())
        return all(usage[i] + asked.get(i, 0) <= nominal[i] for i in governed)

    def potential(self, queue: str) -> list[float]:
        """The most ``queue`` could ever hold with the whole tree idle (for NeverFits)."""
        path = self.path[queue]
        root = path[-1]
        result = [INF] * len(self.usage[queue])
        for i in self.governed.get(root, ()):
            most: float = self.subtree[root][i]
            for name in reversed(path[:-1]):
                most = self.guaranteed[name][i] + most
                limit = self.borrowing[name][i]
                if limit != INF:
                    most = min(most, self.subtree[name][i] + limit)
            result[i] = most
        return result
