"""The kwok replay of a trace with GPUs as DRA devices (issue 35): `muster sim gpu-mixed-dra
--engine kwok --admission muster` creates the DeviceClass, each GPU node's ResourceSlice and the
GPU jobs' claim templates, runs muster with the trace's --device-class, and every gang finishes
with no eviction (its in-process twin is tests/sim/test_devices.py).

Its own control plane (`$MUSTER_KWOK_DEVICES_TEST_CLUSTER`, default `muster-test-kwok-dra`), as
the kwok engine's other tests (tests/cluster/test_kwok_engine.py, which says why); at time scale
50 the trace's two hours of GPU work take a few minutes.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from simulator.controlplane.build import Binaries
from simulator.controlplane.cluster import LocalCluster
from tests.kwok_replays import muster_sim

pytestmark = [pytest.mark.cluster]

CLUSTER = os.environ.get("MUSTER_KWOK_DEVICES_TEST_CLUSTER", "muster-test-kwok-dra")


def test_the_kwok_replay_of_gpus_as_devices_finishes_with_no_eviction(tmp_path: Path) -> None:
    if Binaries.at().missing():
        pytest.fail("control-plane binaries missing: run `muster cluster build`")
    if LocalCluster(name=CLUSTER).is_healthy():
        pytest.fail(f"a cluster named {CLUSTER!r} is running already; stop it first")
    out = tmp_path / "out"
    proc = muster_sim(
        "gpu-mixed-dra",
        "--engine",
        "kwok",
        "--admission",
        "muster",
        "--time-scale",
        "50",
        "--stall",
        "15",
        "--cluster-name",
        CLUSTER,
        "--out",
        str(out),
        "--quiet",
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())["muster"]
    assert summary["gangs"] == 96 and summary["finished"] == 96, summary
    assert summary["evictions"] == 0 and summary["clogs"] == 0, summary
    with (out / "gangs.csv").open() as handle:
        rows = [r for r in csv.DictReader(handle) if r["group"] in ("llm", "finetune")]
    assert len(rows) == 16 and all(r["state"] == "finished" for r in rows)
    assert not LocalCluster(name=CLUSTER).is_healthy()
