"""A gang's history row: what happened to one gang from submission to its end, in one format.

The simulator writes these rows as `gangs.csv` (times in trace seconds from the first
submission) and the controller serves them for the gangs it saw finish or fail as
`/v1/history` and `muster history` (times in wall-clock seconds since the epoch). Both have the
same columns, and a file of either feeds `muster sim --jobs-csv` back (`simulator.trace`): a real
cluster's history replays in the simulator. Pure: stdlib and `policies` only.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from policies.resources import format_quantity

COLUMNS: Final = (
    "engine",
    "gang",
    "group",
    "queue",
    "kind",
    "size",
    "min_size",
    "submitted_s",
    "admitted_s",
    "started_s",
    "finished_s",
    "wait_s",
    "evictions",
    "preemptions",
    "clogs",
    "admitted_size",
    "state",
    "reason",
    "requests",
    "runtime_s",
    "one_pod_per_node",
    "priority",
)
"""The columns of gangs.csv and of `muster history -o csv`, in order."""

TIME_COLUMNS: Final = ("submitted_s", "admitted_s", "started_s", "finished_s")


def format_requests(requests: Mapping[str, int]) -> str:
    """One pod's requests as a CSV cell: `cpu=6;memory=20Gi` (sorted, zero amounts left out)."""
    return ";".join(
        f"{name}={format_quantity(name, amount)}"
        for name, amount in sorted(requests.items())
        if amount
    )


def format_seconds(value: float | None) -> str:
    """A time or duration cell: millisecond precision, no trailing zeros; empty = never."""
    return "" if value is None else f"{value:.3f}".rstrip("0").rstrip(".")


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """One gang's history. Times are seconds on one clock: trace seconds in the simulator,
    wall-clock seconds since the epoch in the controller; None = never happened."""

    gang: str
    """namespace/name."""
    queue: str
    kind: str
    size: int
    min_size: int
    submitted: float
    admitted: float | None
    """The admission in force when the gang ended (the simulator: its first admission)."""
    started: float | None
    """When the gang had its minimum of pods running (ready) after that admission."""
    finished: float | None
    state: str
    """finished, failed (or, in the simulator, stuck)."""
    requests: Mapping[str, int]
    """One pod's requests."""
    evictions: int = 0
    preemptions: int = 0
    clogs: int | None = None
    """None: not counted (the controller counts every eviction in `evictions`)."""
    admitted_size: int | None = None
    reason: str = ""
    one_pod_per_node: bool = False
    priority: int = 0
    engine: str = "muster"
    group: str = ""
    runtime: float | None = None
    """Seconds it ran; None = finished − started."""

    @property
    def wait(self) -> float | None:
        return None if self.started is None else self.started - self.submitted

    @property
    def run_seconds(self) -> float | None:
        if self.runtime is not None:
            return self.runtime
        if self.started is None or self.finished is None:
            return None
        return max(0.0, self.finished - self.started)

    def as_dict(self) -> dict[str, Any]:
        """The row keyed by column (JSON: numbers as numbers, None as null)."""
        return {
            "engine": self.engine,
            "gang": self.gang,
            "group": self.group,
            "queue": self.queue,
            "kind": self.kind,
            "size": self.size,
            "min_size": self.min_size,
            "submitted_s": _round(self.submitted),
            "admitted_s": _round(self.admitted),
            "started_s": _round(self.started),
            "finished_s": _round(self.finished),
            "wait_s": _round(self.wait),
            "evictions": self.evictions,
            "preemptions": self.preemptions,
            "clogs": self.clogs,
            "admitted_size": self.admitted_size,
            "state": self.state,
            "reason": self.reason,
            "requests": format_requests(self.requests),
            "runtime_s": _round(self.run_seconds),
            "one_pod_per_node": self.one_pod_per_node,
            "priority": self.priority,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def cells(row: Mapping[str, Any]) -> list[str]:
    """A row (as `HistoryRow.as_dict` gives it) as CSV cells in `COLUMNS` order."""
    out: list[str] = []
    for column in COLUMNS:
        value = row.get(column)
        if value is None:
            out.append("")
        elif isinstance(value, bool):
            out.append("true" if value else "false")
        elif isinstance(value, float):
            out.append(format_seconds(value))
        else:
            out.append(str(value))
    return out


def write_csv(rows: Iterable[Mapping[str, Any]], handle: Any) -> None:
    """Write the header and `rows` (dicts keyed by column) to a text handle."""
    writer = csv.writer(handle)
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow(cells(row))


def to_csv(rows: Iterable[Mapping[str, Any]]) -> str:
    buffer = io.StringIO()
    write_csv(rows, buffer)
    return buffer.getvalue()
