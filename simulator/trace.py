"""Simulator traces: the YAML/JSON trace format, CSV job-list import, and conversion to the
`policies` model (nodes, queue tree, gangs).

A trace is validated completely while it loads: a bad trace raises `TraceError` naming the
job group (or node group, or queue) and the field, and nothing runs. The format is documented
in docs/simulator.md; the shipped examples live in `simulator/traces/`.
"""

from __future__ import annotations

import csv
import json
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Any, Literal

import yaml

from policies import (
    Backoff,
    Gang,
    Node,
    PolicyError,
    Preemption,
    QuantityError,
    Queue,
    QueueTree,
    Resources,
    SizeRatio,
    SubmitStamp,
    Taint,
    Toleration,
    durations,
    parse_preemption,
)
from policies.phase import parse_queue_limits

DEFAULT_TRACE = "blog-burst"
"""The trace `muster sim` replays when given none (shipped in simulator/traces/)."""

DEFAULT_POD_START_DELAY = 2.0
"""Seconds from a pod being bound to a node to it running (image pull, container start)."""

Kind = Literal["Job", "MiniCluster"]
Strategy = Literal["BestEffortFIFO", "StrictFIFO"]


class TraceError(ValueError):
    """A trace that cannot run; the message names where (`jobs[2] (mc16).podRequests.cpu`)."""


# --------------------------------------------------------------------------- trace model


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """`count` identical nodes."""

    count: int
    allocatable: Resources
    name: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()


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
        )


@dataclass(frozen=True, slots=True)
class JobGroup:
    """`count` identical gangs `<name>-<i>`, submitted at `submit_at + i * submit_interval`."""

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

    @property
    def min(self) -> int:
        return self.min_size if self.min_size is not None else self.size


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

    @property
    def gang_count(self) -> int:
        return sum(group.count for group in self.jobs)

    @property
    def node_count(self) -> int:
        return sum(group.count for group in self.node_groups)

    @property
    def pod_count(self) -> int:
        return sum(group.count * group.size for group in self.jobs)

    def nodes(self) -> list[Node]:
        """The cluster's nodes, named `<group name or node-g<i>>-<j>` in trace order."""
        nodes: list[Node] = []
        for index, group in enumerate(self.node_groups):
            prefix = group.name or f"node-g{index}"
            width = len(str(max(group.count - 1, 0)))
            for j in range(group.count):
                nodes.append(
                    Node(
                        name=f"{prefix}-{j:0{width}d}",
                        allocatable=group.allocatable,
                        labels=dict(group.labels),
                        taints=group.taints,
                    )
                )
        return nodes

    def queue_tree(self) -> QueueTree:
        return QueueTree.build([spec.to_queue() for spec in self.queues])

    def queue_specs(self) -> dict[str, QueueSpec]:
        return {spec.name: spec for spec in self.queues}

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
    raw.sort(key=lambda item: (item[0], item[1]))
    expanded: list[SubmittedGang] = []
    for seq, (at, _rank, name, group) in enumerate(raw):
        gang = Gang(
            id=f"{group.namespace}/{name}",
            queue=group.queue,
            pod_requests=group.pod_requests,
            size=group.size,
            min_size=group.min_size,
            priority=group.priority,
            submitted=SubmitStamp(time=at, seq=seq, name=name),
            one_pod_per_node=group.one_pod_per_node,
            node_selector=dict(group.node_selector),
            tolerations=group.tolerations,
            elastic_after=group.elastic_after,
            kind=group.kind,
            runtime_limit=group.runtime_limit,
        )
        expanded.append(SubmittedGang(gang=gang, runtime=group.runtime, group=group.name))
    return expanded


# --------------------------------------------------------------------------- loading


def shipped_traces() -> list[str]:
    """Names of the example traces shipped inside the package."""
    folder = importlib_resources.files("simulator") / "traces"
    return sorted(p.name.rsplit(".", 1)[0] for p in folder.iterdir() if p.name.endswith(".yaml"))


def resolve(path_or_name: str | None) -> tuple[str, str]:
    """Return (text, source) for a trace file path or the name of a shipped trace."""
    if path_or_name is None:
        path_or_name = DEFAULT_TRACE
    path = Path(path_or_name)
    if path.is_file():
        try:
            return path.read_text(encoding="utf-8"), str(path)
        except (OSError, UnicodeDecodeError) as exc:
            raise TraceError(f"{path}: cannot read trace: {exc}") from exc
    shipped = importlib_resources.files("simulator") / "traces" / f"{path_or_name}.yaml"
    if "/" not in path_or_name and shipped.is_file():
        return shipped.read_text(encoding="utf-8"), f"shipped:{path_or_name}"
    names = ", ".join(shipped_traces())
    raise TraceError(
        f"trace {path_or_name!r} not found: give a trace file path or a shipped trace ({names})"
    )


def load(path_or_name: str | None = None) -> Trace:
    """Load and validate a trace file (YAML or JSON) or a shipped trace by name."""
    text, source = resolve(path_or_name)
    default_name = Path(source.removeprefix("shipped:")).name
    for suffix in (".yaml", ".yml", ".json"):
        default_name = default_name.removesuffix(suffix)
    return loads(text, source=source, default_name=default_name)


def loads(text: str, *, source: str = "<trace>", default_name: str = "trace") -> Trace:
    """Parse and validate trace text (YAML; JSON is accepted too as it is YAML)."""
    try:
        data = json.loads(text) if source.endswith(".json") else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        one_line = " ".join(str(exc).split())
        raise TraceError(f"{source}: not valid YAML/JSON: {one_line}") from exc
    try:
        return from_dict(data, source=source, default_name=default_name)
    except TraceError as exc:
        raise TraceError(f"{source}: {exc}") from None


_TOP_FIELDS = ("name", "cluster", "queues", "jobs", "simulation")
_NODE_FIELDS = ("count", "allocatable", "name", "labels", "taints")
_QUEUE_FIELDS = (
    "name",
    "parent",
    "weight",
    "nominal",
    "borrowingLimit",
    "lendingLimit",
    "strategy",
    "sizeRatio",
    "clogTimeout",
    "backoff",
    "nodeFit",
    "preemption",
    "limits",
)
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
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


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
    jobs = tuple(_job_group(item, i) for i, item in enumerate(job_items))
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
    parent = data.get("parent")
    if parent is not None:
        parent = _str(parent, f"{where}.parent")
    weight = _float(data.get("weight", 1.0), f"{where}.weight")
    if weight <= 0:
        raise TraceError(f"{where}.weight: {weight} must be positive, e.g. 1")
    strategy = data.get("strategy", "BestEffortFIFO")
    if strategy not in ("BestEffortFIFO", "StrictFIFO"):
        raise TraceError(f"{where}.strategy: {strategy!r} is not BestEffortFIFO or StrictFIFO")
    # Checked as the Queue's spec.limits is, and not simulated: the simulator has no ingress
    # (every gang of a trace is submitted), so a limit would only drop gangs from the replay.
    try:
        parse_queue_limits(data.get("limits"), f"{where}.limits")
    except PolicyError as error:
        raise TraceError(str(error)) from None
    return QueueSpec(
        name=name,
        parent=parent,
        weight=weight,
        nominal=_opt_resources(data.get("nominal"), f"{where}.nominal"),
        quota_names=frozenset(data.get("nominal") or ()),
        borrowing_limit=_opt_resources(data.get("borrowingLimit"), f"{where}.borrowingLimit"),
        lending_limit=_opt_resources(data.get("lendingLimit"), f"{where}.lendingLimit"),
        strategy=strategy,
        size_ratio=_size_ratio(data, f"{where}.sizeRatio"),
        clog_timeout=_duration(data.get("clogTimeout", 300.0), f"{where}.clogTimeout"),
        backoff=_backoff(data.get("backoff"), f"{where}.backoff"),
        node_fit=_bool(data.get("nodeFit", True), f"{where}.nodeFit"),
        preemption=_preemption(data.get("preemption"), f"{where}.preemption"),
    )


def _preemption(value: object, where: str) -> Preemption:
    try:
        return parse_preemption(value, where)
    except PolicyError as error:
        raise TraceError(str(error)) from None


def _size_ratio(data: Mapping[str, Any], where: str) -> SizeRatio | None:
    if "sizeRatio" not in data:
        return SizeRatio()
    value = data["sizeRatio"]
    if value is None or value is False:
        return None
    if isinstance(value, bool):
        raise TraceError(
            f"{where}: use a ratio such as 0.1, {{ratio: 0.1, action: Reject}}, or null"
        )
    if isinstance(value, int | float):
        ratio, action = float(value), "Serialize"
    else:
        spec = _mapping(value, where, ("ratio", "action"))
        ratio = _float(spec.get("ratio", 0.1), f"{where}.ratio")
        action = spec.get("action", "Serialize")
        if action not in ("Serialize", "Reject"):
            raise TraceError(f"{where}.action: {action!r} is not Serialize or Reject")
    if not 0 < ratio <= 1:
        raise TraceError(f"{where}.ratio: {ratio} must be in (0, 1], e.g. 0.1")
    return SizeRatio(ratio=ratio, action="Reject" if action == "Reject" else "Serialize")


def _backoff(value: object, where: str) -> Backoff:
    if value is None:
        return Backoff()
    data = _mapping(value, where, ("base", "max", "limit"))
    default = Backoff()
    base = _duration(data.get("base", default.base), f"{where}.base")
    maximum = _duration(data.get("max", default.max), f"{where}.max")
    limit = _int(data.get("limit", default.limit), f"{where}.limit", minimum=0)
    if maximum < base:
        raise TraceError(f"{where}.max: {maximum}s is below base {base}s")
    return Backoff(base=base, max=maximum, limit=limit)


def _job_group(item: object, index: int) -> JobGroup:
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


# --------------------------------------------------------------------------- scalar fields


def parse_duration(value: object, where: str) -> float:
    """Seconds from `300`, `300s`, `1.5m`, `1h30m`, `250ms`; negative or malformed -> TraceError."""
    return _duration(value, where)


def _duration(value: object, where: str) -> float:
    try:
        return durations.parse_duration(value, field=where)
    except durations.DurationError as exc:
        raise TraceError(str(exc)) from None


def _mapping(value: object, where: str, known: Sequence[str]) -> dict[str, Any]:
    if value is None:
        raise TraceError(f"{where}: missing; expected a mapping with fields {', '.join(known)}")
    if not isinstance(value, dict):
        raise TraceError(f"{where}: expected a mapping, got {type(value).__name__}")
    for key in value:
        if key not in known:
            name = value.get("name")
            if isinstance(name, str) and name and where.endswith("]"):
                where = f"{where} ({name})"
            raise TraceError(f"{where}: unknown field {key!r}; known fields: {', '.join(known)}")
    return value


def _list(value: object, where: str, *, required: bool = False) -> list[Any]:
    if value is None and not required:
        return []
    if not isinstance(value, list):
        raise TraceError(f"{where}: expected a list, got {type(value).__name__}")
    if required and not value:
        raise TraceError(f"{where}: must not be empty")
    return value


def _str(value: object, where: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise TraceError(f"{where}: expected a string, got {value!r}")
    if not value and not allow_empty:
        raise TraceError(f"{where}: must not be empty")
    return value


def _dns_name(value: str, where: str) -> None:
    if not _NAME_RE.match(value) or len(value) > 63:
        raise TraceError(
            f"{where}: {value!r} is not a valid name; use lower-case letters, digits and '-'"
        )


def _int(value: object, where: str, *, minimum: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise TraceError(f"{where}: expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise TraceError(f"{where}: {value} is below the minimum {minimum}")
    return value


def _float(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TraceError(f"{where}: expected a number, got {value!r}")
    if not math.isfinite(value):
        raise TraceError(f"{where}: {value!r} is not a finite number")
    return float(value)


def _bool(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise TraceError(f"{where}: expected true or false, got {value!r}")
    return value


def _str_map(value: object, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise TraceError(f"{where}: expected a mapping of strings, got {value!r}")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TraceError(f"{where}.{key}: expected a string, got {item!r}")
    return dict(value)


def _resources(value: object, where: str, *, required: bool = False) -> Resources:
    if value is None and not required:
        return Resources()
    if not isinstance(value, dict) or (required and not value):
        raise TraceError(f"{where}: expected a mapping of resource quantities, e.g. {{cpu: '6'}}")
    for key, item in value.items():
        if not isinstance(key, str):
            raise TraceError(f"{where}: resource name {key!r} is not a string")
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise TraceError(f"{where}.{key}: {item!r} is not a quantity; use e.g. 500m or 2Gi")
    try:
        return Resources.parse(value, field=where)
    except QuantityError as exc:
        raise TraceError(str(exc)) from None


def _opt_resources(value: object, where: str) -> Resources | None:
    return None if value is None else _resources(value, where)


# --------------------------------------------------------------------------- CSV job lists

CSV_COLUMNS = ("submit", "queue", "size", "requests", "runtime")
CSV_OPTIONAL_COLUMNS = ("name", "min_size", "kind", "one_pod_per_node", "priority", "namespace")
HISTORY_REQUIRED = ("gang", "queue", "size", "submitted_s", "requests")
"""Columns a history (gangs.csv, `muster history -o csv`) needs to replay (policies/history.py)."""


@dataclass(frozen=True, slots=True)
class HistoryJobs:
    """The job list read from a history file, and what reading it left out or measured."""

    jobs: tuple[JobGroup, ...]
    skipped: int = 0
    """Rows of gangs that never ran (no runtime): failed before they started, or stuck."""
    start_latency: float | None = None
    """Median seconds from admission to start over the rows (× scale): the cluster's pod start
    delay, which the trace's `podStartDelay` models."""
    engine: str = ""


def load_jobs_csv(path: str | Path, *, scale: float = 1.0) -> tuple[JobGroup, ...]:
    """Read a job list (one gang per row) as job groups of count 1.

    Required columns: submit (duration since trace start, `0`, `90s`, `1h`), queue, size,
    requests (`cpu=6;memory=20Gi`), runtime (duration). Optional: name (default `job-<row>`),
    min_size, kind (Job|MiniCluster), one_pod_per_node (true|false), priority, namespace.

    A history (the simulator's gangs.csv, `muster history -o csv`; it has a `submitted_s`
    column) is read as `load_history_csv` reads it. `scale` multiplies every time (submission,
    runtime): a history taken from a kwok replay at --time-scale X is in wall seconds, and X
    brings it back to the trace's.
    """
    return read_jobs_csv(path, scale=scale).jobs


def read_jobs_csv(path: str | Path, *, scale: float = 1.0) -> HistoryJobs:
    """`load_jobs_csv` with what reading a history left out or measured."""
    path = Path(path)
    if not scale > 0:
        raise TraceError(f"{path}: the time scale must be positive, got {scale:g}")
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
            header = list(rows[0].keys()) if rows else []
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise TraceError(f"{path}: cannot read job list: {exc}") from exc
    if not rows:
        raise TraceError(f"{path}: no rows; the header is {','.join(CSV_COLUMNS)}")
    if "submitted_s" in header:
        return _history_jobs(path, rows, header, scale)
    missing = [c for c in CSV_COLUMNS if c not in header]
    if missing:
        raise TraceError(
            f"{path}: missing column(s) {', '.join(missing)}; "
            f"required: {','.join(CSV_COLUMNS)}; optional: {','.join(CSV_OPTIONAL_COLUMNS)} "
            "(or a history: gangs.csv, `muster history -o csv`)"
        )
    unknown = [c for c in header if c not in CSV_COLUMNS + CSV_OPTIONAL_COLUMNS]
    if unknown:
        raise TraceError(f"{path}: unknown column(s) {', '.join(map(str, unknown))}")
    groups: list[JobGroup] = []
    for number, row in enumerate(rows, start=2):  # line 1 is the header
        name = (row.get("name") or "").strip() or f"job-{number - 1}"
        item: dict[str, Any] = {
            "name": name,
            "queue": (row["queue"] or "").strip(),
            "size": _csv_int(row["size"], path, number, "size"),
            "podRequests": _csv_requests(row["requests"], path, number),
            "runtime": (row["runtime"] or "").strip(),
            "submit": {"at": (row["submit"] or "").strip()},
        }
        _csv_optional(item, row, path, number)
        groups.append(_csv_group(item, path, number, scale))
    return HistoryJobs(tuple(groups))


def _csv_optional(item: dict[str, Any], row: Mapping[str, str], path: Path, number: int) -> None:
    """The optional columns both formats share: min_size, kind, one_pod_per_node, priority,
    namespace."""
    if (row.get("min_size") or "").strip():
        item["minSize"] = _csv_int(row["min_size"], path, number, "min_size")
    if (row.get("kind") or "").strip():
        item["kind"] = row["kind"].strip()
    if (row.get("one_pod_per_node") or "").strip():
        flag = row["one_pod_per_node"].strip().lower()
        if flag not in ("true", "false"):
            raise TraceError(f"{path}:{number}: one_pod_per_node: {flag!r} is not true/false")
        item["onePodPerNode"] = flag == "true"
    if (row.get("priority") or "").strip():
        item["priority"] = _csv_int(row["priority"], path, number, "priority")
    if (row.get("namespace") or "").strip():
        item["namespace"] = row["namespace"].strip()


def _csv_group(item: dict[str, Any], path: Path, number: int, scale: float) -> JobGroup:
    try:
        group = _job_group(item, number - 2)
    except TraceError as exc:
        raise TraceError(f"{path}:{number}: {exc}") from None
    if scale == 1.0:
        return group
    return replace(group, submit_at=group.submit_at * scale, runtime=group.runtime * scale)


def _csv_float(value: str | None, path: Path, number: int, column: str) -> float | None:
    text = (value or "").strip()
    if not text:
        return None
    try:
        number_value = float(text)
    except ValueError:
        raise TraceError(f"{path}:{number}: {column}: {text!r} is not a number") from None
    if not math.isfinite(number_value):
        raise TraceError(f"{path}:{number}: {column}: {text!r} is not a number")
    return number_value


def _history_jobs(
    path: Path, rows: list[dict[str, str]], header: Sequence[str], scale: float
) -> HistoryJobs:
    """A history's rows as job groups: submission relative to the first row's, runtime from
    runtime_s (else finished_s − started_s); gangs that never ran are left out. A file with
    several engines' rows (gangs.csv of `--admission both`) is read for its first engine."""
    missing = [c for c in HISTORY_REQUIRED if c not in header]
    if missing:
        raise TraceError(
            f"{path}: a history (it has submitted_s) needs column(s) {', '.join(missing)}; "
            "write it with `muster history -o csv`, or take the simulator's gangs.csv"
        )
    engine = (rows[0].get("engine") or "").strip()
    chosen = [
        (number, row)
        for number, row in enumerate(rows, start=2)
        if (row.get("engine") or "").strip() == engine
    ]
    submitted = {
        number: _csv_float(row["submitted_s"], path, number, "submitted_s")
        for number, row in chosen
    }
    known = [t for t in submitted.values() if t is not None]
    if not known:
        raise TraceError(f"{path}: no row has a submitted_s time")
    origin = min(known)
    groups: list[JobGroup] = []
    latencies: list[float] = []
    skipped = 0
    for number, row in chosen:
        at = submitted[number]
        if at is None:
            raise TraceError(f"{path}:{number}: submitted_s: empty")
        started = _csv_float(row.get("started_s"), path, number, "started_s")
        admitted = _csv_float(row.get("admitted_s"), path, number, "admitted_s")
        runtime = _csv_float(row.get("runtime_s"), path, number, "runtime_s")
        if runtime is None:
            finished = _csv_float(row.get("finished_s"), path, number, "finished_s")
            if started is not None and finished is not None:
                runtime = finished - started
        if runtime is None:
            skipped += 1
            continue
        if started is not None and admitted is not None and started >= admitted:
            latencies.append(started - admitted)
        namespace, sep, name = (row.get("gang") or "").strip().rpartition("/")
        if not sep:
            namespace, name = "default", name
        item: dict[str, Any] = {
            "name": name,
            "queue": (row.get("queue") or "").strip(),
            "size": _csv_int(row.get("size"), path, number, "size"),
            "podRequests": _csv_requests(row.get("requests"), path, number),
            # Kept above zero: a gang the cluster ended at once (a failure) still runs.
            "runtime": max(runtime, 0.001),
            "submit": {"at": at - origin},
        }
        _csv_optional(item, {**row, "namespace": namespace or "default"}, path, number)
        if item.get("minSize") == item["size"]:
            del item["minSize"]
        groups.append(_csv_group(item, path, number, scale))
    if not groups:
        raise TraceError(f"{path}: no gang in the history ran (every row lacks a runtime)")
    latencies.sort()
    latency = latencies[len(latencies) // 2] * scale if latencies else None
    return HistoryJobs(tuple(groups), skipped, latency, engine)


def with_jobs(trace: Trace, jobs: Sequence[JobGroup], source: str) -> Trace:
    """The trace's cluster and queues with another job list (e.g. from a CSV), re-validated."""
    replaced = Trace(
        name=trace.name,
        node_groups=trace.node_groups,
        queues=trace.queues,
        jobs=tuple(jobs),
        pod_start_delay=trace.pod_start_delay,
        horizon=trace.horizon,
        source=source,
    )
    try:
        check(replaced)
    except TraceError as exc:
        raise TraceError(f"{source}: {exc}") from None
    return replaced


def _csv_int(value: str | None, path: Path, number: int, column: str) -> int:
    try:
        return int((value or "").strip())
    except ValueError:
        raise TraceError(f"{path}:{number}: {column}: {value!r} is not an integer") from None


def _csv_requests(value: str | None, path: Path, number: int) -> dict[str, str]:
    requests: dict[str, str] = {}
    for part in (value or "").split(";"):
        part = part.strip()
        if not part:
            continue
        key, sep, amount = part.partition("=")
        if not sep or not key.strip() or not amount.strip():
            raise TraceError(
                f"{path}:{number}: requests: {part!r} is not name=quantity; "
                "write e.g. cpu=6;memory=20Gi"
            )
        requests[key.strip()] = amount.strip()
    if not requests:
        raise TraceError(f"{path}:{number}: requests: empty; write e.g. cpu=6;memory=20Gi")
    return requests


# --------------------------------------------------------------------------- writing


def dump_yaml(document: Mapping[str, Any]) -> str:
    """Write a trace document in the compact style of the shipped traces (one job per line).

    Hand-written because yaml.dump is slow for 100k-line traces and puts each field on a line.
    """
    lines: list[str] = []
    for key, value in document.items():
        if key in ("cluster",):
            lines.append(f"{key}:")
            lines.append("  nodes:")
            for node in value["nodes"]:
                lines.append(f"    - {_flow(node)}")
        elif isinstance(value, list):
            lines.append(f"{key}:")
            lines.extend(f"  - {_flow(item)}" for item in value)
        else:
            lines.append(f"{key}: {_flow(value)}")
    return "\n".join(lines) + "\n"


def _flow(value: object) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    if _PLAIN_RE.fullmatch(text) and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text)


_PLAIN_RE = re.compile(r"[A-Za-z][A-Za-z0-9_./-]*")
_YAML_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "y", "n", "null"})
