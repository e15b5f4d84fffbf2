"""`muster sim --engine kwok --admission external`: a replay admitted by a controller muster does
not run, on the real control plane.

The outside controller is `fifo_controller.py`, a script that unsuspends the Jobs labelled
`ext.muster.dev/queue=fifo` strictly in creation order within a capacity of 4 pods, and only in
namespaces with its `fifo-queue` ConfigMap (as Kueue needs a LocalQueue). The replay hands the
objects over the way a user hands them to Kueue: `--label`, `--namespace-manifest`,
`--controller-pid`.

Where it runs: a control plane of its own (`$MUSTER_EXT_TEST_CLUSTER`, default
`muster-test-external`, no nodes: the replay creates its own), because the session cluster runs
muster's webhook and the replay must pass `--kubeconfig` of a cluster the outside controller
watches. About a minute.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kubeport import kubeapi
from kubeport.kubeapi import KubeClient
from simulator.controlplane.build import Binaries
from simulator.controlplane.cluster import LocalCluster
from simulator.kwok_objects import SIM_RUN
from tests.kwok_replays import muster_sim

pytestmark = [pytest.mark.cluster]

CLUSTER = os.environ.get("MUSTER_EXT_TEST_CLUSTER", "muster-test-external")
CONTROLLER = Path(__file__).with_name("fifo_controller.py")
HANDED = "ext.muster.dev/queue=fifo"
# Two 4-pod MiniClusters and three 2-pod Jobs; one 6-cpu pod per 8-cpu node, so at most 4 pods
# run at a time: the controller's capacity.
TRACE = """\
name: ext-small
cluster:
  nodes:
    - {count: 4, name: n, allocatable: {cpu: "8", memory: 30Gi, pods: "110"}}
queues:
  - {name: lab, clogTimeout: 60s, sizeRatio: null}
jobs:
  - {name: mc, count: 2, kind: MiniCluster, queue: lab, size: 4,
     podRequests: {cpu: "6", memory: 20Gi}, onePodPerNode: true, runtime: 40s}
  - {name: j, count: 3, kind: Job, queue: lab, size: 2,
     podRequests: {cpu: "6", memory: 4Gi}, runtime: 40s, submit: {at: 5s, interval: 5s}}
"""
# What the controller needs in each namespace, with a wrong namespace the replay overrides.
MANIFEST = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: fifo-queue, namespace: not-the-replays}
data: {capacity: "4"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: second-document}
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    if Binaries.at().missing():
        pytest.fail("control-plane binaries missing: run `muster cluster build`")
    local = LocalCluster(name=CLUSTER, log=lambda _m: None)
    if local.is_healthy():
        pytest.fail(f"a cluster named {CLUSTER!r} is running already; stop it first")
    try:
        local.up(nodes=0)
        yield local
    finally:
        local.down(quiet=True)


@dataclass
class Replay:
    out: Path
    controller_pid: int
    controller_output: str


@pytest.fixture(scope="module")
def replay(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Replay:
    folder = tmp_path_factory.mktemp("external")
    (folder / "trace.yaml").write_text(TRACE)
    (folder / "manifest.yaml").write_text(MANIFEST)
    log = folder / "controller.log"
    with log.open("w") as sink:
        controller = subprocess.Popen(
            [sys.executable, str(CONTROLLER), str(cluster.kubeconfig), HANDED, "4"],
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        proc = muster_sim(
            str(folder / "trace.yaml"),
            "--engine",
            "kwok",
            "--admission",
            "external",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--label",
            HANDED,
            "--label",
            "team=ext",
            "--namespace-manifest",
            str(folder / "manifest.yaml"),
            "--controller-pid",
            str(controller.pid),
            "--external-name",
            "fifo",
            "--time-scale",
            "20",
            # Ends a stuck replay in 30 s rather than the default 120 s.
            "--external-stall",
            "30",
            "--out",
            str(folder / "out"),
            "--quiet",
        )
    finally:
        controller.terminate()
        controller.wait(timeout=30)
    output = log.read_text()
    assert proc.returncode == 0, proc.stdout + proc.stderr + output
    return Replay(folder / "out", controller.pid, output)


def test_the_outside_controller_admits_every_gang(replay: Replay) -> None:
    summary = json.loads((replay.out / "summary.json").read_text())
    assert "muster" not in summary and "none" not in summary
    external = summary["external"]
    assert external["admission"] == "external" and external["controller"] == "fifo"
    assert external["gangs"] == 5 and external["finished"] == 5, external
    assert external["stuck_gangs"] == 0 and external["admitted"] == 5
    # Each gang was created suspended: the controller unsuspended every one of them, once.
    admitted = [line.split()[1] for line in replay.controller_output.splitlines()]
    assert len(admitted) == len(set(admitted)) == 5, replay.controller_output
    assert sorted(name.split("/")[1] for name in admitted) == ["j-0", "j-1", "j-2", "mc-0", "mc-1"]


def test_gang_rows_are_the_external_controllers(replay: Replay) -> None:
    with (replay.out / "gangs.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 5 and {r["engine"] for r in rows} == {"external"}
    for row in rows:
        assert row["state"] == "finished", row
        times = [float(row[k]) for k in ("submitted_s", "admitted_s", "started_s", "finished_s")]
        assert times == sorted(times), row
        assert int(row["admitted_size"]) == int(row["size"])


def test_the_report_attributes_cpu_to_the_controller(replay: Replay) -> None:
    engine = json.loads((replay.out / "summary.json").read_text())["engine"]
    cpu = engine["external"]["cpu_s"]
    mine = [
        seconds for key, seconds in cpu.items() if key.endswith(f"(pid {replay.controller_pid})")
    ]
    assert len(mine) == 1 and mine[0] > 0, cpu
    assert "muster" not in cpu  # no muster was started for an external replay


def test_nothing_of_the_replay_is_left(cluster: LocalCluster, replay: Replay) -> None:
    with KubeClient.from_kubeconfig(cluster.kubeconfig) as client:
        selector = {"labelSelector": SIM_RUN}
        assert client.get(kubeapi.NODES.path(), selector)["items"] == []
        namespaces = client.get(kubeapi.NAMESPACES.path(), selector)["items"]
        assert all(n["metadata"].get("deletionTimestamp") for n in namespaces), namespaces
        # An external replay installs no muster Queue CRD on the other controller's cluster.
        crds = client.get(kubeapi.CRDS.path())["items"]
        assert "queues.muster.dev" not in {c["metadata"]["name"] for c in crds}


@pytest.mark.parametrize(
    ("manifest", "says"),
    [
        (
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: x}\n",
            "cluster-scoped",
        ),
        ("apiVersion: example.com/v1\nkind: Thing\nmetadata: {name: x}\n", "serves no API"),
        ("apiVersion: v1\nkind: Gadget\nmetadata: {name: x}\n", "has no kind Gadget"),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: [1]}\n",
            "the apiserver refuses it",
        ),
    ],
)
def test_a_manifest_the_cluster_refuses_changes_nothing(
    cluster: LocalCluster, tmp_path: Path, manifest: str, says: str
) -> None:
    (tmp_path / "trace.yaml").write_text(TRACE)
    (tmp_path / "manifest.yaml").write_text(manifest)
    proc = muster_sim(
        str(tmp_path / "trace.yaml"),
        "--engine",
        "kwok",
        "--admission",
        "external",
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--namespace-manifest",
        str(tmp_path / "manifest.yaml"),
        "--out",
        str(tmp_path / "out"),
        "--quiet",
    )
    assert proc.returncode == 1 and says in proc.stderr, proc.stderr
    with KubeClient.from_kubeconfig(cluster.kubeconfig) as client:
        selector = {"labelSelector": SIM_RUN}
        assert client.get(kubeapi.NODES.path(), selector)["items"] == []
        namespaces = client.get(kubeapi.NAMESPACES.path(), selector)["items"]
        assert all(n["metadata"].get("deletionTimestamp") for n in namespaces), namespaces
