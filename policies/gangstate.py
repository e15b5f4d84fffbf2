"""The gang state vocabulary: where a gang stands, in the words `muster status`, `muster explain`
and the status service print. One vocabulary for the controller (`admission.gangs.JobRecord.state`)
and the simulators (`simulator.records.GangRecord.state`).

The controller's gangs are Pending, BackingOff, Admitted, Running, Finished or Failed; a
simulated gang is also Waiting (not submitted yet) or Stuck (unfinished when the run ended).
The simulator's gangs.csv spells the states its own way (`CSV_NAMES`), unchanged since its
first release so that saved results still compare.
"""

from __future__ import annotations

from typing import Final, Literal

GangState = Literal[
    "Waiting", "Pending", "BackingOff", "Admitted", "Running", "Finished", "Failed", "Stuck"
]

WAITING: Final = "Waiting"
"""Simulator only: not submitted yet."""
PENDING: Final = "Pending"
"""Submitted, waiting for admission (without gang admission: for its first pod's node)."""
BACKING_OFF: Final = "BackingOff"
"""Evicted, waiting out the requeue backoff."""
ADMITTED: Final = "Admitted"
"""Admitted (unsuspended; without gang admission: some pods bound), fewer than min pods
running or ready."""
RUNNING: Final = "Running"
"""At least min pods running: the gang is doing its work."""
FINISHED: Final = "Finished"
FAILED: Final = "Failed"
"""Rejected by the planner, past its runtime limit, or evicted past the backoff limit."""
STUCK: Final = "Stuck"
"""Simulator only: unfinished when the run ended."""

STATES: Final[tuple[GangState, ...]] = (
    WAITING,
    PENDING,
    BACKING_OFF,
    ADMITTED,
    RUNNING,
    FINISHED,
    FAILED,
    STUCK,
)

CSV_NAMES: Final[dict[GangState, str]] = {
    WAITING: "waiting",
    PENDING: "pending",
    BACKING_OFF: "backoff",
    ADMITTED: "holding",
    RUNNING: "running",
    FINISHED: "finished",
    FAILED: "failed",
    STUCK: "stuck",
}
"""The `state` column of the simulator's gangs.csv."""
