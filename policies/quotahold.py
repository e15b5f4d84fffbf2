"""Step 4 of a plan (see `policies.planner`), for quota: the nominal quota an aged big gang's
queue lent, which other queues borrow while the gang waits for it, is held for it.

Quota is lent: what a queue of a cohort does not use, the others may borrow. Without preemption
a queue gets lent quota back only when the borrowers' gangs end, and the freed quota goes to
whoever fits first: a big gang, which needs more than what frees at once, waits for as long as
the borrowers have work (docs/benchmarks.md, *Trace families*: on seeds 7 and 15 of the family a
queue holding nothing waited 2,300 s for its own nominal quota, 800 s and more for the nodes
after it). Kueue reserves the quota of a workload that needs preemption it cannot get in its
scheduling cycle (``reserveCapacityForUnreclaimablePreempt``). muster holds it for the big gang
that has waited its starvation bound and holds the plan's reservation of nodes
(`policies.reservation.Reservation.find_starving`), whenever its queue stays within its own
nominal quota with it (at the fewest pods it may start with), whether it lacks quota now or not
(a gang that fits its quota but whose turn in the policy's order comes after borrowers' would
find it borrowed by then):

- gangs of the other queues of its cohort tree may take quota within their own nominal quota as
  before, but borrow only what is left beyond what the holder needs; as borrowers end, the freed
  quota stays free until it fits;
- never against its own queue (its order is the queue's business), and only the part of its
  demand its queue draws from the cohort (a lending limit's unlent part is its own anyway).

One gang at a time, as the reservation of nodes: holding the lent quota of every queue whose
next gang waits within it idled quota while those gangs waited for nodes
(simulator/traces/two-queues.yaml: makespan 4,810 s against 6,314 s, replayed from its
gangs.csv).
"""

from __future__ import annotations

from collections.abc import Sequence

from policies import reasons
from policies.decisions import Reason
from policies.fitcatalog import Demand
from policies.model import Gang
from policies.planstate import PlanState
from policies.quota import INF

__all__ = ["QuotaHolds"]


class QuotaHolds:
    """The plan's quota hold, if any (see the module docstring): the holding leaf, its gang and
    what it draws from its cohort, as a vector of the plan's resources."""

    __slots__ = ("held", "leaf", "root", "state")

    def __init__(self, state: PlanState) -> None:
        self.state = state
        self.leaf: str | None = None
        self.root: str | None = None
        self.held: tuple[Gang, list[float]] | None = None

    def entitled(self, leaf: str, demand: Demand) -> bool:
        """True if ``leaf`` stays within its own nominal quota with ``demand`` in every
        resource its tree's quota governs, and the tree governs some."""
        quota = self.state.quota
        return bool(quota.governed.get(self.state.tree.root(leaf))) and quota.within_nominal(
            leaf, demand
        )

    def hold(self, gang: Gang, demand: Demand) -> None:
        """``gang`` (entitled, see `entitled`) holds what it draws from its cohort."""
        state = self.state
        quota = state.quota
        leaf = gang.queue
        usage = quota.usage[leaf]
        guaranteed = quota.guaranteed[leaf]
        vector = [0.0] * len(usage)
        for i, amount in demand:
            if amount:
                # Beyond the quota its queue keeps unlent, which no other queue could borrow.
                after = usage[i] + amount - guaranteed[i]
                before = usage[i] - guaranteed[i]
                vector[i] = float(max(after, 0) - max(before, 0))
        self.leaf = leaf
        self.root = state.tree.root(leaf)
        self.held = (gang, vector)

    @property
    def holder(self) -> Gang | None:
        return self.held[0] if self.held is not None else None

    def release(self, gang: Gang) -> None:
        """``gang`` was admitted: if it held quota, its admission holds it now."""
        if self.held is not None and self.held[0] is gang:
            self.held = self.leaf = self.root = None

    def available(self, leaf: str) -> Sequence[float]:
        """What ``leaf`` may take now: its quota's availability, less, where it would borrow,
        what the holder needs (the same list when nothing is held against it)."""
        quota = self.state.quota
        available = quota.available(leaf)
        held = self.held
        if held is None or leaf == self.leaf or self.state.tree.root(leaf) != self.root:
            return available
        nominal = quota.subtree[leaf]
        usage = quota.usage[leaf]
        adjusted = list(available)
        for i, amount in enumerate(held[1]):
            if amount and adjusted[i] != INF:
                own = max(0, nominal[i] - usage[i])  # within its own nominal: never held
                adjusted[i] = min(available[i], max(adjusted[i] - amount, own))
        return adjusted

    def explain(self, leaf: str, request: Sequence[int], pods: int, first: Reason) -> Reason:
        """``first``, why ``pods`` pods of ``request`` exceed what `available` leaves ``leaf``,
        or, when its quota's own availability would hold them, that the hold keeps them out."""
        held = self.held
        if held is None or leaf == self.leaf or self.state.tree.root(leaf) != self.root:
            return first
        available = self.state.quota.available(leaf)
        if any(available[i] < amount * pods for i, amount in enumerate(request) if amount):
            return first
        return reasons.quota_held(leaf, held[0].id)
