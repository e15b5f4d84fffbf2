"""Engine behaviour on small crafted traces and the blog-burst acceptance."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from muster.cli import main
from simulator.engine import FAILED, FINISHED, STUCK, EngineConfig, simulate
from simulator.report import summarize
from simulator.trace import Trace, from_dict, load


def tiny(jobs: list[dict[str, Any]], nodes: int = 6, **queue: Any) -> Trace:
    return from_dict(
        {
            "name": "tiny",
            "cluster": {"nodes": [{"count": nodes, "allocatable": {"cpu": "4"}}]},
            "queues": [{"name": "q", "clogTimeout": "60s", "sizeRatio": None, **queue}],
            "jobs": jobs,
        }
    )


def gang(name: str, size: int, **fields: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "name": name,
        "queue": "q",
        "size": size,
        "podRequests": {"cpu": "4"},
        "runtime": "100s",
        "onePodPerNode": True,
    }
    job.update(fields)
    return job


def two_gangs_of_four() -> Trace:
    # Two 4-pod gangs submitted together on 6 one-pod nodes: either fits alone, not both.
    return tiny([gang("a", 4), gang("b", 4)])


def test_none_reproduces_a_clog() -> None:
    result = simulate(two_gangs_of_four(), EngineConfig(admission="none", check=True))
    summary = summarize(result)
    # Pods interleave (1 of a, 1 of b, 2 of a, 2 of b): each gang holds 3 nodes, needs 4.
    assert summary["stuck_gangs"] == 2
    assert summary["finished"] == 0
    assert summary["clogs"] == 2
    assert summary["makespan_s"] is None
    assert all(r.bound_pods == 3 and r.reason.startswith("Clogged") for r in result.gangs)


def test_muster_runs_the_same_gangs_one_after_the_other() -> None:
    result = simulate(two_gangs_of_four(), EngineConfig(admission="muster", check=True))
    summary = summarize(result)
    assert summary["stuck_gangs"] == 0 and summary["finished"] == 2
    assert summary["clogs"] == 0 and summary["evictions"] == 0
    first, second = sorted(result.gangs, key=lambda r: r.started or 0)
    assert first.started == 2.0  # the default pod start delay
    assert first.finished == 102.0
    assert second.first_admitted == 102.0
    assert second.finished == 204.0
    assert summary["makespan_s"] == 204.0


def test_quota_only_queue_clogs_and_is_evicted_with_backoff() -> None:
    # nodeFit: false admits on quota alone (like Kueue); the pods then meet the nodes.
    # A 4-pod gang can never get 4 nodes while "hog" holds 3 of 6 for a long time.
    trace = tiny(
        [
            gang("hog", 3, runtime="10000s"),
            gang("big", 4, submit={"at": "1s"}),
        ],
        nodeFit=False,
        backoff={"base": "10s", "max": "40s", "limit": 2},
    )
    result = simulate(trace, EngineConfig(admission="muster", check=True))
    big = next(r for r in result.gangs if r.group == "big")
    assert big.state == FAILED
    assert big.evictions == 3 and big.clogs == 3
    # The controller's words (policies.lifecycle.Eviction.message).
    assert big.reason == (
        "evicted (Clogged): 3 of at least 4 pods ready after 1m (clog timeout 1m); "
        "2 evictions before: failed"
    )
    evictions = [i.time for i in result.incidents if i.kind == "evict"]
    # Admitted at 1 s, clogged at 61 s, requeued after 10 s, 20 s: exponential backoff.
    assert evictions == [61.0, 131.0]
    hog = next(r for r in result.gangs if r.group == "hog")
    assert hog.state == FINISHED


def test_never_fitting_gang_fails_under_muster_and_is_stuck_under_none() -> None:
    trace = tiny([gang("wide", 8), gang("ok", 2)])
    muster = simulate(trace, EngineConfig(admission="muster", check=True))
    states = {r.group: r.state for r in muster.gangs}
    assert states == {"wide": FAILED, "ok": FINISHED}
    assert next(r for r in muster.gangs if r.group == "wide").reason.startswith("NeverFits")
    none = simulate(trace, EngineConfig(admission="none", check=True))
    assert {r.group: r.state for r in none.gangs}["wide"] == STUCK


def test_horizon_reports_unfinished_as_stuck() -> None:
    trace = tiny([gang("a", 2, runtime="1h")])
    result = simulate(trace, EngineConfig(admission="muster", horizon=600.0))
    assert [r.state for r in result.gangs] == [STUCK]
    assert result.horizon_reached and result.end == 600.0


def test_admit_interval_coalesces_decisions() -> None:
    trace = tiny([gang(f"g{i}", 1, submit={"at": f"{i}s"}) for i in range(10)])
    every = simulate(trace, EngineConfig(admission="muster"))
    cycled = simulate(trace, EngineConfig(admission="muster", admit_interval=5.0))
    assert cycled.plan_calls < every.plan_calls
    assert all(r.first_admitted is not None and r.first_admitted % 5 == 0 for r in cycled.gangs)


def test_blog_burst_none_clogs_and_muster_completes(tmp_path: Path) -> None:
    """The README's main job: both engines on the shipped blog burst, one report."""
    out = tmp_path / "out"
    assert main(["sim", "--out", str(out), "--quiet"]) == 0
    for name in (
        "summary.json",
        "gangs.csv",
        "queues.csv",
        "report.html",
        "utilization.png",
        "fairness.png",
    ):
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    none, muster = summary["none"], summary["muster"]
    assert set(muster["utilization_by_resource"]) == {"cpu", "memory"}
    assert muster["utilization_by_resource"]["cpu"] == muster["utilization_mean"]
    assert none["stuck_gangs"] > 0 and none["clogs"] > 0
    assert muster["stuck_gangs"] == 0
    assert muster["finished"] == summary["trace"]["gangs"] == 106
    assert muster["makespan_s"] > 0
    for key in ("makespan_s", "utilization_mean", "fairness_error", "admitted", "evictions"):
        assert key in muster
    for key in ("wait_p50_s", "wait_p95_s", "wait_max_s"):
        assert key in muster["queues"]["lammps"]
    rows = (out / "gangs.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 106
    report = (out / "report.html").read_text()
    assert "none (pod-level scheduler)" in report and "muster (gang admission)" in report


def test_blog_burst_acceptance_holds_for_several_seeds() -> None:
    trace = load()
    for seed in range(3):
        none = summarize(simulate(trace, EngineConfig(admission="none", seed=seed)))
        muster = summarize(simulate(trace, EngineConfig(admission="muster", seed=seed)))
        assert none["stuck_gangs"] > 0
        assert muster["stuck_gangs"] == 0 and muster["finished"] == 106


def test_every_shipped_trace_runs_under_both_engines() -> None:
    from simulator.trace import shipped_traces

    for name in shipped_traces():
        trace = load(name)
        for admission in ("none", "muster"):
            result = simulate(trace, EngineConfig(admission=admission, check=True))
            assert all(r.state in (FINISHED, FAILED, STUCK) for r in result.gangs)


def test_sim_errors_are_one_line(tmp_path: Path, capsys: Any) -> None:
    assert main(["sim", "no-such-trace", "--quiet", "--out", str(tmp_path / "o")]) == 2
    assert main(["sim", "--policy", "nope", "--quiet", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2
    assert "not found" in err[0] and "--policy nope" in err[1]


def test_bench_sim_prints_one_json_line(capsys: Any) -> None:
    assert main(["bench", "sim", "--gangs", "200", "--nodes", "20", "--json"]) == 0
    line = capsys.readouterr().out.strip()
    figures = json.loads(line)
    assert figures["gangs"] == 200 and figures["nodes"] == 20 and figures["wall_s"] >= 0
    assert figures["finished"] == 200


def test_stuck_gangs_keep_the_last_reason_the_planner_gave_them() -> None:
    # One node, held for the whole run by "hold". With a lookahead of one gang per queue:
    # "early" waits in the window, then "urgent" (higher priority) pushes it out; "late" never
    # enters the window. Each stuck gang's reason is the last one a plan gave it.
    trace = tiny(
        [
            gang("hold", 1, runtime="1000s"),
            gang("early", 1, submit={"at": "1s"}),
            gang("urgent", 1, priority=5, submit={"at": "2s"}),
            gang("late", 1, submit={"at": "3s"}),
        ],
        nodes=1,
    )
    result = simulate(trace, EngineConfig(lookahead=1, horizon=500.0))
    reasons = {r.gang.id: r.reason for r in result.gangs if r.state == STUCK and r.started is None}
    no_room = "NoFit: does not fit nodes: needs 1 nodes with 4 cpu free, 0 available"
    assert reasons == {
        "default/early-0": f"{no_room} (at the horizon)",
        "default/urgent-0": f"{no_room} (at the horizon)",
        "default/late-0": "NoFit: no pod of the gang fits a node (at the horizon)",
    }


# --- runtime limits (activeDeadlineSeconds) --------------------------------------------------


def test_a_gang_past_its_runtime_limit_fails_with_deadline_exceeded() -> None:
    # Admitted at 0 and still running at its 50 s limit (it needs 2 s + 100 s): Kubernetes
    # ends it then, as failed, and its nodes go to the next gang.
    trace = tiny([gang("late", 4, runtimeLimit="50s"), gang("next", 4, submit={"at": "1s"})])
    result = simulate(trace, EngineConfig(admission="muster", check=True))
    late, following = sorted(result.gangs, key=lambda r: r.group)
    assert late.state == FAILED
    assert late.reason.startswith("DeadlineExceeded")
    assert late.finished == 50.0
    assert following.state == FINISHED and following.first_admitted == 50.0
    assert summarize(result)["failed"] == 1


def test_without_gang_admission_the_deadline_counts_from_submission() -> None:
    # Unsuspended Jobs start at creation: the clogged pair fails at its limit, which frees
    # the nodes that each held.
    trace = tiny([gang("a", 4, runtimeLimit="30s"), gang("b", 4, runtimeLimit="30s")])
    result = simulate(trace, EngineConfig(admission="none", check=True))
    assert {r.state for r in result.gangs} == {FAILED}
    assert all(r.finished == 30.0 and r.reason.startswith("DeadlineExceeded") for r in result.gangs)


def test_gangs_that_never_started_count_in_the_every_gang_p95_by_their_wait_so_far() -> None:
    # The clogged pair fails at 30 s without ever starting; "c" starts once they are gone, at
    # 30 s. The started-only p95 sees c alone; every gang's sees the pair's 30 s too.
    trace = tiny(
        [
            gang("a", 4, runtimeLimit="30s"),
            gang("b", 4, runtimeLimit="30s"),
            gang("c", 4, submit={"at": "20s"}),
        ]
    )
    result = simulate(trace, EngineConfig(admission="none", check=True))
    assert [r.started is None for r in sorted(result.gangs, key=lambda r: r.group)] == [
        True,
        True,
        False,
    ]
    assert all(r.ended == 30.0 for r in result.gangs if r.started is None)
    queue = summarize(result)["queues"]["q"]
    c_wait = next(r.started - r.submitted for r in result.gangs if r.started is not None)
    assert queue["wait_p95_s"] == round(c_wait, 3)
    assert queue["wait_p95_all_s"] == round(max(30.0, c_wait), 3)
    assert queue["wait_p95_all_s"] >= queue["wait_p95_s"]
    assert queue["over_fair_share"] == 0.0  # one queue: its fair share is whatever runs


def _backfill_trace(small_limit: str | None) -> Trace:
    # Six one-pod nodes; "hog" holds three until 102 s; "big" needs all six and holds the
    # reservation from 1 s; "small" comes after it and needs one node for 10 s.
    small = gang("small", 1, runtime="10s", submit={"at": "2s"})
    if small_limit is not None:
        small["runtimeLimit"] = small_limit
    return tiny(
        [
            gang("hog", 3, runtimeLimit="120s"),
            gang("big", 6, submit={"at": "1s"}),
            small,
        ],
        sizeRatio={"ratio": 0.5},
    )


def test_a_gang_with_a_short_limit_backfills_and_the_big_gang_starts_on_time() -> None:
    starts: dict[str | None, dict[str, float]] = {}
    for limit in (None, "20s"):
        result = simulate(_backfill_trace(limit), EngineConfig(admission="muster", check=True))
        assert all(r.state == FINISHED and r.started is not None for r in result.gangs)
        starts[limit] = {r.group: r.started or 0.0 for r in result.gangs}
    # hog runs from 2 s to 102 s; big is admitted then and runs from 104 s either way.
    assert starts[None]["big"] == starts["20s"]["big"] == 104.0
    assert starts[None]["small"] > 104.0  # Reserved until big ran
    assert starts["20s"]["small"] == 4.0  # backfilled at once


def test_a_gang_whose_limit_outlasts_the_reservation_does_not_backfill() -> None:
    result = simulate(_backfill_trace("200s"), EngineConfig(admission="muster", check=True))
    started = {r.group: r.started for r in result.gangs}
    assert started["small"] is not None and started["small"] > 100.0


def test_a_run_unfreezes_what_it_froze() -> None:
    # The engine freezes the objects that live for the whole run (the collector skips them)
    # and gives them back to the collector when the run ends; a caller's own freeze stays.
    import gc

    assert gc.get_freeze_count() == 0
    simulate(two_gangs_of_four(), EngineConfig(admission="muster"))
    assert gc.get_freeze_count() == 0
    gc.freeze()
    try:
        simulate(two_gangs_of_four(), EngineConfig(admission="muster"))
        assert gc.get_freeze_count() > 0  # still frozen: not the engine's to unfreeze
    finally:
        gc.unfreeze()
