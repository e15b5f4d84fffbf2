"""Recovery on the real control plane: a gang that keeps clogging fails after its backoff limit,
a running gang that loses a node is evicted, and the documented status client follows a gang."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from typing import Any

import pytest

from kubeport.kubeapi import KubeClient
from policies.vocabulary import EVICTED_REASON, STATE
from simulator.controlplane.nodes import NODE_GROUP_LABEL
from tests import builders
from tests.conftest import REPO, MusterProcess
from tests.controller_helpers import (
    admitted,
    create_nodes,
    create_queue,
    delete_nodes,
    delete_queue,
    event_reasons,
    evictions,
    jobs_path,
    metric,
)
from tests.kube import wait_for

pytestmark = [pytest.mark.cluster]


def annotations_of(job: dict[str, Any]) -> dict[str, str]:
    return dict(job["metadata"].get("annotations") or {})


def test_a_gang_past_its_backoff_limit_fails_and_stays_suspended(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """nodeFit off admits a gang whose pods can never be placed: it clogs, is evicted and
    requeued once (limit 1), clogs again, and is marked Failed with an Event."""
    q = f"{namespace}-bo"
    create_queue(
        kube,
        q,
        {"nodeFit": False, "clogTimeout": "3s", "backoff": {"base": "1s", "max": "1s", "limit": 1}},
    )
    clogs_before = metric(muster.metrics_url, "muster_clogs_detected_total")
    path = f"{jobs_path(namespace)}/nowhere"
    try:
        kube.create(
            jobs_path(namespace),
            builders.job(
                "nowhere", q, pods=2, node_selector={"muster-test/no-such-node": "x"}, runtime="2s"
            ),
        )
        job = wait_for(
            lambda: j if annotations_of(j := kube.get(path)).get(STATE) == "Failed" else None,
            timeout=120,
            what="the gang marked Failed after its second eviction",
        )
        assert evictions(job) == 2
        assert annotations_of(job)[EVICTED_REASON] == "Clogged"
        assert job["spec"]["suspend"] is True

        def failed_event() -> list[str] | None:
            reasons = event_reasons(kube, namespace, "nowhere")
            return reasons if "Failed" in reasons else None

        reasons = wait_for(
            failed_event,
            timeout=30,
            what="a Failed Event",
        )
        assert "Evicted" in reasons and "Admitted" in reasons, reasons
        assert metric(muster.metrics_url, "muster_clogs_detected_total") >= clogs_before + 2
        # Failed is final: several cycles later it is still suspended and not admitted again.
        time.sleep(5)
        job = kube.get(path)
        assert job["spec"]["suspend"] is True and admitted(job) is None
        assert evictions(job) == 2
    finally:
        delete_queue(kube, q)


def test_a_running_gang_that_loses_a_node_is_evicted_below_minimum(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """Two 6-cpu pods on two 8-cpu nodes: the gang runs. One node goes away with its pod; the
    replacement pod has nowhere to go, so the gang is below its minimum and, after the clog
    timeout, evicted with reason BelowMinimum."""
    group = f"lost-{namespace}"[:60]
    nodes: dict[str, dict[str, str]] = {f"{group}-a": {}, f"{group}-b": {}}
    create_nodes(kube, group, nodes)
    q = f"{namespace}-lost"
    create_queue(kube, q, {"clogTimeout": "4s", "backoff": {"base": "60s", "max": "60s"}})
    path = f"{jobs_path(namespace)}/pair"
    pods_path = f"/api/v1/namespaces/{namespace}/pods"
    try:
        kube.create(
            jobs_path(namespace),
            builders.job(
                "pair", q, pods=2, cpu="6", runtime="600s", node_selector={NODE_GROUP_LABEL: group}
            ),
        )
        wait_for(
            lambda: (kube.get(path).get("status") or {}).get("ready") == 2,
            timeout=90,
            what="both pods of the gang ready",
        )
        # Wait until the controller counts the gang as having reached its minimum.
        time.sleep(2)
        pods = kube.get(pods_path, {"labelSelector": "muster.dev/gang=pair"})["items"]
        lost = next(p for p in pods if p["spec"].get("nodeName") == f"{group}-b")
        kube.delete(f"/api/v1/nodes/{group}-b")
        kube.request(
            "DELETE",
            f"{pods_path}/{lost['metadata']['name']}",
            {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
        )
        job = wait_for(
            lambda: j if evictions(j := kube.get(path)) else None,
            timeout=120,
            what="the gang evicted once it runs below its minimum",
        )
        assert annotations_of(job)[EVICTED_REASON] == "BelowMinimum"
        assert job["spec"]["suspend"] is True
        wait_for(
            lambda: "Evicted" in event_reasons(kube, namespace, "pair"),
            timeout=30,
            what="an Evicted Event",
        )
    finally:
        delete_queue(kube, q)
        delete_nodes(kube, group)


def documented_client() -> str:
    """The Python block after 'A pod with only the standard library' in docs/metrics.md."""
    text = (REPO / "docs/metrics.md").read_text()
    after = text.split("A pod with only the standard library", 1)[1]
    found = re.search(r"```python\n(.*?)```", after, re.S)
    assert found, "docs/metrics.md lost its urllib client"
    return found.group(1)


def test_the_documented_urllib_client_follows_its_gang(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    q = f"{namespace}-client"
    create_queue(kube, q, {"nominal": {"cpu": "8"}})
    try:
        kube.create(jobs_path(namespace), builders.job("follow", q, pods=2, runtime="3s"))
        done = subprocess.run(
            [sys.executable, "-c", documented_client()],
            env={**os.environ, "MUSTER_STATUS_URL": muster.status_url}
            | {"NS": namespace, "JOB": "follow"},
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        last = done.stdout.splitlines()[-1]
        assert last.split()[0] in ("Running", "Finished"), done.stdout
    finally:
        delete_queue(kube, q)


def test_the_documented_urllib_client_stops_when_its_job_is_deleted(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    # A gang that waits (a long one holds its queue's room), then is deleted: the snippet,
    # holding a long-poll, hears a 404 for a gang it has seen, and stops saying so instead of
    # asking again every second forever.
    q = f"{namespace}-gone"
    create_queue(kube, q, {"nominal": {"cpu": "1"}})
    kube.create(jobs_path(namespace), builders.job("holder", q, pods=1, cpu="1", runtime="600s"))
    holder = f"{jobs_path(namespace)}/holder"
    wait_for(lambda: admitted(kube.get(holder)), timeout=60, what="the holder admitted")
    client = subprocess.Popen(
        [sys.executable, "-c", documented_client()],
        env={**os.environ, "MUSTER_STATUS_URL": muster.status_url}
        | {"NS": namespace, "JOB": "gone"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        kube.create(jobs_path(namespace), builders.job("gone", q, pods=1, cpu="1", runtime="2s"))
        assert client.stdout is not None
        first = client.stdout.readline()  # the gang seen, waiting behind the holder
        assert first.split()[0] in ("Waiting", "Pending"), first
        kube.delete(f"{jobs_path(namespace)}/gone")
        _, stderr = client.communicate(timeout=60)
        assert client.returncode == 1, stderr
        assert "gang gone was deleted" in stderr
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
        delete_queue(kube, q)
