"""muster's own updates skip its update review; everybody else's are reviewed.

The session's `muster run --local` runs as the local control plane's `muster-controller` user
(`simulator.controlplane.cluster.controller_kubeconfig`), so the configuration it registers
leaves that user's updates out of the update webhooks (`matchConditions`), and each admission
PATCH no longer costs the apiserver a call to the webhook. The admin's updates (the tests', a
tenant's) still go to it. Counted by the apiserver itself:
`apiserver_admission_webhook_request_total` of the Jobs' update webhook.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kubeport.kubeapi import KubeClient
from tests import builders
from tests.conftest import MusterProcess
from tests.controller_helpers import admitted, create_queue, delete_queue, jobs_path
from tests.kube import wait_for
from webhook.configuration import CONTROLLER_USER, NAME

pytestmark = pytest.mark.cluster

UPDATES = f"jobs-updates.{NAME}"


def update_reviews(kube: KubeClient) -> int:
    """UPDATE calls the apiserver made to the Jobs' update webhook so far."""
    status, body = kube.raw_get("/metrics")
    assert status == 200, body[:200]
    total = 0
    for line in body.decode().splitlines():
        if line.startswith("apiserver_admission_webhook_request_total{") and (
            f'name="{UPDATES}"' in line and 'operation="UPDATE"' in line
        ):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def test_musters_admission_is_not_reviewed_and_the_admins_update_is(
    kube: KubeClient, kubeconfig: Path, namespace: str, muster: MusterProcess
) -> None:
    config = kube.get(f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{NAME}")
    hooks = {hook["name"]: hook for hook in config["webhooks"]}
    conditions = hooks[UPDATES].get("matchConditions") or []
    assert [c["expression"] for c in conditions] == [
        f'request.userInfo.username != "{CONTROLLER_USER}"'
    ]
    # Creates are reviewed whoever sends them.
    assert all("matchConditions" not in h for n, h in hooks.items() if "updates" not in n)

    queue = f"{namespace}-q"
    create_queue(kube, queue, {"nominal": {"cpu": "4"}})
    try:
        before = update_reviews(kube)
        kube.create(jobs_path(namespace), builders.job("own", queue, pods=1, runtime=None))
        wait_for(
            lambda: admitted(kube.get(f"{jobs_path(namespace)}/own")),
            timeout=60,
            what="the Job admitted",
        )
        assert update_reviews(kube) == before  # muster's release PATCH: not sent to review
        kube.patch(
            f"{jobs_path(namespace)}/own",
            {"metadata": {"labels": {"team": "a"}}},
        )
        wait_for(
            lambda: update_reviews(kube) > before,
            timeout=10,
            what="the admin's update reviewed",
        )
        assert update_reviews(kube) == before + 1
    finally:
        delete_queue(kube, queue)
