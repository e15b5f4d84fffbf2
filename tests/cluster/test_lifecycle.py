"""`muster cluster up/down` on a cluster of its own: idempotent up, clean down, crash recovery."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from simulator.controlplane.cluster import LocalCluster, _alive, _start_ticks

pytestmark = pytest.mark.cluster

NAME = "muster-lifecycle-test"


def _muster(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "muster.cli", *args], capture_output=True, text=True, check=False
    )


@pytest.fixture
def lifecycle_cluster() -> Iterator[LocalCluster]:
    cluster = LocalCluster(name=NAME, log=lambda _: None)
    cluster.down(quiet=True)
    yield cluster
    cluster.down(quiet=True)


def test_up_is_idempotent_and_down_leaves_no_process(lifecycle_cluster: LocalCluster) -> None:
    first = _muster("cluster", "up", "--name", NAME, "--nodes", "3")
    assert first.returncode == 0, first.stderr
    pids = [r.pid for r in lifecycle_cluster.records()]
    assert len(pids) == 5 and all(_start_ticks(p) for p in pids)

    again = _muster("cluster", "up", "--name", NAME)
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stderr
    assert [r.pid for r in lifecycle_cluster.records()] == pids

    status = _muster("cluster", "status", "--name", NAME)
    assert status.returncode == 0
    assert "kube-apiserver.log" in status.stdout

    records = lifecycle_cluster.records()
    down = _muster("cluster", "down", "--name", NAME)
    assert down.returncode == 0, down.stderr
    assert not any(_alive(r) for r in records)
    assert not lifecycle_cluster.state_dir.exists()
    # And nothing else of ours is left: no process runs from this cluster's state dir.
    leftover = subprocess.run(
        ["pgrep", "-f", str(lifecycle_cluster.state_dir)], capture_output=True, text=True
    )
    assert leftover.stdout.strip() == ""


def test_up_after_a_crash_cleans_and_restarts(lifecycle_cluster: LocalCluster) -> None:
    lifecycle_cluster.up()
    crashed = lifecycle_cluster.records()
    apiserver = next(r for r in crashed if r.component == "kube-apiserver")
    os.kill(apiserver.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _alive(apiserver) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not lifecycle_cluster.is_healthy()

    lifecycle_cluster.up()
    assert lifecycle_cluster.is_healthy()
    assert not any(_alive(r) for r in crashed)
    assert {r.pid for r in lifecycle_cluster.records()}.isdisjoint({r.pid for r in crashed})
