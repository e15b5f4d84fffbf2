"""MiniClusters through muster, with the real Flux Operator (issue 29): preempted and restored,
and a controller killed with SIGKILL admits nothing twice, as tests/cluster/test_jobset.py
shows for JobSets.

A MiniCluster has no suspend of its own: muster holds, admits, preempts and restores the
Indexed Job the operator makes for it (`policies.kinds.minicluster`), so what these tests look
at is that Job and its pods. The operator runs beside the control plane
(`muster cluster up --operators flux`); without it these tests are skipped, saying why: the
stand-in reconciler models the Job the operator makes, not what the operator does to that Job
afterwards (it resizes it to `spec.size`, for one) while muster suspends and resumes it."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from policies.kinds.pinning import PLACEMENT_GATE
from policies.vocabulary import (
    ADMITTED,
    EVICTED_REASON,
    PREEMPTIONS,
    PRIORITY,
    QUEUE,
    RESTORE,
    RUNTIME,
)
from simulator.controlplane.minicluster import describe_job_maker
from tests.builders import KWOK_TOLERATION
from tests.conftest import MusterProcess
from tests.controller_helpers import create_queue, delete_queue, in_background
from tests.kube import create_through_webhook, job_condition, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("real_flux_operator")]

JOB_NAME = "batch.kubernetes.io/job-name"


@pytest.fixture
def real_flux_operator(flux_operator: bool) -> None:
    if not flux_operator:
        pytest.skip(f"MiniClusters' Jobs are made by {describe_job_maker(False)}")


def minicluster(
    name: str,
    queue: str,
    *,
    size: int,
    runtime: str,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A MiniCluster of `size` pods of 1 cpu, each run by kwok for `runtime` and succeeded."""
    return {
        "apiVersion": kubeapi.MINICLUSTERS.api_version,
        "kind": "MiniCluster",
        "metadata": {
            "name": name,
            "labels": {QUEUE: queue},
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "size": size,
            "containers": [{"image": "muster-sim", "resources": {"requests": {"cpu": "1"}}}],
            "pod": {"annotations": {RUNTIME: runtime}, "tolerations": [KWOK_TOLERATION]},
        },
    }


def create(kube: KubeClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return create_through_webhook(kube, kubeapi.MINICLUSTERS.path(namespace), body, timeout=90)


def job(kube: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    """The MiniCluster's Job, as the operator made it and muster changed it; None until made."""
    try:
        return kube.get(kubeapi.JOBS.path(namespace, name))
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def notes(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def live_pods(
    kube: KubeClient, namespace: str, name: str, *, terminating: bool = True
) -> list[dict[str, Any]]:
    """The pods of the MiniCluster's Job that are neither succeeded nor failed; without those
    being deleted unless `terminating`."""
    selector = {"labelSelector": f"{JOB_NAME}={name}"}
    pods = kube.get(kubeapi.PODS.path(namespace), selector)["items"]
    return [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        and (terminating or not p["metadata"].get("deletionTimestamp"))
    ]


def complete(kube: KubeClient, namespace: str, name: str) -> bool:
    made = job(kube, namespace, name)
    return made is not None and job_condition(made, "Complete")


def completes(kube: KubeClient, namespace: str, name: str, size: int, timeout: float) -> str:
    """When the MiniCluster's Job completed (`status.completionTime`), once it has, with all of
    its `size` pods succeeded."""
    done: dict[str, Any] = wait_for(
        lambda: j if (j := job(kube, namespace, name)) and job_condition(j, "Complete") else None,
        timeout=timeout,
        what=f"the MiniCluster {name}'s Job complete",
    )
    assert done["status"]["succeeded"] == size, done["status"]
    return str(done["status"]["completionTime"])


@contextmanager
def queue(kube: KubeClient, name: str, spec: dict[str, Any]) -> Iterator[str]:
    create_queue(kube, name, spec)
    time.sleep(1.0)  # the webhook learns queues from its watch
    try:
        yield name
    finally:
        delete_queue(kube, name)


@contextmanager
def counting(
    kube: KubeClient, namespace: str, names: list[str], *, terminating: bool = True
) -> Iterator[list[int]]:
    """Counts the live pods of the MiniClusters `names` (`live_pods`), all together, every
    0.25 s in a thread while the body runs: the list it yields gets one count per look."""
    counts: list[int] = []

    def look(own: KubeClient) -> None:
        pods = (live_pods(own, namespace, n, terminating=terminating) for n in names)
        counts.append(sum(len(p) for p in pods))

    with in_background(kube, look, 0.25):
        yield counts


@contextmanager
def as_created(kube: KubeClient, namespace: str, name: str) -> Iterator[dict[str, Any]]:
    """Fills the dict it yields with the Job `name` as the apiserver stored it at create (the
    operator's, as muster's webhook held it), from a watch opened before the MiniCluster is
    created: muster may admit the Job, pinning its pod template, before any GET sees it."""
    seen: dict[str, Any] = {}
    stream = kube.watch(
        kubeapi.JOBS.path(namespace), {"fieldSelector": f"metadata.name={name}"}, 300
    )

    def run() -> None:
        for event in stream:
            if event.get("type") == "ADDED":
                seen.update(event["object"])
                return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stream.close()
        thread.join(timeout=10)


def test_a_preempted_minicluster_gets_its_template_back_and_the_preemptor_runs(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """A low-priority MiniCluster of 4 pods holds the queue's 4 cpus for a long time; a
    high-priority one of the same queue preempts it (withinQueue: LowerPriority): the low one's
    Job is suspended with its pod template as the operator made it (muster's pin taken off), its
    pods go, the high one runs all of its pods and completes, then the low one is admitted again
    and completes. At no look do more than 4 of their pods live (but for the victim's being
    deleted)."""
    spec = {
        "nominal": {"cpu": "4", "memory": "100Gi"},
        "preemption": {"withinQueue": "LowerPriority"},
    }
    with queue(kube, f"{namespace}-p", spec) as q:
        with as_created(kube, namespace, "low") as made:
            create(kube, namespace, minicluster("low", q, size=4, runtime="20s"))
            first_pods = wait_for(
                lambda: p if len(p := live_pods(kube, namespace, "low")) == 4 else None,
                timeout=90,
                what="the low-priority MiniCluster's 4 pods",
            )
        assert made, "no watch event of the low-priority MiniCluster's Job"
        # Held at create by muster's webhook, as the operator made it: its template unpinned.
        assert made["spec"]["suspend"] is True and ADMITTED not in notes(made)
        created = made["spec"]["template"]
        assert PLACEMENT_GATE not in str(created["spec"].get("schedulingGates"))
        assert "nodeAffinity" not in (created["spec"].get("affinity") or {})
        # Admitted, it runs pinned (a required node affinity on the nodes of muster's plan).
        running = job(kube, namespace, "low")
        assert running is not None and ADMITTED in notes(running)
        assert "nodeAffinity" in running["spec"]["template"]["spec"]["affinity"]
        high = minicluster("high", q, size=4, runtime="6s", annotations={PRIORITY: "10"})
        # Not counting the victim's pods once they are being deleted: the Job controller deletes
        # them when muster suspends the Job, and muster admits the preemptor in the same plan,
        # as the victim's quota is free from then on (as Kueue's is, for a Job: its
        # status.active leaves out terminating pods). On kwok they go within a second.
        with counting(kube, namespace, ["low", "high"], terminating=False) as counts:
            create(kube, namespace, high)

            def preempted() -> dict[str, Any] | None:
                now = job(kube, namespace, "low")
                if now and PREEMPTIONS in notes(now) and RESTORE not in notes(now):
                    return now
                return None

            victim = wait_for(preempted, timeout=60, what="the low-priority MiniCluster preempted")
            assert notes(victim)[EVICTED_REASON] == "Preempted"
            assert victim["spec"]["suspend"] is True or ADMITTED in notes(victim)
            if victim["spec"]["suspend"]:
                assert ADMITTED not in notes(victim)
                assert victim["spec"]["template"] == created
            first = {p["metadata"]["name"] for p in first_pods}
            wait_for(
                lambda: (
                    not first & {p["metadata"]["name"] for p in live_pods(kube, namespace, "low")}
                ),
                timeout=60,
                what="the preempted MiniCluster's pods gone",
            )
            high_done = completes(kube, namespace, "high", 4, 120)
            low_done = completes(kube, namespace, "low", 4, 180)
        assert high_done <= low_done, (high_done, low_done)
        assert counts and max(counts) <= 4, f"{max(counts)} pods lived at once on 4 cpus of quota"


def test_kill_9_while_miniclusters_are_admitted_admits_nothing_twice(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """Five MiniClusters of 2 pods in a queue of 4 cpus (two at a time), the controller killed
    with SIGKILL twice while they are admitted: every MiniCluster completes with its 2 pods
    succeeded, and at no look do more than 4 of their pods live."""
    names = [f"mc-{i}" for i in range(5)]
    with (
        queue(kube, f"{namespace}-k", {"nominal": {"cpu": "4", "memory": "100Gi"}}) as q,
        counting(kube, namespace, names) as counts,
    ):
        for name in names:
            create(kube, namespace, minicluster(name, q, size=2, runtime="4s"))
        killed_among: set[str] = set()
        kills = 0
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            running = {n for n in names if live_pods(kube, namespace, n)}
            # Each kill while MiniClusters run that were not running at the one before: the
            # second falls on admissions the restarted controller made.
            if kills < 2 and running - killed_among:
                muster.restart(signal.SIGKILL)
                kills += 1
                killed_among |= running
            if all(complete(kube, namespace, n) for n in names):
                break
            time.sleep(0.5)
    assert kills == 2
    assert [complete(kube, namespace, n) for n in names] == [True] * 5
    for name in names:
        done = job(kube, namespace, name)
        assert done is not None
        assert (done["status"].get("succeeded"), done["status"].get("failed")) == (2, None)
    assert counts and max(counts) <= 4, f"{max(counts)} pods lived at once on 4 cpus of quota"
