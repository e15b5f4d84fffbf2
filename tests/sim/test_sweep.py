"""Capacity sweep: SLO parsing, node-group scaling, and the boundary on the blog burst."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from muster.cli import main
from simulator.sweep import parse_objective, parse_sizes, scale_counts


def test_parse_objective() -> None:
    objective = parse_objective("p95_wait<=10m")
    assert (objective.metric, objective.op, objective.value) == ("p95_wait", "<=", 600.0)
    assert objective.holds({"wait_p95_s": 599.0})
    assert not objective.holds({"wait_p95_s": 601.0})
    assert not objective.holds({"wait_p95_s": None})
    assert parse_objective("utilization >= 0.5").value == 0.5
    for bad in ("p95<=10m", "p95_wait=10m", "p95_wait<=soon", "utilization>=x"):
        with pytest.raises(ValueError):
            parse_objective(bad)


def test_parse_sizes() -> None:
    assert parse_sizes("50:400:25")[:3] == [50, 75, 100]
    assert parse_sizes("50:400:25")[-1] == 400
    assert parse_sizes("200,100,100") == [100, 200]
    for bad in ("400:50", "a:b", "0,10", "1:2:0"):
        with pytest.raises(ValueError):
            parse_sizes(bad)


def test_scale_counts_keeps_proportions() -> None:
    assert scale_counts([149], 300) == [300]
    assert scale_counts([32, 8], 20) == [16, 4]
    assert sum(scale_counts([3, 3, 3], 10)) == 10
    assert min(scale_counts([100, 1], 10)) == 1
    with pytest.raises(ValueError):
        scale_counts([1, 1, 1], 2)


def test_sweep_finds_the_boundary_on_the_blog_burst(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    argv = ["sweep", "--nodes", "100,150,200,300", "--slo", "p95_wait<=30m"]
    assert main([*argv, "--parallel", "2", "--out", str(out), "--quiet"]) == 0
    document = json.loads((out / "sweep.json").read_text())
    by_nodes = {row["nodes"]: row for row in document["sizes"]}
    assert set(by_nodes) == {100, 150, 200, 300}
    assert all(row["stuck_gangs"] == 0 for row in by_nodes.values())
    boundary = document["smallest_nodes_meeting_slo"]
    assert boundary is not None
    assert by_nodes[boundary]["wait_p95_s"] <= 1800
    assert all(not row["meets_slo"] for n, row in by_nodes.items() if n < boundary)
    assert (out / "sweep.png").is_file() and (out / "sweep.csv").is_file()


def test_sweep_prints_its_document_as_yaml_or_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    argv = ["sweep", "--nodes", "150,200", "--slo", "p95_wait<=30m", "--parallel", "1"]
    assert main([*argv, "--out", str(tmp_path / "y"), "-o", "yaml"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    written = json.loads((tmp_path / "y" / "sweep.json").read_text())
    assert {k: v for k, v in printed.items() if k != "plot"} == written
    assert main([*argv, "--out", str(tmp_path / "j"), "-o", "json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert as_json["smallest_nodes_meeting_slo"] == written["smallest_nodes_meeting_slo"]
    assert [(r["nodes"], r["wait_p95_s"]) for r in as_json["sizes"]] == [
        (r["nodes"], r["wait_p95_s"]) for r in written["sizes"]
    ]


def test_sweep_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--nodes", "10", "--slo", "p99<=1m"]) == 2
    assert "unknown metric" in capsys.readouterr().err
