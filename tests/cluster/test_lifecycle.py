"""`muster cluster up/down` on a cluster of its own: idempotent up, clean down, crash recovery."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from simulator.controlplane.cluster import LocalCluster
from simulator.controlplane.components import free_ports
from simulator.controlplane.errors import ClusterError
from simulator.controlplane.processes import alive, start_ticks

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
    assert len(pids) == 5 and all(start_ticks(p) for p in pids)

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
    assert not any(alive(r) for r in records)
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
    while alive(apiserver) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not lifecycle_cluster.is_healthy()

    lifecycle_cluster.up()
    assert lifecycle_cluster.is_healthy()
    assert not any(alive(r) for r in crashed)
    assert {r.pid for r in lifecycle_cluster.records()}.isdisjoint({r.pid for r in crashed})


def test_a_taken_port_stops_up_with_the_components_log_and_leaves_no_process(
    lifecycle_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """etcd cannot bind its port (held here, as a racing program would): `up` says which
    component exited, shows the end of its log with a hint, and stops what it started."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        # Where `up` looks the ports up.
        monkeypatch.setattr(
            "simulator.controlplane.cluster.free_ports", lambda n: [taken, *free_ports(n - 1)]
        )
        with pytest.raises(ClusterError) as failed:
            lifecycle_cluster.up()
    message = str(failed.value)
    assert message.startswith("etcd exited at start; log "), message
    assert "address already in use" in message
    assert "hint: a port was taken between picking it and binding; run up again" in message
    assert not any(alive(r) for r in lifecycle_cluster.records())
    leftover = subprocess.run(
        ["pgrep", "-f", str(lifecycle_cluster.state_dir)], capture_output=True, text=True
    )
    assert leftover.stdout.strip() == ""
