"""How to run the kwok engine (`KwokSettings`, the `muster sim --engine kwok` options), what it
refuses (`KwokError`, `check_trace`) and what it shows while it runs (`Progress`): what every
part of the kwok engine shares.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from policies.kinds.registry import kind_named, pod_gang
from simulator.kwok_external import ExternalController
from simulator.records import Admission
from simulator.trace import Trace

MAX_NODES: Final = 5000
"""kwok nodes one local control plane takes on a small machine (heartbeats of 5000 fake nodes
already keep a core busy); a larger trace is refused rather than replayed badly."""
MIN_WALL_RUNTIME: Final = 1.0
"""Wall seconds below which a compressed runtime is mostly control-plane latency (warned)."""

Log = Callable[[str], None]


class KwokError(RuntimeError):
    """The kwok engine cannot run or lost its footing; the message says what to do."""


@dataclass(frozen=True)
class KwokSettings:
    """How to run the kwok engine (the `muster sim --engine kwok` options)."""

    time_scale: float = 25.0
    """Trace seconds per wall second: 25 replays 100 s of trace time in 4 s."""
    kubeconfig: Path | None = None
    """Use this control plane; None = bring one up (`cluster_name`) and take it down after."""
    cluster_name: str = "muster-sim"
    external_muster: bool = False
    """muster (webhook + controller) already runs against the cluster: do not start one; trace
    queues that already exist are used as they are."""
    keep_cluster: bool = False
    """Leave a cluster this engine brought up running (for inspection)."""
    policy: str = "drf"
    seed: int = 0
    horizon: float | None = None
    """Trace seconds after which unfinished gangs are stuck; None = the trace's."""
    min_clog_timeout: float = 30.0
    """Wall seconds below which a queue's compressed clog timeout is not set: starting a
    64-pod gang takes this control plane several seconds on a busy machine, and a shorter
    timeout would evict gangs that are merely starting."""
    stall: float = 5.0
    """Wall seconds without any change (and nothing running or backing off) after which the
    unfinished gangs are reported stuck."""
    poll: float = 0.1
    """Wall seconds between two looks at the watch caches (longer when a look takes long)."""
    submitters: int = 8
    """Parallel submitters (as the blog's parallel workers)."""
    out_dir: Path | None = None
    """Where muster's log goes (muster-run.log)."""
    muster_args: tuple[str, ...] = ()
    external: ExternalController = field(default_factory=ExternalController)
    """How the `external` admission hands the replay to a controller muster does not run."""
    controller_pids: tuple[int, ...] = ()
    """Processes (with their children) whose CPU seconds each replay's figures attribute: an
    outside controller, or a muster running outside (`external_muster`)."""


@dataclass(frozen=True)
class Progress:
    """What the progress display shows, in trace time."""

    admission: Admission
    trace_time: float
    done: int
    total: int
    running: int
    pods_bound: int
    looks: int


ProgressFn = Callable[[Progress], None]


def refuse_pod_sets(trace: Trace, admissions: Sequence[Admission] = ()) -> None:
    """The kwok engine creates a Job or a MiniCluster per gang of that kind, one pod template
    each: such a gang of several pod sets is not one such object, and a replay of it split up
    would not be the trace's (a JobSet's or a pod group's pod sets are its replicated Jobs, its
    pods). A pod group is muster's: a controller muster does not run (`external`) cannot be
    handed one. Refused before anything is built or started."""
    for group in trace.jobs:
        kind = kind_named(group.kind)
        if group.others and not kind.labels_pod_sets:
            names = ", ".join(pod_set.name for pod_set in group.pod_sets)
            raise KwokError(
                f"jobs {group.name}: a {group.kind} gang of {len(group.others) + 1} pod sets "
                f"({names}); the kwok engine replays a gang of several pod sets as a JobSet "
                "or a PodGroup (kind: JobSet, kind: PodGroup), or replay this trace in-process "
                "(--engine in-process)"
            )
        if pod_gang(kind) is not None and "external" in admissions:
            raise KwokError(
                f"jobs {group.name}: a pod group cannot be handed to a controller muster does "
                "not run (--admission external): replay it with none or muster"
            )


def check_trace(trace: Trace, settings: KwokSettings, log: Log) -> None:
    """Refuse what the kwok engine cannot replay faithfully; warn about what it distorts."""
    if not settings.time_scale > 0:
        raise KwokError(f"--time-scale must be positive, got {settings.time_scale}")
    if trace.node_count > MAX_NODES:
        raise KwokError(
            f"trace {trace.name!r} has {trace.node_count} nodes; the kwok engine takes at most "
            f"{MAX_NODES} on one local control plane: use the in-process engine or a smaller "
            "cluster (muster sweep resizes node groups)"
        )
    if settings.min_clog_timeout < 0:
        raise KwokError("--min-clog-timeout must not be negative")
    if settings.stall <= 0 or settings.poll <= 0 or settings.submitters < 1:
        raise KwokError("--stall and the poll interval must be positive, submitters at least 1")
    if settings.external.stall <= 0:
        raise KwokError("--external-stall must be positive")
    for group in trace.jobs:
        wall = group.runtime / settings.time_scale
        if wall < MIN_WALL_RUNTIME:
            log(
                f"warning: jobs {group.name}: runtime {group.runtime:g}s is {wall:.2f}s of wall "
                f"time at --time-scale {settings.time_scale:g}; control-plane latency (about "
                "0.5-1 s per gang) will weigh on it: a smaller --time-scale is more faithful"
            )
    for spec in trace.queues:
        wall = spec.clog_timeout / settings.time_scale
        if wall < settings.min_clog_timeout and spec.name in {g.queue for g in trace.jobs}:
            log(
                f"note: queue {spec.name}: clogTimeout {spec.clog_timeout:g}s is {wall:.1f}s of "
                f"wall time at --time-scale {settings.time_scale:g}; muster gets "
                f"{settings.min_clog_timeout:g}s (--min-clog-timeout) so gangs still starting "
                "are not evicted as clogged"
            )
    if trace.slowdown is not None:
        log(
            f"note: the kwok engine does not apply crossDomainSlowdown (x{trace.slowdown.factor:g}"
            f" across {trace.slowdown.level}s): a pod's runtime is fixed when it is created, "
            "before anyone knows where its gang runs; the nodes carry the trace's topology "
            "labels and muster runs with its levels"
        )
    if any(g.priority < 0 for g in trace.jobs):
        shift = -min(g.priority for g in trace.jobs)
        log(
            f"note: muster.dev/priority is 0..1e9; the trace's priorities are replayed shifted "
            f"by +{shift} (the order within each queue is the same)"
        )
