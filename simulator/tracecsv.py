"""CSV job lists: a list of gangs (one a row) or a history (the simulator's gangs.csv,
`muster history -o csv`) read as a trace's job groups; each row is checked as a trace's job
group is (`simulator.traceparse.job_group`).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from policies import Gang, PolicyError, fields
from policies.history import format_requests
from simulator.tracedump import pod_sets_document
from simulator.tracemodel import JobGroup, Trace, TraceError
from simulator.traceparse import check, job_group

CSV_COLUMNS = ("submit", "queue", "size", "requests", "runtime")
CSV_OPTIONAL_COLUMNS = (
    "name",
    "min_size",
    "kind",
    "one_pod_per_node",
    "priority",
    "namespace",
    "pod_sets",
)
POD_SETS_COLUMN = "pod_sets"
"""A gang of several pod sets: the trace job's `podSets` list as JSON (the main set without
`count`); `requests` and `one_pod_per_node` are then its main set's. gangs.csv has it last, when
a run has such a gang; `muster history` has no such gang yet."""


def pod_sets_cell(gang: Gang) -> str:
    """The `pod_sets` cell of a gang: empty for a gang of one pod set."""
    if not gang.others:
        return ""
    return json.dumps(pod_sets_document(gang.main, gang.others), separators=(",", ":"))


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
    min_size, kind (Job|MiniCluster|JobSet|PodGroup), one_pod_per_node (true|false), priority,
    namespace, pod_sets (`POD_SETS_COLUMN`).

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
            "runtime": (row["runtime"] or "").strip(),
            "submit": {"at": (row["submit"] or "").strip()},
        }
        _csv_optional(item, row, path, number)
        groups.append(_csv_group(item, row, path, number, scale))
    return HistoryJobs(tuple(groups))


def _csv_optional(item: dict[str, Any], row: Mapping[str, str], path: Path, number: int) -> None:
    """The columns both formats share besides their own: requests, pod_sets,
    one_pod_per_node, min_size, kind, priority, namespace."""
    if (row.get(POD_SETS_COLUMN) or "").strip():
        item["podSets"] = _csv_pod_sets(row[POD_SETS_COLUMN], path, number)
    else:
        item["podRequests"] = _csv_requests(row.get("requests"), path, number)
        flag = _csv_flag(row, path, number)
        if flag is not None:
            item["onePodPerNode"] = flag
    if (row.get("min_size") or "").strip():
        item["minSize"] = _csv_int(row["min_size"], path, number, "min_size")
    if (row.get("kind") or "").strip():
        item["kind"] = row["kind"].strip()
    if (row.get("priority") or "").strip():
        item["priority"] = _csv_int(row["priority"], path, number, "priority")
    if (row.get("namespace") or "").strip():
        item["namespace"] = row["namespace"].strip()


def _csv_flag(row: Mapping[str, str], path: Path, number: int) -> bool | None:
    """The one_pod_per_node cell, None if empty."""
    flag = (row.get("one_pod_per_node") or "").strip().lower()
    if not flag:
        return None
    if flag not in ("true", "false"):
        raise TraceError(f"{path}:{number}: one_pod_per_node: {flag!r} is not true/false")
    return flag == "true"


def _csv_pod_sets(cell: str, path: Path, number: int) -> object:
    try:
        return json.loads(cell)
    except json.JSONDecodeError as exc:
        raise TraceError(
            f"{path}:{number}: {POD_SETS_COLUMN}: not JSON ({exc.msg} at character {exc.pos}); "
            'write the trace\'s podSets list, e.g. [{"name":"worker","podRequests":{"cpu":"4"}}]'
        ) from None


def _csv_group(
    item: dict[str, Any], row: Mapping[str, str], path: Path, number: int, scale: float
) -> JobGroup:
    try:
        group = job_group(item, number - 2)
    except TraceError as exc:
        raise TraceError(f"{path}:{number}: {exc}") from None
    if "podSets" in item:
        _csv_main_agrees(group, row, path, number)
    if scale == 1.0:
        return group
    return replace(group, submit_at=group.submit_at * scale, runtime=group.runtime * scale)


def _csv_main_agrees(group: JobGroup, row: Mapping[str, str], path: Path, number: int) -> None:
    """A row with pod sets: its requests and one_pod_per_node, when given, are its main set's
    (gangs.csv writes them so); a cell that says otherwise is an error, not ignored."""
    main = f"the main pod set {group.set_name}'s in {POD_SETS_COLUMN}"
    if (row.get("requests") or "").strip():
        where = f"{path}:{number}: requests"
        try:
            requests = fields.resources(_csv_requests(row["requests"], path, number), where)
        except PolicyError as exc:
            raise TraceError(str(exc)) from None
        if requests != group.pod_requests:
            raise TraceError(
                f"{where}: {row['requests'].strip()!r} is not "
                f"{format_requests(group.pod_requests)!r}, {main}: make them agree, or leave "
                "requests empty"
            )
    flag = _csv_flag(row, path, number)
    if flag is not None and flag != group.one_pod_per_node:
        raise TraceError(
            f"{path}:{number}: one_pod_per_node: {str(flag).lower()} is not "
            f"{str(group.one_pod_per_node).lower()}, {main}: make them agree, or leave it empty"
        )


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
            # Kept above zero: a gang the cluster ended at once (a failure) still runs.
            "runtime": max(runtime, 0.001),
            "submit": {"at": at - origin},
        }
        _csv_optional(item, {**row, "namespace": namespace or "default"}, path, number)
        if item.get("minSize") == item["size"]:
            del item["minSize"]
        groups.append(_csv_group(item, row, path, number, scale))
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
        topology=trace.topology,
        slowdown=trace.slowdown,
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
