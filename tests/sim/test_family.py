"""Trace families (simulator/family.py) and their replay table (simulator/familyrun.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from muster import cli
from simulator.family import ROLES, FamilySpec, family_document, parse_range
from simulator.familyrun import P95_SLACK, json_line, judge, seed_of, table
from simulator.trace import from_dict

SMALL = FamilySpec(nodes=(8, 12), gpu_nodes=(2, 3), window=(300.0, 400.0), load=(0.5, 0.7))


def _roles(document: dict[str, Any]) -> list[str]:
    return [job["name"].split("-")[2] for job in document["jobs"]]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_a_family_trace_is_valid_deterministic_and_has_a_flood_and_big_gangs(seed: int) -> None:
    document = family_document(SMALL, seed)
    assert document == family_document(SMALL, seed)
    trace = from_dict(document, source="test", default_name=document["name"])
    assert trace.name == f"family-{seed}"
    kinds = set(_roles(document))
    assert {"task", "sim"} <= kinds  # a flooding queue and a queue of big gangs, always
    cpu_nodes = document["cluster"]["nodes"][0]["count"]
    for job in document["jobs"]:
        if "-sim-" in job["name"]:
            assert job["size"] <= round(0.6 * cpu_nodes)
    leaves = [q for q in document["queues"] if q.get("parent") == "org"]
    assert 3 <= len(leaves) <= 4


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_nominal_quotas_split_every_node_the_queues_can_use(seed: int) -> None:
    # The cohort holds no more than its queues' nominal quotas: quotas that split only the CPU
    # nodes left a GPU pool's CPU, usable by every queue's jobs, idle by quota (seed 21).
    document = family_document(FamilySpec(quota_probability=1.0), seed)
    groups = {group["name"]: group for group in document["cluster"]["nodes"]}
    leaves = [q for q in document["queues"] if q.get("parent") == "org"]
    usable = groups["cpu"]["count"] * 32
    gpu = groups.get("gpu")
    gpu_jobs = any("-gpu-" in job["name"] for job in document["jobs"])
    if gpu is not None and ("taints" not in gpu or gpu_jobs):
        usable += gpu["count"] * 48
    assert sum(int(q["nominal"]["cpu"]) for q in leaves) == usable
    # Split by weight: each within one core of its part.
    total = sum(q["weight"] for q in leaves)
    for queue in leaves:
        assert abs(int(queue["nominal"]["cpu"]) - usable * queue["weight"] / total) < 1


def test_seeds_draw_different_traces() -> None:
    assert family_document(SMALL, 1) != family_document(SMALL, 2)
    assert set(ROLES) >= {"flood", "big"}


def test_half_life_is_set_on_every_queue_only_when_asked() -> None:
    plain = family_document(SMALL, 3)
    assert all("fairSharing" not in q for q in plain["queues"])
    decayed = family_document(FamilySpec(**{**SMALL.as_dict(), "half_life": "10m"}), 3)
    leaves = [q for q in decayed["queues"] if q.get("parent")]
    assert all(q["fairSharing"] == {"halfLife": "10m"} for q in leaves)
    # The same draw otherwise: the option changes nothing but the queues' field.
    assert decayed["jobs"] == plain["jobs"]


def test_borrow_within_cohort_goes_only_to_queues_that_reclaim() -> None:
    spec = FamilySpec(**{**SMALL.as_dict(), "borrow_within_cohort": True})
    seen = 0
    for seed in range(1, 30):
        plain, borrow = family_document(SMALL, seed), family_document(spec, seed)
        assert borrow["jobs"] == plain["jobs"]  # the same draw otherwise
        for before, after in zip(plain["queues"], borrow["queues"], strict=True):
            rules = before.get("preemption") or {}
            if "reclaimWithinCohort" in rules:
                seen += 1
                assert after["preemption"] == {
                    **rules,
                    "borrowWithinCohort": {"policy": "LowerPriority"},
                }
            else:
                assert after == before
    assert seen  # some queue of these seeds reclaims
    from_dict(family_document(spec, 4), source="test", default_name="family-4")


def test_parse_range() -> None:
    assert parse_range("1-50", "--seed-range") == (1, 50)
    assert parse_range("7", "--seed-range") == (7, 7)
    for bad in ("x", "5-1", "-1", "1-"):
        with pytest.raises(ValueError, match="--seed-range"):
            parse_range(bad, "--seed-range")


def _summary(name: str, **figures: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "trace": name,
        "gangs": 10,
        "clogs": 0,
        "stuck_gangs": 0,
        "failed": 0,
        "makespan_s": 100.0,
        "utilization_mean": 0.5,
        "wait_mean_s": 10.0,
        "wait_p50_s": 5.0,
        "wait_p95_s": 20.0,
        "wait_max_s": 30.0,
        "fairness_error": 0.01,
        "queues": {"a": {"wait_p95_s": 20.0}, "b": {"wait_p95_s": 20.0}},
    }
    base.update(figures)
    return base


def test_judge_counts_traces_where_muster_is_at_least_as_good_and_names_the_worst() -> None:
    results = [
        (_summary("family-1", clogs=3), _summary("family-1")),
        (
            _summary("family-2"),
            _summary(
                "family-2",
                utilization_mean=0.4,
                queues={"a": {"wait_p95_s": 21.0}, "b": {"wait_p95_s": 40.0}},
            ),
        ),
        # none fails a gang: its makespan is not compared
        (_summary("family-3", failed=1, makespan_s=50.0), _summary("family-3")),
    ]
    report = judge(results)
    rows = {v.row.key: v for v in report.verdicts}
    assert (rows["clogs"].good, rows["clogs"].compared) == (3, 3)
    assert (rows["utilization_mean"].good, rows["utilization_mean"].compared) == (2, 3)
    assert rows["utilization_mean"].worst is not None
    assert rows["utilization_mean"].worst[1] == "2"
    assert rows["makespan_s"].compared == 2
    # queue pairs: 21 within 10% of 20, 40 is not
    assert (report.pairs, report.pairs_good) == (6, 5)
    assert report.worst_pair is not None and report.worst_pair[1:3] == ("2", "b")
    assert report.worst_pair[0] > P95_SLACK
    rows_by_key = {v.row.key: v for v in report.verdicts}
    assert rows_by_key["utilization_common"].compared == 0  # none of these summaries has it
    line = json_line(report, {"traces": 3})
    assert line["rows"]["utilization_mean"]["worst_seed"] == "2"
    assert line["queue_p95_pairs"] == 6
    shown = {line[0]: line[1] for line in table(report)}
    assert shown["queue p95 within 10% (pairs)"] == "5/6"
    assert shown["queue p95 within 10%, every gang (pairs)"] == "0/0"  # no summary has it
    assert seed_of("family-12") == "12"


def test_family_commands_write_traces_and_replay_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "family"
    words = ["trace", "family", "--seed-range", "3-4", "--nodes", "8-10", "--out", str(folder)]
    assert cli.main(words) == 0
    assert sorted(p.name for p in folder.glob("*.yaml")) == ["family-3.yaml", "family-4.yaml"]
    capsys.readouterr()
    out = tmp_path / "out"
    code = cli.main(
        ["sim", "--family", str(folder), "--parallel", "1", "--quiet", "--json", "--out", str(out)]
    )
    assert code == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["traces"] == 2
    assert line["rows"]["clogs"]["compared"] == 2
    document = json.loads((out / "family.json").read_text())
    assert [t["seed"] for t in document["traces"]] == ["3", "4"]
    assert (out / "family.csv").read_text().count("\n") == 3


def test_family_refuses_a_trace_beside_it(tmp_path: Path) -> None:
    assert cli.main(["sim", "two-queues", "--family", str(tmp_path)]) == 2
    assert cli.main(["sim", "--family", str(tmp_path / "missing")]) == 2


def test_the_summary_table_has_a_wait_row_per_queue() -> None:
    from simulator.report import queue_rows

    summaries: dict[str, dict[str, Any]] = {
        "none": {"queues": {"a": {"wait_p50_s": 1.0, "wait_p95_s": 2500.4, "wait_max_s": None}}},
        "muster": {"queues": {"a": {"wait_p50_s": 2.0, "wait_p95_s": 3.0, "wait_max_s": 4.0}}},
    }
    assert queue_rows(summaries) == [["a wait p50/p95/max (s)", "1 / 2,500 / –", "2 / 3 / 4"]]
    summaries["none"]["queues"]["a"]["over_fair_share"] = 0.2
    summaries["muster"]["queues"]["a"]["over_fair_share"] = 0.0
    assert queue_rows(summaries)[1] == ["a above its fair share (mean)", "0.200", "0.000"]


def test_utilization_over_the_same_window_is_judged_resource_by_resource() -> None:
    even = {"cpu": 0.5, "nvidia.com/gpu": 0.5}
    results = [
        (
            _summary("family-1", utilization_common=even),
            _summary("family-1", utilization_common=even),
        ),
        (
            _summary("family-2", utilization_common=even),
            _summary("family-2", utilization_common={"cpu": 0.9, "nvidia.com/gpu": 0.4}),
        ),
    ]
    report = judge(results)
    row = next(v for v in report.verdicts if v.row.key == "utilization_common")
    assert (row.good, row.compared) == (1, 2)  # more CPU does not make up for fewer GPUs
    shown = next(line for line in table(report) if line[0].startswith("utilization, same"))
    assert shown[2] == "seed 2 nvidia.com/gpu: 0.500 -> 0.400"
    fairness = next(line for line in table(report) if line[0].startswith("fairness error <="))
    assert fairness[1] == "2/2"


def test_queue_pairs_by_every_gang_and_by_queues_none_did_not_favour() -> None:
    # none failed a's gangs that waited longest: its started-only p95 is 20 s, every gang's
    # 200 s; muster's 30 s is 50% worse than the first and better than the second.
    none_queues = {
        "a": {"wait_p95_s": 20.0, "wait_p95_all_s": 200.0, "over_fair_share": 0.01},
        # none ran b 0.2 above its fair share: muster's longer wait there is not counted in
        # the pairs of queues none did not favour
        "b": {"wait_p95_s": 20.0, "wait_p95_all_s": 20.0, "over_fair_share": 0.2},
    }
    muster_queues = {
        "a": {"wait_p95_s": 30.0, "wait_p95_all_s": 30.0, "over_fair_share": 0.0},
        "b": {"wait_p95_s": 90.0, "wait_p95_all_s": 90.0, "over_fair_share": 0.0},
    }
    results = [
        (
            _summary("family-1", queues=none_queues, fairness_error_by_resource=0.01),
            _summary("family-1", queues=muster_queues, fairness_error_by_resource=0.07),
        )
    ]
    report = judge(results)
    assert (report.pairs, report.pairs_good) == (2, 0)
    assert (report.pairs_all, report.pairs_all_good) == (2, 1)
    assert (report.pairs_unfavoured, report.pairs_unfavoured_good) == (1, 1)
    assert (report.fair_good, report.fair_by_resource_good) == (1, 0)
    line = json_line(report, {"traces": 1})
    assert (line["queue_p95_all_within"], line["queue_p95_all_pairs"]) == (1, 2)
    assert (line["queue_p95_unfavoured_within"], line["queue_p95_unfavoured_pairs"]) == (1, 1)
    assert line["fairness_by_resource_within_goal"] == 0
