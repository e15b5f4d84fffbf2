"""`muster bench plan` runs and prints its figures (no timing assertions)."""

from __future__ import annotations

import json

import pytest

from muster.bench import plan as bench_plan
from policies import plan


def test_bench_plan_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = bench_plan.main(
        ["--pending", "200", "--nodes", "40", "--queues", "10", "--runs", "2", "--json"]
    )
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    for key in (
        "pending",
        "nodes",
        "queues",
        "admitted",
        "plan_ms_median",
        "plan_ms_p90",
        "plan_ms_min",
    ):
        assert key in result
    assert (result["pending"], result["nodes"], result["queues"]) == (200, 40, 10)
    assert 0 < result["admitted"] < 200  # many but not all gangs fit
    assert result["admitted"] + result["waiting"] + result["rejected"] == 200


def test_bench_plan_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        bench_plan.main(["--pending", "50", "--nodes", "20", "--queues", "5", "--runs", "1"]) == 0
    )
    out = capsys.readouterr().out
    assert "plan_ms_median" in out and "admitted" in out


def test_bench_plan_rejects_nonsense(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_plan.main(["--runs", "0"]) == 2
    assert "must be >= 1" in capsys.readouterr().err


def test_synthetic_snapshot_is_deterministic() -> None:
    first = bench_plan.build_snapshot(300, 30, 10, seed=7)
    again = bench_plan.build_snapshot(300, 30, 10, seed=7)
    assert plan(first) == plan(again)
    assert [g.id for g in first.pending] == [g.id for g in again.pending]


def test_controller_cycle_starts_from_what_plan_decides() -> None:
    # The cycle figures time a controller's cache and PlanFeed holding the bench snapshot: its
    # first cycle must decide what plan() decides on the snapshot, or the figure times
    # something else.
    snapshot = bench_plan.build_snapshot(400, 40, 10, seed=3)
    first, syncs, plans, cpu = bench_plan.controller_cycles(snapshot, "drf", 3)
    expected = plan(snapshot)
    assert first.admitted == expected.admitted
    assert dict(first.pending.items()) == dict(expected.pending.items())
    assert first.rejected == expected.rejected
    assert len(syncs) == len(plans) == len(cpu) == 3


def test_bench_plan_reports_the_controller_cycle(capsys: pytest.CaptureFixture[str]) -> None:
    code = bench_plan.main(
        ["--pending", "100", "--nodes", "20", "--queues", "5", "--runs", "2", "--json"]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    for key in (
        "cycle_ms_median",
        "cycle_sync_ms_median",
        "cycle_plan_ms_median",
        "cycle_cpu_ms_median",
    ):
        assert result[key] > 0
    assert result["cycle_admitted_first"] == result["admitted"]
