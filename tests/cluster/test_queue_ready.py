"""Each Queue's `Ready` condition, written by the controller: a cycle, a missing parent and the
queues below them say so on the object, and a gang of such a queue is told why it waits; the
Ready and Reason columns of `kubectl get queues` show it."""

from __future__ import annotations

from typing import Any

import pytest

from kubeport.kubeapi import TABLE, KubeClient
from tests import builders
from tests.cluster.test_cli import muster_cli
from tests.conftest import MusterProcess
from tests.controller_helpers import (
    QUEUES,
    admitted,
    create_queue,
    delete_queue,
    jobs_path,
    pending_reason,
)
from tests.kube import create_through_webhook, wait_for

pytestmark = [pytest.mark.cluster]


def ready(kube: KubeClient, name: str) -> dict[str, Any] | None:
    conditions = (kube.get(f"{QUEUES}/{name}").get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Ready"), None)


def wait_ready(kube: KubeClient, name: str, status: str, reason: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        condition = ready(kube, name)
        if condition is not None and (condition["status"], condition["reason"]) == (status, reason):
            return condition
        return None

    return wait_for(probe, timeout=60, what=f"queue {name} Ready={status} ({reason})")


def test_a_cycle_and_a_missing_parent_show_on_the_queues_and_in_the_gangs_reason(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    a, b, c, d, ok = (f"{namespace}-{x}" for x in ("a", "b", "c", "d", "ok"))
    create_queue(kube, a, {"parent": b, "nominal": {"cpu": "4"}})
    create_queue(kube, b, {"parent": a})
    create_queue(kube, c, {"parent": f"{namespace}-nope"})
    create_queue(kube, d, {"parent": a, "nominal": {"cpu": "4"}})
    create_queue(kube, ok, {"nominal": {"cpu": "4"}})
    try:
        for name in (a, b):
            cycle = wait_ready(kube, name, "False", "ParentCycle")
            assert f"({a} -> {b} -> {a})" in cycle["message"], cycle
        missing = wait_ready(kube, c, "False", "ParentNotFound")
        assert f'spec.parent "{namespace}-nope" names no Queue' in missing["message"]
        below = wait_ready(kube, d, "False", "ParentNotReady")
        assert f'queue "{a}" above it is not ready (ParentCycle)' in below["message"]
        active = wait_ready(kube, ok, "True", "Active")

        # A gang of d, the leaf below the cycle.
        create_through_webhook(
            kube, jobs_path(namespace), builders.job("g", d, pods=2, runtime="2s")
        )
        url = f"{muster.status_url}/v1/gangs/{namespace}/g"
        status = wait_for(
            lambda: pending_reason(url, "QueueNotReady"), timeout=60, what="QueueNotReady"
        )
        assert status["reason"]["message"].startswith(
            f'queue "{d}" is not ready (ParentNotReady): queue "{a}" above it is not ready '
            "(ParentCycle)"
        )
        explained = muster_cli("explain", f"{namespace}/g", "--kubeconfig", str(muster.kubeconfig))
        assert explained.returncode == 0, explained.stderr
        assert "ParentCycle" in explained.stdout and "kubectl get queues" in explained.stdout

        # b becomes the root: a and d are Ready, the gang is admitted (d's 4 cpu); ok's
        # condition is the same one (its transition time does not move).
        kube.patch(f"{QUEUES}/{b}", {"spec": {"parent": None}})
        wait_ready(kube, b, "True", "Active")
        wait_ready(kube, a, "True", "Active")
        wait_ready(kube, d, "True", "Active")
        wait_for(
            lambda: admitted(kube.get(f"{jobs_path(namespace)}/g")),
            timeout=60,
            what="the gang admitted once its queue is Ready",
        )
        assert ready(kube, ok) == active
    finally:
        for name in (d, a, b, c, ok):
            delete_queue(kube, name)


def printed(kube: KubeClient, names: list[str]) -> dict[str, dict[str, Any]]:
    """The rows `kubectl get queues` prints for `names`: column name -> cell, as the apiserver
    renders the CRD's additionalPrinterColumns (a Table)."""
    table = kube.request("GET", QUEUES, accept=TABLE)
    assert table["kind"] == "Table", table.get("kind")
    columns = [c["name"] for c in table["columnDefinitions"]]
    rows = {row["cells"][0]: dict(zip(columns, row["cells"], strict=True)) for row in table["rows"]}
    return {name: rows[name] for name in names if name in rows}


def test_kubectl_get_queues_shows_ready_and_reason(kube: KubeClient, muster: MusterProcess) -> None:
    """The Ready and Reason columns (`kubectl get queues`) of the queues that are themselves on a
    cycle, one whose parent is missing, specs the CRD lets through but muster cannot use
    (backoff.max below backoff.base: a rule across two Go durations, which the CRD's schema does
    not check; a queue that is its own parent), and an Active one."""
    names = [f"table-{x}-{muster.proc.pid}" for x in ("a", "b", "self", "orphan", "bad", "ok")]
    a, b, itself, orphan, bad, ok = names
    create_queue(kube, a, {"parent": b})
    create_queue(kube, b, {"parent": a})
    create_queue(kube, itself, {"parent": itself})
    create_queue(kube, orphan, {"parent": f"{orphan}-nope"})
    create_queue(kube, bad, {"backoff": {"base": "10m", "max": "1s"}})
    create_queue(kube, ok, {"nominal": {"cpu": "4"}})
    expected = {
        a: ("False", "ParentCycle"),
        b: ("False", "ParentCycle"),
        itself: ("False", "InvalidSpec"),
        orphan: ("False", "ParentNotFound"),
        bad: ("False", "InvalidSpec"),
        ok: ("True", "Active"),
    }
    try:
        for name, (status, reason) in expected.items():
            wait_ready(kube, name, status, reason)
        rows = printed(kube, names)
        assert {n: (rows[n]["Ready"], rows[n]["Reason"]) for n in names} == expected
        assert rows[itself]["Parent"] == itself
        assert "backoff.max" in (ready(kube, bad) or {})["message"]
        assert "names the queue itself" in (ready(kube, itself) or {})["message"]
    finally:
        for name in names:
            delete_queue(kube, name)
