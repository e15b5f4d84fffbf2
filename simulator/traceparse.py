"""Reading a trace document: every field checked while it loads, a bad one raises `TraceError`
naming the job group (or node group, or queue) and the field, and nothing runs. Field readers
are `policies.fields`' (the same as the Queue spec's); the queues are read by
`policies.queuespec`, the controller's reader of Queue objects. The format is documented in
docs/simulator.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, ParamSpec, TypeVar

from policies import PolicyError, Resources, Taint, Toleration, fields
from policies.phase import parse_queue_limits
from policies.queuespec import QUEUE_SPEC_FIELDS, parse_queue
from simulator.tracemodel import (
    DEFAULT_POD_START_DELAY,
    JobGroup,
    NodeGroup,
    QueueSpec,
    Trace,
    TraceError,
)

_TOP_FIELDS = ("name", "cluster", "queues", "jobs", "simulation")
_NODE_FIELDS = ("count", "allocatable", "name", "labels", "taints")
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
    "onePodPerNode",
    "runtime",
    "submit",
    "priority",
    "namespace",
    "nodeSelector",
    "tolerations",
    "elasticAfter",
    "runtimeLimit",
)
_SIM_FIELDS = ("podStartDelay", "horizon")


def from_dict(data: object, *, source: str = "<trace>", default_name: str = "trace") -> Trace:
    """Validate a parsed trace document and build a `Trace`."""
    top = _mapping(data, "trace", _TOP_FIELDS)
    name = _str(top.get("name", default_name), "name")
    cluster = _mapping(top.get("cluster"), "cluster", ("nodes",))
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
    trace = Trace(
        name=name,
        node_groups=node_groups,
        queues=queues,
        jobs=jobs,
        pod_start_delay=start_delay,
        horizon=horizon,
        source=source,
    )
    check(trace)
    return trace


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
    return NodeGroup(count=count, allocatable=allocatable, name=name, labels=labels, taints=taints)


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
    kind = data.get("kind", "Job")
    if kind not in ("Job", "MiniCluster"):
        raise TraceError(f"{where}.kind: {kind!r} is not Job or MiniCluster")
    count = _int(data.get("count", 1), f"{where}.count", minimum=1)
    size = _int(data.get("size"), f"{where}.size", minimum=1)
    min_size: int | None = None
    if data.get("minSize") is not None:
        min_size = _int(data["minSize"], f"{where}.minSize", minimum=1)
        if min_size > size:
            raise TraceError(f"{where}.minSize: {min_size} is larger than size {size}")
    pod_requests = _resources(data.get("podRequests"), f"{where}.podRequests", required=True)
    if pod_requests.is_zero():
        raise TraceError(f"{where}.podRequests: every request is zero; give e.g. {{cpu: '1'}}")
    runtime = _duration(data.get("runtime"), f"{where}.runtime")
    if runtime <= 0:
        raise TraceError(f"{where}.runtime: must be positive, e.g. 300s")
    submit = _mapping(data.get("submit", {}), f"{where}.submit", ("at", "interval"))
    at = _duration(submit.get("at", 0.0), f"{where}.submit.at")
    interval = _duration(submit.get("interval", 0.0), f"{where}.submit.interval")
    namespace = _str(data.get("namespace", "default"), f"{where}.namespace")
    _dns_name(namespace, f"{where}.namespace")
    tolerations = tuple(
        _toleration(t, f"{where}.tolerations[{j}]")
        for j, t in enumerate(_list(data.get("tolerations", []), f"{where}.tolerations"))
    )
    elastic_after = _duration(data.get("elasticAfter", 0.0), f"{where}.elasticAfter")
    runtime_limit: float | None = None
    if data.get("runtimeLimit") is not None:
        runtime_limit = _duration(data["runtimeLimit"], f"{where}.runtimeLimit")
        if runtime_limit <= 0:
            raise TraceError(
                f"{where}.runtimeLimit: must be positive, e.g. 360s (or leave it out: no limit)"
            )
    return JobGroup(
        name=name,
        queue=_str(data.get("queue"), f"{where}.queue"),
        size=size,
        pod_requests=pod_requests,
        runtime=runtime,
        count=count,
        kind=kind,
        min_size=min_size,
        one_pod_per_node=_bool(data.get("onePodPerNode", False), f"{where}.onePodPerNode"),
        submit_at=at,
        submit_interval=interval,
        priority=_int(data.get("priority", 0), f"{where}.priority", minimum=None),
        namespace=namespace,
        node_selector=_str_map(data.get("nodeSelector", {}), f"{where}.nodeSelector"),
        tolerations=tolerations,
        elastic_after=elastic_after,
        runtime_limit=runtime_limit,
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
