"""`muster bench kueue-perf` end to end on a small generator file: its own API-only control
plane, muster, the paced Jobs and the runner that finishes them; it must finish every workload
and print Kueue's figures and muster's costs in one JSON line (no figure is held to a time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster]

TINY = Path(__file__).resolve().parents[1] / "data" / "kueue-generator-tiny.yaml"


def test_documented_bench_kueue_perf_runs_a_small_generator() -> None:
    # On a control plane of its own (etcd and the apiserver only): its `muster run --local`
    # registers the one webhook configuration the session's muster uses.
    done = subprocess.run(
        [
            sys.executable, "-m", "muster.cli", "bench", "kueue-perf",
            "--generator", str(TINY), "--name", f"kperf-ci-{os.getpid()}", "--json",
        ],
        capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout[-2000:]
    figures = json.loads(lines[0])
    # 2 cohorts of 2 queues, 60 workloads each: all created, admitted and finished.
    assert (figures["workloads"], figures["queues"], figures["cohorts"]) == (240, 4, 2)
    assert figures["finished"] == 240
    assert figures["admissions"] >= 240
    assert figures["errors"] == []
    # Kueue's figures: per workload class and per queue class.
    assert {c: f["count"] for c, f in figures["classes"].items()} == {
        "small": 160, "medium": 60, "large": 20,
    }  # fmt: skip
    for f in figures["classes"].values():
        assert f["finished"] == f["count"]
        assert f["avg_time_to_finish_s"] >= f["avg_time_to_admission_s"] >= 0
    assert set(figures["queue_classes"]) == {"cq"}
    for key in ("usage_pct", "min_queue_usage_pct", "mean_queue_usage_pct"):
        assert 0 < figures["queue_classes"]["cq"][key] <= 100, key
    for key in ("wall_s", "generation_s", "create_to_last_finish_s", "evictions"):
        assert figures[key] is not None, key
    # muster's costs: CPU from /proc, API calls from its metrics (one admit PATCH at least).
    assert figures["cpu_s"]["muster"] > 0 and figures["cpu_s"]["kube-apiserver"] > 0
    assert "kube-scheduler" not in figures["cpu_s"]  # the API-only control plane
    assert figures["muster_api_per_workload"]["writes:admit"] >= 1
    assert figures["bench_writes_per_workload"] >= 2  # its create and its finish
    for key in ("muster_cpu_ms_per_workload", "load_avg_1m_start", "load_avg_1m_end"):
        assert figures[key] is not None, key
