"""`muster bench estimate` and `muster bench status-estimate` run at tiny size and print their
figures and one JSON line (no timing assertions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from muster.bench import estimate as bench_estimate
from muster.bench import status_estimate as bench_status_estimate

TRACE = str(Path(__file__).resolve().parents[2] / "simulator/traces/two-queues.yaml")


def test_bench_estimate_scores_every_asked_gang(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_estimate.main([TRACE, "--deadline-factor", "1.5", "--limit", "30", "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    figures = json.loads(lines[0])
    assert figures["asked"] == 30
    assert figures["estimated"] + figures["unknown"] + figures["never_started"] == 30
    # Every job has a deadline: nothing is unknown.
    assert figures["unknown"] == 0
    assert figures["error_s_median"] is not None


def test_bench_estimate_without_deadlines_admits_unknowns(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench_estimate.main([TRACE, "--limit", "30"]) == 0
    out = capsys.readouterr().out
    figures = json.loads(out.splitlines()[-1])
    assert figures["unknown"] > 0  # no deadline, nothing finished yet: no number invented
    assert "absolute error" in out


def test_bench_estimate_asks_again_as_time_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_estimate.main([TRACE, "--limit", "5", "--ask-every", "600", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["later_asked"] > 0
    assert figures["later_estimated"] + figures["later_unknown"] == figures["later_asked"]


def test_bench_estimate_rejects_a_deadline_below_the_runtime(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench_estimate.main([TRACE, "--deadline-factor", "0.5"]) == 2
    assert "--deadline-factor" in capsys.readouterr().err


def test_bench_status_estimate_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--pending", "40", "--running", "10", "--finished", "10", "--nodes", "20"]
    assert bench_status_estimate.main([*argv, "--requests", "20", "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    figures = json.loads(lines[0])
    assert figures["estimated"] + figures["unknown"] == 40
    for key in ("idle_ms_p99", "refreshing_ms_p99", "refresh_s"):
        assert figures[key] >= 0
