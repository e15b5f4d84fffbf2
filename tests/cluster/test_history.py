"""`muster history` on a real control plane: gangs that finished are in the controller's history,
and a restarted controller rebuilds the same history from the Jobs in the cluster (state lives
in the cluster); the API source (`--kubeconfig`, no status service) gives it too."""

from __future__ import annotations

import csv
import io
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kubeport.kubeapi import KubeClient
from tests import builders
from tests.conftest import MusterProcess
from tests.controller_helpers import create_queue, delete_queue, jobs_path, wait_all_finished

pytestmark = [pytest.mark.cluster]

GANGS = 3


def muster_csv(*argv: str) -> list[dict[str, Any]]:
    """Rows of a `muster ... -o csv` run as a user runs it (its own process)."""
    done = subprocess.run(
        [sys.executable, "-m", "muster.cli", *argv, "-o", "csv"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return list(csv.DictReader(io.StringIO(done.stdout)))


def mine(rows: list[dict[str, Any]], namespace: str) -> dict[str, dict[str, Any]]:
    return {r["gang"]: r for r in rows if r["gang"].startswith(f"{namespace}/")}


def wait_rows(
    read: Callable[[], list[dict[str, Any]]], namespace: str, count: int, timeout: float = 30
) -> dict[str, Any]:
    """The namespace's rows once there are `count` (the controller sees Jobs end a moment
    after the API shows it), or what there is after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        rows = mine(read(), namespace)
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(1)


def test_history_after_jobs_finish_and_after_a_restart(
    kube: KubeClient, namespace: str, muster: MusterProcess, kubeconfig: Path
) -> None:
    queue = f"{namespace}-q"
    create_queue(kube, queue, {"nominal": {"cpu": "4"}})
    try:
        for i in range(GANGS):
            # 2 pods of 1 cpu, 2 s each: the quota (4 cpu) takes two gangs at a time.
            kube.create(jobs_path(namespace), builders.job(f"h-{i}", queue, pods=2, runtime="2s"))
        wait_all_finished(kube, namespace, GANGS, timeout=120)

        def served() -> list[dict[str, Any]]:
            return muster_csv("history", "--status-url", muster.status_url)

        live = wait_rows(served, namespace, GANGS)
        assert sorted(live) == [f"{namespace}/h-{i}" for i in range(GANGS)]
        for row in live.values():
            assert row["state"] == "finished" and row["queue"] == queue, row
            assert row["kind"] == "Job" and row["size"] == "2" and row["admitted_size"] == "2"
            assert row["requests"] == "cpu=1" and row["evictions"] == "0"
            times = [float(row[k]) for k in ("submitted_s", "admitted_s", "started_s")]
            times.append(float(row["finished_s"]))
            assert times == sorted(times), row
            # The gang ran its 2 s (seen by the controller: a little more, never much less).
            assert 1.5 <= float(row["runtime_s"]) < 30, row

        # A restarted controller rebuilds the history from the Jobs still in the cluster.
        muster.restart(signal.SIGKILL)
        rebuilt = wait_rows(served, namespace, GANGS)
        assert sorted(rebuilt) == sorted(live)
        for gang, row in rebuilt.items():
            before = live[gang]
            for column in ("submitted_s", "admitted_s", "queue", "size", "requests", "state"):
                assert row[column] == before[column], (column, row, before)
            # From status.completionTime and startTime (1-second resolution) this time.
            assert abs(float(row["finished_s"]) - float(before["finished_s"])) < 3, (row, before)
            assert float(row["admitted_s"]) <= float(row["started_s"]) <= float(row["finished_s"])

        # Without the status service: the same rows, rebuilt from a LIST with a kubeconfig.
        listed = mine(muster_csv("history", "--kubeconfig", str(kubeconfig)), namespace)
        assert {g: r["finished_s"] for g, r in listed.items()} == {
            g: r["finished_s"] for g, r in rebuilt.items()
        }
    finally:
        delete_queue(kube, queue)
