"""The planner: which pending gangs to admit now, where their pods go, and why the rest wait.

Two doors to one algorithm:

- ``plan(snapshot, policy)`` is pure: it builds the plan's starting state from the snapshot,
  plans, and returns `Decisions`.
- `Planner` keeps that starting state between plans (free node capacity in fit order, quota
  usage, the waiting gangs screened and in queue order) and is told what changed (gangs that
  became pending, were admitted, started, finished or were evicted; nodes). A plan then costs
  what changed plus what the plan does, not the size of the cluster or of the backlog.
  ``Planner.plan(now)`` returns exactly what ``plan(planner.snapshot(now), policy)`` returns
  (tests/property/test_incremental_planner.py checks this on random sequences of changes).

A plan, top to bottom:

1. Index resources, apply gangs admitted earlier to free node capacity and to quota usage
   (`policies.planstate.PlanState`; kept by a `Planner`).
2. Screen every pending gang once: its queue exists and is a leaf; it could ever fit the
   cluster and its queue's quota (else NeverFits); it is not above its queue's size ratio
   with ``action: Reject``. (`PlanState`, when the gang is added.)
3. Order each leaf queue's gangs by priority, then submission (a `QueueLine`, kept sorted).
4. Size ratio: find the gang a big gang waits behind, if any (one big gang admitted and not
   running at a time). If none, the big gang past `STARVATION_AFTER` of the queue lowest in
   share holds the plan's reservation against every younger (or since preempted) gang except
   those of queues below their weighted fair share and not above its queue, and those it waits
   behind in a strict order (no starvation; see `policies.reservation`); within its queue's
   nominal quota it also holds the quota its queue lent (`policies.quotahold`). Node-blind queues
   (``nodeFit: false``): find the oldest of their admitted gangs that has waited longer than
   `PARTIAL_HOLD_AFTER` without reaching its minimum; while there is one, node-blind queues
   admit nothing (Kueue's ``waitForPodsReady.blockAdmission``, once a gang is seen stuck).
5. Take queue heads from a heap ordered by the policy (DRF: lowest weighted dominant share
   including the head, over the resources the head asks for). For each head: size ratio,
   quota, node fit, elastic sizing; admit it and account its quota and placement, or record
   why not. A head that does not fit is skipped or blocks its queue (StrictFIFO) or everything
   (``strict-fifo``), as the policy says.
   Reservation in policy order: the first big gang whose turn comes and that waits for nodes
   only (its quota suffices) holds the plan's one reservation: the nodes with the most free
   capacity, as many as it needs (`Cluster.reserve`). Gangs whose turn comes after it (later
   heads of the heap, so queues at a higher weighted share, and the rest of its own queue) keep
   off those nodes; gangs before it, such as a queue below its share, never wait for it. A big
   gang that waits for nodes is therefore a queue head even when it cannot be admitted.
   Backfill by deadline: a gang after the holder may still use the reserved nodes when its
   runtime limit (``Gang.runtime_limit``, a Job's activeDeadlineSeconds) ends no later than the
   holder's earliest start, the latest end by runtime limit of the admitted gangs that may hold
   room on those nodes (computed once per plan and only when asked).
   One gang at a time: `policies.admitter`; a gang of several pod sets places its other pod
   sets whole, then its main pod set.
6. Every gang still queued gets a reason (`policies.planreasons`).
7. Preemption, for queues that enable it (`policies.preemption`).

Steps 4-7 are a `policies.cycle.Cycle`: it works on the state without changing it (quota it
takes is given back at the end, `policies.shares`; node placements live in the cluster's
per-plan overlay).

Within a plan, free capacity and quota headroom only shrink, so a gang passed over earlier in
the plan would not fit later in the same plan: every gang is considered exactly once.

Speed. Queue scans: while nothing is admitted, whether a gang can be admitted and why not
depends only on its fit class, size and bigness (for gangs that are not elastic, and while no
big gang holds a reservation, as backfill then depends on each gang's runtime limit; a big gang
waiting for nodes ends a scan, as it may take one);
each such *verdict key* is a small int, a scan decides each key once and skips the gangs of
keys already turned down with a C-level search. Reasons are not formatted per gang: the
decisions carry, per scanned stretch of a queue, the verdict per key, and `PendingReasons`
writes the gang -> reason mapping only when someone reads it. Node fit works per bucket of
nodes with equal free capacity (policies/fit.py). The decisions are the same as the
straightforward version's, pinned by tests/unit/test_plan_regression.py.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from policies.cycle import Cycle
from policies.decisions import Decisions, Reason
from policies.fairtime import Memory
from policies.fit import unique_names
from policies.model import AdmittedGang, Gang, Node, PolicyError, QueueTree, Snapshot
from policies.packing import DEFAULT_PACKING, Packing
from policies.planstate import Entry, PlanState, request_keys, resource_names
from policies.strategies import AdmissionPolicy, get_policy
from policies.topology import NO_TOPOLOGY, Topology

__all__ = ["NeverFitsScreen", "Planner", "collector_paused", "plan"]


def plan(snapshot: Snapshot, policy: str | AdmissionPolicy = "drf") -> Decisions:
    """Decide which pending gangs of ``snapshot`` to admit now; see the module docstring."""
    chosen = get_policy(policy) if isinstance(policy, str) else policy
    with collector_paused():
        return Cycle(PlanState.from_snapshot(snapshot), chosen, snapshot.now, keep=False).run()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Keep CPython's cyclic garbage collector out of a plan (and out of other work that
    allocates many long-lived containers without cycles: the simulator's trace and records).

    A plan allocates a container per waiting gang (its queue entry), and every 700 allocations
    the collector runs; at 100k waiting gangs a plan set off ~150 young and ~14 middle
    collections and one full one, which walks every object of the caller's heap (the snapshot,
    a controller's cache): about 40% of ``plan`` (docs/benchmarks.md, *Planner*). A plan makes
    no reference cycles, so what it frees, reference counting frees; the collector runs again
    as soon as the plan returns. Process-wide, like the collector itself: another thread
    allocating meanwhile is not collected either, for the length of one plan.
    """
    if not gc.isenabled():  # the caller's choice, or another plan in progress
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class NeverFitsScreen:
    """Step 2's NeverFits screen for one gang at a time, outside any plan: the webhook asks it
    whether a gang being created could ever be admitted (`webhook.neverfits`).

    The same `PlanState` a plan starts from, with nothing admitted: the same resource index, node
    shapes (`Cluster.empty_room`), queue potentials (`QuotaState.potential`) and reason
    builders, so the webhook and the planner cannot disagree. ``nodes`` None: the node rule is
    skipped (the caller has not seen the nodes yet). Kept while the nodes and queues are the
    same; not thread-safe (one caller at a time)."""

    def __init__(self, tree: QueueTree, nodes: Sequence[Node] | None) -> None:
        self.tree = tree
        self.nodes = list(nodes) if nodes is not None else None
        self._states: dict[tuple[str, ...], PlanState] = {}
        # The resources nodes offer and quotas name; a gang may add its own (as in a plan).
        self._names = tuple(resource_names(self.nodes or [], tree, []))
        self._known = frozenset(self._names)

    def verdict(self, gang: Gang) -> Reason | None:
        """The NeverFits reason the planner would give ``gang`` (at its minimum size), or None
        when it could fit, or when its queue is not a leaf (the planner says QueueNotFound)."""
        if not self.tree.is_leaf(gang.queue):
            return None
        nodes = self.nodes or []
        names = self._names
        asked = {name for request in request_keys(gang) for name, _ in request}
        if not asked <= self._known:
            names = tuple(sorted(self._known | asked))
        state = self._states.get(names)
        if state is None:
            if len(self._states) > 16:  # gangs asking for ever new resource names
                self._states.clear()
            state = self._states[names] = PlanState(
                nodes, self.tree, list(names), nodes_known=self.nodes is not None
            )
        return state.never_fits_verdict(gang)


class Planner:
    """An incremental planner: the state plans start from, kept up to date by the caller.

    Tell it what changes: gangs that become pending (`add_pending`) or stop being pending
    (`remove_pending`: admitted, deleted, failed), gangs admitted or started (`add_admitted`,
    which replaces an earlier record of the same gang) and gangs that finished or were evicted
    (`remove_admitted`), nodes (`set_nodes`) and queues (`set_queues`). ``plan(now)`` never
    changes the state: admitting what it decided is the caller's report, as it would be for a
    controller whose admission can still fail.

    ``plan(now)`` returns the same `Decisions` as ``policies.plan(self.snapshot(now), policy)``
    unless a queue has a usage half-life (`policies.fairtime`): only a planner that saw gangs
    released remembers them.
    A change costs O(its nodes and resources); a plan costs what it admits and the queues it
    scans (see the module docstring), not a rebuild of the cluster or of the backlog. A change
    of the set of resource names, of the nodes' shapes or labels, or of the queues rebuilds
    the state at the next plan.

    Example::

        planner = Planner(nodes, tree)
        for gang in pending:
            planner.add_pending(gang)
        decisions = planner.plan(now)
        for admission in decisions.admitted:
            gang = planner.remove_pending(admission.gang_id)
            planner.add_admitted(
                AdmittedGang(
                    gang, admission.size, admission.placement, now,
                    other_placements=admission.other_placements,
                )
            )
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        queues: QueueTree,
        policy: str | AdmissionPolicy = "drf",
        topology: Topology = NO_TOPOLOGY,
        packing: Packing = DEFAULT_PACKING,
    ) -> None:
        """``topology``: the cluster's topology levels (none: gangs' topology requests are not
        looked at); ``packing``: the order in which gangs are offered nodes."""
        self._policy = get_policy(policy) if isinstance(policy, str) else policy
        self._topology = topology
        self._packing = packing
        unique_names(nodes)
        self._nodes: tuple[Node, ...] = tuple(nodes)
        self._tree = queues
        self._pending: dict[str, Gang] = {}
        self._entries: dict[str, Entry | None] = {}  # gang id -> its entry in the state
        self._admitted: dict[str, AdmittedGang] = {}
        self._static_names = self._fixed_names()
        # Resources pending/admitted gangs request that no node offers and no quota names.
        self._requested: Counter[str] = Counter()
        self._fixed_requests: set[frozenset[tuple[str, int]]] = set()  # requests of known names
        self._state: PlanState | None = None  # None: rebuild at the next plan
        # Fairness over time (policies/fairtime.py): released gangs of queues with a half-life
        # are remembered at the next plan's time (a gang released and admitted again before it,
        # a replaced record, was not released).
        self._memory = Memory(queues)
        self._released: list[AdmittedGang] = []

    # --- what the planner holds ----------------------------------------------------------

    @property
    def nodes(self) -> tuple[Node, ...]:
        return self._nodes

    @property
    def queues(self) -> QueueTree:
        return self._tree

    @property
    def topology(self) -> Topology:
        return self._topology

    @property
    def packing(self) -> Packing:
        return self._packing

    @property
    def pending(self) -> Mapping[str, Gang]:
        return self._pending

    @property
    def admitted(self) -> Mapping[str, AdmittedGang]:
        return self._admitted

    # --- changes -------------------------------------------------------------------------

    def add_pending(self, gang: Gang) -> None:
        """``gang`` waits for admission."""
        if gang.id in self._pending:
            raise PolicyError(f"gang {gang.id}: already pending; remove it first")
        self._pending[gang.id] = gang
        self._count(gang, 1)
        state = self._state
        self._entries[gang.id] = state.add_pending(gang) if state is not None else None

    def remove_pending(self, gang_id: str) -> Gang:
        """``gang_id`` no longer waits (admitted, deleted or failed); returns the gang."""
        gang = self._pending.pop(gang_id, None)
        if gang is None:
            raise PolicyError(f"gang {gang_id}: not pending")
        entry = self._entries.pop(gang_id)
        self._count(gang, -1)
        state = self._state
        if state is not None:
            state.remove_pending(gang, entry)
        return gang

    def add_admitted(self, admitted: AdmittedGang) -> None:
        """``admitted.gang`` holds its quota and placement (replacing an earlier record of the
        same gang: e.g. ``running=True`` once it reached its minimum)."""
        gang_id = admitted.gang.id
        old = self._admitted.get(gang_id)
        if old is admitted:
            return  # the caller's unchanged record (`admission.reservations.Reservations.admitted`)
        if old is not None:
            if (
                (old.gang is admitted.gang or old.gang == admitted.gang)
                and old.size == admitted.size
                and old.placement == admitted.placement
                and old.other_placements == admitted.other_placements
            ):
                self._admitted[gang_id] = admitted
                state = self._state
                if state is not None:
                    state.not_running.pop(gang_id, None)
                    if not admitted.running:
                        state.not_running[gang_id] = admitted
                return
            self.remove_admitted(gang_id)
        self._admitted[gang_id] = admitted
        self._count(admitted.gang, 1)
        if self._state is not None:
            self._state.add_admitted(admitted)

    def remove_admitted(self, gang_id: str) -> AdmittedGang:
        """``gang_id`` released its quota and nodes (finished, evicted, deleted)."""
        admitted = self._admitted.pop(gang_id, None)
        if admitted is None:
            raise PolicyError(f"gang {gang_id}: not admitted")
        self._count(admitted.gang, -1)
        if self._state is not None:
            self._state.add_admitted(admitted, -1)
        if admitted.gang.queue in self._memory.tracked:
            self._released.append(admitted)
        return admitted

    def set_nodes(self, nodes: Sequence[Node]) -> None:
        """The cluster's nodes now. Cheap when only nodes' ``used`` changed."""
        unique_names(nodes)
        nodes = tuple(nodes)
        old = self._nodes
        self._nodes = nodes
        state = self._state
        if (
            state is not None
            and len(old) == len(nodes)
            and all(
                a is b
                or (
                    a.name == b.name
                    and a.allocatable == b.allocatable
                    and a.labels == b.labels
                    and a.taints == b.taints
                )
                for a, b in zip(old, nodes, strict=True)
            )
        ):
            cluster = state.cluster
            names = state.names
            for a, b in zip(old, nodes, strict=True):
                if a is not b and a.used != b.used:
                    before, after = a.used, b.used
                    change = [after[name] - before[name] for name in names]
                    cluster.take(cluster.index[b.name], change, 1)
            return
        self._refix()

    def set_queues(self, queues: QueueTree) -> None:
        """The queue tree now (the state is rebuilt at the next plan)."""
        self._tree = queues
        self._memory.set_queues(queues)
        self._refix()

    # --- planning ------------------------------------------------------------------------

    def plan(self, now: float) -> Decisions:
        """Decide which pending gangs to admit at ``now``; the state is left as it was."""
        state = self._ready()
        if self._memory.tracked:
            state.memory = self._remembered(state, now)
        with collector_paused():
            return Cycle(state, self._policy, now, keep=True).run()

    def _remembered(self, state: PlanState, now: float) -> dict[str, list[float]]:
        """The released gangs' memory at ``now`` per leaf queue with a half-life, as vectors of
        the state's resources (`policies.fairtime`); releases since the last plan count from
        ``now``."""
        memory = self._memory
        for admitted in self._released:
            if admitted.gang.id not in self._admitted:
                gang = admitted.gang
                memory.release(gang.queue, gang.demand(admitted.size), admitted.admitted_at, now)
        self._released.clear()
        index = state.index
        out: dict[str, list[float]] = {}
        for leaf, amounts in memory.at(now).items():
            vector = [0.0] * len(state.names)
            for name, amount in amounts.items():
                i = index.get(name)
                if i is not None:
                    vector[i] = amount
            out[leaf] = vector
        return out

    def snapshot(self, now: float) -> Snapshot:
        """The snapshot ``plan(now)`` decides on: pending gangs of missing queues first, then
        per leaf queue (in the order the planner met them) its rejected gangs, then the rest in
        queue order."""
        state = self._ready()
        pending = [self._pending[gang_id] for gang_id in state.missing]
        for line in state.lines.values():
            pending.extend(line.rejected.values())
            pending.extend(entry[2] for entry in line.entries)
        return Snapshot(
            self._nodes,
            self._tree,
            list(self._admitted.values()),
            pending,
            now,
            self._topology,
            self._packing,
        )

    # --- internals -----------------------------------------------------------------------

    def _fixed_names(self) -> frozenset[str]:
        names: set[str] = set()
        for node in self._nodes:
            names.update(node.allocatable)
        for queue in self._tree:
            names.update(queue.nominal or ())
        return frozenset(names)

    def _refix(self) -> None:
        """Nodes or queues changed: resource names they fix, and the requested names beyond
        those, are counted again; the state is rebuilt at the next plan."""
        self._static_names = self._fixed_names()
        self._fixed_requests.clear()
        self._requested.clear()
        for gang in self._pending.values():
            self._count(gang, 1)
        for admitted in self._admitted.values():
            self._count(admitted.gang, 1)
        self._state = None

    def _count(self, gang: Gang, delta: int) -> None:
        """Track requested resource names; a name appearing or vanishing changes every vector,
        so the state is rebuilt. (Requests whose names nodes or quotas name anyway, the usual
        case, are not counted.)"""
        fixed = self._fixed_requests
        extra: list[str] = []
        for request in request_keys(gang):
            if request in fixed:
                continue
            names = [name for name, _ in request if name not in self._static_names]
            if not names:
                if len(fixed) >= 4096:
                    fixed.clear()
                fixed.add(request)
            extra.extend(names)
        requested = self._requested
        for name in extra:
            count = requested[name] + delta
            if count:
                requested[name] = count
            else:
                del requested[name]
            if count == 0 or count == delta:
                self._state = None

    def _ready(self) -> PlanState:
        state = self._state
        if state is None:
            names = sorted(self._static_names | self._requested.keys())
            state = PlanState(
                self._nodes,
                self._tree,
                names,
                admitted=self._admitted,
                topology=self._topology,
                packing=self._packing,
            )
            for admitted in self._admitted.values():
                state.add_admitted(admitted)
            entries = self._entries
            for gang_id, gang in self._pending.items():
                entries[gang_id] = state.add_pending(gang)
            self._state = state
        return state
