"""Two `muster run --peering` replicas: only the active one admits; a standby takes over."""

from __future__ import annotations

import re
import signal
import urllib.error
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubeport.kubeapi import KubeClient
from simulator.controlplane.minicluster import apply_crd
from tests import builders
from tests.conftest import REPO, MusterProcess, start_muster
from tests.controller_helpers import (
    admitted,
    all_jobs,
    create_queue,
    delete_queue,
    evictions,
    http_json,
    jobs_path,
)
from tests.kube import wait_for

pytestmark = [pytest.mark.cluster]

LIFETIME = "15"  # seconds a killed replica still counts as alive; kopf's floor is about 10


def admitted_here(process: MusterProcess, namespace: str) -> set[str]:
    """Names of the Jobs in `namespace` that this process logged as admitted by itself."""
    pattern = re.compile(rf"{re.escape(namespace)}/(\S+) admitted \d+ of \d+ pods")
    return {m.group(1) for m in pattern.finditer(process.text())}


def submit(kube: KubeClient, namespace: str, queue: str, names: list[str]) -> None:
    for name in names:
        kube.create(jobs_path(namespace), builders.job(name, queue, pods=2, runtime="1s"))


def all_admitted(kube: KubeClient, namespace: str, names: list[str]) -> bool:
    jobs = {j["metadata"]["name"]: j for j in all_jobs(kube, namespace)}
    return all(name in jobs and admitted(jobs[name]) for name in names)


def serving(url: str) -> dict[str, Any] | None:
    try:
        body: dict[str, Any] = http_json(url)
    except urllib.error.HTTPError as exc:
        exc.close()
        return None
    return body


def test_only_the_active_replica_admits_and_a_standby_takes_over(
    kube: KubeClient, kubeconfig: Path, namespace: str, muster: MusterProcess
) -> None:
    apply_crd(
        kube,
        yaml.safe_load((REPO / "manifests/crd/clusterkopfpeerings.kopf.dev.yaml").read_text()),
    )
    peering = f"{namespace}-peering"[-63:].lstrip("-")
    queue = f"{namespace}-q"
    create_queue(kube, queue, {"nominal": {"cpu": "64"}})
    # The session's standalone controller would admit too; it steps aside for this test.
    muster.stop()
    flags = ["--peering", peering, "--peering-lifetime", LIFETIME]
    high = low = None
    try:
        high = start_muster(kubeconfig, *flags, "--priority", "200")
        # Both start paused; kopf resumes the one no peer of higher priority outranks.
        wait_for(
            lambda: "controller ready" in high.text(),
            timeout=60,
            what="the replica of priority 200 becomes active",
        )
        low = start_muster(kubeconfig, *flags, "--priority", "100")
        wait_for(
            lambda: "controller standby" in low.text(),
            timeout=10,
            what="the replica of priority 100 stands by",
        )
        # The standby's view is paused: its status service says so instead of answering stale.
        with pytest.raises(urllib.error.HTTPError) as standby:
            http_json(f"{low.status_url}/v1/queues")
        assert standby.value.code == 503
        standby.value.close()

        first = [f"first-{i}" for i in range(4)]
        submit(kube, namespace, queue, first)
        wait_for(
            lambda: all_admitted(kube, namespace, first),
            timeout=60,
            what="the active replica admits the first Jobs",
        )
        wait_for(
            lambda: admitted_here(high, namespace) >= set(first),
            timeout=15,
            what="the active replica's admission log lines",
        )
        assert admitted_here(high, namespace) == set(first)
        assert admitted_here(low, namespace) == set()
        assert "this replica is active" not in low.text()

        high.stop(signal.SIGKILL)
        second = [f"second-{i}" for i in range(4)]
        submit(kube, namespace, queue, second)
        wait_for(
            lambda: all_admitted(kube, namespace, second),
            timeout=120,
            what="the standby takes over after the active replica is killed",
        )
        wait_for(
            lambda: "this replica is active" in low.text(),
            timeout=15,
            what="the standby logs that it is active",
        )
        # Active and synced now: its status service answers, with the new leader's view.
        wait_for(
            lambda: queue in (serving(f"{low.status_url}/v1/queues") or {}).get("queues", {}),
            timeout=30,
            what="the new leader's status service answers",
        )
        # The log line of an admission follows its PATCH: give it a moment to arrive.
        wait_for(
            lambda: admitted_here(low, namespace) >= set(second),
            timeout=15,
            what="the new leader's admission log lines",
        )
        # The new leader LISTs before it plans: the first Jobs are known as admitted, not
        # admitted again.
        assert admitted_here(low, namespace) == set(second)
        assert all(evictions(j) == 0 for j in all_jobs(kube, namespace))
    finally:
        for process in (high, low):
            if process is not None:
                process.stop()
        delete_queue(kube, queue)
        muster.restart(signal.SIGTERM)
