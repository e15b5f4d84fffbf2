"""`muster bench pipeline`'s pure parts: the burst, the figures of a side, the JSON line, and the
check that a round measured what it says (no cluster; the cluster test runs the command)."""

from __future__ import annotations

import argparse

import pytest

from muster.bench import pipeline
from muster.bench.admit import Created
from muster.bench.pipeline import Bench, BurstJob, Round


def test_the_burst_is_the_same_for_a_seed_and_keeps_to_its_bounds() -> None:
    jobs = pipeline.burst(500, 8, (1, 5), seed=3)
    assert jobs == pipeline.burst(500, 8, (1, 5), seed=3)
    assert jobs != pipeline.burst(500, 8, (1, 5), seed=4)
    assert {job.pods for job in jobs} == set(range(1, 9))
    assert {job.runtime_s for job in jobs} == set(range(1, 6))
    assert len({job.name for job in jobs}) == 500


def test_a_burst_job_is_unsuspended_labelled_and_completes_on_kwok() -> None:
    body = BurstJob("p-00001", 3, 4).body("q")
    spec = body["spec"]
    assert body["metadata"]["labels"] == {"muster.dev/queue": "q"}
    assert (spec["parallelism"], spec["completions"], spec["suspend"]) == (3, 3, False)
    assert spec["template"]["metadata"]["annotations"] == {"muster.dev/runtime": "4s"}


@pytest.mark.parametrize(("text", "bounds"), [("1-5", (1, 5)), ("3", (3, 3)), ("2-2", (2, 2))])
def test_runtime_range(text: str, bounds: tuple[int, int]) -> None:
    assert pipeline.parse_runtime(text) == bounds


@pytest.mark.parametrize("text", ["0-3", "5-1", "x", "1-"])
def test_runtime_range_refused(text: str) -> None:
    with pytest.raises(ValueError):
        pipeline.parse_runtime(text)


def _round(number: int, side: pipeline.Side, rate: float, to_running: list[float]) -> Round:
    cpu = {"kube-apiserver": 10.0 * number, "bench-client": 2.0}
    if side == "b":
        cpu |= {"muster": 3.0, "muster-webhook": 1.0}
    result = Round(number, side, f"ns-{number}{side}", 1.0, completed=100, wall_s=100 / rate)
    if side == "b":
        result.api = {"requests": 150.0 * number, "writes": 100.0 * number, "writes:admit": 100.0}
    result.to_running = to_running
    result.cpu_s = cpu
    return result


def test_a_sides_figures_pool_its_jobs_and_average_its_rounds() -> None:
    rounds = [_round(1, "b", 10.0, [1.0] * 100), _round(2, "b", 20.0, [2.0] * 99 + [90.0])]
    figures = pipeline.side_figures(rounds)
    assert figures["jobs_per_s"] == 15.0
    assert figures["create_to_running_p50_s"] == 1.5
    assert figures["create_to_running_p99_s"] == 2.0  # over 200 Jobs, the 200th is above it
    assert figures["cpu_s"]["kube-apiserver"] == 15.0
    # The client is the users' side: not in the cluster's CPU, nor in muster's share.
    assert figures["cpu_s_cluster"] == 19.0
    assert figures["muster_cpu_share"] == round(4 / 19, 3)
    # muster's API calls per Job: summed over the rounds, over all their Jobs.
    assert figures["muster_api_per_job"] == {"requests": 2.25, "writes": 1.5, "writes:admit": 1.0}
    assert rounds[1].figures()["muster_api_per_job"]["writes"] == 2.0


def test_the_json_line_compares_b_with_a() -> None:
    rounds = [
        _round(1, "a", 10.0, [1.0] * 100),
        _round(1, "b", 9.0, [1.2] * 100),
        _round(2, "a", 10.0, [1.0] * 100),
        _round(2, "b", 9.0, [1.2] * 100),
    ]
    args = argparse.Namespace(nodes=10)
    bench = Bench(args, None, None, None, [BurstJob("p", 1, 1)] * 100, print)  # type: ignore[arg-type]
    line = pipeline.summary(bench, rounds, 0.5)
    assert line["ratio"] == 0.9 and line["p99_vs_a"] == 1.2
    assert line["goal_met"] == {"ratio": False, "p99": False}
    assert [(r["round"], r["side"]) for r in line["rounds"]] == [
        (1, "a"),
        (1, "b"),
        (2, "a"),
        (2, "b"),
    ]
    assert "muster_cpu_share" not in line["a"] and line["b"]["muster_cpu_share"] > 0
    assert "muster_api_per_job" not in line["a"] and line["b"]["muster_api_per_job"]
    printed: list[str] = []
    pipeline.print_table(line, printed.append)
    assert any(row.startswith("Jobs completed/s") for row in printed)


def test_a_round_whose_jobs_the_webhook_did_not_stamp_as_expected_is_refused() -> None:
    stamped = {"muster.dev/submitted": "2026-11-25T16:00:00.000000001Z#1"}
    created = {"p-1": Created(0.0, stamped), "p-2": Created(0.0, {}), "p-3": Created(0.0, None)}
    for side in pipeline.SIDES:
        with pytest.raises(RuntimeError, match="1 of 2 Jobs stamped"):
            pipeline._check_stamps(Round(1, side, "ns", 0.0), created)
    pipeline._check_stamps(Round(1, "a", "ns", 0.0), {"p-2": created["p-2"]})
    pipeline._check_stamps(Round(1, "b", "ns", 0.0), {"p-1": created["p-1"]})
