"""Reading a trace document: every field checked while it loads, a bad one raises `TraceError`
naming the job group (or node group, or queue) and the field, and nothing runs. Field readers
are `policies.fields`' (the same as the Queue spec's); the queues are read by
`policies.queuespec`, the controller's reader of Queue objects. The format is documented in
docs/simulator.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Literal, ParamSpec, TypeVar

from policies import PodSet, PolicyError, Resources, Taint, Toleration, fields
from policies.packing import DEFAULT_PACKING, Packing, PackingError
from policies.phase import parse_queue_limits
from policies.queuespec import QUEUE_SPEC_FIELDS, parse_queue
from simulator.tracedevices import device_classes, job_devices, node_devices, with_devices
from simulator.tracemodel import (
    DEFAULT_POD_START_DELAY,
    KINDS,
    JobGroup,
    Kind,
    NodeGroup,
    QueueSpec,
    Trace,
    TraceError,
)
from simulator.tracetopology import (
    check_topology,
    cluster_topology,
    job_topology,
    node_topology,
    slowdown,
)

_TOP_FIELDS = ("name", "cluster", "queues", "jobs", "simulation")
_NODE_FIELDS = ("count", "allocatable", "name", "labels", "taints", "topology", "devices")
_QUEUE_FIELDS = ("name", *(f for f in QUEUE_SPEC_FIELDS if f != "namespaceSelector"))
"""A trace's queue: its name and the Queue spec's fields (a trace has no namespaces to
select)."""
_JOB_FIELDS = (
    "name",
    "count",
    "kind",
    "queue",
    "size",
    "minSize",
    "podRequests",
    "podDevices",
    "onePodPerNode",
    "runtime",
    "submit",
    "priority",
    "namespace",
    "nodeSelector",
    "tolerations",
    "elasticAfter",
    "runtimeLimit",
    "podSets",
    "class",
    "topology",
)
_POD_FIELDS = ("podRequests", "onePodPerNode", "nodeSelector", "tolerations", "podDevices")
"""A job's per-pod fields: its one pod set's, or, with podSets, each pod set's."""
_POD_SET_FIELDS = ("name", "count", *_POD_FIELDS)
_SIM_FIELDS = ("podStartDelay", "horizon", "crossDomainSlowdown")


def from_dict(data: object, *, source: str = "<trace>", default_name: str = "trace") -> Trace:
    """Validate a parsed trace document and build a `Trace`."""
    top = _mapping(data, "trace", _TOP_FIELDS)
    name = _str(top.get("name", default_name), "name")
    cluster = _mapping(
        top.get("cluster"), "cluster", ("nodes", "topology", "packing", "deviceClasses")
    )
    devices = device_classes(cluster.get("deviceClasses", []))
    topology = cluster_topology(cluster.get("topology"))
    packing = _packing(cluster.get("packing"))
    node_items = _list(cluster.get("nodes"), "cluster.nodes", required=True)
    node_groups = tuple(_node_group(item, i) for i, item in enumerate(node_items))
    queue_items = _list(top.get("queues"), "queues", required=True)
    queues = tuple(_queue_spec(item, i) for i, item in enumerate(queue_items))
    sim = _mapping(top.get("simulation", {}), "simulation", _SIM_FIELDS)
    start_delay = _duration(
        sim.get("podStartDelay", DEFAULT_POD_START_DELAY), "simulation.podStartDelay"
    )
    horizon = None
    if sim.get("horizon") is not None:
        horizon = _duration(sim["horizon"], "simulation.horizon")
        if horizon <= 0:
            raise TraceError("simulation.horizon: must be positive, e.g. 24h")
    job_items = _list(top.get("jobs"), "jobs", required=True)
    jobs = tuple(job_group(item, i) for i, item in enumerate(job_items))
    node_groups, jobs = with_devices(devices, node_groups, jobs)
    trace = Trace(
        name=name,
        node_groups=node_groups,
        queues=queues,
        jobs=jobs,
        pod_start_delay=start_delay,
        horizon=horizon,
        source=source,
        topology=topology,
        slowdown=slowdown(sim.get("crossDomainSlowdown"), topology),
        packing=packing,
        devices=devices,
    )
    check(trace)
    return trace


def _packing(value: object) -> Packing:
    """`cluster.packing`: a strategy, or {strategy, gpuWeight}."""
    where = "cluster.packing"
    if value is None:
        return DEFAULT_PACKING
    try:
        if isinstance(value, dict):
            spec = _mapping(value, where, ("strategy", "gpuWeight"))
            if spec.get("gpuWeight") is not None and spec.get("strategy") != "weighted":
                raise TraceError(f"{where}.gpuWeight: only with strategy: weighted")
            return Packing.parse(
                spec.get("strategy"),
                spec.get("gpuWeight"),
                f"{where}.strategy",
                f"{where}.gpuWeight",
            )
        return Packing.parse(value, None, where)
    except PackingError as exc:
        raise TraceError(str(exc)) from None


def check(trace: Trace) -> None:
    """Cross-field checks: unique names, queues exist and are leaves, the queue tree is valid."""
    seen_nodes: set[str] = set()
    for i, node_group in enumerate(trace.node_groups):
        label = f"cluster.nodes[{i}]" + (f" ({node_group.name})" if node_group.name else "")
        if node_group.name and node_group.name in seen_nodes:
            raise TraceError(f"{label}.name: duplicate node group name {node_group.name!r}")
        seen_nodes.add(node_group.name)
    try:
        tree = trace.queue_tree()
    except PolicyError as exc:
        raise TraceError(f"queues: {exc}") from None
    names = [spec.name for spec in trace.queues]
    parents = {spec.parent for spec in trace.queues if spec.parent}
    leaves = [n for n in names if n not in parents]
    del tree
    check_topology(trace)
    seen_jobs: set[str] = set()
    for i, group in enumerate(trace.jobs):
        label = f"jobs[{i}] ({group.name})"
        if group.name in seen_jobs:
            raise TraceError(f"{label}.name: duplicate job group name; names must be unique")
        seen_jobs.add(group.name)
        if group.queue not in names:
            raise TraceError(
                f"{label}.queue: queue {group.queue!r} not found: add it under queues: "
                f"or use one of: {', '.join(leaves)}"
            )
        if group.queue in parents:
            raise TraceError(
                f"{label}.queue: {group.queue!r} is a cohort (it has child queues); "
                f"gangs go to leaf queues: {', '.join(leaves)}"
            )


def _node_group(item: object, index: int) -> NodeGroup:
    where = f"cluster.nodes[{index}]"
    data = _mapping(item, where, _NODE_FIELDS)
    name = _str(data.get("name", ""), f"{where}.name", allow_empty=True)
    if name:
        where = f"{where} ({name})"
        _dns_name(name, f"{where}.name")
    count = _int(data.get("count", 1), f"{where}.count", minimum=1)
    allocatable = _resources(data.get("allocatable"), f"{where}.allocatable", required=True)
    if allocatable.is_zero():
        raise TraceError(f"{where}.allocatable: every resource is zero; give e.g. {{cpu: '8'}}")
    labels = _str_map(data.get("labels", {}), f"{where}.labels")
    taints = tuple(
        _taint(t, f"{where}.taints[{j}]")
        for j, t in enumerate(_list(data.get("taints", []), f"{where}.taints"))
    )
    return NodeGroup(
        count=count,
        allocatable=allocatable,
        name=name,
        labels=labels,
        taints=taints,
        topology=node_topology(data.get("topology"), f"{where}.topology"),
        devices=node_devices(data.get("devices", []), f"{where}.devices"),
    )


def _queue_spec(item: object, index: int) -> QueueSpec:
    where = f"queues[{index}]"
    data = _mapping(item, where, _QUEUE_FIELDS)
    name = _str(data.get("name"), f"{where}.name")
    where = f"{where} ({name})"
    _dns_name(name, f"{where}.name")
    spec = {key: value for key, value in data.items() if key != "name"}
    queue = _traced(parse_queue, name, spec, where, known=_QUEUE_FIELDS)
    # Checked as the Queue's spec.limits is, and not simulated: the simulator has no ingress
    # (every gang of a trace is submitted), so a limit would only drop gangs from the replay.
    _traced(parse_queue_limits, data.get("limits"), f"{where}.limits")
    return QueueSpec.from_queue(queue)


def job_group(item: object, index: int) -> JobGroup:
    """One job group (``jobs[index]``) of a trace, or one row of a CSV job list."""
    where = f"jobs[{index}]"
    data = _mapping(item, where, _JOB_FIELDS)
    name = _str(data.get("name"), f"{where}.name")
    where = f"{where} ({name})"
    _dns_name(name, f"{where}.name")
    kind = job_kind(data.get("kind", "Job"), f"{where}.kind")
    count = _int(data.get("count", 1), f"{where}.count", minimum=1)
    size = _int(data.get("size"), f"{where}.size", minimum=1)
    main, others = _pod_sets(data, where, size)
    fixed = size - main.count
    min_size: int | None = None
    if data.get("minSize") is not None:
        min_size = _int(data["minSize"], f"{where}.minSize", minimum=1)
        if min_size > size:
            raise TraceError(f"{where}.minSize: {min_size} is larger than size {size}")
        if min_size <= fixed:
            raise TraceError(
                f"{where}.minSize: {min_size} leaves no pod of the main pod set {main.name}: "
                f"its other pod sets have {_pods(fixed)}, admitted whole; give at least {fixed + 1}"
            )
    if kind == "JobSet" and min_size is not None and min_size < size:
        raise TraceError(
            f"{where}.minSize: {min_size} is below size {size}, but a JobSet is admitted whole "
            "(its replicated Jobs cannot shrink while it runs); remove minSize"
        )
    runtime = _duration(data.get("runtime"), f"{where}.runtime")
    if runtime <= 0:
        raise TraceError(f"{where}.runtime: must be positive, e.g. 300s")
    submit = _mapping(data.get("submit", {}), f"{where}.submit", ("at", "interval"))
    at = _duration(submit.get("at", 0.0), f"{where}.submit.at")
    interval = _duration(submit.get("interval", 0.0), f"{where}.submit.interval")
    namespace = _str(data.get("namespace", "default"), f"{where}.namespace")
    _dns_name(namespace, f"{where}.namespace")
    elastic_after = _duration(data.get("elasticAfter", 0.0), f"{where}.elasticAfter")
    runtime_limit: float | None = None
    if data.get("runtimeLimit") is not None:
        runtime_limit = _duration(data["runtimeLimit"], f"{where}.runtimeLimit")
        if runtime_limit <= 0:
            raise TraceError(
                f"{where}.runtimeLimit: must be positive, e.g. 360s (or leave it out: no limit)"
            )
    if kind == "PodGroup" and runtime_limit is not None:
        raise TraceError(
            f"{where}.runtimeLimit: a pod group has no runtime limit muster knows of (a pod's "
            "activeDeadlineSeconds runs from its own start); remove runtimeLimit"
        )
    return JobGroup(
        name=name,
        queue=_str(data.get("queue"), f"{where}.queue"),
        size=size,
        pod_requests=main.requests,
        runtime=runtime,
        count=count,
        kind=kind,
        min_size=min_size,
        one_pod_per_node=main.one_pod_per_node,
        submit_at=at,
        submit_interval=interval,
        priority=_int(data.get("priority", 0), f"{where}.priority", minimum=None),
        namespace=namespace,
        node_selector=main.node_selector,
        tolerations=main.tolerations,
        elastic_after=elastic_after,
        runtime_limit=runtime_limit,
        others=others,
        set_name=main.name,
        class_name=_str(data.get("class", ""), f"{where}.class", allow_empty=True),
        topology=job_topology(data.get("topology"), f"{where}.topology"),
        devices=job_devices(data, where),
    )


def job_kind(value: object, where: str) -> Kind:
    """A job's kind: the one place that reads it (in-process, a PodGroup's pods are created
    at once, the others' in slow-start batches; the kwok engine creates an object of that kind,
    a pod group's pods)."""
    for kind in KINDS:
        if value == kind:
            return kind
    raise TraceError(f"{where}: {value!r} is not {', '.join(KINDS[:-1])} or {KINDS[-1]}")


def _pod_sets(data: dict[str, Any], where: str, size: int) -> tuple[PodSet, tuple[PodSet, ...]]:
    """A job's main pod set (at full size) and its other pod sets. Without `podSets` the job's
    own per-pod fields are its one pod set; with it, each set has its own, and the main set
    (the one that may be admitted smaller) is the one without `count`, which takes the rest of
    `size`, or, if every set has a count, the largest (the first of the largest)."""
    if data.get("podSets") is None:
        return _pod_set(data, where, "", size), ()
    for field in _POD_FIELDS:
        if field in data:
            raise TraceError(
                f"{where}.{field}: a job with podSets has no {field} of its own: give each pod "
                f"set its {field} under podSets"
            )
    items = _list(data["podSets"], f"{where}.podSets", required=True)
    sets: list[tuple[PodSet, bool]] = []  # (pod set, its count was given)
    seen: set[str] = set()
    for j, item in enumerate(items):
        at = f"{where}.podSets[{j}]"
        fields = _mapping(item, at, _POD_SET_FIELDS)
        name = _str(fields.get("name"), f"{at}.name")
        at = f"{at} ({name})"
        _dns_name(name, f"{at}.name")
        if name in seen:
            raise TraceError(f"{at}.name: duplicate pod set name; names must be unique in a job")
        seen.add(name)
        counted = fields.get("count") is not None
        count = _int(fields["count"], f"{at}.count", minimum=1) if counted else size
        sets.append((_pod_set(fields, at, name, count), counted))
    uncounted = [j for j, (_, counted) in enumerate(sets) if not counted]
    if len(uncounted) > 1:
        j = uncounted[1]
        raise TraceError(
            f"{where}.podSets[{j}] ({sets[j][0].name}).count: missing; only the main pod set "
            f"({sets[uncounted[0]][0].name}) may leave out count, to take the rest of size"
        )
    counts = sum(pod_set.count for pod_set, counted in sets if counted)
    if uncounted:
        main_at = uncounted[0]
        rest = size - counts
        if rest < 1:
            raise TraceError(
                f"{where}.size: {size} leaves no pod for the main pod set "
                f"{sets[main_at][0].name}: its other pod sets have {_pods(counts)}; size counts "
                "every pod of the gang"
            )
        sets[main_at] = (replace(sets[main_at][0], count=rest), True)
    elif counts != size:
        raise TraceError(
            f"{where}.size: {size} is not the {_pods(counts)} of its pod sets; size counts every "
            "pod of the gang (or leave out the main pod set's count: it takes the rest)"
        )
    else:
        main_at = max(range(len(sets)), key=lambda j: (sets[j][0].count, -j))
    main = sets[main_at][0]
    return main, tuple(pod_set for j, (pod_set, _) in enumerate(sets) if j != main_at)


def _pods(count: int) -> str:
    return f"{count} pod" if count == 1 else f"{count} pods"


def _pod_set(data: dict[str, Any], where: str, name: str, count: int) -> PodSet:
    """The per-pod fields of a job without podSets, or of one of its pod sets."""
    requests = _resources(data.get("podRequests"), f"{where}.podRequests", required=True)
    if requests.is_zero():
        raise TraceError(f"{where}.podRequests: every request is zero; give e.g. {{cpu: '1'}}")
    tolerations = tuple(
        _toleration(t, f"{where}.tolerations[{j}]")
        for j, t in enumerate(_list(data.get("tolerations", []), f"{where}.tolerations"))
    )
    return PodSet(
        name=name,
        count=count,
        requests=requests,
        one_pod_per_node=_bool(data.get("onePodPerNode", False), f"{where}.onePodPerNode"),
        node_selector=_str_map(data.get("nodeSelector", {}), f"{where}.nodeSelector"),
        tolerations=tolerations,
    )


def _taint(item: object, where: str) -> Taint:
    data = _mapping(item, where, ("key", "value", "effect"))
    effect = data.get("effect", "NoSchedule")
    if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        raise TraceError(f"{where}.effect: {effect!r} is not NoSchedule/PreferNoSchedule/NoExecute")
    return Taint(
        key=_str(data.get("key"), f"{where}.key"),
        value=_str(data.get("value", ""), f"{where}.value", allow_empty=True),
        effect=effect,
    )


def _toleration(item: object, where: str) -> Toleration:
    data = _mapping(item, where, ("key", "operator", "value", "effect"))
    operator = data.get("operator", "Equal")
    if operator not in ("Equal", "Exists"):
        raise TraceError(f"{where}.operator: {operator!r} is not Equal or Exists")
    return Toleration(
        key=_str(data.get("key", ""), f"{where}.key", allow_empty=True),
        operator=operator,
        value=_str(data.get("value", ""), f"{where}.value", allow_empty=True),
        effect=_toleration_effect(data.get("effect", ""), f"{where}.effect"),
    )


def _toleration_effect(
    value: object, where: str
) -> Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"]:
    if value == "":
        return ""
    if value == "NoSchedule":
        return "NoSchedule"
    if value == "PreferNoSchedule":
        return "PreferNoSchedule"
    if value == "NoExecute":
        return "NoExecute"
    raise TraceError(f"{where}: {value!r} is not empty, NoSchedule, PreferNoSchedule or NoExecute")


def parse_duration(value: object, where: str) -> float:
    """Seconds from `300`, `300s`, `1.5m`, `1h30m`, `250ms`; negative or malformed -> TraceError."""
    return _duration(value, where)


P = ParamSpec("P")
T = TypeVar("T")


def _traced(read: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``read(...)``, its PolicyError raised as the TraceError it is here."""
    try:
        return read(*args, **kwargs)
    except PolicyError as exc:
        raise TraceError(str(exc)) from None


def _duration(value: object, where: str) -> float:
    return _traced(fields.duration, value, where)


def _mapping(value: object, where: str, known: Sequence[str]) -> dict[str, Any]:
    return _traced(fields.mapping, value, where, known)


def _list(value: object, where: str, *, required: bool = False) -> list[Any]:
    return _traced(fields.items, value, where, required=required)


def _str(value: object, where: str, *, allow_empty: bool = False) -> str:
    return _traced(fields.string, value, where, allow_empty=allow_empty)


def _dns_name(value: str, where: str) -> None:
    _traced(fields.dns_name, value, where)


def _int(value: object, where: str, *, minimum: int | None) -> int:
    return _traced(fields.integer, value, where, minimum=minimum)


def _bool(value: object, where: str) -> bool:
    return _traced(fields.boolean, value, where)


def _str_map(value: object, where: str) -> dict[str, str]:
    return _traced(fields.str_map, value, where)


def _resources(value: object, where: str, *, required: bool = False) -> Resources:
    return _traced(fields.resources, value, where, required=required)
