"""Quota headroom and weighted dominant shares, as one plan sees them.

`Shares` is the plan's view of its `QuotaState`: how many pods of a fit class a queue's quota
admits now, a queue's weighted dominant share (the DRF order of queue heads, and who may preempt
whom), whether a queue borrows or holds more than its fair share, and the quota it takes and
gives back during the plan (given back to the state at the end: a plan never changes it).
"""

from __future__ import annotations

from collections.abc import Sequence

from policies import reasons
from policies.decisions import Reason
from policies.fit import FitClass
from policies.fitcatalog import Demand
from policies.model import Gang, QueueTree
from policies.planstate import PlanState, QueueLine
from policies.quota import INF, QuotaState
from policies.quotahold import QuotaHolds

__all__ = ["Shares"]


class Shares:
    """Quota and shares for one plan over a `PlanState` (see the module docstring)."""

    __slots__ = (
        "holds",
        "inverse",
        "keep",
        "lines",
        "memory",
        "quota",
        "quota_reasons",
        "state",
        "taken",
        "tree",
    )

    def __init__(self, state: PlanState, keep: bool) -> None:
        self.state = state
        self.keep = keep  # the state outlives the plan: what the plan takes is given back
        self.tree: QueueTree = state.tree
        self.quota: QuotaState = state.quota
        self.lines: dict[str, QueueLine] = state.lines
        self.inverse = state.inverse_capacity
        self.taken: list[tuple[str, Demand]] = []  # quota the plan took: given back at its end
        # Many waiting gangs of a queue share a message; build each once.
        self.quota_reasons: dict[tuple[str, int, float, float], Reason] = {}
        self.memory = state.memory  # leaf -> recent usage beside what it holds (fairtime)
        self.holds = QuotaHolds(state)  # lent quota held for the aged big gang (step 4)

    # --- taking and giving back ------------------------------------------------------------

    def take(self, leaf: str, demand: Demand) -> None:
        """An admission of the plan takes ``demand`` of ``leaf``'s quota."""
        self.quota.add(leaf, demand)
        if self.keep:
            self.taken.append((leaf, demand))

    def give_back(self, leaf: str, demand: Sequence[tuple[int, int]]) -> None:
        """A preempted gang's quota goes back (and returns to the state after the plan)."""
        back = [(i, -amount) for i, amount in demand]
        self.quota.add(leaf, back)
        if self.keep:
            self.taken.append((leaf, back))

    def restore(self) -> None:
        """Undo what the plan took and gave back: the state is as the plan found it."""
        for leaf, demand in reversed(self.taken):
            self.quota.add(leaf, [(i, -amount) for i, amount in demand])
        self.taken.clear()

    # --- quota -----------------------------------------------------------------------------

    def available(self, leaf: str) -> Sequence[float]:
        """What ``leaf`` may take now: its quota's availability, less what it would borrow of
        quota held for another queue's big gang (`policies.quotahold`)."""
        return self.holds.available(leaf)

    def quota_room(self, leaf: str, fit: FitClass, pods: int) -> int:
        """Pods of ``fit`` (at most ``pods``) ``leaf``'s quota admits now."""
        available = self.holds.available(leaf)
        request = fit.request
        most = pods
        for i in fit.nonzero:
            left = available[i]
            if left != INF:
                count = int(left // request[i])
                if count < most:
                    most = count
        return most

    def quota_reason(
        self, leaf: str, fit: FitClass, pods: int, available: Sequence[float]
    ) -> Reason:
        """QuotaExhausted for the first resource the queue lacks for ``pods`` pods of ``fit``."""
        request = fit.request
        for i in fit.nonzero:
            if available[i] < request[i] * pods:
                key = (leaf, i, request[i] * pods, available[i])
                reason = self.quota_reasons.get(key)
                if reason is None:
                    reason = reasons.quota_exhausted(leaf, self.state.names[i], key[2], key[3])
                    reason = self.holds.explain(leaf, request, pods, reason)
                    self.quota_reasons[key] = reason
                return reason
        raise AssertionError(f"queue {leaf}: quota suffices for {pods} pods")  # pragma: no cover

    def demand_reason(self, leaf: str, demand: Demand, available: Sequence[float]) -> Reason | None:
        """QuotaExhausted for the first resource of ``demand`` the queue lacks; None if none."""
        for i, amount in demand:
            if available[i] < amount:
                return reasons.quota_exhausted(leaf, self.state.names[i], amount, available[i])
        return None

    # --- shares ----------------------------------------------------------------------------

    def usage(self, leaf: str) -> Sequence[float]:
        """What ``leaf``'s share counts: its quota usage now, plus its memory of the gangs it
        released recently when it has a half-life (`policies.fairtime`)."""
        usage = self.quota.usage[leaf]
        memory = self.memory.get(leaf)
        if memory is None:
            return usage
        return [held + past for held, past in zip(usage, memory, strict=True)]

    def head_share(self, leaf: str, gang: Gang, fit: FitClass) -> float:
        """The queue's weighted dominant share if ``gang`` were admitted at full size, over the
        resources ``gang`` asks for: a queue that holds every GPU is not pushed back when its
        head asks for CPU only (admitting it takes no GPU), so it competes for CPU by its CPU
        share. Over all resources, a queue with a saturated resource would go first for every
        other resource for as long as it has demand."""
        usage = self.usage(leaf)
        best = 0.0
        if gang.others:
            for i, amount in self.state.catalog.demand(gang, gang.size):
                if amount:
                    capacity = self.state.cluster.capacity[i]
                    if capacity > 0:
                        best = max(best, (usage[i] + amount) / capacity)
            return best / self.tree.queues[leaf].weight
        request = fit.request
        size = gang.size
        for i, inverse in self.inverse:
            if request[i] == 0:
                continue
            share = (usage[i] + request[i] * size) * inverse
            if share > best:
                best = share
        return best / self.tree.queues[leaf].weight

    def share_of(self, leaf: str, fit: FitClass, pods: int) -> float:
        """``leaf``'s weighted dominant share over the resources of ``fit`` with ``pods`` more
        pods of it (the share heads are ordered by)."""
        usage = self.usage(leaf)
        request = fit.request
        best = 0.0
        for i, inverse in self.inverse:
            if request[i]:
                share = (usage[i] + request[i] * pods) * inverse
                if share > best:
                    best = share
        return best / self.tree.queues[leaf].weight

    def borrowing(self, leaf: str) -> bool:
        """True if ``leaf`` uses more than its nominal quota of some resource its tree's quota
        governs (a queue with no nominal quota borrows whatever it uses of them; in a tree
        without quota, whatever it uses). A resource no queue of the tree names is not lent
        or borrowed: counting it made every queue using memory a borrower when only CPU had
        quota, and reclaimWithinCohort preempted gangs within their queue's CPU quota (seed 7
        of the trace family)."""
        if not self.quota.governed.get(self.tree.root(leaf)):
            return any(self.quota.usage[leaf])
        return not self.quota.within_nominal(leaf)

    def _active(self, leaf: str) -> bool:
        line = self.lines.get(leaf)
        return any(self.quota.usage[leaf]) or (line is not None and bool(line.entries))

    def above_fair_share(self, leaf: str, fit: FitClass) -> bool:
        """True if ``leaf`` holds more than its weighted fair share (its weight's part of the
        weights of the queues of its tree that hold or wait for something), over the
        resources of ``fit``."""
        tree = self.tree
        root = tree.root(leaf)
        total = sum(
            tree.queues[other].weight
            for other in tree.leaves
            if tree.root(other) == root and self._active(other)
        )
        if total <= 0:
            return False
        fair = tree.queues[leaf].weight / total
        return self.share_of(leaf, fit, 0) * tree.queues[leaf].weight > fair

    def below_fair_share(self, than: str) -> frozenset[str]:
        """The leaf queues whose dominant share is below their weighted fair share of the
        cluster (their weight's part of the weights of the leaves that hold or wait for
        something; all trees: they share the nodes) and, weighted, below ``than``'s: those a
        gang of ``than`` does not hold back. A queue below its fair share but above ``than``
        is not owed more than ``than`` is."""
        queues = self.tree.queues
        inverse = self.inverse
        active = [leaf for leaf in self.tree.leaves if self._active(leaf)]
        total = sum(queues[leaf].weight for leaf in active)

        def share(leaf: str) -> float:
            mine = self.usage(leaf)
            return max((mine[i] * inv for i, inv in inverse), default=0.0)

        ceiling = share(than) / queues[than].weight
        below = set()
        for leaf in active:
            weight = queues[leaf].weight
            mine = share(leaf)
            if mine < weight / total and mine / weight <= ceiling:
                below.add(leaf)
        return frozenset(below)
