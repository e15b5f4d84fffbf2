"""The kwok engine replays JobSets and pod groups (issue 29): `muster sim --engine kwok
--admission both` on a small trace of both kinds, on its OWN control plane (`--cluster-name`,
$MUSTER_KWOK_TEST_CLUSTER_KINDS, default `muster-test-kwok-kinds`; see test_kwok_engine.py for
why not the session's), which it brings up with the real JobSet controller (built by `muster
cluster build` from ../shared/src/jobset) and takes down at the end.

Four gangs of 4 one-per-node pods of 6 cpus on 6 nodes of 8, all at once: two JobSets (a
leader pod set of one small pod beside the 4 workers) and two pod groups (a driver and 4
executors). With muster every gang finishes, none evicted; without gang admission the default
scheduler interleaves them. The test takes about two minutes.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from simulator.controlplane.cluster import LocalCluster
from simulator.controlplane.operators import JOBSET, binary_path, is_present, source_of
from tests.kwok_replays import replay_both

pytestmark = [pytest.mark.cluster]

TRACE = """\
name: kwok-kinds
cluster:
  nodes:
    - {count: 6, name: n, allocatable: {cpu: "8", memory: 30Gi, pods: "110"}}
queues:
  - {name: lab, clogTimeout: 60s, sizeRatio: null}
jobs:
  - name: js
    count: 2
    kind: JobSet
    queue: lab
    size: 5
    runtime: 60s
    podSets:
      - {name: leader, count: 1, podRequests: {cpu: "1", memory: 1Gi}}
      - {name: worker, podRequests: {cpu: "6", memory: 4Gi}, onePodPerNode: true}
  - name: pg
    count: 2
    kind: PodGroup
    queue: lab
    size: 5
    runtime: 60s
    podSets:
      - {name: driver, count: 1, podRequests: {cpu: "1", memory: 1Gi}}
      - {name: executor, podRequests: {cpu: "6", memory: 4Gi}, onePodPerNode: true}
"""
CLUSTER = os.environ.get("MUSTER_KWOK_TEST_CLUSTER_KINDS", "muster-test-kwok-kinds")


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = source_of(JOBSET)
    if not is_present(source) or not os.access(binary_path(JOBSET, source), os.X_OK):
        pytest.skip("no JobSet controller built from ../shared/src/jobset (muster cluster build)")
    return replay_both(TRACE, CLUSTER, tmp_path_factory.mktemp("kwok-kinds"))


def test_muster_finishes_every_jobset_and_pod_group_without_evictions(replay: Path) -> None:
    summary = json.loads((replay / "summary.json").read_text())
    muster, none = summary["muster"], summary["none"]
    assert muster["gangs"] == 4 and muster["finished"] == 4, muster
    assert muster["evictions"] == 0 and muster["clogs"] == 0, muster
    assert none["finished"] + none["failed"] + none["stuck_gangs"] == 4, none


def test_each_gang_is_its_kind_and_admitted_whole(replay: Path) -> None:
    with (replay / "gangs.csv").open() as handle:
        rows = [r for r in csv.DictReader(handle) if r["engine"] == "muster"]
    assert sorted(r["kind"] for r in rows) == ["JobSet", "JobSet", "PodGroup", "PodGroup"]
    for row in rows:
        assert row["state"] == "finished" and row["admitted_size"] == "5", row


def test_everything_it_started_is_gone(replay: Path) -> None:
    cluster = LocalCluster(name=CLUSTER)
    assert not cluster.is_healthy()
    assert not cluster.state_dir.exists()
