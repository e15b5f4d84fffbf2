"""The real operators beside the session's cluster (`muster cluster up --operators available`),
on kwok nodes, where their pods never really start: kwok's stages run each pod that carries
`muster.dev/runtime` for that long and succeed it.

- The JobSet controller: a suspended JobSet of two replicated Jobs is defaulted by its mutating
  webhook (registered with the apiserver by URL on loopback), its child Jobs are made suspended
  and resumed when the JobSet is, and the JobSet reaches Completed; its validating webhook
  refuses a bad one. The JobSet carries no `muster.dev/queue`: muster's webhook leaves it and
  its Jobs alone (muster's own handling of JobSets is tested elsewhere).
- The Flux Operator: a MiniCluster in a muster queue gets its Job from the real operator with
  `spec.jobLabels`, held suspended by muster's webhook (a MiniCluster has no suspend of its own),
  resumed when muster admits it, and run to completion on kwok; the operator's ConfigMap and
  headless Service are made too.

Skipped where the operator's source is not beside the repository.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient, Resource
from policies.vocabulary import QUEUE, RUNTIME, SUBMITTED
from simulator.controlplane.cluster import LocalCluster
from simulator.controlplane.minicluster import describe_job_maker, job_maker
from simulator.controlplane.operators import JOBSET, available, sources_root
from simulator.controlplane.processes import alive
from tests.builders import KWOK_TOLERATION
from tests.conftest import MusterProcess
from tests.controller_helpers import admitted, create_queue, delete_queue
from tests.kube import create_through_webhook, job_condition, wait_for

pytestmark = [pytest.mark.cluster]

JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets")
SERVICES = Resource("", "v1", "services")
CONFIGMAPS = Resource("", "v1", "configmaps")
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"


def pod_template(runtime: str = "3s") -> dict[str, Any]:
    """A pod kwok runs for `runtime`, on its tainted nodes."""
    return {
        "metadata": {"annotations": {RUNTIME: runtime}},
        "spec": {
            "restartPolicy": "Never",
            "tolerations": [KWOK_TOLERATION],
            "containers": [
                {"name": "main", "image": "muster-sim", "resources": {"requests": {"cpu": "1"}}}
            ],
        },
    }


def jobset(name: str, *, suspend: bool) -> dict[str, Any]:
    """A leader Job of 1 pod and 2 worker Jobs of 2 pods each."""

    def replicated(job: str, replicas: int, pods: int) -> dict[str, Any]:
        spec = {"parallelism": pods, "completions": pods, "template": pod_template()}
        return {"name": job, "replicas": replicas, "template": {"spec": spec}}

    return {
        "apiVersion": JOBSETS.api_version,
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "suspend": suspend,
            "replicatedJobs": [replicated("leader", 1, 1), replicated("workers", 2, 2)],
        },
    }


def child_jobs(kube: KubeClient, namespace: str, name: str) -> list[dict[str, Any]]:
    selector = {"labelSelector": f"{JOBSET_NAME}={name}"}
    return list(kube.get(kubeapi.JOBS.path(namespace), selector)["items"])


def suspended(jobs: list[dict[str, Any]]) -> list[bool]:
    return [bool(j["spec"].get("suspend")) for j in jobs]


def terminal(kube: KubeClient, namespace: str, name: str) -> str | None:
    state = kube.get(JOBSETS.path(namespace, name)).get("status", {}).get("terminalState")
    return str(state) if state else None


@pytest.mark.usefixtures("jobset_controller")
def test_a_suspended_jobset_is_held_resumed_and_completed_by_the_jobset_controller(
    kube: KubeClient, namespace: str
) -> None:
    stored = kube.create(JOBSETS.path(namespace), jobset("train", suspend=True))
    # Its mutating webhook answered: the defaults are JobSet's own.
    assert stored["spec"]["successPolicy"]["operator"] == "All"
    assert stored["spec"]["network"]["enableDNSHostnames"] is True
    for replicated in stored["spec"]["replicatedJobs"]:
        assert replicated["template"]["spec"]["completionMode"] == "Indexed"

    jobs = wait_for(
        lambda: j if len(j := child_jobs(kube, namespace, "train")) == 3 else None,
        timeout=60,
        what="the JobSet's 3 child Jobs",
    )
    assert sorted(j["metadata"]["name"] for j in jobs) == [
        "train-leader-0",
        "train-workers-0",
        "train-workers-1",
    ]
    assert suspended(jobs) == [True] * 3
    assert all(j["metadata"]["ownerReferences"][0]["kind"] == "JobSet" for j in jobs)
    assert not kube.get(kubeapi.PODS.path(namespace))["items"]
    # The headless Service of its pods' DNS names: stored, though nothing on kwok resolves it.
    services = wait_for(
        lambda: kube.get(SERVICES.path(namespace))["items"],
        timeout=30,
        what="the JobSet's headless Service",
    )
    assert [(s["metadata"]["name"], s["spec"]["clusterIP"]) for s in services] == [
        ("train", "None")
    ]

    kube.patch(JOBSETS.path(namespace, "train"), {"spec": {"suspend": False}})
    wait_for(
        lambda: suspended(child_jobs(kube, namespace, "train")) == [False] * 3,
        timeout=60,
        what="the child Jobs resumed with their JobSet",
    )
    state = wait_for(
        lambda: terminal(kube, namespace, "train"),
        timeout=120,
        what="the JobSet's terminal state",
    )
    assert state == "Completed"
    done = kube.get(JOBSETS.path(namespace, "train"))
    assert any(
        c["type"] == "Completed" and c["status"] == "True" for c in done["status"]["conditions"]
    )
    jobs = child_jobs(kube, namespace, "train")
    assert all(job_condition(j, "Complete") for j in jobs)
    assert sum(j["status"].get("succeeded", 0) for j in jobs) == 5


@pytest.mark.usefixtures("jobset_controller")
def test_the_jobset_validating_webhook_refuses_a_bad_jobset(
    kube: KubeClient, namespace: str
) -> None:
    body = jobset("bad", suspend=True)
    body["spec"]["successPolicy"] = {"operator": "All", "targetReplicatedJobs": ["nope"]}
    with pytest.raises(ApiError) as refused:
        kube.create(JOBSETS.path(namespace), body)
    assert refused.value.status in (400, 403, 422)
    assert "invalid replicatedJob name 'nope'" in refused.value.message


@pytest.fixture
def open_queue(kube: KubeClient, namespace: str) -> Iterator[str]:
    name = f"{namespace}-q"
    create_queue(kube, name, {"nominal": {"cpu": "100", "memory": "1Ti"}})
    # The webhook learns queues from its watch; give it a moment to see this one.
    time.sleep(1.0)
    yield name
    delete_queue(kube, name)


def test_the_flux_operator_makes_a_miniclusters_job_that_muster_admits_and_kwok_completes(
    kube: KubeClient,
    namespace: str,
    muster: MusterProcess,
    flux_operator: bool,
    open_queue: str,
) -> None:
    if not flux_operator:
        pytest.skip(f"MiniClusters' Jobs are made by {describe_job_maker(False)}")
    template = pod_template()
    body = {
        "apiVersion": kubeapi.MINICLUSTERS.api_version,
        "kind": "MiniCluster",
        "metadata": {"name": "lammps", "labels": {QUEUE: open_queue}},
        "spec": {
            "size": 2,
            "jobLabels": {"team": "physics"},
            "containers": [{"image": "muster-sim", "resources": {"requests": {"cpu": "1"}}}],
            "pod": {
                "annotations": template["metadata"]["annotations"],
                "tolerations": template["spec"]["tolerations"],
            },
        },
    }
    stored = create_through_webhook(kube, kubeapi.MINICLUSTERS.path(namespace), body)
    assert stored["spec"]["jobLabels"][QUEUE] == open_queue  # muster's webhook wrote it

    job_path = kubeapi.JOBS.path(namespace, "lammps")

    def job() -> dict[str, Any] | None:
        try:
            return kube.get(job_path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    made = wait_for(job, timeout=60, what="the operator's Job")
    # The operator copied spec.jobLabels; muster's webhook held the Job it created (suspended
    # and stamped with the MiniCluster's submission).
    assert (
        made["metadata"]["annotations"][SUBMITTED] == stored["metadata"]["annotations"][SUBMITTED]
    )
    assert made["metadata"]["labels"]["team"] == "physics"
    assert made["metadata"]["labels"][QUEUE] == open_queue
    owner = made["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("MiniCluster", "lammps", True)
    assert made["spec"]["parallelism"] == 2 and made["spec"]["completionMode"] == "Indexed"
    # What the operator makes besides the Job and muster never reads: Flux's init container,
    # its entrypoint ConfigMap and the headless Service of the brokers' DNS names.
    assert made["spec"]["template"]["spec"]["initContainers"]
    assert kube.get(CONFIGMAPS.path(namespace))["items"]
    headless = [
        s for s in kube.get(SERVICES.path(namespace))["items"] if s["spec"]["clusterIP"] == "None"
    ]
    assert headless

    wait_for(lambda: admitted(j) if (j := job()) else None, timeout=60, what="muster's admission")
    done = wait_for(
        lambda: j if (j := job()) and job_condition(j, "Complete") else None,
        timeout=120,
        what="the MiniCluster's Job complete on kwok",
    )
    assert done["spec"]["suspend"] is False and done["status"]["succeeded"] == 2


def test_an_elastic_minicluster_admitted_smaller_runs_only_its_admitted_pods(
    kube: KubeClient,
    namespace: str,
    muster: MusterProcess,
    flux_operator: bool,
    request: pytest.FixtureRequest,
) -> None:
    """muster admits a MiniCluster of 4 (minSize 2) at 2 into a queue of 2 cpus. The real Flux
    Operator keeps its Job's parallelism and completions at `spec.size` (its resizeCluster: the
    Job must match the MiniCluster), so writing 2 on the Job alone ran 4 pods on 2 cpus of
    quota; muster resizes the MiniCluster too (`MiniClusterKind.resize_owner`). The stand-in
    never resized the Job, so this was not seen before the real operator ran in tests."""
    queue = f"{namespace}-small"
    create_queue(kube, queue, {"nominal": {"cpu": "2", "memory": "100Gi"}})
    time.sleep(1.0)  # the webhook learns queues from its watch
    try:
        template = pod_template("30s")
        body = {
            "apiVersion": kubeapi.MINICLUSTERS.api_version,
            "kind": "MiniCluster",
            "metadata": {"name": "elastic", "labels": {QUEUE: queue}},
            "spec": {
                "size": 4,
                "minSize": 2,
                "containers": [{"image": "muster-sim", "resources": {"requests": {"cpu": "1"}}}],
                "pod": {
                    "annotations": template["metadata"]["annotations"],
                    "tolerations": template["spec"]["tolerations"],
                },
            },
        }
        create_through_webhook(kube, kubeapi.MINICLUSTERS.path(namespace), body)
        if not flux_operator:
            maker = job_maker(kube, namespace, real=False).start()
            request.addfinalizer(maker.stop)
        job_path = kubeapi.JOBS.path(namespace, "elastic")

        def admitted_job() -> dict[str, Any] | None:
            try:
                job = kube.get(job_path)
            except ApiError as exc:
                if exc.status == 404:
                    return None
                raise
            return job if admitted(job) else None

        job = wait_for(admitted_job, timeout=60, what="the MiniCluster's Job admitted")
        size = int(str(admitted(job)).rsplit("/", 1)[1])
        assert size == 2
        # Long enough for the operator's reconcile of the admission's update, and then some.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            spec = kube.get(job_path)["spec"]
            assert (spec["parallelism"], spec["completions"]) == (size, size)
            time.sleep(0.5)
    finally:
        delete_queue(kube, queue)


OWN_CLUSTER = "muster-operators-test"


def test_the_operators_are_supervised_like_the_control_plane() -> None:
    """On a cluster of its own: `up --operators` records them (pid, port, log), a second `up`
    keeps them, a kill -9 is restarted on the same ports (JobSet's webhooks answer again), and
    `down` stops them with the rest."""
    wanted = available()
    if not wanted:
        pytest.skip(f"no operator source in {sources_root()}")
    cluster = LocalCluster(name=OWN_CLUSTER, log=lambda _: None)
    cluster.down(quiet=True)
    try:
        names = ",".join(op.name for op in wanted)
        up = muster_cli("cluster", "up", "--name", OWN_CLUSTER, "--operators", names)
        assert up.returncode == 0, up.stderr
        assert cluster.operators() == wanted
        pids = {r.component: r.pid for r in cluster.records()}
        again = muster_cli("cluster", "up", "--name", OWN_CLUSTER, "--operators", names)
        assert again.returncode == 0 and "already running" in again.stderr, again.stderr
        assert {r.component: r.pid for r in cluster.records()} == pids
        status = muster_cli("cluster", "status", "--name", OWN_CLUSTER)
        assert status.returncode == 0
        for op in wanted:
            assert f"{op.component} {op.version}" in status.stdout
        if JOBSET in wanted:
            assert cluster.restart("jobset-controller") > 0
            with cluster.client() as client:
                dry = client.request(
                    "POST",
                    JOBSETS.path("default"),
                    jobset("dry", suspend=True),
                    params={"dryRun": "All"},
                )
            assert dry["spec"]["successPolicy"]["operator"] == "All"
        records = cluster.records()
        down = muster_cli("cluster", "down", "--name", OWN_CLUSTER)
        assert down.returncode == 0, down.stderr
        assert not any(alive(r) for r in records)
    finally:
        cluster.down(quiet=True)


def muster_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "muster.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
