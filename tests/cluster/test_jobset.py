"""JobSets through muster, with the real JobSet controller (issue 29): a JobSet is one gang of a
pod set per replicated Job, held at create by its own `spec.suspend`, admitted whole against
quota, each pod placed on a node of its own pod set's plan, evicted as a clog and preempted
with its templates put back, and a controller killed with SIGKILL admits nothing twice.

The JobSet controller runs beside the control plane (`muster cluster up --operators jobset`);
without it these tests are skipped by the `jobset_controller` fixture, which says why."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from kubeport import kubeapi
from kubeport.kubeapi import KubeClient, Resource
from policies.kinds.pinning import PLACEMENT_GATE, decode_placement
from policies.vocabulary import (
    ADMITTED,
    CLOG_TIMEOUT,
    EVICTED_REASON,
    GANG,
    PLACEMENT,
    POD_SET,
    PREEMPTIONS,
    PRIORITY,
    QUEUE,
    RESTORE,
    SUBMITTED,
)
from tests.builders import KWOK_TOLERATION
from tests.conftest import MusterProcess
from tests.controller_helpers import create_queue, delete_queue
from tests.kube import create_through_webhook, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("jobset_controller")]

JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets")
HOSTNAME = "kubernetes.io/hostname"


def jobset(
    name: str,
    queue: str,
    *,
    runtime: str = "3s",
    workers: int = 2,
    annotations: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A leader Job of 1 pod and `workers` worker Jobs of 2 pods, 1 cpu each, on kwok."""

    def replicated(job: str, replicas: int, pods: int) -> dict[str, Any]:
        pod: dict[str, Any] = {
            "restartPolicy": "Never",
            "tolerations": [KWOK_TOLERATION],
            "containers": [
                {"name": "main", "image": "muster-sim", "resources": {"requests": {"cpu": "1"}}}
            ],
        }
        if node_selector:
            pod["nodeSelector"] = dict(node_selector)
        template = {"metadata": {"annotations": {"muster.dev/runtime": runtime}}, "spec": pod}
        spec = {"parallelism": pods, "completions": pods, "template": template}
        return {"name": job, "replicas": replicas, "template": {"spec": spec}}

    return {
        "apiVersion": JOBSETS.api_version,
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "labels": {QUEUE: queue},
            "annotations": dict(annotations or {}),
        },
        "spec": {"replicatedJobs": [replicated("leader", 1, 1), replicated("workers", workers, 2)]},
    }


def get(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    return kube.get(JOBSETS.path(namespace, name))


def notes(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def gang_pods(kube: KubeClient, namespace: str, name: str) -> list[dict[str, Any]]:
    selector = {"labelSelector": f"{GANG}={name}"}
    pods = kube.get(kubeapi.PODS.path(namespace), selector)["items"]
    return [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


def terminal(kube: KubeClient, namespace: str, name: str) -> str | None:
    state = (get(kube, namespace, name).get("status") or {}).get("terminalState")
    return str(state) if state else None


@contextmanager
def queue(kube: KubeClient, name: str, spec: dict[str, Any]) -> Iterator[str]:
    create_queue(kube, name, spec)
    time.sleep(1.0)  # the webhook learns queues from its watch
    try:
        yield name
    finally:
        delete_queue(kube, name)


def test_a_jobset_is_held_admitted_whole_within_quota_and_placed_per_pod_set(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """Two JobSets of 5 pods (1 cpu each) in a queue of 5 cpus: the first is admitted whole, the
    second waits held until the first ends. Each pod runs on a node its own pod set was planned
    on, as many per node as planned; at no time do more than 5 of their pods live."""
    path = JOBSETS.path(namespace)
    with queue(kube, f"{namespace}-q", {"nominal": {"cpu": "5"}}) as q:
        first = create_through_webhook(kube, path, jobset("first", q, runtime="8s"))
        second = create_through_webhook(kube, path, jobset("second", q, runtime="2s"))
        for stored in (first, second):
            assert stored["spec"]["suspend"] is True
            assert {QUEUE, SUBMITTED} <= set(notes(stored))
            labels = [
                r["template"]["spec"]["template"]["metadata"]["labels"]
                for r in stored["spec"]["replicatedJobs"]
            ]
            name = stored["metadata"]["name"]
            assert [(lb[GANG], lb[POD_SET]) for lb in labels] == [
                (name, "leader"),
                (name, "workers"),
            ]
        admitted = wait_for(
            lambda: j if ADMITTED in notes(j := get(kube, namespace, "first")) else None,
            timeout=60,
            what="the first JobSet admitted",
        )
        assert notes(admitted)[ADMITTED].endswith("/5")
        plans = decode_placement(notes(admitted)[PLACEMENT], PLACEMENT)
        assert {name: sum(p.values()) for name, p in plans.items()} == {"leader": 1, "workers": 4}
        gates = [
            r["template"]["spec"]["template"]["spec"]["schedulingGates"]
            for r in admitted["spec"]["replicatedJobs"]
        ]
        assert gates == [[{"name": PLACEMENT_GATE}]] * 2
        # The second waits: its queue's quota is taken.
        assert get(kube, namespace, "second")["spec"]["suspend"] is True
        pods = wait_for(
            lambda: (
                p
                if len(p := gang_pods(kube, namespace, "first")) == 5
                and all(x["spec"].get("nodeName") for x in p)
                else None
            ),
            timeout=90,
            what="the first JobSet's 5 pods bound",
        )
        hosts = {n["metadata"]["name"]: n["metadata"]["labels"].get(HOSTNAME) for n in _nodes(kube)}
        for pod_set, plan in plans.items():
            bound = Counter(
                p["spec"]["nodeName"] for p in pods if p["metadata"]["labels"][POD_SET] == pod_set
            )
            assert dict(bound) == plan, (pod_set, dict(bound), plan)
            for p in pods:
                if p["metadata"]["labels"][POD_SET] == pod_set:
                    assert p["spec"]["nodeSelector"][HOSTNAME] == hosts[p["spec"]["nodeName"]]
        live = len(gang_pods(kube, namespace, "second"))
        assert live == 0, "the second JobSet's pods ran beside the first's"
        assert ends(kube, namespace, "first", 120) == ("Completed")
        assert ends(kube, namespace, "second", 120) == ("Completed")


def ends(kube: KubeClient, namespace: str, name: str, timeout: float) -> str:
    """The JobSet's terminal state, once it has one."""
    state: str = wait_for(
        lambda: terminal(kube, namespace, name), timeout=timeout, what=f"{name} ends"
    )
    return state


def _nodes(kube: KubeClient) -> list[dict[str, Any]]:
    return list(kube.get(kubeapi.NODES.path())["items"])


def test_a_clogged_jobset_is_evicted_and_its_templates_put_back(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """A JobSet whose pods select no node, with its own clog timeout of 4 s, in a node-blind
    queue: admitted, never ready, evicted as Clogged: suspended again with its replicated Jobs'
    templates as created (no gate) and neither muster.dev/restore nor muster.dev/placement."""
    path = JOBSETS.path(namespace)
    spec = {"nodeFit": False, "clogTimeout": "10m", "backoff": {"base": "5m", "max": "5m"}}
    with queue(kube, f"{namespace}-blind", spec) as q:
        body = jobset(
            "stuck",
            q,
            annotations={CLOG_TIMEOUT: "4s"},
            node_selector={"muster.dev/test-no-such-node": "true"},
        )
        created = create_through_webhook(kube, path, body)
        wait_for(
            lambda: ADMITTED in notes(get(kube, namespace, "stuck")),
            timeout=60,
            what="the JobSet admitted",
        )

        def evicted() -> dict[str, Any] | None:
            now = get(kube, namespace, "stuck")
            done = notes(now).get(EVICTED_REASON) == "Clogged" and now["spec"]["suspend"]
            return now if done and RESTORE not in notes(now) else None

        now = wait_for(evicted, timeout=90, what="the JobSet evicted and restored")
        assert PLACEMENT not in notes(now)
        templates = [r["template"]["spec"]["template"] for r in now["spec"]["replicatedJobs"]]
        assert templates == [
            r["template"]["spec"]["template"] for r in created["spec"]["replicatedJobs"]
        ]


def test_a_preempted_jobset_gets_its_templates_back_and_the_preemptor_runs(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """A low-priority JobSet holds the queue's 5 cpus for a long time; a high-priority one of
    the same queue preempts it (withinQueue: LowerPriority), runs, and ends; the victim was
    suspended with its templates as created, then admitted again."""
    path = JOBSETS.path(namespace)
    spec = {"nominal": {"cpu": "5"}, "preemption": {"withinQueue": "LowerPriority"}}
    with queue(kube, f"{namespace}-p", spec) as q:
        low = create_through_webhook(kube, path, jobset("low", q, runtime="20s"))
        wait_for(
            lambda: len(gang_pods(kube, namespace, "low")) == 5,
            timeout=90,
            what="the low-priority JobSet running",
        )
        high = jobset("high", q, runtime="2s", annotations={PRIORITY: "10"})
        create_through_webhook(kube, path, high)

        def preempted() -> dict[str, Any] | None:
            now = get(kube, namespace, "low")
            return now if PREEMPTIONS in notes(now) and RESTORE not in notes(now) else None

        victim = wait_for(preempted, timeout=60, what="the low-priority JobSet preempted")
        assert victim["spec"]["suspend"] is True or ADMITTED in notes(victim)
        templates = [r["template"]["spec"]["template"] for r in victim["spec"]["replicatedJobs"]]
        created = [r["template"]["spec"]["template"] for r in low["spec"]["replicatedJobs"]]
        if victim["spec"]["suspend"]:
            assert templates == created
        assert ends(kube, namespace, "high", 120) == ("Completed")
        assert ends(kube, namespace, "low", 180) == ("Completed")


def test_kill_9_while_jobsets_are_admitted_admits_nothing_twice(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """Six JobSets of 5 pods in a queue of 10 cpus, the controller killed with SIGKILL twice
    while they are admitted: every JobSet completes, none is admitted twice at once, and at no
    look do more than 10 of their pods live."""
    path = JOBSETS.path(namespace)
    names = [f"js-{i}" for i in range(6)]
    with queue(kube, f"{namespace}-k", {"nominal": {"cpu": "10"}}) as q:
        for name in names:
            create_through_webhook(kube, path, jobset(name, q, runtime="4s"), timeout=90)
        most = 0
        kills = 0
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            live = sum(len(gang_pods(kube, namespace, n)) for n in names)
            most = max(most, live)
            if kills < 2 and live >= 5:
                muster.restart(signal.SIGKILL)
                kills += 1
            if all(terminal(kube, namespace, n) for n in names):
                break
            time.sleep(1.0)
        assert kills == 2
        assert [terminal(kube, namespace, n) for n in names] == ["Completed"] * 6
        assert most <= 10, f"{most} pods of the JobSets lived at once on 10 cpus of quota"
