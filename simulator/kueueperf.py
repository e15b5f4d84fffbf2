"""Kueue's scheduler benchmark, in muster's terms: its generator file (sigs.k8s.io/kueue,
`test/performance/scheduler/runner/generator`) read as it is, and what each part becomes here.

The generator describes cohorts of ClusterQueues and paced streams of one-pod workloads:

    cohorts: [{className, count, queuesSets: [{className, count, nominalQuota, borrowingLimit,
               reclaimWithinCohort, withinClusterQueue,
               workloadsSets: [{count, creationIntervalMs,
                                workloads: [{className, runtimeMs, priority, request}]}]}]}]

What it becomes (the same for `muster trace from-kueue-perf`, the simulator's view, and for
`muster bench kueue-perf`, the control plane's):

- cohort `i` of a cohort set is a parent Queue `<className>-<i>` with no quota of its own (a
  Kueue cohort without a Cohort object has none);
- ClusterQueue `q` of queue set `s` in that cohort is a leaf Queue `<className>-<s>-<q>-<cohort>`
  (Kueue's name) with `nominal` and `borrowingLimit` cpu as written, its preemption rules
  (`reclaimWithinCohort` as it is, `withinClusterQueue` as `withinQueue`), `nodeFit: false`
  (quota-only admission: Kueue's runner has no nodes) and no size-ratio rule (Kueue has none);
  its workloads live in a namespace of the same name, as Kueue's generator puts them;
- workload template `w` of workloads set `k`, in its `j`-th round, is a one-pod Job
  `<className>-<k>-<j>-<w>` requesting `request` cpu at priority `priority`, running
  `runtimeMs` once admitted. Kueue's generator runs one loop per workloads set and queue, which
  waits `creationIntervalMs` before each create: the `n`-th workload of a set (n = j × templates
  + w) is due `(n + 1) × creationIntervalMs` after the start (`PerfWorkload.due_ms`).

A field muster cannot honour, or does not know, is refused with its place in the file
(`cohorts[0].queuesSets[1].withinClusterQueue: ...`), never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from policies import PolicyError, fields
from policies.resources import QuantityError, format_quantity, parse_quantity
from simulator.tracemodel import TraceError


class KueuePerfError(TraceError):
    """A generator file muster cannot run; the message names the field."""


_TOP: Final = ("cohorts",)
_COHORT: Final = ("className", "count", "queuesSets")
_QUEUES: Final = (
    "className",
    "count",
    "nominalQuota",
    "borrowingLimit",
    "reclaimWithinCohort",
    "withinClusterQueue",
    "workloadsSets",
)
_SET: Final = ("count", "creationIntervalMs", "workloads")
_WORKLOAD: Final = ("className", "runtimeMs", "priority", "request")

# Fields of Kueue's generator for Topology Aware Scheduling and DRA: a node-blind run has no
# topology to place on, so a file that uses them is refused rather than run without them.
_TAS_FIELDS: Final = {
    "topology",
    "dra",
    "resourceFlavor",
    "podCount",
    "tasConstraint",
    "tasLevel",
    "sliceSize",
    "devices",
    "deviceNominalQuota",
    "deviceBorrowingLimit",
}

RECLAIM: Final = ("Never", "LowerPriority", "Any")
"""Kueue's `reclaimWithinCohort` values; muster's `preemption.reclaimWithinCohort` has the same."""
WITHIN: Final = ("Never", "LowerPriority")
"""Kueue's `withinClusterQueue` values muster's `preemption.withinQueue` has (Kueue also has
LowerOrNewerEqualPriority, which muster has not: refused)."""


@dataclass(frozen=True, slots=True)
class WorkloadTemplate:
    class_name: str
    runtime_ms: int
    priority: int
    request: str
    """cpu per workload, as a Kubernetes quantity (`1`, `500m`)."""


@dataclass(frozen=True, slots=True)
class WorkloadsSet:
    count: int
    interval_ms: int
    workloads: tuple[WorkloadTemplate, ...]


@dataclass(frozen=True, slots=True)
class QueuesSet:
    class_name: str
    count: int
    nominal: str
    borrowing_limit: str | None
    reclaim: str
    within: str
    workloads_sets: tuple[WorkloadsSet, ...]


@dataclass(frozen=True, slots=True)
class CohortSet:
    class_name: str
    count: int
    queues_sets: tuple[QueuesSet, ...]


@dataclass(frozen=True, slots=True)
class Generator:
    """A whole generator file."""

    cohorts: tuple[CohortSet, ...]
    source: str = ""


@dataclass(frozen=True, slots=True)
class PerfQueue:
    """One ClusterQueue of the generator: a leaf Queue of muster."""

    name: str
    cohort: str
    class_name: str
    spec: dict[str, Any]
    """The Queue's spec, as a Queue object and a trace write it."""
    nominal_milli: int


@dataclass(frozen=True, slots=True)
class PerfWorkload:
    """One workload of the generator: a one-pod Job in namespace `queue`."""

    queue: str
    name: str
    class_name: str
    runtime_ms: int
    priority: int
    request: str
    stream: int
    """Which of the generator's creation loops makes it (one per queue and workloads set)."""
    interval_ms: int
    """That loop's wait before each create."""
    due_ms: int
    """When Kueue's generator would create it if every create took no time."""


def load_generator(path: str | Path) -> Generator:
    """Read a generator file (YAML); KueuePerfError naming the file and the field."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KueuePerfError(f"{source}: cannot read: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KueuePerfError(f"{source}: not valid YAML: {' '.join(str(exc).split())}") from None
    try:
        return read_generator(data, source=source)
    except KueuePerfError as exc:
        raise KueuePerfError(f"{source}: {exc}") from None


def read_generator(data: object, *, source: str = "<generator>") -> Generator:
    """Check a parsed generator document field by field; KueuePerfError names the first bad one."""
    top = _mapping(data, "generator", _TOP)
    cohort_items = _items(top.get("cohorts"), "cohorts")
    cohorts = tuple(_cohort(item, f"cohorts[{i}]") for i, item in enumerate(cohort_items))
    generator = Generator(cohorts=cohorts, source=source)
    seen: set[str] = set()
    for cohort in cohort_names(generator):
        if cohort in seen:
            raise KueuePerfError(f"cohorts: cohort {cohort!r} is made twice; rename a className")
        seen.add(cohort)
    for queue in queues(generator):
        _checked(fields.dns_name, queue.name, f"ClusterQueue {queue.name!r}")
        if queue.name in seen:
            raise KueuePerfError(f"queuesSets: queue {queue.name!r} is made twice")
        seen.add(queue.name)
    return generator


def _cohort(item: object, where: str) -> CohortSet:
    data = _mapping(item, where, _COHORT)
    class_name = _name(data.get("className"), f"{where}.className")
    count = _count(data.get("count"), f"{where}.count")
    sets = _items(data.get("queuesSets"), f"{where}.queuesSets")
    return CohortSet(
        class_name=class_name,
        count=count,
        queues_sets=tuple(_queues_set(s, f"{where}.queuesSets[{i}]") for i, s in enumerate(sets)),
    )


def _queues_set(item: object, where: str) -> QueuesSet:
    data = _mapping(item, where, _QUEUES)
    nominal = _cpu(data.get("nominalQuota"), f"{where}.nominalQuota")
    borrowing = data.get("borrowingLimit")
    reclaim = data.get("reclaimWithinCohort") or "Never"
    if reclaim not in RECLAIM:
        raise KueuePerfError(
            f"{where}.reclaimWithinCohort: {reclaim!r} is not one of {', '.join(RECLAIM)}"
        )
    within = data.get("withinClusterQueue") or "Never"
    if within not in WITHIN:
        raise KueuePerfError(
            f"{where}.withinClusterQueue: {within!r} is not one of {', '.join(WITHIN)} "
            "(muster's withinQueue has no LowerOrNewerEqualPriority)"
        )
    sets = _items(data.get("workloadsSets"), f"{where}.workloadsSets")
    return QueuesSet(
        class_name=_name(data.get("className"), f"{where}.className"),
        count=_count(data.get("count"), f"{where}.count"),
        nominal=nominal,
        borrowing_limit=None
        if borrowing in (None, "")
        else _cpu(borrowing, f"{where}.borrowingLimit"),
        reclaim=str(reclaim),
        within=str(within),
        workloads_sets=tuple(
            _workloads_set(s, f"{where}.workloadsSets[{i}]") for i, s in enumerate(sets)
        ),
    )


def _workloads_set(item: object, where: str) -> WorkloadsSet:
    data = _mapping(item, where, _SET)
    templates = _items(data.get("workloads"), f"{where}.workloads")
    return WorkloadsSet(
        count=_count(data.get("count"), f"{where}.count"),
        interval_ms=_checked(
            fields.integer,
            data.get("creationIntervalMs", 0),
            f"{where}.creationIntervalMs",
            minimum=0,
        ),
        workloads=tuple(_workload(t, f"{where}.workloads[{i}]") for i, t in enumerate(templates)),
    )


def _workload(item: object, where: str) -> WorkloadTemplate:
    data = _mapping(item, where, _WORKLOAD)
    priority = _checked(fields.integer, data.get("priority", 0), f"{where}.priority", minimum=0)
    if priority > 1_000_000_000:
        raise KueuePerfError(f"{where}.priority: {priority} is above muster's 1000000000")
    request = _cpu(data.get("request"), f"{where}.request")
    if parse_quantity(request, field=f"{where}.request", resource="cpu") == 0:
        raise KueuePerfError(f"{where}.request: must be more than 0 cpu, e.g. 1")
    return WorkloadTemplate(
        class_name=_name(data.get("className"), f"{where}.className"),
        # The simulator's runtimes must be positive; Kueue's runner finishes a 0 ms workload
        # at once, which 1 ms is as near as a trace gets.
        runtime_ms=_checked(fields.integer, data.get("runtimeMs"), f"{where}.runtimeMs", minimum=1),
        priority=priority,
        request=request,
    )


# --- what the generator makes ----------------------------------------------------------------


def cohort_names(generator: Generator) -> list[str]:
    """The cohorts, as Kueue's generator names them (`<className>-<i>`)."""
    return [f"{c.class_name}-{i}" for c in generator.cohorts for i in range(c.count)]


def queues(generator: Generator) -> list[PerfQueue]:
    """Every ClusterQueue of the generator, as a leaf Queue, in the generator's order."""
    return [
        PerfQueue(
            name=name,
            cohort=cohort,
            class_name=queues_set.class_name,
            spec=queue_spec(queues_set, cohort),
            nominal_milli=parse_quantity(queues_set.nominal, field="nominalQuota", resource="cpu"),
        )
        for name, cohort, queues_set in _queue_sets(generator)
    ]


def queue_spec(queues_set: QueuesSet, cohort: str) -> dict[str, Any]:
    """A leaf Queue's spec for a ClusterQueue of ``queues_set`` in ``cohort``."""
    spec: dict[str, Any] = {
        "parent": cohort,
        "nominal": {"cpu": queues_set.nominal},
        # Quota-only admission: Kueue's runner has no nodes (nor pods) to fit on.
        "nodeFit": False,
        # Kueue has no size-ratio rule: ratio 1 never fires (the Queue CRD has no "off").
        "sizeRatio": {"ratio": 1.0},
    }
    if queues_set.borrowing_limit is not None:
        spec["borrowingLimit"] = {"cpu": queues_set.borrowing_limit}
    preemption = {}
    if queues_set.reclaim != "Never":
        preemption["reclaimWithinCohort"] = queues_set.reclaim
    if queues_set.within != "Never":
        preemption["withinQueue"] = queues_set.within
    if preemption:
        spec["preemption"] = preemption
    return spec


def workloads(generator: Generator) -> list[PerfWorkload]:
    """Every workload of the generator, in the order of `due_ms` (ties: the generator's)."""
    out = []
    stream = 0
    for queue, _, queues_set in _queue_sets(generator):
        for k, workloads_set in enumerate(queues_set.workloads_sets):
            per_round = len(workloads_set.workloads)
            for j in range(workloads_set.count):
                for w, template in enumerate(workloads_set.workloads):
                    n = j * per_round + w
                    out.append(
                        PerfWorkload(
                            queue=queue,
                            name=f"{template.class_name}-{k}-{j}-{w}",
                            class_name=template.class_name,
                            runtime_ms=template.runtime_ms,
                            priority=template.priority,
                            request=template.request,
                            stream=stream,
                            interval_ms=workloads_set.interval_ms,
                            due_ms=(n + 1) * workloads_set.interval_ms,
                        )
                    )
            stream += 1
    out.sort(key=lambda w: w.due_ms)  # stable: ties keep the generator's order
    return out


def _queue_sets(generator: Generator) -> list[tuple[str, str, QueuesSet]]:
    """(queue name, cohort, queue set) for every ClusterQueue, in the generator's order, named
    as Kueue's generator names them."""
    out = []
    for cohort_set in generator.cohorts:
        for c in range(cohort_set.count):
            cohort = f"{cohort_set.class_name}-{c}"
            for s, queues_set in enumerate(cohort_set.queues_sets):
                for q in range(queues_set.count):
                    out.append((f"{queues_set.class_name}-{s}-{q}-{cohort}", cohort, queues_set))
    return out


def trace_document(generator: Generator, name: str) -> dict[str, Any]:
    """The simulator's trace of the generator (`simulator.trace.from_dict` reads it).

    Besides the queues and the paced Jobs: pods run as soon as they are bound
    (`podStartDelay: 0s`: Kueue's runner starts a workload's runtime at its admission), and one
    node holding every queue's nominal cpu, which is the most the queues can ever admit
    together (cohorts have no quota of their own, so a cohort's admitted cpu never exceeds its
    queues' nominal): node-blind admission can never leave a pod without room."""
    leaves = queues(generator)
    total = sum(q.nominal_milli for q in leaves)
    jobs = []
    for queue, _, queues_set in _queue_sets(generator):
        for k, workloads_set in enumerate(queues_set.workloads_sets):
            per_round = len(workloads_set.workloads)
            every = workloads_set.interval_ms
            for w, template in enumerate(workloads_set.workloads):
                jobs.append(
                    {
                        "name": f"{queue}-{template.class_name}-{k}-{w}",
                        "count": workloads_set.count,
                        "class": template.class_name,
                        "queue": queue,
                        "namespace": queue,
                        "size": 1,
                        "podRequests": {"cpu": template.request},
                        "runtime": f"{template.runtime_ms}ms",
                        "priority": template.priority,
                        "submit": {
                            "at": f"{(w + 1) * every}ms",
                            "interval": f"{per_round * every}ms",
                        },
                    }
                )
    return {
        "name": name,
        "simulation": {"podStartDelay": "0s"},
        "cluster": {
            "nodes": [
                {"name": "quota", "count": 1, "allocatable": {"cpu": format_quantity("cpu", total)}}
            ]
        },
        "queues": [{"name": c} for c in cohort_names(generator)]
        + [{"name": q.name, **q.spec} for q in leaves],
        "jobs": jobs,
    }


# --- field readers: policies.fields, their errors named as this file's ----------------------


def _checked(read: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return read(*args, **kwargs)
    except PolicyError as exc:
        raise KueuePerfError(str(exc)) from None


def _mapping(value: object, where: str, known: tuple[str, ...]) -> dict[str, Any]:
    if isinstance(value, dict):
        for key in value:
            if key in _TAS_FIELDS:
                raise KueuePerfError(
                    f"{where}.{key}: Topology Aware Scheduling and DRA fields are not run here; "
                    "muster runs Kueue's node-blind configurations (baseline, large-scale)"
                )
    data: dict[str, Any] = _checked(fields.mapping, value, where, known)
    return data


def _items(value: object, where: str) -> list[Any]:
    found: list[Any] = _checked(fields.items, value, where, required=True)
    return found


def _name(value: object, where: str) -> str:
    name: str = _checked(fields.string, value, where)
    _checked(fields.dns_name, name, where)
    return name


def _count(value: object, where: str) -> int:
    count: int = _checked(fields.integer, value, where, minimum=1)
    return count


def _cpu(value: object, where: str) -> str:
    """A cpu quantity as Kueue writes it (`20`, `"500m"`), spelled as a string."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise KueuePerfError(f"{where}: expected a cpu quantity such as 20 or 500m, got {value!r}")
    try:
        parse_quantity(value, field=where, resource="cpu")
    except QuantityError as exc:
        raise KueuePerfError(str(exc)) from None
    return str(value)
