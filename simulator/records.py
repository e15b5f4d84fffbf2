"""What one in-process engine run holds and yields: its configuration, the record of each gang
across its life (its state in the gang state vocabulary), pod classes, samples, incidents and
the run's result. Shared by the in-process engine's parts (`simulator.engine`,
`simulator.lifecycle`, `simulator.placement`, `simulator.podscheduler`, `simulator.planfeed`,
`simulator.admitmodel`, `simulator.sampling`), the kwok engine's timeline and the reports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from policies import Gang, Reason
from policies.gangstate import (
    ADMITTED,
    BACKING_OFF,
    FAILED,
    FINISHED,
    PENDING,
    RUNNING,
    STATES,
    STUCK,
    WAITING,
    GangState,
)
from policies.packing import Packing

Admission = Literal["muster", "none", "external"]
"""How gangs are admitted: `muster` (gang admission by muster), `none` (no gang admission: the
pod-level scheduler alone), `external` (kwok engine only: objects are created suspended and a
controller muster does not run, e.g. Kueue, unsuspends them)."""
IN_PROCESS_ADMISSIONS: tuple[Admission, ...] = ("muster", "none")
"""What the in-process engine models (it has no outside controller to hand gangs to)."""
Placement = Literal["pinned", "scheduler"]
PLACEMENTS: tuple[Placement, ...] = ("pinned", "scheduler")
IncidentKind = Literal["clog", "evict", "fail", "preempt"]

# The gang state vocabulary (`policies.gangstate`), here for the simulator's modules.
__all__ = [
    "ADMITTED",
    "BACKING_OFF",
    "FAILED",
    "FINISHED",
    "IN_PROCESS_ADMISSIONS",
    "PENDING",
    "PLACEMENTS",
    "RUNNING",
    "STATES",
    "STUCK",
    "WAITING",
    "Admission",
    "EngineConfig",
    "EngineResult",
    "GangRecord",
    "GangState",
    "Incident",
    "IncidentKind",
    "Placement",
    "PodClass",
    "PodSetRecord",
    "ProgressFn",
    "Sample",
]


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How to run one engine over a trace."""

    admission: Admission = "muster"
    seed: int = 0
    policy: str = "drf"
    lookahead: int = 1000
    """Pending gangs per queue handed to the planner each cycle (queue order); 0 = all."""
    admit_interval: float = 0.0
    """Seconds between admission cycles; 0 = plan at every decision point."""
    horizon: float | None = None
    """Stop at this simulated time; None = the trace's horizon or its default."""
    record: bool = True
    """Keep per-instant time series (for queues.csv and plots)."""
    check: bool = False
    """Verify invariants after every instant (tests): no node overcommitted, counts agree."""
    placement: Placement = "pinned"
    """Where admitted gangs' pods go. ``pinned``: on the nodes the plan chose (the controller
    pins them, issue 18). ``scheduler``: unpinned, as on a cluster whose controller does not
    pin: the pod-level scheduler places every pod on the feasible node it scores best
    (kube-scheduler's default scores, LeastAllocated and BalancedAllocation: spreading), pods
    of gangs admitted in the same cycle interleave, and the planner sees where the pods are,
    not the plan. Under ``none`` admission there is nothing to pin: ``scheduler`` only makes
    its pod-level scheduler score nodes instead of taking the first fit."""
    topology_blind: bool = False
    """Plan without the trace's topology levels (the nodes keep their labels, and gangs spread
    over domains still run slower): what topology-aware placement is measured against."""
    packing: Packing | None = None
    """The planner's packing strategy (`muster sim --packing`); None: the trace's
    (`cluster.packing`), else the default."""


@dataclass(slots=True)
class GangRecord:
    """The simulator's mutable view of one gang across its whole life."""

    index: int
    gang: Gang
    queue: int
    runtime: float
    group: str
    request: tuple[tuple[int, int], ...]  # (resource index, amount) of one pod, non-zero only
    clog_timeout: float
    state: GangState = WAITING
    attempt: int = 0
    first_admitted: float | None = None
    admitted_at: float | None = None
    started: float | None = None
    finished: float | None = None
    ended: float | None = None  # when it finished or failed, whichever way (`set_state`)
    evictions: int = 0
    preemptions: int = 0
    clogs: int = 0
    admitted_size: int = 0
    bound: dict[int, int] = field(default_factory=dict)  # node index -> pods bound
    plan: dict[int, int] | None = None  # placement "scheduler": node index -> pods planned
    reserving: bool = False  # placement "scheduler": the planner still counts the plan
    bound_pods: int = 0
    running_pods: int = 0
    waiting_pods: int = 0  # pods that still need a node (counted in the queue's demand)
    in_pending_list: bool = False
    pod_class: int = 0
    queued_pods: int = 0  # live entries of this gang in the scheduler queue
    reason: str = ""  # why it failed or is stuck
    waiting_for: Reason | None = None  # the planner's last reason for not admitting it
    sets: tuple[PodSetRecord, ...] = ()
    domains: int = 0  # domains of the measured topology level its pods spanned at its start
    """A gang of several pod sets: each set's record, the main one first (`Gang.pod_sets`).
    ``request`` and ``pod_class`` above are then its main set's; ``bound`` and the pod counts
    are the totals over its sets, and ``plan`` is kept per set. Empty for a gang of one pod
    set: its record is its one set's."""

    @property
    def submitted(self) -> float:
        return self.gang.submitted.time

    def set_sizes(self, size: int) -> tuple[int, ...]:
        """Pods of each pod set (main first) of the gang admitted at ``size`` pods in all: the
        main set the rest, every other set whole (`policies.Gang`)."""
        gang = self.gang
        return (size - gang.fixed, *(other.count for other in gang.others))

    @property
    def ready_pods(self) -> int:
        """Running pods that count toward the gang's minimum. For a gang of several pod sets:
        those of its main set up to its own minimum (``min`` less the other sets' pods) and those
        of the other sets, so the minimum is reached only with every other set running whole
        (an MPI job's workers do nothing without their launcher)."""
        if not self.sets:
            return self.running_pods
        return self._toward_min([part.running_pods for part in self.sets])

    @property
    def bound_toward_min(self) -> int:
        """Bound pods that count toward the minimum, as `ready_pods` counts running ones."""
        if not self.sets:
            return self.bound_pods
        return self._toward_min([part.bound_pods for part in self.sets])

    def _toward_min(self, pods: list[int]) -> int:
        gang = self.gang
        others = zip(pods[1:], self.sets[1:], strict=True)
        return min(pods[0], gang.min - gang.fixed) + sum(min(n, part.count) for n, part in others)


@dataclass(slots=True)
class PodSetRecord:
    """One pod set of a gang of several (`GangRecord.sets`): its pods' request and class, and
    where its pods are, as a gang of one pod set keeps them in its own record."""

    count: int
    """Its pods at the gang's full size (the main set: the gang's size less the others')."""
    request: tuple[tuple[int, int], ...]  # (resource index, amount) of one pod, non-zero only
    pod_class: int
    one_pod_per_node: bool
    bound: dict[int, int] = field(default_factory=dict)  # node index -> pods bound
    plan: dict[int, int] | None = None  # placement "scheduler": node index -> pods planned
    bound_pods: int = 0
    running_pods: int = 0
    waiting_pods: int = 0
    queued_pods: int = 0


@dataclass(slots=True)
class PodClass:
    """Pods the scheduler treats alike: same request, same eligible nodes."""

    request: tuple[tuple[int, int], ...]
    nodes: list[int]  # eligible node indices, ascending (the first-fit order)
    cursor: int = 0  # nodes[:cursor] had no room for one pod of this class when last looked at
    queued: int = 0  # live entries of this class in the scheduler queue
    scores: dict[tuple[int, ...], int] = field(default_factory=dict)
    """Placement "scheduler": node score by (node shape, free amounts of the scored resources)."""


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster at one instant (after that instant's events and decisions)."""

    time: float
    utilization: float  # share of the utilization resource held by running gangs
    allocation: float  # share held by any bound pod (running or not)
    fairness_error: float
    pending: tuple[int, ...]  # per queue
    holding: tuple[int, ...]
    running: tuple[int, ...]
    usage: tuple[float, ...]  # per queue, utilization resource held (display units, e.g. cores)
    share: tuple[float, ...]  # per queue, share of the resource shared worst held by running gangs
    fair_share: tuple[float, ...]  # per queue, its fair share of that resource
    fairness_dominant: float = 0.0  # the instant error as measured before issue 33
    # Per queue and resource: running shares and fair shares (simulator.fairness).
    running_by_resource: tuple[tuple[float, ...], ...] = ()
    fair_by_resource: tuple[tuple[float, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class Incident:
    """A clog or an eviction, for the timeline plot."""

    time: float
    kind: IncidentKind
    gang: str
    queue: str


@dataclass(slots=True)
class EngineResult:
    """Everything one engine run produced."""

    admission: Admission
    trace: str
    seed: int
    queues: tuple[str, ...]
    gangs: list[GangRecord]
    samples: list[Sample]
    incidents: list[Incident]
    utilization_resource: str
    first_submit: float
    end: float
    utilization_mean: float
    allocation_mean: float
    fairness_error: float
    """The time mean of the instant fairness error (`simulator.fairness`)."""
    events: int
    plan_calls: int
    plan_seconds: float
    placement_misses: int
    """Admitted pods not bound where the plan put them."""
    wall_seconds: float
    horizon_reached: bool
    placement: Placement | None = None
    """The in-process engine's placement model; None: not modelled (the kwok engine)."""
    controller: str | None = None
    """Admission `external`: the outside controller's name for reports (`--external-name`)."""
    topology: dict[str, Any] | None = None
    """A trace with topology levels: its figures (`simulator.domainmodel.DomainModel.figures`)."""
    fairness_dominant: float | None = None
    """The time mean of the fairness error as measured before issue 33."""
    over_fair_share: tuple[float, ...] = ()
    """Per queue, the mean of how far above its fair share it ran, in the resource where most,
    over the time it ran or was owed a share (`FairnessMeter.over_fair_share`), on both engines;
    empty when no sample covered the run."""
    utilization_by_resource: dict[str, float] | None = None
    """Each resource's mean share held by running gangs, over the run."""
    curve: Any = None
    """`simulator.sampling.UtilizationCurve` of the in-process engine (None on kwok)."""
    resources: tuple[str, ...] = ()
    """The resources of the samples' per-resource shares, in their order."""


ProgressFn = Callable[[float, int, int], None]
"""progress(simulated time, events so far, gangs done so far)."""
