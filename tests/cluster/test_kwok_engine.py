"""The kwok engine end to end: `muster sim --engine kwok --admission both` on a small trace.

Where it runs, and why: the engine brings up its OWN control plane (`--cluster-name`, default
`muster-test-kwok`, or $MUSTER_KWOK_TEST_CLUSTER) with exactly the trace's nodes, starts its own
`muster run --local`, and takes both down at the end. It does not use the session cluster:

- the session's `muster` fixture already runs `muster run --local` there, and two of them
  would fight over the cluster-wide MutatingWebhookConfiguration;
- replaying through that muster instead (`--external-muster`) would let the controller plan
  against the session's 1000 big nodes too, so size ratio, DRF shares and node fit would not be
  the trace's and the run would not be the replay the test claims to check;
- bringing a cluster up and down is what `muster sim --engine kwok` does for users; the test
  covers that path (and checks nothing is left running).

The trace clogs without gang admission (four 4-pod one-per-node Jobs on 6 nodes, all at once)
and completes with muster. Jobs, not MiniClusters: the real Flux Operator, which the engine uses
where it is built, makes a burst's MiniClusters' Jobs one after the other (seconds apart under
load), so whether they clog without admission would depend on its pace (its replays are covered
by the blog-burst tests). Runtimes are compressed 20x; the test takes about a minute.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.controlplane.cluster import LocalCluster
from tests.kwok_replays import muster_sim, replay_both

pytestmark = [pytest.mark.cluster]

TRACE = """\
name: kwok-small
cluster:
  nodes:
    - {count: 6, name: n, allocatable: {cpu: "8", memory: 30Gi, pods: "110"}}
queues:
  - {name: lab, clogTimeout: 60s, sizeRatio: null}
jobs:
  - {name: g4, count: 4, kind: Job, queue: lab, size: 4,
     podRequests: {cpu: "6", memory: 20Gi}, onePodPerNode: true, runtime: 60s}
  - {name: j2, count: 3, kind: Job, queue: lab, size: 2,
     podRequests: {cpu: "2", memory: 4Gi}, runtime: 40s, submit: {at: 10s, interval: 5s}}
"""
RUNTIMES = {"g4": 60.0, "j2": 40.0}
CLUSTER = os.environ.get("MUSTER_KWOK_TEST_CLUSTER", "muster-test-kwok")


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return replay_both(TRACE, CLUSTER, tmp_path_factory.mktemp("kwok"))


def test_outputs_are_written(replay: Path) -> None:
    for name in ("summary.json", "gangs.csv", "queues.csv", "report.html", "utilization.png"):
        assert (replay / name).is_file(), name
    assert (replay / "muster-run.log").is_file()
    assert (replay / "history.csv").is_file()


def test_every_gang_finished_or_stuck_and_muster_none_stuck(replay: Path) -> None:
    summary = json.loads((replay / "summary.json").read_text())
    assert summary["engine"]["name"] == "kwok" and summary["engine"]["time_scale"] == 20
    for engine in ("none", "muster"):
        s = summary[engine]
        assert s["gangs"] == 7
        assert s["finished"] + s["failed"] + s["stuck_gangs"] == 7, s
    muster, none = summary["muster"], summary["none"]
    assert muster["stuck_gangs"] == 0 and muster["finished"] == 7
    assert muster["makespan_s"] is not None and muster["makespan_s"] > 0
    # Without gang admission the 4-pod gangs interleave on 6 nodes: a real clog.
    assert none["stuck_gangs"] > 0 and none["clogs"] > 0
    assert none["makespan_s"] is None
    # Measured from the replay's samples as in-process; one queue's fair share is what it runs.
    assert muster["queues"]["lab"]["over_fair_share"] == 0.0


def test_gang_rows_are_consistent(replay: Path) -> None:
    with (replay / "gangs.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert sorted({r["engine"] for r in rows}) == ["muster", "none"]
    assert len(rows) == 14
    for row in rows:
        assert row["state"] in ("finished", "stuck"), row
        if row["state"] == "stuck":
            assert row["reason"], row
            continue
        times = [float(row[k]) for k in ("submitted_s", "admitted_s", "started_s", "finished_s")]
        assert times == sorted(times), row
        # Finished = started + the trace's runtime (compressed on kwok, converted back), or a
        # little later when kwok completes the pods late; never earlier.
        runtime = float(row["finished_s"]) - float(row["started_s"])
        assert runtime >= RUNTIMES[row["group"]] - 0.01, row
        assert float(row["wait_s"]) == pytest.approx(times[2] - times[0], abs=0.01)
        assert int(row["admitted_size"]) == int(row["size"])
    stuck = [r for r in rows if r["state"] == "stuck"]
    assert all(r["engine"] == "none" for r in stuck)
    # Stuck holding nodes with part of the gang bound, or with no pod placed at all.
    assert all(r["reason"].startswith(("Clogged: ", "NoFit: ")) for r in stuck)
    assert any(r["reason"].startswith("Clogged: ") for r in stuck)


def test_queue_series_never_goes_back(replay: Path) -> None:
    with (replay / "queues.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    for engine in ("none", "muster"):
        times = [float(r["time_s"]) for r in rows if r["engine"] == engine]
        assert times and times == sorted(times)
        assert all(float(r["usage_cpu"]) >= 0 for r in rows if r["engine"] == engine)
    # muster ends with nothing pending or holding.
    last = [r for r in rows if r["engine"] == "muster"][-1]
    assert last["pending"] == "0" and last["holding"] == "0"


def test_the_replays_history_replays_in_process(replay: Path) -> None:
    """The round trip of issue #16: muster's history of the kwok replay (history.csv, fetched
    from the replay's controller as `muster history -o csv` prints it, in wall seconds) fed to
    `muster sim --jobs-csv` at the replay's time scale reproduces the replay's makespan within
    10% in-process."""
    with (replay / "history.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 7 and all(r["state"] == "finished" for r in rows), rows
    assert sorted(r["kind"] for r in rows) == ["Job"] * 7
    assert all(r["requests"] and float(r["runtime_s"]) > 0 for r in rows), rows
    out = replay.parent / "from-history"
    proc = muster_sim(
        str(replay.parent / "trace.yaml"),
        "--jobs-csv",
        str(replay / "history.csv"),
        "--csv-time-scale",
        "20",
        "--admission",
        "muster",
        "--out",
        str(out),
        "--quiet",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kwok = json.loads((replay / "summary.json").read_text())["muster"]
    in_process = json.loads((out / "summary.json").read_text())["muster"]
    assert in_process["finished"] == 7
    assert in_process["makespan_s"] == pytest.approx(kwok["makespan_s"], rel=0.10), (
        in_process["makespan_s"],
        kwok["makespan_s"],
    )


def test_everything_it_started_is_gone(replay: Path) -> None:
    cluster = LocalCluster(name=CLUSTER)
    assert not cluster.is_healthy()
    assert not cluster.state_dir.exists()


def test_bad_options_change_nothing(tmp_path: Path) -> None:
    proc = muster_sim("--engine", "kwok", "--lookahead", "5", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "in-process options" in proc.stderr
    proc = muster_sim("--engine", "kwok", "--external-muster", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "--external-muster needs --kubeconfig" in proc.stderr
    assert not (tmp_path / "o").exists()


def test_missing_binaries_say_what_to_run(tmp_path: Path) -> None:
    env = {**os.environ, "MUSTER_CACHE": str(tmp_path / "empty-cache")}
    proc = subprocess.run(
        [sys.executable, "-m", "muster.cli", "sim", "--engine", "kwok", "--out", str(tmp_path)]
        + ["--cluster-name", "never-started"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert "muster cluster build" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "empty-cache").exists()
