"""Simulator traces: the YAML/JSON trace format, CSV job-list import, and conversion to the
`policies` model (nodes, queue tree, gangs). This module loads trace files and names the
whole; the parts are the model (`simulator.tracemodel`), the reader and its checks
(`simulator.traceparse`), CSV job lists (`simulator.tracecsv`) and writing
(`simulator.tracedump`).

A trace is validated completely while it loads: a bad trace raises `TraceError` naming the
job group (or node group, or queue) and the field, and nothing runs. The format is documented
in docs/simulator.md; the shipped examples live in `simulator/traces/`.
"""

from __future__ import annotations

import json
from importlib import resources as importlib_resources
from pathlib import Path

import yaml

from simulator.tracecsv import (
    CSV_COLUMNS,
    CSV_OPTIONAL_COLUMNS,
    HISTORY_REQUIRED,
    POD_SETS_COLUMN,
    HistoryJobs,
    load_jobs_csv,
    pod_sets_cell,
    read_jobs_csv,
    with_jobs,
)
from simulator.tracedump import dump_yaml, pod_sets_document
from simulator.tracemodel import (
    DEFAULT_POD_START_DELAY,
    DEFAULT_TRACE,
    JobGroup,
    Kind,
    NodeGroup,
    QueueSpec,
    Strategy,
    SubmittedGang,
    Trace,
    TraceError,
    expand,
)
from simulator.traceparse import check, from_dict, parse_duration

__all__ = [
    "CSV_COLUMNS",
    "CSV_OPTIONAL_COLUMNS",
    "DEFAULT_POD_START_DELAY",
    "DEFAULT_TRACE",
    "HISTORY_REQUIRED",
    "POD_SETS_COLUMN",
    "HistoryJobs",
    "JobGroup",
    "Kind",
    "NodeGroup",
    "QueueSpec",
    "Strategy",
    "SubmittedGang",
    "Trace",
    "TraceError",
    "check",
    "dump_yaml",
    "expand",
    "from_dict",
    "load",
    "load_jobs_csv",
    "loads",
    "parse_duration",
    "pod_sets_cell",
    "pod_sets_document",
    "read_jobs_csv",
    "resolve",
    "shipped_traces",
    "with_jobs",
]


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
