"""Gang history: the row format (policies/history.py), the controller's store fed by the cache
(admission/history.py), `/v1/history` and `muster history`, and the CSV round trip into
`muster sim --jobs-csv` (simulator/trace.py)."""

from __future__ import annotations

import copy
import csv
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

from admission.cache import Cache
from admission.history import GangHistory
from admission.status import history_body
from muster import cli
from policies import Resources
from policies.history import COLUMNS, HistoryRow, format_requests, to_csv
from policies.kinds.reading import format_time
from simulator.trace import TraceError, load_jobs_csv, read_jobs_csv
from tests.unit.test_cli_view import NOW, job, pod, served


def _row(**overrides: Any) -> HistoryRow:
    fields: dict[str, Any] = {
        "gang": "team-a/train-0",
        "queue": "a",
        "kind": "MiniCluster",
        "size": 4,
        "min_size": 3,
        "submitted": NOW,
        "admitted": NOW + 10.5,
        "started": NOW + 12.25,
        "finished": NOW + 72.25,
        "state": "finished",
        "requests": Resources.parse({"cpu": "6", "memory": "20Gi"}, field="t"),
        "one_pod_per_node": True,
        "admitted_size": 4,
    }
    fields.update(overrides)
    return HistoryRow(**fields)


# -- the row -------------------------------------------------------------------------------


def test_requests_cell_is_the_job_list_format() -> None:
    requests = Resources.parse({"cpu": "1500m", "memory": "20Gi", "nvidia.com/gpu": "0"}, field="t")
    assert format_requests(requests) == "cpu=1500m;memory=20Gi"


def test_row_as_dict_and_csv_cells() -> None:
    row = _row().as_dict()
    assert list(row) == list(COLUMNS)
    assert row["wait_s"] == 12.25 and row["runtime_s"] == 60.0
    assert row["requests"] == "cpu=6;memory=20Gi" and row["clogs"] is None
    text = to_csv([row, _row(gang="team-a/never", started=None, finished=None).as_dict()])
    lines = list(csv.DictReader(io.StringIO(text)))
    assert lines[0]["submitted_s"] == f"{NOW:.0f}" and lines[0]["admitted_s"] == f"{NOW + 10.5}"
    assert lines[0]["one_pod_per_node"] == "true" and lines[0]["clogs"] == ""
    assert lines[1]["runtime_s"] == "" and lines[1]["wait_s"] == ""


# -- the store, fed by the cache ------------------------------------------------------------


def _finished(body: dict[str, Any], at: float) -> dict[str, Any]:
    done = copy.deepcopy(body)
    done["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 100)
    done["status"] = {
        "succeeded": 4,
        "startTime": format_time(at - 70).split(".")[0] + "Z",
        "completionTime": format_time(at).split(".")[0] + "Z",
        "conditions": [{"type": "Complete", "status": "True"}],
    }
    return done


def test_a_gang_seen_live_is_timed_by_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [NOW]
    monkeypatch.setattr("admission.cache.time.time", lambda: clock[0])
    cache = Cache()
    admitted = job("g", "a", pods=4, seq=1, admitted=4)  # admitted at NOW - 300
    cache.apply_job("ADDED", admitted)
    clock[0] = NOW + 5
    running = copy.deepcopy(admitted)
    running["metadata"]["resourceVersion"] = "50"
    running["status"] = {"ready": 4}
    cache.apply_job("MODIFIED", running)
    assert cache.jobs["ns/g"].started_at == NOW + 5
    clock[0] = NOW + 65.5
    cache.apply_job("MODIFIED", _finished(running, NOW + 65))
    [row] = cache.history.rows()
    assert row.gang == "ns/g" and row.state == "finished"
    assert row.admitted == pytest.approx(NOW - 300) and row.admitted_size == 4
    assert row.started == NOW + 5 and row.finished == NOW + 65.5  # the cache's clock
    assert row.run_seconds == 60.5
    assert row.submitted == pytest.approx(NOW - 600, abs=1e-3)
    # A later status update of the finished Job does not add it again.
    again = _finished(running, NOW + 65)
    again["metadata"]["resourceVersion"] = "500"
    cache.apply_job("MODIFIED", again)
    assert len(cache.history) == 1


def test_a_gang_ends_when_its_last_pod_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gang starts when its minimum of pods is ready and ends when its last pod ends, as the
    pod watch shows them; the Job's status.ready and Complete follow a moment later."""
    clock = [NOW]
    monkeypatch.setattr("admission.cache.time.time", lambda: clock[0])
    cache = Cache()
    body = job("g", "a", pods=2, seq=1, admitted=2)
    cache.apply_job("ADDED", body)
    pods = [pod(f"g-{i}", "g", f"n{i}", "1") for i in range(2)]
    for i, p in enumerate(pods):
        clock[0] = NOW + i
        cache.apply_pod("ADDED", p)
    for i, p in enumerate(pods):
        clock[0] = NOW + 60 + i
        done = copy.deepcopy(p)
        done["metadata"]["resourceVersion"] = "9"
        done["status"]["phase"] = "Succeeded"
        cache.apply_pod("MODIFIED", done)
    clock[0] = NOW + 62.5
    cache.apply_job("MODIFIED", _finished(body, NOW + 62))
    [row] = cache.history.rows()
    assert row.started == NOW + 1  # the second (min) ready pod, not the Job's status.ready
    assert row.finished == NOW + 61  # the last pod, not the Complete condition
    gone = _finished(body, NOW + 62)
    gone["metadata"]["resourceVersion"] = "999"
    cache.apply_job("DELETED", gone)
    assert cache.pods.ended == {} and len(cache.history) == 1


def test_a_restarted_controller_rebuilds_rows_from_the_objects() -> None:
    cache = Cache()
    body = _finished(job("g", "a", pods=4, seq=1, admitted=4), NOW - 100)
    body["metadata"]["annotations"]["muster.dev/evictions"] = "2"
    body["metadata"]["annotations"]["muster.dev/preemptions"] = "1"
    cache.apply_job("ADDED", body)
    [row] = cache.history.rows()
    assert row.finished == NOW - 100  # status.completionTime
    assert row.started == NOW - 170  # status.startTime: when it was unsuspended
    assert row.evictions == 2 and row.preemptions == 1
    assert row.requests == Resources.parse({"cpu": "1"}, field="t")


def test_a_failed_job_and_a_gang_muster_failed() -> None:
    cache = Cache()
    failed = _finished(job("dl", "a", pods=2, seq=1, admitted=2), NOW - 50)
    failed["status"]["conditions"] = [
        {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "late"}
    ]
    cache.apply_job("ADDED", failed)
    gave_up = job("gu", "a", pods=2, seq=2)
    gave_up["metadata"]["annotations"].update(
        {"muster.dev/state": "Failed", "muster.dev/evictions": "6"}
    )
    cache.apply_job("ADDED", gave_up)
    rows = {r.gang: r for r in cache.history.rows()}
    assert rows["ns/dl"].state == "failed" and rows["ns/dl"].reason == "DeadlineExceeded: late"
    assert rows["ns/dl"].run_seconds == 70.0 and rows["ns/dl"].finished is None
    assert rows["ns/gu"].state == "failed" and rows["ns/gu"].started is None
    assert rows["ns/gu"].reason.startswith("BackoffLimit: evicted 6 times")


def test_the_history_is_bounded_and_filtered_by_end_time() -> None:
    cache = Cache(history=GangHistory(limit=3))
    for i in range(5):
        cache.apply_job("ADDED", _finished(job(f"g{i}", "a", pods=1, seq=i, admitted=1), NOW + i))
    assert len(cache.history) == 3
    assert [r.gang for r in cache.history.rows()] == ["ns/g2", "ns/g3", "ns/g4"]
    assert [r.gang for r in cache.history.rows(since=NOW + 3)] == ["ns/g3", "ns/g4"]
    body = history_body(cache, 1.5, NOW + 4.5)
    assert [g["gang"] for g in body["gangs"]] == ["ns/g3", "ns/g4"]
    assert body["held"] == 3 and body["limit"] == 3
    with pytest.raises(ValueError, match="at least 1"):
        GangHistory(limit=0)


# -- the service and the command ------------------------------------------------------------


def test_muster_history_csv_and_table_through_the_status_service(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cache = Cache()
    cache.synced = True
    hour_ago = time.time() - 3600
    for i in range(2):
        body = job(f"g{i}", "a", pods=2, seq=i, admitted=2)
        cache.apply_job("ADDED", _finished(body, hour_ago + i))
    with served(cache) as url:
        assert cli.main(["history", "--status-url", url, "-o", "csv"]) == 0
        rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
        assert [r["gang"] for r in rows] == ["ns/g0", "ns/g1"]
        assert rows[0]["requests"] == "cpu=1" and rows[0]["state"] == "finished"
        assert cli.main(["history", "--status-url", url]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0].split()[:4] == ["GANG", "QUEUE", "KIND", "SIZE"] and len(out) == 3
        assert cli.main(["history", "--status-url", url, "--since", "1m", "-o", "json"]) == 0
        assert json.loads(capsys.readouterr().out)["gangs"] == []  # they ended an hour ago
        assert cli.main(["history", "--status-url", url, "--since", "2h", "-o", "json"]) == 0
        assert len(json.loads(capsys.readouterr().out)["gangs"]) == 2
    assert cli.main(["history", "--since", "soon", "--status-url", url]) == 2
    assert "--since" in capsys.readouterr().err


# -- into the simulator ---------------------------------------------------------------------


def test_a_history_csv_is_a_job_list(tmp_path: Path) -> None:
    rows = [
        _row(gang="team-a/first").as_dict(),
        _row(gang="team-a/later", submitted=NOW + 30, min_size=4, one_pod_per_node=False).as_dict(),
        _row(gang="team-a/never", state="failed", started=None, finished=None).as_dict(),
    ]
    path = tmp_path / "history.csv"
    path.write_text(to_csv(rows))
    read = read_jobs_csv(path)
    assert read.skipped == 1 and read.engine == "muster"
    assert read.start_latency == pytest.approx(1.75)
    first, later = read.jobs
    assert (first.name, first.namespace, first.submit_at, first.runtime) == (
        "first",
        "team-a",
        0.0,
        60.0,
    )
    assert first.min_size == 3 and first.kind == "MiniCluster" and first.one_pod_per_node
    assert first.pod_requests == Resources.parse({"cpu": "6", "memory": "20Gi"}, field="t")
    assert later.submit_at == 30.0 and later.min_size is None and not later.one_pod_per_node
    scaled = load_jobs_csv(path, scale=20)
    assert scaled[1].submit_at == 600.0 and scaled[1].runtime == 1200.0


def test_a_history_without_what_a_replay_needs_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "history.csv"
    path.write_text("gang,queue,size,submitted_s\nns/a,q,1,5\n")
    with pytest.raises(TraceError, match=r"needs column.*requests"):
        load_jobs_csv(path)


def test_gangs_csv_replays_the_trace(tmp_path: Path) -> None:
    """gangs.csv (either engine's rows) fed back with --jobs-csv is the same trace's run."""
    out = tmp_path / "first"
    assert cli.main(["sim", "two-queues", "--out", str(out), "--quiet"]) == 0
    again = tmp_path / "again"
    argv = ["sim", "two-queues", "--jobs-csv", str(out / "gangs.csv"), "--out", str(again)]
    assert cli.main([*argv, "--admission", "muster", "--quiet"]) == 0
    first = json.loads((out / "summary.json").read_text())["muster"]
    replayed = json.loads((again / "summary.json").read_text())["muster"]
    assert replayed["gangs"] == first["gangs"]
    assert replayed["makespan_s"] == pytest.approx(first["makespan_s"], rel=0.01)


def test_the_pod_start_delay_option_reaches_the_model(tmp_path: Path) -> None:
    makespans = []
    for delay in ("2", "60"):
        out = tmp_path / delay
        argv = ["sim", "two-queues", "--admission", "muster", "--out", str(out), "--quiet"]
        assert cli.main([*argv, "--pod-start-delay", delay]) == 0
        makespans.append(json.loads((out / "summary.json").read_text())["muster"]["makespan_s"])
    assert makespans[1] > makespans[0]
    assert cli.main(["sim", "two-queues", "--pod-start-delay", "-1", "--quiet"]) == 2


def test_pod_start_delay_is_refused_on_kwok(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["sim", "--engine", "kwok", "--pod-start-delay", "5", "--quiet"]) == 2
    assert "in-process option" in capsys.readouterr().err


def test_the_shipped_history_example_replays_two_queues() -> None:
    read = read_jobs_csv(Path(__file__).parents[2] / "simulator/traces/history-example.csv")
    assert len(read.jobs) == 4 and read.skipped == 1
    assert {j.namespace for j in read.jobs} == {"team-a", "team-b"}
    assert read.jobs[2].min_size == 12 and read.jobs[2].runtime == pytest.approx(899.269)


def test_a_kwok_history_replays_with_the_clog_floor_it_had(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A kwok replay at --time-scale X floors clog timeouts at --min-clog-timeout wall seconds;
    its history, replayed in-process at --csv-time-scale X, gets the same floor in trace time."""
    history = Path(__file__).parents[2] / "simulator/traces/history-example.csv"
    argv = ["sim", "two-queues", "--jobs-csv", str(history), "--admission", "muster"]
    argv += ["--csv-time-scale", "2", "--min-clog-timeout", "200", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "clog timeouts of research, team-a, team-b raised to 400s" in err
    assert "pod start delay 3.8s: the history's median admission-to-start" in err
