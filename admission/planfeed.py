"""The controller's incremental planner: a `policies.Planner` kept in step with the cache.

The simulator feeds the same `Planner` from its events; the controller brings it up to date at
the start of each cycle from what changed in the cache since the last one: nodes whose usage
moved, queues, gangs that became or stopped being pending, gangs admitted, started, finished or
evicted. A cycle then costs what changed and what the plan scans, not a rebuild of every node,
admitted gang and pending gang (`plan(cache.snapshot(...))`, which decides the same:
`tests/property/test_planfeed.py`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from itertools import compress
from operator import attrgetter, is_not, not_

from admission.cache import Cache
from policies import Decisions, Planner, QueueTree, Reason
from policies.packing import DEFAULT_PACKING, Packing
from policies.topology import NO_TOPOLOGY, Topology

_ID = attrgetter("id")


class PlanFeed:
    """One `Planner` for the life of the controller, synced from the cache before each plan."""

    def __init__(
        self,
        policy: str = "drf",
        topology: Topology = NO_TOPOLOGY,
        packing: Packing = DEFAULT_PACKING,
    ) -> None:
        self.policy = policy
        self.packing = packing
        self.topology = topology
        self.planner: Planner | None = None
        self._tree: QueueTree | None = None

    def sync(
        self,
        cache: Cache,
        now: float,
        refused: Mapping[str, Reason] | None = None,
        busy: Collection[str] = (),
    ) -> Planner:
        """Bring the planner to what the cache holds at `now` (the gangs a snapshot would
        hold: `JobStore.pending` pending, every admitted unfinished gang with
        `Reservations.placement`) and return it."""
        tree = cache.queues.tree if cache.queues.tree is not None else QueueTree.build([])
        view = cache.pods.node_view
        nodes = [view(name) for name in cache.nodes]
        planner = self.planner
        if planner is None:
            planner = self.planner = Planner(nodes, tree, self.policy, self.topology, self.packing)
            self._tree = tree
        else:
            if tree is not self._tree:
                planner.set_queues(tree)
                self._tree = tree
            planner.set_nodes(nodes)
        # Admitted first: a gang admitted since the last cycle leaves the pending set and
        # joins the admitted one in the same sync.
        admitted = {entry.gang.id: entry for entry in cache.reservations.admitted(now)}
        gangs = cache.jobs.pending(now, refused, busy)
        pending = dict(zip(map(_ID, gangs), gangs, strict=True))
        held_pending = planner.pending
        # Every pending gang is compared each cycle; in C, as few of them change.
        same = map(is_not, map(pending.get, held_pending), held_pending.values())
        for gang_id in list(compress(held_pending, same)):
            planner.remove_pending(gang_id)
        for gang_id in [g for g in planner.admitted if g not in admitted]:
            planner.remove_admitted(gang_id)
        for entry in admitted.values():
            planner.add_admitted(entry)
        new = map(not_, map(held_pending.__contains__, pending))
        for gang in list(compress(pending.values(), new)):
            planner.add_pending(gang)
        return planner

    def plan(
        self,
        cache: Cache,
        now: float,
        refused: Mapping[str, Reason] | None = None,
        busy: Collection[str] = (),
    ) -> Decisions:
        """Sync, then plan at `now` (the planner's state is left as the cache says)."""
        planner = self.sync(cache, now, refused, busy)
        if not planner.pending:
            return Decisions([], {}, {})
        return planner.plan(now)
