"""Wait-time estimates on the real control plane (issue #16): a Job waiting behind a running
Job with activeDeadlineSeconds gets an expected start from the controller's status service and
from `muster status` reading the API, at most that deadline away."""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path
from typing import Any

import pytest

from kubeport.kubeapi import KubeClient
from tests import builders
from tests.cluster.test_cli import muster_cli
from tests.conftest import MusterProcess
from tests.controller_helpers import admitted, create_queue, delete_queue, http_json, jobs_path
from tests.kube import wait_for

pytestmark = [pytest.mark.cluster]

DEADLINE = 600


def test_status_shows_an_estimate_behind_a_running_job_with_a_deadline(
    kube: KubeClient, namespace: str, muster: MusterProcess, kubeconfig: Path
) -> None:
    q = f"{namespace}-q"
    create_queue(kube, q, {"nominal": {"cpu": "4"}})
    try:
        holder = builders.job("holder", q, pods=4, runtime=f"{DEADLINE}s")
        holder["spec"]["activeDeadlineSeconds"] = DEADLINE
        kube.create(jobs_path(namespace), holder)
        wait_for(
            lambda: admitted(kube.get(f"{jobs_path(namespace)}/holder")),
            timeout=60,
            what="the holder gang to be admitted",
        )
        kube.create(jobs_path(namespace), builders.job("waiter", q, pods=2, runtime="2s"))
        url = f"{muster.status_url}/v1/gangs/{namespace}/waiter"

        def estimated() -> dict[str, Any] | None:
            try:
                found = http_json(url).get("estimate") or {}
            except urllib.error.HTTPError:
                return None  # not in the controller's cache yet
            return found if "expectedStart" in found else None

        found = wait_for(estimated, timeout=60, what="the controller's estimate for waiter")
        assert found is not None
        # The holder ends at its deadline at the latest: the waiter starts by then.
        assert 0 < found["startsInSeconds"] <= DEADLINE
        assert found["latestInSeconds"] is not None
        assert found["startsInSeconds"] <= found["latestInSeconds"] <= DEADLINE

        # `muster status` from the status service, and from the API with a kubeconfig.
        gang = f"{namespace}/waiter"
        served = muster_cli("status", gang, "--status-url", muster.status_url)
        assert served.returncode == 0, served.stderr
        line = next(x for x in served.stdout.splitlines() if x.startswith("expected start:"))
        assert "in ~" in line, served.stdout
        done = muster_cli("status", gang, "--kubeconfig", str(kubeconfig), "-o", "json")
        assert done.returncode == 0, done.stderr
        body = json.loads(done.stdout)
        assert 0 < body["estimate"]["startsInSeconds"] <= DEADLINE
        explained = muster_cli("explain", gang, "--kubeconfig", str(kubeconfig))
        assert explained.returncode == 0, explained.stderr
        assert any(x.startswith("expected start: in ~") for x in explained.stdout.splitlines())
    finally:
        delete_queue(kube, q)
