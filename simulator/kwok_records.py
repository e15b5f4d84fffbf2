"""What a kwok replay knows of its gangs: each gang's record (`simulator.records.GangRecord`,
in trace time, as the in-process engine keeps it), what the engine last saw of it in the
cluster (`Seen`, wall clock), the incidents, and every change of state; and the replay's clock
between wall time and trace time (`ReplayClock`).

The timeline (`simulator.kwok_timeline`) and the readings of each look
(`simulator.kwok_reading`) write here; the samples and the result are derived from it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from policies import Gang
from simulator.records import FAILED, FINISHED, GangRecord, GangState, Incident, IncidentKind
from simulator.trace import SubmittedGang, Trace


@dataclass(slots=True)
class Seen:
    """What the engine last saw of one gang in the cluster (wall clock)."""

    bound: int = 0  # live pods with a node
    running: int = 0  # live pods Running
    first_bound: float | None = None  # trace time of the first look with a pod bound
    run_started: float | None = None  # wall: the current run began (gang runner)
    run_ends: float | None = None  # wall: when the current run's pods are due to complete
    completed: float | None = None  # wall: first look with the run's pods all completed
    admission: str | None = None  # the muster.dev/admitted value in force
    requeue_at: float = 0.0  # wall
    evictions: int = 0
    preemptions: int = 0
    # Latency of the current admission (wall): when admitted, when all its pods existed, when
    # all were bound. With run_started they show where the control plane spends its time.
    admitted_wall: float | None = None
    created_wall: float | None = None
    bound_wall: float | None = None
    running_wall: float | None = None
    job_ready_seen: bool = False  # the Job's status.ready reached minSize (what muster reads)


@dataclass(slots=True)
class ReplayClock:
    """Trace time of the replay: wall time since `t0` times the scale, from `origin` (the
    first submission's trace time)."""

    origin: float
    scale: float
    t0: float = 0.0

    def trace_time(self, wall: float) -> float:
        return self.origin + (wall - self.t0) * self.scale

    def wall_time(self, trace_seconds: float) -> float:
        return self.t0 + (trace_seconds - self.origin) / self.scale


class ReplayRecords:
    """The replay's gangs: their records, what was seen of each, incidents, state changes."""

    def __init__(
        self,
        trace: Trace,
        arrivals: Sequence[SubmittedGang],
        namespaces: Mapping[str, str],
        request: Callable[[Gang], tuple[tuple[int, int], ...]],
    ) -> None:
        """``namespaces``: the replay's namespace of each trace namespace; ``request``: one
        pod's request of a gang ((resource index, amount), non-zero only)."""
        tree = trace.queue_tree()
        self.queue_names: tuple[str, ...] = tree.leaves
        q_index = {name: i for i, name in enumerate(self.queue_names)}
        self.gangs: list[GangRecord] = []
        self.seen: list[Seen] = []
        self.by_job: dict[tuple[str, str], int] = {}
        for index, arrival in enumerate(arrivals):
            gang = arrival.gang
            self.gangs.append(
                GangRecord(
                    index=index,
                    gang=gang,
                    queue=q_index[gang.queue],
                    runtime=arrival.runtime,
                    group=arrival.group,
                    request=request(gang),
                    clog_timeout=tree[gang.queue].clog_timeout,
                )
            )
            self.seen.append(Seen())
            namespace = gang.id.split("/", 1)[0]
            self.by_job[(namespaces[namespace], gang.submitted.name)] = index
        self.incidents: list[Incident] = []
        self.done = 0
        self.last_change = 0.0  # trace time of the last change of any gang

    def set_state(self, record: GangRecord, state: GangState, at: float) -> None:
        if state in (FINISHED, FAILED) and record.state not in (FINISHED, FAILED):
            self.done += 1
            record.ended = at
        record.state = state
        self.last_change = max(self.last_change, at)

    def incident(self, at: float, kind: IncidentKind, record: GangRecord) -> None:
        self.incidents.append(Incident(at, kind, record.gang.id, self.queue_names[record.queue]))


def count(value: str | None) -> int:
    """A count the cluster wrote (an annotation, a status field): 0 if absent or not a number."""
    try:
        return int(value or 0)
    except ValueError:
        return 0
