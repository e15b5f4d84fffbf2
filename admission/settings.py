"""How the controller runs: `ControllerSettings`, the flags of `muster run` that the admit loop,
its detectors and its writers read."""

from __future__ import annotations

from dataclasses import dataclass

from policies.devices import NO_DEVICES, DeviceMapping
from policies.lifecycle import REJECTED_GRACE
from policies.packing import DEFAULT_PACKING, Packing
from policies.topology import NO_TOPOLOGY, Topology


@dataclass(frozen=True)
class ControllerSettings:
    """How the controller runs (flags of `muster run`)."""

    policy: str = "drf"
    """Admission policy name (policies.get_policy)."""
    topology: Topology = NO_TOPOLOGY
    """The cluster's topology levels (`--topology-levels`), which gangs' topology requests
    name; none: the requests are not looked at."""
    packing: Packing = DEFAULT_PACKING
    """The order in which the planner offers gangs nodes (`--packing`, `--packing-gpu-weight`;
    `policies.packing`)."""
    period: float = 2.0
    """Seconds between cycles when nothing changes."""
    coalesce: float = 0.2
    """Seconds to wait after a change so a burst of events makes one cycle (also the least
    time between cycles)."""
    pace: float = 2.0
    """Between two cycles, wait at least `pace` times as long as the last cycle took (at most
    `period`): a cycle walks every gang, so under a burst the loop takes at most 1/(1+pace)
    of the process and leaves the rest to the watches that feed it."""
    deadlock_grace: float = 10.0
    """Seconds a gang must be partially placed before the deadlock detector looks at it."""
    status_interval: float = 2.0
    """Least seconds between two writes of one Queue's status."""
    status_writes_per_second: float = 10.0
    """Queue status writes the controller sends a second at most, all queues together (the
    queues written longest ago first): at 1,000 queues whose counts all move, one write per
    queue per `status_interval` was 3 writes per admission, competing with the workloads' own
    requests at the apiserver (docs/benchmarks.md, Kueue's scheduler benchmark)."""
    admit_events: bool = True
    """Post an Event for every admission (evictions and failures always get one)."""
    write_concurrency: int = 32
    estimate_interval: float = 5.0
    """Least seconds between two refreshes of the wait-time estimates (in the background;
    0: never estimate)."""
    pin: bool = True
    """Pin each admitted gang's pod template to the nodes the planner chose (off: the
    scheduler may place the pods anywhere they fit, and the plan may not be what runs)."""
    history_limit: int = 100_000
    """Gangs the history (/v1/history) keeps; the oldest go first (admission/history.py)."""
    clog_progress: bool = True
    """Time a clog from when the Job controller started the gang and from its pods' last
    progress (created, bound, ready), not from its admission (policies.lifecycle.check_clog,
    `started` and `advanced`): a gang a busy control plane is still starting is not evicted as
    clogged. Off: from the admission, as Kueue's waitForPodsReady."""
    devices: DeviceMapping = NO_DEVICES
    """The DeviceClasses whose devices muster counts, each as a resource (`--device-class`;
    `policies.devices`); empty: DRA claims are not counted."""
    fail_rejected_after: float = REJECTED_GRACE
    """Seconds a gang must stay rejected (NeverFits, SizeRatioRejected) before it is marked
    Failed (policies.lifecycle.fails_rejected)."""
