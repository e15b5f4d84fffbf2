"""The in-process engine's cluster (`ClusterModel`): nodes' free capacity, the pod classes
(`PodClasses`), and the pod-level scheduler that binds queued pods to nodes.

Every pod of one class asks the same amounts and may go on the same nodes; the pods of a gang
of several pod sets are of each set's class (`GangRecord.sets`). The scheduler binds
pods in queue order to the first eligible node with room (placement "scheduler": to the
feasible node kube-scheduler's default scoring ranks first, `node_score`). What a binding means
for the gang (its state, its clog clock, its metrics) is the lifecycle's (`simulator.lifecycle`):
it is told through the ``bound`` callback of `ClusterModel.schedule`.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache

from policies import Gang, Node, Resources, Toleration
from policies.kinds.registry import kind_named, pod_gang
from policies.model import NodeTerm, node_affinity_holds, tolerated
from simulator.records import ADMITTED, PENDING, GangRecord, PodClass, PodSetRecord

MAX_NODE_SCORE = 100  # kube-scheduler's framework.MaxNodeScore

PodEntry = tuple[int, int, int, int]
"""A pod in the scheduler queue: (order key, gang index, the gang's attempt, its pod set: the
index in `GangRecord.sets`, 0 for a gang of one pod set)."""

BoundFn = Callable[[GangRecord, int, int], None]
"""bound(gang, node, pod set): one pod of the gang's pod set was just bound to the node."""


class PodClasses:
    """The pod classes of one run: pods the scheduler treats alike (the same request over the
    cluster model's resources, the same eligible nodes), each asked once: every gang's main pod
    set and each set of a gang of several."""

    def __init__(self, nodes: Sequence[Node], resources: Sequence[str], counts_pods: bool) -> None:
        self.nodes = nodes
        self.resources = resources
        self.r_index = {name: i for i, name in enumerate(resources)}
        self.counts_pods = counts_pods  # nodes declare `pods`: every pod takes one
        self.classes: list[PodClass] = []
        self._request_cache: dict[tuple[int, ...], tuple[tuple[int, int], ...]] = {}
        self._class_index: dict[tuple[object, ...], int] = {}
        self._eligible_cache: dict[tuple[object, ...], list[int]] = {}
        self._by_screen_key: dict[object, tuple[tuple[tuple[int, int], ...], int]] = {}

    def classify(self, gang: Gang) -> tuple[tuple[tuple[int, int], ...], int]:
        """One pod of ``gang``'s main pod set: its request ((resource index, amount), non-zero
        only) and its pod class. Gangs with equal screen keys (same non-zero requests, node
        selector, tolerations and node affinity, among others) are one class: asked once."""
        known = self._by_screen_key.get(gang.screen_key)
        if known is not None:
            return known
        found = self._class_of(
            gang.pod_requests, gang.node_selector, gang.tolerations, gang.node_terms
        )
        self._by_screen_key[gang.screen_key] = found
        return found

    def pod_sets(self, gang: Gang) -> tuple[PodSetRecord, ...]:
        """The record of each pod set of a gang of several, main first (`GangRecord.sets`);
        none for a gang of one."""
        if not gang.others:
            return ()
        return tuple(
            PodSetRecord(
                pod_set.count,
                *self._class_of(
                    pod_set.requests, pod_set.node_selector, pod_set.tolerations, pod_set.node_terms
                ),
                one_pod_per_node=pod_set.one_pod_per_node,
            )
            for pod_set in gang.pod_sets
        )

    def _class_of(
        self,
        requests: Resources,
        selector: Mapping[str, str],
        tolerations: tuple[Toleration, ...],
        terms: tuple[NodeTerm, ...],
    ) -> tuple[tuple[tuple[int, int], ...], int]:
        r_index = self.r_index
        vector = [requests[r] for r in self.resources]
        if self.counts_pods:
            vector[r_index["pods"]] = max(vector[r_index["pods"]], 1)
        key = tuple(vector)
        request = self._request_cache.setdefault(key, tuple((i, a) for i, a in enumerate(key) if a))
        placement_key = (tuple(sorted(selector.items())), tolerations, terms)
        class_key = (request, placement_key)
        pod_class = self._class_index.get(class_key)
        if pod_class is None:
            nodes = self._eligible_cache.get(placement_key)
            if nodes is None:
                nodes = self._eligible_cache[placement_key] = self.eligible(
                    selector, tolerations, terms
                )
            pod_class = self._class_index[class_key] = len(self.classes)
            self.classes.append(PodClass(request=request, nodes=nodes))
        return request, pod_class

    def eligible(
        self,
        selector: Mapping[str, str],
        tolerations: tuple[Toleration, ...],
        terms: tuple[NodeTerm, ...] = (),
    ) -> list[int]:
        """Nodes a pod may go to (resources aside): its node selector, its required node
        affinity and its tolerations (`policies.model.placeable`, for any pod set)."""
        return [
            i
            for i, node in enumerate(self.nodes)
            if all(node.labels.get(k) == v for k, v in selector.items())
            and node_affinity_holds(node.labels, terms)
            and tolerated(node.taints, tolerations)
        ]


class ClusterModel:
    """Nodes, what is free on them, and the pods waiting for a node."""

    def __init__(
        self, nodes: Sequence[Node], pod_requests: Iterable[Iterable[str]], unpinned: bool
    ) -> None:
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self.node_index = {node.name: i for i, node in enumerate(self.nodes)}
        self.unpinned = unpinned
        # Resources the cluster model tracks: everything nodes offer or pods ask for. "pods" is
        # one per pod when nodes declare it, as in Kubernetes.
        names: list[str] = []
        for node in self.nodes:
            names.extend(r for r in node.allocatable if r not in names)
        for requests in pod_requests:
            names.extend(r for r in requests if r not in names)
        self.resources = tuple(names)
        self.r_index = r_index = {name: i for i, name in enumerate(names)}
        self.capacity = [0] * len(names)
        self.free: list[list[int]] = []
        for node in self.nodes:
            vector = [node.allocatable[r] - node.used[r] for r in names]
            self.free.append(vector)
            for i, amount in enumerate(vector):
                self.capacity[i] += max(amount, 0)
        self.util_r = r_index["cpu"] if "cpu" in r_index and self.capacity[r_index["cpu"]] else 0
        self.util_scale = 1000.0 if names[self.util_r] == "cpu" else 1.0
        self.counts_pods = "pods" in r_index and any(n.allocatable["pods"] for n in self.nodes)
        # Placement "scheduler": what the pod-level scheduler scores (kube-scheduler's default
        # NodeResourcesFit: cpu and memory, weight 1 each; other resources if a cluster has
        # neither) and each node's allocatable of them (its shape).
        self.scored: tuple[int, ...] = ()
        self.shape: list[int] = []  # node index -> its shape: index of its allocatable in shapes
        self.shapes: list[tuple[int, ...]] = []  # allocatable of the scored resources
        if unpinned:
            scored = [r_index[r] for r in ("cpu", "memory") if r in r_index]
            self.scored = tuple(scored) or tuple(
                i for i, name in enumerate(names) if name != "pods"
            )
            shape_of: dict[tuple[int, ...], int] = {}
            for node in self.nodes:
                shape = tuple(node.allocatable[names[r]] for r in self.scored)
                self.shape.append(shape_of.setdefault(shape, len(shape_of)))
            self.shapes = list(shape_of)
        self.classes = PodClasses(self.nodes, self.resources, self.counts_pods)
        self.pod_classes: list[PodClass] = self.classes.classes
        self.freed_floor = 0  # lowest node index whose capacity grew since the last pass
        # Scheduler queue of unbound pods, one entry per pod.
        self.pod_queue: list[PodEntry] = []
        # Pod sets whose pods were created since the last scheduler pass: (creation second, gang
        # index, pods, pod set); submitted (none) or admitted unpinned (placement "scheduler").
        self.new_gangs: list[tuple[int, int, int, int]] = []
        self.pod_queue_dirty = False
        self.placement_misses = 0  # admitted pods not bound where the plan put them

    # ------------------------------------------------------------------ pod classes

    def classify(self, gang: Gang) -> tuple[tuple[tuple[int, int], ...], int]:
        """One pod of ``gang``'s main pod set: its request and pod class (`PodClasses`)."""
        return self.classes.classify(gang)

    def pod_sets(self, gang: Gang) -> tuple[PodSetRecord, ...]:
        """The record of each pod set of a gang of several (`PodClasses`)."""
        return self.classes.pod_sets(gang)

    # ------------------------------------------------------------------ capacity

    def bind(
        self, record: GangRecord, node: int, pods: int, part: PodSetRecord | None = None
    ) -> None:
        """``pods`` pods of ``record`` (of its pod set ``part``, for a gang of several) on
        ``node``."""
        vector = self.free[node]
        for r, amount in record.request if part is None else part.request:
            vector[r] -= amount * pods
        record.bound[node] = record.bound.get(node, 0) + pods
        record.bound_pods += pods
        if part is not None:
            part.bound[node] = part.bound.get(node, 0) + pods
            part.bound_pods += pods

    def bind_plan(
        self, record: GangRecord, placement: Mapping[str, int], part: PodSetRecord | None = None
    ) -> int:
        """Bind an admitted gang's pods where the plan put them (node name -> pods), on each
        node where they still fit (its free capacity holds them; a one-pod-per-node gang: one
        pod, on a node it is not on yet); returns the pods bound. A node's binding is `bind`'s,
        written out here (this runs once per admitted gang of a million-gang run): a change to
        `bind` must be made here too. For a gang of several pod sets, once per set (``part``)."""
        if part is not None:
            placed = self._bind_set_plan(record, placement, part)
            record.bound_pods += placed
            return placed
        node_index = self.node_index
        free = self.free
        request = record.request
        bound = record.bound
        one_per_node = record.gang.one_pod_per_node
        placed = 0
        for node_name, pods in placement.items():
            node = node_index[node_name]
            if one_per_node and (pods > 1 or node in bound):
                continue
            vector = free[node]
            for r, amount in request:
                if vector[r] < amount * pods:
                    break
            else:
                for r, amount in request:
                    vector[r] -= amount * pods
                bound[node] = bound.get(node, 0) + pods
                placed += pods
        record.bound_pods += placed
        return placed

    def _bind_set_plan(
        self, record: GangRecord, placement: Mapping[str, int], part: PodSetRecord
    ) -> int:
        """`bind_plan` for one pod set of a gang of several: into the set's and the gang's
        counts of each node."""
        placed = 0
        for node_name, pods in placement.items():
            node = self.node_index[node_name]
            if part.one_pod_per_node and (pods > 1 or node in part.bound):
                continue
            vector = self.free[node]
            if all(vector[r] >= amount * pods for r, amount in part.request):
                for r, amount in part.request:
                    vector[r] -= amount * pods
                part.bound[node] = part.bound.get(node, 0) + pods
                record.bound[node] = record.bound.get(node, 0) + pods
                placed += pods
        part.bound_pods += placed
        return placed

    def release(self, record: GangRecord) -> None:
        """Every pod of ``record`` leaves its node and the scheduler queue."""
        self.drop_queued_pods(record)
        for node in record.bound:
            if node < self.freed_floor:
                self.freed_floor = node
        for request, bound in (
            ((part.request, part.bound) for part in record.sets)
            if record.sets
            else ((record.request, record.bound),)
        ):
            for node, pods in bound.items():
                vector = self.free[node]
                for r, amount in request:
                    vector[r] += amount * pods
        for part in record.sets:
            part.bound = {}
            part.bound_pods = 0
        record.bound = {}
        record.bound_pods = 0
        if self.pod_queue:
            self.pod_queue_dirty = True

    # ------------------------------------------------------------------ scheduler queue

    def drop_queued_pods(self, record: GangRecord) -> None:
        # Its entries stay in the queue list and are skipped (stale attempt or state) there.
        if record.queued_pods:
            if record.sets:
                for part in record.sets:
                    self.pod_classes[part.pod_class].queued -= part.queued_pods
                    part.queued_pods = 0
            else:
                self.pod_classes[record.pod_class].queued -= record.queued_pods
            record.queued_pods = 0

    def queue_pods(self, record: GangRecord, pods: int, set_index: int = 0) -> None:
        """``pods`` pods of an admitted gang (of its pod set ``set_index``) whose plan no longer
        fits wait for a node."""
        self.pod_queue.extend([(0, record.index, record.attempt, set_index)] * pods)
        self._count_queued(record, set_index, pods)
        self.pod_queue_dirty = True

    def _count_queued(self, record: GangRecord, set_index: int, pods: int) -> None:
        record.queued_pods += pods
        if record.sets:
            part = record.sets[set_index]
            part.queued_pods += pods
            self.pod_classes[part.pod_class].queued += pods
        else:
            self.pod_classes[record.pod_class].queued += pods

    def create_pods(self, second: int, record: GangRecord, pods: int) -> None:
        """The Job controller creates ``pods`` pods of ``record`` (submitted without gang
        admission, or admitted unpinned) in creation second ``second``; a gang of several pod
        sets is one Job per set (a JobSet's), created together: ``pods`` is then the gang's
        size, of which each set takes its own (`GangRecord.set_sizes`)."""
        if record.sets:
            for set_index, count in enumerate(record.set_sizes(pods)):
                if count:
                    self.new_gangs.append((second, record.index, count, set_index))
        else:
            self.new_gangs.append((second, record.index, pods, 0))
        self.pod_queue_dirty = True

    def schedule(self, gangs: Sequence[GangRecord], bound: BoundFn) -> dict[tuple[int, int], int]:
        """One scheduler pass: bind queued pods, in queue order, to the first node that fits
        (placement "scheduler": to the node that fits and scores best); ``bound`` is told of
        each binding at once. Returns the pods bound per (gang index, pod set).

        Work is bounded by two facts: within a pass free capacity only shrinks, so once a pod
        of a class fits no node, no later pod of that class will (the class is blocked); and
        between passes capacity grows only on released nodes, so each class keeps a cursor
        past the leading nodes that had no room for it, rewound to the lowest released node.
        """
        self.pod_queue_dirty = False
        if self.new_gangs:
            self._enqueue_new_gangs(gangs)
        classes = self.pod_classes
        live = self._rewind_cursors()
        queue = self.pod_queue
        remaining: list[PodEntry] = []
        blocked_classes: set[int] = set()
        blocked_sets: set[tuple[int, int]] = set()
        bound_now: dict[tuple[int, int], int] = {}
        place = self.best_fit if self.unpinned else self.first_fit
        for position, entry in enumerate(queue):
            if not live:
                remaining.extend(queue[position:])
                break
            _, index, attempt, set_index = entry
            record = gangs[index]
            if attempt != record.attempt or record.state not in (PENDING, ADMITTED):
                continue  # its gang runs already, finished, or was evicted: pod not needed
            part = record.sets[set_index] if record.sets else None
            pods: GangRecord | PodSetRecord = record if part is None else part
            class_id = pods.pod_class
            key = (index, set_index)
            if class_id in blocked_classes or key in blocked_sets:
                remaining.append(entry)
                continue
            pod_class = classes[class_id]
            one_per_node = record.gang.one_pod_per_node if part is None else part.one_pod_per_node
            node = place(pod_class, pods.bound, one_per_node)
            if node is None:
                remaining.append(entry)
                if pod_class.cursor >= len(pod_class.nodes):
                    blocked_classes.add(class_id)  # no node has room for one such pod
                    live -= 1
                else:
                    blocked_sets.add(key)  # only nodes this pod set already uses have room
                continue
            self.bind(record, node, 1, part)
            plan = pods.plan
            if plan is not None and pods.bound[node] > plan.get(node, 0):
                self.placement_misses += 1  # placement "scheduler": it landed off plan
            record.queued_pods -= 1
            if part is not None:
                part.queued_pods -= 1
            pod_class.queued -= 1
            if not pod_class.queued:
                live -= 1
            bound_now[key] = bound_now.get(key, 0) + 1
            bound(record, node, set_index)
        self.pod_queue = remaining
        return bound_now

    def _enqueue_new_gangs(self, gangs: Sequence[GangRecord]) -> None:
        for _, index, pods, set_index in self.new_gangs:
            self._count_queued(gangs[index], set_index, pods)
        self.pod_queue.extend(pod_creation_order(self.new_gangs, gangs))
        self.new_gangs = []
        self.pod_queue.sort(key=_creation_second)

    def _rewind_cursors(self) -> int:
        """Rewind each class's cursor to the lowest node released since the last pass; returns
        how many classes have pods queued."""
        floor = self.freed_floor
        self.freed_floor = len(self.nodes)
        live = 0
        for pod_class in self.pod_classes:
            if pod_class.cursor and floor < len(self.nodes):
                pod_class.cursor = min(pod_class.cursor, bisect.bisect_left(pod_class.nodes, floor))
            if pod_class.queued:
                live += 1
        return live

    def first_fit(
        self, pod_class: PodClass, bound: Mapping[int, int], one_per_node: bool
    ) -> int | None:
        """The first eligible node with room for one pod of a pod set (``bound``: where its
        pods are; ``one_per_node``: at most one there); advances the class cursor past leading
        nodes without room (not past nodes skipped for one-pod-per-node)."""
        free = self.free
        request = pod_class.request
        nodes = pod_class.nodes
        position = pod_class.cursor
        leading = True
        while position < len(nodes):
            node = nodes[position]
            vector = free[node]
            for r, amount in request:
                if vector[r] < amount:
                    break
            else:
                if not (one_per_node and node in bound):
                    return node
                leading = False
                position += 1
                continue
            position += 1
            if leading:
                pod_class.cursor = position
        return None

    def best_fit(
        self, pod_class: PodClass, bound: Mapping[int, int], one_per_node: bool
    ) -> int | None:
        """The eligible node with room for one pod of a pod set that kube-scheduler's default
        profile scores highest (`node_score`); ties go to the first node (kube-scheduler picks
        one of them at random). Advances the class cursor as `first_fit` does."""
        free = self.free
        request = pod_class.request
        nodes = pod_class.nodes
        scored = self.scored
        wanted = dict(request)
        asks = tuple(wanted.get(r, 0) for r in scored)
        shape = self.shape
        shapes = self.shapes
        scores = pod_class.scores  # the same few (shape, free) pairs recur on many nodes
        position = pod_class.cursor
        leading = True
        best: int | None = None
        best_score = -1
        while position < len(nodes):
            node = nodes[position]
            vector = free[node]
            for r, amount in request:
                if vector[r] < amount:
                    break
            else:
                leading = False
                if not (one_per_node and node in bound):
                    key = (shape[node], *map(vector.__getitem__, scored))
                    score = scores.get(key)
                    if score is None:
                        score = scores[key] = node_score(key[1:], asks, shapes[key[0]])
                    if score > best_score:
                        best, best_score = node, score
                position += 1
                continue
            position += 1
            if leading:
                pod_class.cursor = position
        return best


@lru_cache(maxsize=16)
def _made_at_once(kind: str) -> bool:
    """A gang of ``kind`` is a set of pods its own operator makes all at once (a pod group), not
    a Job whose controller makes its pods in slow-start batches."""
    return pod_gang(kind_named(kind)) is not None


def pod_creation_order(
    created: Sequence[tuple[int, int, int, int]], gangs: Sequence[GangRecord]
) -> list[PodEntry]:
    """Scheduler queue entries for new gangs' pods, in the order they would be created;
    ``created`` = (creation second, gang index, pods, pod set) in the order the gangs were
    created (submitted, or unsuspended when admitted).

    The Job controller creates a Job's pods in slow-start batches (1, 2, 4, ...) and syncs
    Jobs in parallel, so pods of gangs created in the same second interleave: round-robin,
    one batch per Job per round, gangs in arrival order (same-instant ties already seeded);
    each pod set of a gang of several is a Job of its own (a JobSet's replicated Jobs). A pod
    group's pods are made by its own operator, not the Job controller: all in its first round.
    """
    entries: list[PodEntry] = []
    by_second: dict[int, list[tuple[int, int]]] = {}
    left_of: dict[tuple[int, int], int] = {}
    at_once = {index: _made_at_once(gangs[index].gang.kind) for _, index, _, _ in created}
    for second, index, pods, set_index in created:
        job = (index, set_index)
        by_second.setdefault(second, []).append(job)
        left_of[job] = pods
    for second, group in by_second.items():
        left = {job: left_of[job] for job in group}
        batch = 1
        while left:
            for job in group:
                pods = left.get(job, 0)
                if not pods:
                    continue
                index, set_index = job
                take = pods if at_once[index] else min(batch, pods)
                entries.extend([(second, index, gangs[index].attempt, set_index)] * take)
                if take == pods:
                    del left[job]
                else:
                    left[job] = pods - take
            batch *= 2
    return entries


def _creation_second(entry: PodEntry) -> int:
    return entry[0]


def node_score(free: Sequence[int], ask: Sequence[int], allocatable: Sequence[int]) -> int:
    """What kube-scheduler's default profile scores a node for one pod, over the scored
    resources (cpu and memory): NodeResourcesFit with LeastAllocated (the mean share left free
    once the pod is there: spreading) plus NodeResourcesBalancedAllocation (how even the
    resources' used shares are), each 0..100 and weight 1, in the scheduler's integer steps.
    ``free`` is the node's free amount of each scored resource before the pod, ``ask`` the pod's
    request. The default profile's other scores are equal on every node here (no preferred
    affinities, taints or topology spread for Job pods), so they decide nothing."""
    least = weights = 0
    fractions: list[float] = []
    for left, wanted, capacity in zip(free, ask, allocatable, strict=True):
        if capacity <= 0:
            continue
        requested = capacity - left + wanted
        least += (capacity - requested) * MAX_NODE_SCORE // capacity if requested <= capacity else 0
        weights += 1
        fractions.append(min(requested / capacity, 1.0))
    least = least // weights if weights else 0
    spread = 0.0
    if len(fractions) == 2:
        spread = abs(fractions[0] - fractions[1]) / 2
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        spread = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
    return least + int((1 - spread) * MAX_NODE_SCORE)
