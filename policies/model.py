"""The model the planner decides over: nodes, gangs, queues and the cohort tree, snapshots.

Everything here is immutable. A `Snapshot` is what one planning cycle sees; the controller builds
it from its cache and the simulator from its in-memory cluster.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import networkx as nx

from policies.durations import shown
from policies.labels import holds
from policies.packing import DEFAULT_PACKING, Packing
from policies.resources import Resources, format_quantity
from policies.topology import NO_TOPOLOGY, Topology, TopologyRequest
from policies.vocabulary import MAX_INT32, PRIORITY_MAX

__all__ = [
    "AdmittedGang",
    "Backoff",
    "BorrowWithinCohort",
    "Gang",
    "Node",
    "Ordering",
    "PodSet",
    "PolicyError",
    "Preemption",
    "Queue",
    "QueueTree",
    "SizeRatio",
    "Snapshot",
    "SubmitStamp",
    "Taint",
    "Toleration",
]

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
Strategy = Literal["BestEffortFIFO", "StrictFIFO"]
SizeRatioAction = Literal["Serialize", "Reject"]
NeverFitsAction = Literal["Warn", "Reject"]
OrderBy = Literal["Submission", "SmallestFirst"]


class PolicyError(ValueError):
    """An invalid queue, gang or snapshot; the message names the object and the field."""


def parse_priority(value: object, where: str) -> int:
    """A gang's priority (`muster.dev/priority`): a whole number from 0 to 1e9, higher first.

    One reading for the webhook (which refuses a bad one) and the controller (which keeps a
    Job with a bad one waiting, with this message); raises PolicyError naming `where`.
    """
    fix = f"set it to a whole number from 0 to {PRIORITY_MAX} (higher goes first)"
    priority = whole_number(value)
    if priority is None:
        raise PolicyError(f"{where}: {shown(value)} is not an integer; {fix}")
    if not 0 <= priority <= PRIORITY_MAX:
        raise PolicyError(f"{where}: {spelled(priority, value)} is out of range; {fix}")
    return priority


MAX_DIGITS = 19
"""Digits of the largest integer Kubernetes stores (int64: 9223372036854775807)."""
OUT_OF_RANGE = 2**63
"""What `whole_number` reads a longer digit string as: beyond every range muster checks."""


def spelled(number: int, value: object) -> str:
    """How a message quotes a whole number read from ``value``: the number, or the value cut
    short (`policies.durations.shown`) when it had more digits than any range holds."""
    return str(number) if abs(number) < OUT_OF_RANGE else shown(value)


def whole_number(value: object) -> int | None:
    """The integer an `int` or an optionally signed string of ASCII digits (spaces around it
    allowed) is, else None. A string of more than `MAX_DIGITS` digits reads as ±`OUT_OF_RANGE`
    without being converted: no range muster checks reaches it, and `int()` of thousands of
    digits costs time or raises (Python refuses over 4300)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        return None
    text = value.strip()
    sign, digits = (-1, text[1:]) if text.startswith("-") else (1, text)
    if not is_digits(digits):
        return None
    if len(digits.lstrip("0")) > MAX_DIGITS:
        return sign * OUT_OF_RANGE
    return sign * int(digits)


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    """Kubernetes semantics: empty key with ``Exists`` tolerates every taint; empty effect
    matches every effect."""

    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


def tolerated(taints: Iterable[Taint], tolerations: Sequence[Toleration]) -> bool:
    """True if every taint that keeps pods off a node (NoSchedule, NoExecute) is tolerated."""
    return all(
        taint.effect == "PreferNoSchedule" or any(t.tolerates(taint) for t in tolerations)
        for taint in taints
    )


NodeExpression = tuple[str, str, tuple[str, ...]]
"""One `matchExpressions` entry of a required node affinity term: (key, operator, values)."""
NodeTerm = tuple[NodeExpression, ...]
"""A node selector term: every expression must hold."""


def node_affinity_holds(labels: Mapping[str, str], terms: tuple[NodeTerm, ...]) -> bool:
    """True if a node with ``labels`` satisfies a pod's required node affinity (terms ORed,
    expressions within a term ANDed, as Kubernetes does); no terms: every node."""
    return not terms or any(all(holds(labels, *e) for e in term) for term in terms)


def placeable(labels: Mapping[str, str], taints: Iterable[Taint], gang: Gang) -> bool:
    """True if the gang's pods may go to a node with these labels and taints: its node
    selector, its required node affinity and its tolerations (resources aside)."""
    return (
        all(labels.get(k) == v for k, v in gang.node_selector.items())
        and node_affinity_holds(labels, gang.node_terms)
        and tolerated(taints, gang.tolerations)
    )


@dataclass(frozen=True, slots=True)
class Node:
    """A node's allocatable capacity; ``used`` is held by pods muster does not manage."""

    name: str
    allocatable: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    used: Resources = field(default_factory=Resources)

    def __hash__(self) -> int:
        return hash(self.name)


@dataclass(frozen=True, slots=True, order=True)
class SubmitStamp:
    """When a gang was submitted. Ordered by (time, seq, name): a total order even for gangs
    created in the same second by parallel submitters."""

    time: float
    seq: int = 0
    name: str = ""


# Gang.screen_key: queue, per-pod request as (resource, amount) pairs, one-pod-per-node, node
# selector as sorted (key, value) pairs, tolerations as (key, operator, value, effect), required
# node affinity terms; then, for a gang of several pod sets, its other pod sets' (count, key).
ScreenKey = tuple[Any, ...]
_T = TypeVar("_T")
# Equal screen keys (and per-pod requests) of different gangs are made the same object, so the
# planner's dict lookups on them compare by identity. Bounded: cleared when it grows large.
_CANONICAL: dict[object, object] = {}


def _canonical(value: _T) -> _T:
    found = _CANONICAL.get(value)
    if found is None:
        if len(_CANONICAL) >= 1 << 16:
            _CANONICAL.clear()
        _CANONICAL[value] = found = value
    return found  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class PodSet:
    """One group of a gang's pods made from one pod template (a JobSet's replicated Job, an MPI
    job's launcher): ``count`` identical pods, admitted whole."""

    name: str
    count: int
    requests: Resources
    one_pod_per_node: bool = False
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    node_terms: tuple[NodeTerm, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise PolicyError(
                f"pod set {self.name!r}: count must be at least 1, got {self.count!r}"
            )

    def screen_key(self) -> tuple[object, ...]:
        """What fit depends on: request, one-pod-per-node, selector, tolerations, affinity."""
        requests = self.requests
        amounts = (
            requests._amounts
            if isinstance(requests, Resources)
            else {name: amount for name, amount in requests.items() if amount}
        )
        return (
            frozenset(amounts.items()),
            self.one_pod_per_node,
            tuple(sorted(self.node_selector.items())),
            tuple((t.key, t.operator, t.value, t.effect) for t in self.tolerations),
            self.node_terms,
        )


@dataclass(frozen=True, slots=True)
class Gang:
    """The unit of admission: ``size`` pods admitted together (at least ``min``).

    A gang is one or more pod sets. Its *main* pod set is written inline (``pod_requests``,
    ``one_pod_per_node``, ``node_selector``, ``tolerations``, ``node_terms``; named
    ``set_name``): the only one that may be admitted smaller than asked (elastic). ``others``
    are its further pod sets, each admitted whole (an MPI launcher beside its workers, the other
    replicated Jobs of a JobSet). ``size`` and ``min_size`` count every pod of the gang: the
    main set has ``size - fixed`` pods, of which at least ``min - fixed`` are admitted."""

    id: str  # "namespace/name", unique
    queue: str
    pod_requests: Resources
    size: int
    min_size: int | None = None  # None = size (not elastic)
    priority: int = 0
    submitted: SubmitStamp = SubmitStamp(0.0)
    one_pod_per_node: bool = False
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    node_terms: tuple[NodeTerm, ...] = ()
    """The pod template's required node affinity (matchExpressions of each term; empty: none)."""
    elastic_after: float = 0.0
    kind: str = "Job"
    preemptions: int = 0  # times it was preempted so far (muster.dev/preemptions)
    # Seconds the gang may run once admitted: the Job's spec.activeDeadlineSeconds (a
    # MiniCluster's spec.deadlineSeconds, which the operator copies there). Kubernetes ends the
    # Job then, so the planner may lend it nodes reserved for a big gang (backfill). None: no
    # bound, never backfills.
    runtime_limit: float | None = None
    others: tuple[PodSet, ...] = ()
    """The gang's pod sets besides the main one, in the kind's order; each admitted whole."""
    set_name: str = ""
    """The main pod set's name ('' for a kind with one pod template)."""
    topology: TopologyRequest | None = None
    """Where its pods go among the cluster's topology domains (muster.dev/topology-required,
    -preferred; every pod set of the gang alike); None: anywhere, as before topology."""
    shared: Resources | None = None
    """What the gang takes once, whatever its size: the devices of the ResourceClaims its pods
    share (`policies.devices`), in its quota and shares; no node's (kube-scheduler allocates
    a shared claim where its first pod goes, and then the claim holds that node's devices).
    None (nearly every gang): nothing; checked by identity on the planner's hot paths."""
    # Pods of ``others``: the part of ``size`` (and of ``min``) that never shrinks.
    fixed: int = field(init=False, repr=False, compare=False)
    # Within-queue order (priority first, then submission), precomputed for the planner's sort.
    order_key: tuple[int, float, int, str] = field(init=False, repr=False, compare=False)
    # Gangs of one queue with equal screen keys are screened and fitted alike (same queue, per-pod
    # request, one-pod-per-node flag, node selector and tolerations, and the same other pod
    # sets). Plain tuples, strings and frozensets only, so hashing and comparing it stays in C.
    screen_key: ScreenKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        fixed = sum(other.count for other in self.others)
        object.__setattr__(self, "fixed", fixed)
        if not isinstance(self.size, int) or self.size < 1 + fixed:
            least = "at least 1" if not fixed else f"more than its other pod sets' {fixed} pods"
            raise PolicyError(f"gang {self.id}: size must be {least}, got {self.size!r}")
        if self.min_size is not None and not 1 + fixed <= self.min_size <= self.size:
            raise PolicyError(
                f"gang {self.id}: minSize {self.min_size} must be between {1 + fixed} and size "
                f"{self.size}"
            )
        if not math.isfinite(self.elastic_after) or self.elastic_after < 0:
            raise PolicyError(
                f"gang {self.id}: elasticAfter must be a non-negative number of seconds, "
                f"got {self.elastic_after!r}"
            )
        if not isinstance(self.preemptions, int) or self.preemptions < 0:
            raise PolicyError(
                f"gang {self.id}: preemptions must be a whole number >= 0, got {self.preemptions!r}"
            )
        limit = self.runtime_limit
        if limit is not None and (
            isinstance(limit, bool)
            or not isinstance(limit, int | float)
            or not math.isfinite(limit)
            or limit <= 0
        ):
            raise PolicyError(
                f"gang {self.id}: runtimeLimit (spec.activeDeadlineSeconds) must be a number of "
                f"seconds > 0, got {limit!r}; leave it unset for no limit"
            )
        stamp = self.submitted
        object.__setattr__(self, "order_key", (-self.priority, stamp.time, stamp.seq, stamp.name))
        requests = self.pod_requests
        amounts = (
            requests._amounts  # nonzero amounts only
            if isinstance(requests, Resources)
            else {name: amount for name, amount in requests.items() if amount}
        )
        key: ScreenKey = (
            self.queue,
            _canonical(frozenset(amounts.items())),
            self.one_pod_per_node,
            tuple(sorted(self.node_selector.items())),
            tuple((t.key, t.operator, t.value, t.effect) for t in self.tolerations),
            self.node_terms,
        )
        if self.others:
            key = (*key, tuple((o.count, o.screen_key()) for o in self.others))
        if self.topology is not None:  # last, so a gang without one keeps its key
            key = (*key, ("topology", self.topology.level, self.topology.required))
        if self.shared is not None:  # after, so a gang without shared claims keeps its key
            key = (*key, ("shared", frozenset(self.shared.items())))
        object.__setattr__(self, "screen_key", _canonical(key))

    def __hash__(self) -> int:
        return hash(self.id)

    @property
    def min(self) -> int:
        return self.size if self.min_size is None else self.min_size

    @property
    def elastic(self) -> bool:
        return self.min < self.size

    def demand(self, size: int) -> Resources:
        """Quota of the gang admitted at ``size`` pods (every pod set's)."""
        demand = self.pod_requests.scale(size - self.fixed)
        for other in self.others:
            demand = demand + other.requests.scale(other.count)
        return demand if self.shared is None else demand + self.shared

    @property
    def main(self) -> PodSet:
        """The main pod set at full size."""
        return PodSet(
            self.set_name,
            self.size - self.fixed,
            self.pod_requests,
            self.one_pod_per_node,
            self.node_selector,
            self.tolerations,
            self.node_terms,
        )

    @property
    def pod_sets(self) -> tuple[PodSet, ...]:
        """Every pod set, the main one first."""
        return (self.main, *self.others)

    def placements(
        self, placement: Mapping[str, int], others: Sequence[Mapping[str, int]]
    ) -> dict[str, Mapping[str, int]]:
        """Pod set name -> node name -> pods, from an admission's main placement and those of
        ``others`` (in the order of ``Gang.others``)."""
        out: dict[str, Mapping[str, int]] = {self.set_name: placement}
        for other, where in zip(self.others, others, strict=False):
            out[other.name] = where
        return out


@dataclass(frozen=True, slots=True)
class Backoff:
    """Requeue backoff after an eviction: ``base * 2**(n-1)`` seconds, capped at ``max``;
    after ``limit`` evictions the gang is failed."""

    base: float = 10.0
    max: float = 600.0
    limit: int = 5

    def delay(self, evictions: int) -> float:
        """Seconds to wait before requeueing after the ``evictions``-th eviction (1-based)."""
        if evictions <= 0:
            return 0.0
        return float(min(self.max, self.base * 2 ** min(evictions - 1, 62)))


@dataclass(frozen=True, slots=True)
class SizeRatio:
    """A gang whose dominant demand exceeds ``ratio`` of the cluster is *big*: big gangs are
    serialized (default) or rejected. 0.1 comes from the clogging study cited in
    docs/dev/architecture.md."""

    ratio: float = 0.1
    action: SizeRatioAction = "Serialize"


@dataclass(frozen=True, slots=True)
class Ordering:
    """The order of a queue's waiting gangs (`spec.ordering`; policies/ordering.py).

    ``Submission`` (the default): by priority, then submission. ``SmallestFirst``: within a
    priority, a gang that has waited ``aging_bound`` seconds goes first (by submission) and, if
    big, takes the reservation as a starving big gang does; the others follow smallest
    dominant share first, then by submission. ``aging_bound`` None: muster's starvation bound
    for big gangs (`policies.reservation.STARVATION_AFTER`, 120 s)."""

    by: OrderBy = "Submission"
    aging_bound: float | None = None

    @property
    def smallest_first(self) -> bool:
        return self.by == "SmallestFirst"


ReclaimWithinCohort = Literal["Never", "LowerPriority", "Any"]
WithinQueue = Literal["Never", "LowerPriority"]
FairShareReclaim = Literal["Never", "Reclaim"]
BorrowPolicy = Literal["Never", "LowerPriority"]


@dataclass(frozen=True, slots=True)
class BorrowWithinCohort:
    """Whether ``reclaimWithinCohort`` still applies when the preemptor's queue would borrow
    (use more than its nominal quota) with it, as Kueue's ``borrowWithinCohort``: ``Never`` (it
    does not: the default), or ``LowerPriority``: it may preempt gangs of borrowing queues of
    lower priority than its own, and, with ``max_priority_threshold``, only those of priority
    at most that."""

    policy: BorrowPolicy = "Never"
    max_priority_threshold: int | None = None

    @property
    def enabled(self) -> bool:
        return self.policy != "Never"


@dataclass(frozen=True, slots=True)
class Preemption:
    """Which admitted gangs a queue's pending gang may preempt to be admitted (Kueue-like), and
    how the queue's own gangs are kept from being preempted again and again.

    - ``reclaim_within_cohort``: gangs of other queues of the cohort tree that use more than
      their nominal quota (a queue without nominal quota borrows all it uses): ``Any``, only
      those of lower priority (``LowerPriority``) or none (``Never``).
    - ``within_queue``: ``LowerPriority`` gangs of the same queue, or ``Never``.
    - ``fair_share``: ``Reclaim`` = gangs of queues of the tree above their weighted fair share.
    - ``borrow_within_cohort``: whether ``reclaim_within_cohort`` applies while the preemptor
      would borrow (`BorrowWithinCohort`); without it a borrowing preemptor reclaims nothing.

    Across queues a gang is never preempted for a queue whose weighted share with the
    preemptor is not below the victim queue's. ``protect_after``/``protect_for`` are read on
    the victim's queue: a gang preempted ``protect_after`` times is not preempted again within
    ``protect_for`` seconds of its admission.
    """

    reclaim_within_cohort: ReclaimWithinCohort = "Never"
    within_queue: WithinQueue = "Never"
    fair_share: FairShareReclaim = "Never"
    protect_after: int = 3
    protect_for: float = 600.0
    borrow_within_cohort: BorrowWithinCohort = BorrowWithinCohort()

    def validate(self, where: str) -> None:
        """Raise PolicyError naming the field that is wrong (``where``: the spec's path)."""
        _validate_preemption(self, where)

    @property
    def enabled(self) -> bool:
        return (
            self.reclaim_within_cohort != "Never"
            or self.within_queue != "Never"
            or self.fair_share != "Never"
        )


@dataclass(frozen=True, slots=True)
class Queue:
    """A leaf queue takes gangs; a queue with children is a cohort sharing unused quota.

    ``nominal`` None = no quota of its own; ``quota_names`` lists the resources written in
    nominal, zero amounts included, so a nominal of 0 limits rather than vanishes. A resource
    is under quota in a tree when some queue of the tree names it; there a missing nominal
    amount is 0 (the queue can only borrow). Resources no queue of the tree names are not
    limited. In ``borrowing_limit`` and ``lending_limit`` a resource that is not named has no
    limit.
    """

    name: str
    parent: str | None = None
    weight: float = 1.0
    nominal: Resources | None = None
    borrowing_limit: Resources | None = None
    lending_limit: Resources | None = None
    strategy: Strategy = "BestEffortFIFO"
    size_ratio: SizeRatio | None = SizeRatio()
    # Resources written in nominal, zero amounts included: `nominal: {cpu: 0}` puts cpu under
    # quota (a Resources vector drops zeros, so it cannot say this by itself).
    quota_names: frozenset[str] = frozenset()
    clog_timeout: float = 300.0
    backoff: Backoff = Backoff()
    node_fit: bool = True
    preemption: Preemption = Preemption()
    # What the webhook does with a created gang that can never fit (the planner's NeverFits):
    # allow it with a warning, or refuse it. The planner itself ignores it.
    never_fits: NeverFitsAction = "Warn"
    # Fairness over time (`spec.fairSharing.halfLife`, seconds; policies/fairtime.py): shares
    # count recent usage decayed with this half-life. None = not set (a leaf takes its nearest
    # cohort's; none at all: the instant share, the default); 0 = the instant share.
    usage_half_life: float | None = None
    # The order of the queue's waiting gangs (`spec.ordering`); the default, by submission.
    ordering: Ordering = Ordering()


class QueueTree:
    """Validated queues and their cohort tree (a networkx DiGraph, edges parent -> child)."""

    __slots__ = ("_children", "_leaves", "_roots", "graph", "queues")

    queues: Mapping[str, Queue]
    graph: nx.DiGraph

    def __init__(self, queues: Mapping[str, Queue], graph: nx.DiGraph) -> None:
        self.queues = queues
        self.graph = graph
        self._children: dict[str, tuple[str, ...]] = {
            name: tuple(sorted(graph.successors(name))) for name in queues
        }
        self._leaves = tuple(name for name in queues if not self._children[name])
        self._roots: dict[str, str] = {}
        """Each queue's root, as `root` first walks it: a tree never changes once built, and
        preemption asks it of every admitted gang for every preemptor (190 million walks of
        the ancestors in one in-process run of Kueue's large-scale benchmark)."""

    @classmethod
    def build(cls, queues: Iterable[Queue]) -> QueueTree:
        """Validate and link queues. Raises PolicyError naming the queue and the field."""
        by_name: dict[str, Queue] = {}
        for queue in queues:
            if not queue.name:
                raise PolicyError("queue with an empty name: set metadata.name")
            if queue.name in by_name:
                raise PolicyError(
                    f'queue "{queue.name}": duplicate name; queue names are cluster-wide unique'
                )
            validate_queue(queue)
            by_name[queue.name] = queue
        graph = nx.DiGraph()
        graph.add_nodes_from(by_name)
        for queue in by_name.values():
            if queue.parent is None:
                continue
            if queue.parent not in by_name:
                known = ", ".join(sorted(by_name)) or "none"
                raise PolicyError(
                    f'queue "{queue.name}": spec.parent "{queue.parent}" not found; '
                    f"create it or use one of: {known}"
                )
            graph.add_edge(queue.parent, queue.name)
        try:
            cycle = nx.find_cycle(graph)
        except nx.NetworkXNoCycle:
            cycle = None
        if cycle:
            names = [edge[0] for edge in cycle]
            path = " -> ".join([*names, names[0]])
            raise PolicyError(
                f'queue "{min(names)}": spec.parent forms a cycle ({path}); '
                "a cohort tree must have a root"
            )
        return cls(by_name, graph)

    def __contains__(self, name: object) -> bool:
        return name in self.queues

    def __iter__(self) -> Iterator[Queue]:
        return iter(self.queues.values())

    def __len__(self) -> int:
        return len(self.queues)

    def __getitem__(self, name: str) -> Queue:
        return self.queues[name]

    def children(self, name: str) -> tuple[str, ...]:
        return self._children[name]

    def is_leaf(self, name: str) -> bool:
        return name in self.queues and not self._children[name]

    @property
    def leaves(self) -> tuple[str, ...]:
        return self._leaves

    def ancestors(self, name: str) -> list[str]:
        """The queue itself, then its parent, up to the root."""
        path = [name]
        parent = self.queues[name].parent
        while parent is not None:
            path.append(parent)
            parent = self.queues[parent].parent
        return path

    def root(self, name: str) -> str:
        root = self._roots.get(name)
        if root is None:
            root = self._roots[name] = self.ancestors(name)[-1]
        return root


_RECLAIM = ("Never", "LowerPriority", "Any")


def _validate_preemption(preemption: Preemption, path: str) -> None:
    rules: tuple[tuple[str, str, tuple[str, ...]], ...] = (
        (
            "reclaimWithinCohort",
            preemption.reclaim_within_cohort,
            ("Never", "LowerPriority", "Any"),
        ),
        ("withinQueue", preemption.within_queue, ("Never", "LowerPriority")),
        ("fairShare", preemption.fair_share, ("Never", "Reclaim")),
    )
    for field_name, value, allowed in rules:
        if value not in allowed:
            raise PolicyError(
                f"{path}.{field_name}: must be one of {', '.join(allowed)}, got {value!r}"
            )
    if not isinstance(preemption.protect_after, int) or preemption.protect_after < 1:
        raise PolicyError(
            f"{path}.protectAfter: must be a whole number >= 1, got {preemption.protect_after!r}"
        )
    if not (math.isfinite(preemption.protect_for) and preemption.protect_for >= 0):
        raise PolicyError(
            f"{path}.protectFor: must be a duration >= 0, got {preemption.protect_for!r}"
        )
    borrow = preemption.borrow_within_cohort
    if borrow.policy not in ("Never", "LowerPriority"):
        raise PolicyError(
            f"{path}.borrowWithinCohort.policy: must be one of Never, LowerPriority, "
            f"got {borrow.policy!r}"
        )
    threshold = borrow.max_priority_threshold
    if threshold is not None and (
        isinstance(threshold, bool)
        or not isinstance(threshold, int)
        or not -MAX_INT32 - 1 <= threshold <= MAX_INT32
    ):
        # An int32, as Kueue's field and the CRD's: priorities may be negative.
        raise PolicyError(
            f"{path}.borrowWithinCohort.maxPriorityThreshold: {shown(threshold)} is not a whole "
            f"number from {-MAX_INT32 - 1} to {MAX_INT32}; e.g. 100 (gangs of priority at most "
            "100 may be preempted)"
        )
    if borrow.enabled and preemption.reclaim_within_cohort == "Never":
        # As Kueue: it widens reclaimWithinCohort; on its own it would let nothing be preempted.
        raise PolicyError(
            f"{path}.borrowWithinCohort: policy {borrow.policy} needs reclaimWithinCohort "
            "LowerPriority or Any (it lets reclaimWithinCohort apply while the preemptor "
            "borrows); set reclaimWithinCohort, or drop borrowWithinCohort"
        )


def validate_queue(queue: Queue) -> None:
    """Check one queue's own fields; raises PolicyError naming the queue and the field."""
    where = f'queue "{queue.name}"'
    if not (isinstance(queue.weight, int | float) and math.isfinite(queue.weight)) or (
        queue.weight <= 0
    ):
        raise PolicyError(f"{where}: spec.weight must be a number > 0, got {queue.weight!r}")
    half_life = queue.usage_half_life
    if half_life is not None and not (
        isinstance(half_life, int | float) and math.isfinite(half_life) and half_life >= 0
    ):
        raise PolicyError(
            f"{where}: spec.fairSharing.halfLife must be a duration >= 0, got {half_life!r}"
        )
    if queue.parent == queue.name:
        raise PolicyError(
            f"{where}: spec.parent names the queue itself; a queue cannot be its own cohort"
        )
    nominal = queue.nominal or Resources()
    for limit_name, limit in (
        ("borrowingLimit", queue.borrowing_limit),
        ("lendingLimit", queue.lending_limit),
        ("nominal", queue.nominal),
    ):
        for resource, amount in (limit or Resources()).items():
            if amount < 0:
                raise PolicyError(
                    f"{where}: spec.{limit_name}.{resource} is negative "
                    f"({format_quantity(resource, amount)}); use a non-negative quantity"
                )
    for resource, amount in (queue.lending_limit or Resources()).items():
        if amount > nominal[resource]:
            raise PolicyError(
                f"{where}: spec.lendingLimit.{resource} ({format_quantity(resource, amount)}) "
                f"exceeds spec.nominal.{resource} "
                f"({format_quantity(resource, nominal[resource])}); "
                "a queue can lend at most its nominal quota"
            )
    ratio = queue.size_ratio
    if ratio is not None and not (math.isfinite(ratio.ratio) and 0 < ratio.ratio <= 1):
        raise PolicyError(f"{where}: spec.sizeRatio.ratio must be in (0, 1], got {ratio.ratio!r}")
    if ratio is not None and ratio.action not in ("Serialize", "Reject"):
        raise PolicyError(
            f"{where}: spec.sizeRatio.action must be Serialize or Reject, got {ratio.action!r}"
        )
    if queue.strategy not in ("BestEffortFIFO", "StrictFIFO"):
        raise PolicyError(
            f"{where}: spec.strategy must be BestEffortFIFO or StrictFIFO, got {queue.strategy!r}"
        )
    if not (math.isfinite(queue.clog_timeout) and queue.clog_timeout > 0):
        raise PolicyError(
            f"{where}: spec.clogTimeout must be a number of seconds > 0, got {queue.clog_timeout!r}"
        )
    _validate_preemption(queue.preemption, f"{where}: spec.preemption")
    backoff = queue.backoff
    if not (0 < backoff.base <= backoff.max) or backoff.limit < 0:
        raise PolicyError(
            f"{where}: spec.backoff needs 0 < base <= max and limit >= 0, got base={backoff.base}, "
            f"max={backoff.max}, limit={backoff.limit}"
        )


@dataclass(frozen=True, slots=True)
class AdmittedGang:
    """A gang admitted earlier: its quota usage is ``gang.demand(size)``, its node usage the
    placement. ``running`` = it has reached ``min`` ready pods."""

    gang: Gang
    size: int
    placement: Mapping[str, int]  # node name -> pods of the main pod set
    admitted_at: float
    running: bool = False
    other_placements: tuple[Mapping[str, int], ...] = ()
    """Where the pods of ``gang.others`` went, in their order (empty: node-blind, or none)."""

    def __hash__(self) -> int:
        return hash(self.gang.id)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one planning cycle sees. Never mutated; the planner works on private copies."""

    nodes: Sequence[Node]
    queues: QueueTree
    admitted: Sequence[AdmittedGang]
    pending: Sequence[Gang]
    now: float
    topology: Topology = NO_TOPOLOGY
    """The cluster's topology levels (none: gangs' topology requests are not looked at)."""
    packing: Packing = DEFAULT_PACKING
    """The order in which gangs are offered nodes (`policies.packing`)."""

    def __hash__(self) -> int:
        return id(self)


def is_digits(text: str) -> bool:
    """ASCII digits only: `str.isdigit` also takes superscripts, which `int` refuses, and other
    scripts' digits, which no label value can carry on to a MiniCluster's Job."""
    return text.isascii() and text.isdigit()
