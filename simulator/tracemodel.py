"""The trace model: a cluster of node groups, queues, job groups and simulation settings, and
its expansion into gangs in arrival order. Read by `simulator.traceparse`, CSV job lists by
`simulator.tracecsv`; `simulator.trace` loads files and names the whole.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import Any, Final, Literal

from policies import (
    Backoff,
    Gang,
    Node,
    PodSet,
    Preemption,
    Queue,
    QueueTree,
    Resources,
    SizeRatio,
    SubmitStamp,
    Taint,
    Toleration,
)
from policies.devices import DeviceCatalog, DeviceError, DeviceMapping
from policies.devices.claims import claim_devices
from policies.kinds import KindName
from policies.kinds.registry import KINDS as REGISTERED_KINDS
from policies.model import NeverFitsAction, Ordering
from policies.packing import DEFAULT_PACKING, Packing
from policies.topology import NO_TOPOLOGY, Topology, TopologyRequest, short_name
from simulator.controlplane.dra import (
    DRIVER,
    DeviceShape,
    claim_template,
    device_class,
    node_slice,
)

DEFAULT_TRACE = "blog-burst"
"""The trace `muster sim` replays when given none (shipped in simulator/traces/)."""

DEFAULT_POD_START_DELAY = 2.0
"""Seconds from a pod being bound to a node to it running (image pull, container start)."""

Kind = KindName
KINDS: tuple[Kind, ...] = tuple(REGISTERED_KINDS)
"""The kinds a trace job may be (read by `simulator.traceparse.job_kind`, the one reader): a
JobSet's pod sets are its replicated Jobs, a PodGroup's pods are plain pods its own operator
makes (all at once, not in the Job controller's slow-start batches)."""
Strategy = Literal["BestEffortFIFO", "StrictFIFO"]


class TraceError(ValueError):
    """A trace that cannot run; the message names where (`jobs[2] (mc16).podRequests.cpu`)."""


PodDevices = tuple[tuple[str, int], ...]
"""DeviceClass name -> devices each pod claims (through one claim template), sorted."""


@dataclass(frozen=True, slots=True)
class TraceDeviceClass:
    """One of `cluster.deviceClasses`: a DeviceClass of `driver`'s devices with `attributes`,
    counted as `resource`."""

    name: str
    resource: str
    driver: str = DRIVER
    attributes: Mapping[str, str | int | bool] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return device_class(self.name, self.driver, self.attributes)


@dataclass(frozen=True, slots=True)
class TraceDevices:
    """A trace's device classes (none: the trace has no DRA devices)."""

    classes: tuple[TraceDeviceClass, ...] = ()

    @property
    def mapping(self) -> DeviceMapping:
        """What `muster run --device-class` the kwok engine's muster gets."""
        return DeviceMapping({c.name: c.resource for c in self.classes})

    @property
    def resources(self) -> frozenset[str]:
        return frozenset(c.resource for c in self.classes)

    def catalog(self) -> DeviceCatalog:
        catalog = DeviceCatalog(self.mapping)
        for device_class_ in self.classes:
            catalog.set_class(device_class_.name, device_class_.body())
        return catalog

    def capacity(self, shapes: Sequence[DeviceShape]) -> Resources:
        """What one node with devices `shapes` offers, as the controller reads its slices."""
        catalog = self.catalog()
        for i, shape in enumerate(shapes):
            catalog.set_slice(f"s{i}", node_slice("node", replace(shape, prefix=f"d{i}")))
        return catalog.capacity("node")

    def per_pod(self, devices: PodDevices, where: str) -> Resources:
        """What a pod claiming `devices` through one template requests, as the controller reads
        the template; TraceError naming `where` for a class the trace does not define."""
        known = {c.name for c in self.classes}
        for name, _ in devices:
            if name not in known:
                raise TraceError(
                    f"{where}.{name}: no such DeviceClass in cluster.deviceClasses; define it "
                    f"there or use one of: {', '.join(sorted(known)) or 'none defined'}"
                )
        spec = claim_template("t", dict(devices))["spec"]["spec"]
        try:
            return claim_devices(spec, where, self.mapping, self.catalog().class_problem)
        except DeviceError as exc:  # pragma: no cover - a trace's classes are all readable
            raise TraceError(str(exc)) from None


NO_TRACE_DEVICES: Final = TraceDevices()


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """`count` identical nodes; with ``topology`` (level, domains) pairs, outermost first,
    `count` nodes in each innermost domain: ``(("block", 4), ("rack", 4))`` with count 8 is 4
    blocks of 4 racks of 8 nodes."""

    count: int
    allocatable: Resources
    name: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    topology: tuple[tuple[str, int], ...] = ()
    devices: tuple[DeviceShape, ...] = ()
    """Each node's DRA devices (`devices`; `simulator.tracedevices`): in `allocatable` too, as
    the resources their classes count as."""

    @property
    def total(self) -> int:
        """Its nodes in all."""
        total = self.count
        for _, domains in self.topology:
            total *= domains
        return total

    def domain_labels(self) -> list[tuple[str, dict[str, str]]]:
        """(name part, topology labels) of each innermost domain, in order: a rack's label
        value names its block too (``block1-rack2``), so it is unique in the cluster."""
        out: list[tuple[str, dict[str, str]]] = [("", {})]
        for level, domains in self.topology:
            word = short_name(level)
            grown = []
            for part, labels in out:
                for i in range(domains):
                    value = f"{part}-{word}{i}" if part else f"{word}{i}"
                    grown.append((value, {**labels, level: value}))
            out = grown
        return out


@dataclass(frozen=True, slots=True)
class DomainSlowdown:
    """Gangs whose pods span more than one domain of ``level`` run ``factor`` times longer
    (the trace's `simulation.crossDomainSlowdown`): what placement is worth."""

    level: str
    factor: float


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """One queue as written in the trace (converted to `policies.Queue` by `to_queue`)."""

    name: str
    parent: str | None = None
    weight: float = 1.0
    nominal: Resources | None = None
    quota_names: frozenset[str] = frozenset()
    borrowing_limit: Resources | None = None
    lending_limit: Resources | None = None
    strategy: Strategy = "BestEffortFIFO"
    size_ratio: SizeRatio | None = field(default_factory=SizeRatio)
    clog_timeout: float = 300.0
    backoff: Backoff = field(default_factory=Backoff)
    node_fit: bool = True
    preemption: Preemption = field(default_factory=Preemption)
    never_fits: NeverFitsAction = "Warn"
    """Carried to the Queue objects of kwok runs (the webhook's); the in-process engine has
    no webhook: a gang that never fits is rejected by the planner (NeverFits) either way."""
    usage_half_life: float | None = None
    ordering: Ordering = field(default_factory=Ordering)

    @classmethod
    def from_queue(cls, queue: Queue) -> QueueSpec:
        return cls(
            name=queue.name,
            parent=queue.parent,
            weight=queue.weight,
            nominal=queue.nominal,
            quota_names=queue.quota_names,
            borrowing_limit=queue.borrowing_limit,
            lending_limit=queue.lending_limit,
            strategy=queue.strategy,
            size_ratio=queue.size_ratio,
            clog_timeout=queue.clog_timeout,
            backoff=queue.backoff,
            node_fit=queue.node_fit,
            preemption=queue.preemption,
            never_fits=queue.never_fits,
            usage_half_life=queue.usage_half_life,
            ordering=queue.ordering,
        )

    def to_queue(self) -> Queue:
        return Queue(
            name=self.name,
            parent=self.parent,
            weight=self.weight,
            nominal=self.nominal,
            quota_names=self.quota_names,
            borrowing_limit=self.borrowing_limit,
            lending_limit=self.lending_limit,
            strategy=self.strategy,
            size_ratio=self.size_ratio,
            clog_timeout=self.clog_timeout,
            backoff=self.backoff,
            node_fit=self.node_fit,
            preemption=self.preemption,
            never_fits=self.never_fits,
            usage_half_life=self.usage_half_life,
            ordering=self.ordering,
        )


@dataclass(frozen=True, slots=True)
class JobGroup:
    """`count` identical gangs `<name>-<i>`, submitted at `submit_at + i * submit_interval`.

    ``size`` and ``min_size`` count every pod of a gang. Its main pod set (the only one
    admitted smaller) is written inline: ``pod_requests``, ``one_pod_per_node``,
    ``node_selector``, ``tolerations``, named ``set_name``; ``others`` are its further pod sets
    (a trace job's `podSets`), as in `policies.Gang`."""

    name: str
    queue: str
    size: int
    pod_requests: Resources
    runtime: float
    count: int = 1
    kind: Kind = "Job"
    min_size: int | None = None
    one_pod_per_node: bool = False
    submit_at: float = 0.0
    submit_interval: float = 0.0
    priority: int = 0
    namespace: str = "default"
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    elastic_after: float = 0.0
    runtime_limit: float | None = None
    """Seconds each gang may run once started (its Job's activeDeadlineSeconds); None = none."""
    others: tuple[PodSet, ...] = ()
    """The pod sets besides the main one, in the trace's order; each admitted whole."""
    set_name: str = ""
    """The main pod set's name ('' for a job without podSets)."""
    class_name: str = ""
    """The trace's `class`: a label for reports, which sum up gangs of one class together
    (a workload class of Kueue's benchmark, say); "" = none. No decision reads it."""
    topology: TopologyRequest | None = None
    """The trace job's `topology` (required or preferred: a level), as a gang's annotation."""
    devices: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()
    """Pod set name -> the DRA devices (DeviceClass, count) each of its pods claims
    (`podDevices`; `simulator.tracedevices`): in the pod sets' requests too, as resources."""

    @property
    def min(self) -> int:
        return self.min_size if self.min_size is not None else self.size

    @property
    def fixed(self) -> int:
        """Pods of ``others``: the part of ``size`` that is never admitted smaller."""
        return sum(other.count for other in self.others)

    @property
    def main(self) -> PodSet:
        """The main pod set at full size (as `policies.Gang.main`)."""
        return PodSet(
            self.set_name,
            self.size - self.fixed,
            self.pod_requests,
            self.one_pod_per_node,
            self.node_selector,
            self.tolerations,
        )

    @property
    def pod_sets(self) -> tuple[PodSet, ...]:
        """Every pod set, the main one first (as `policies.Gang.pod_sets`)."""
        return (self.main, *self.others)


@dataclass(frozen=True, slots=True)
class Trace:
    """A whole trace: cluster, queues, job groups and simulation settings."""

    name: str
    node_groups: tuple[NodeGroup, ...]
    queues: tuple[QueueSpec, ...]
    jobs: tuple[JobGroup, ...]
    pod_start_delay: float = DEFAULT_POD_START_DELAY
    horizon: float | None = None
    source: str = ""
    topology: Topology = NO_TOPOLOGY
    """The cluster's topology levels (`cluster.topology`)."""
    slowdown: DomainSlowdown | None = None
    packing: Packing = DEFAULT_PACKING
    """The planner's packing strategy (`cluster.packing`)."""
    devices: TraceDevices = NO_TRACE_DEVICES
    """The DeviceClasses muster counts (`cluster.deviceClasses`)."""

    @property
    def gang_count(self) -> int:
        return sum(group.count for group in self.jobs)

    @property
    def node_count(self) -> int:
        return sum(group.total for group in self.node_groups)

    @property
    def pod_count(self) -> int:
        return sum(group.count * group.size for group in self.jobs)

    def nodes(self) -> list[Node]:
        """The cluster's nodes, named `<group name or node-g<i>>-<j>` in trace order."""
        nodes: list[Node] = []
        for index, group in enumerate(self.node_groups):
            prefix = group.name or f"node-g{index}"
            width = len(str(max(group.count - 1, 0)))
            for part, domain in group.domain_labels():
                start = f"{prefix}-{part}" if part else prefix
                for j in range(group.count):
                    nodes.append(
                        Node(
                            name=f"{start}-{j:0{width}d}",
                            allocatable=group.allocatable,
                            labels={**group.labels, **domain},
                            taints=group.taints,
                        )
                    )
        return nodes

    def queue_tree(self) -> QueueTree:
        return QueueTree.build([spec.to_queue() for spec in self.queues])

    def queue_specs(self) -> dict[str, QueueSpec]:
        return {spec.name: spec for spec in self.queues}

    def classes(self) -> dict[str, str]:
        """The `class` of each job group that has one, by group name (for reports)."""
        return {group.name: group.class_name for group in self.jobs if group.class_name}

    def default_horizon(self) -> float:
        """A safety cap on simulated time: last submission + 2 × Σ runtimes + one day."""
        last_submit = max(
            (g.submit_at + (g.count - 1) * g.submit_interval for g in self.jobs), default=0.0
        )
        total_runtime = sum(g.count * g.runtime for g in self.jobs)
        return last_submit + 2.0 * total_runtime + 86400.0


@dataclass(frozen=True, slots=True)
class SubmittedGang:
    """One gang of the expanded trace, in arrival order (`gang.submitted.seq` = position)."""

    gang: Gang
    runtime: float
    group: str


def expand(trace: Trace, seed: int = 0) -> list[SubmittedGang]:
    """Expand job groups into gangs in arrival order.

    Gangs submitted at the same instant have no order of their own (parallel submitters); the
    seed decides it, as a shuffle. The result is sorted by (time, shuffled rank) and each gang's
    `SubmitStamp.seq` is its arrival position, so stamps are a total order.
    """
    rng = random.Random(seed)
    raw: list[tuple[float, float, str, JobGroup]] = []
    for group in trace.jobs:
        width = len(str(max(group.count - 1, 0)))
        for i in range(group.count):
            at = group.submit_at + i * group.submit_interval
            raw.append((at, rng.random(), f"{group.name}-{i:0{width}d}", group))
    raw.sort(key=itemgetter(0, 1))  # stable: ties keep the input order
    expanded: list[SubmittedGang] = []
    # One copy of each distinct node selector, shared by its gangs (a gang never changes it):
    # a million gangs need not hold a million empty dicts.
    selectors: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
    for seq, (at, _rank, name, group) in enumerate(raw):
        wanted = tuple(group.node_selector.items())
        selector = selectors.get(wanted)
        if selector is None:
            selector = selectors[wanted] = dict(wanted)
        gang = Gang(
            id=f"{group.namespace}/{name}",
            queue=group.queue,
            pod_requests=group.pod_requests,
            size=group.size,
            min_size=group.min_size,
            priority=group.priority,
            submitted=SubmitStamp(time=at, seq=seq, name=name),
            one_pod_per_node=group.one_pod_per_node,
            node_selector=selector,
            tolerations=group.tolerations,
            elastic_after=group.elastic_after,
            kind=group.kind,
            runtime_limit=group.runtime_limit,
            others=group.others,
            set_name=group.set_name,
            topology=group.topology,
        )
        expanded.append(SubmittedGang(gang=gang, runtime=group.runtime, group=group.name))
    return expanded
