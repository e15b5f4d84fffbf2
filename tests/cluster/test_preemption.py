"""Preemption by the real controller: a queue that borrows the whole cohort gives capacity back
to a queue whose rules reclaim it; victims are suspended, requeued at their submission stamps
without backoff, and finish later. State lives in the cluster: kill -9 during preemptions loses
nothing, admits nothing twice and never exceeds the cohort's quota.

Each test runs on its own kwok node group (4 nodes of 8 cpu) that only its gangs select, under a
cohort whose quota is those 32 cpu.
"""

from __future__ import annotations

import re
import signal
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from kubeport.kubeapi import ApiError, KubeClient
from policies.vocabulary import (
    ADMITTED,
    EVICTED_REASON,
    EVICTIONS,
    PREEMPTED_BY,
    PREEMPTIONS,
)
from simulator.controlplane.nodes import NODE_GROUP_LABEL
from tests import builders
from tests.conftest import MusterProcess
from tests.controller_helpers import (
    admitted,
    create_nodes,
    create_queue,
    delete_nodes,
    delete_queue,
    event_reasons,
    finished,
    http_json,
    job_cpu,
    jobs_path,
    metric,
    pending_reason,
    sampling,
    wait_all_finished,
)
from tests.kube import create_through_webhook, wait_for

pytestmark = [pytest.mark.cluster]

QUOTA_M = 32_000  # the cohort's 32 cpu: the node group's 4 nodes of 8 cpu


@contextmanager
def borrowing_cohort(
    kube: KubeClient, namespace: str, preemption: Mapping[str, Any]
) -> Iterator[tuple[str, str, dict[str, str]]]:
    """Queues a (weight 1) and b (weight 2, `preemption`) with 16 cpu of nominal quota each, in
    a cohort, and a node group of 32 cpu; yields (a, b, node selector). a may borrow b's unused
    16 cpu; b reclaims them while it stays within its own nominal quota (as Kueue)."""
    group = f"pre-{namespace}"[:60]
    create_nodes(kube, group, {f"{group}-{i}": {} for i in range(4)})
    org, a, b = f"{namespace}-org", f"{namespace}-a", f"{namespace}-b"
    create_queue(kube, org, {})
    create_queue(kube, a, {"parent": org, "nominal": {"cpu": "16"}})
    create_queue(
        kube,
        b,
        {"parent": org, "weight": 2, "nominal": {"cpu": "16"}, "preemption": dict(preemption)},
    )
    try:
        yield a, b, {NODE_GROUP_LABEL: group}
    finally:
        for q in (a, b, org):
            delete_queue(kube, q)
        delete_nodes(kube, group)


def annotations_of(job: Mapping[str, Any]) -> dict[str, str]:
    return dict((job.get("metadata") or {}).get("annotations") or {})


def running_pods(kube: KubeClient, namespace: str, gang: str) -> int:
    pods = kube.get(
        f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": f"muster.dev/gang={gang}"}
    )["items"]
    return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")


def preemptions_metric(metrics_url: str, queue: str) -> float:
    with urllib.request.urlopen(f"{metrics_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    wanted = f'muster_preemptions_total{{queue="{queue}"}} '
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(wanted)
    )


def assert_within_quota(samples: Sequence[Sequence[Mapping[str, Any]]]) -> None:
    assert samples, "no sample of the Jobs was taken"
    for sample in samples:
        held = sum(job_cpu(j) for j in sample if admitted(j) and not finished(j))
        assert held <= QUOTA_M, f"{held}m cpu held by admitted Jobs > the cohort's {QUOTA_M}m"


def assert_each_admission_accounted(
    samples: Sequence[Sequence[Mapping[str, Any]]], jobs: Sequence[Mapping[str, Any]]
) -> None:
    """No Job was admitted more often than once plus once per preemption: every admission
    writes a fresh muster.dev/admitted stamp, so a second admission of one wave would show an
    extra stamp in the samples (each later one only after a preemption suspended it)."""
    stamps: dict[str, set[str]] = defaultdict(set)
    for sample in [*samples, jobs]:
        for job in sample:
            stamp = annotations_of(job).get(ADMITTED)
            if stamp:
                stamps[job["metadata"]["name"]].add(stamp)
    for job in jobs:
        name = job["metadata"]["name"]
        annotations = annotations_of(job)
        allowed = 1 + int(annotations.get(PREEMPTIONS, "0")) + int(annotations.get(EVICTIONS, "0"))
        assert 1 <= len(stamps[name]) <= allowed, (name, sorted(stamps[name]), annotations)


def _preempt_writes(muster: MusterProcess) -> float:
    with urllib.request.urlopen(f"{muster.metrics_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    wanted = 'muster_api_writes_total{write="preempt"} '
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(wanted)
    )


def _refusals(muster: MusterProcess, victim: str) -> int:
    """How many refusals of the victim's suspension the controller's log counted last."""
    said = re.findall(rf"preempting {re.escape(victim)}: refused (\d+|once)", muster.text())
    return 0 if not said else int(said[-1].replace("once", "1"))


def controller_state(muster: MusterProcess, namespace: str, name: str) -> str | None:
    """The gang's state as the controller sees it (its status service), None until it has
    seen the Job."""
    try:
        body = http_json(f"{muster.status_url}/v1/gangs/{namespace}/{name}")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    state = body.get("state")
    return state if isinstance(state, str) else None


def wait_all_running(
    kube: KubeClient, muster: MusterProcess, namespace: str, names: Sequence[str], pods: int = 4
) -> None:
    """All ``pods`` pods of each gang Running, and the controller seeing them Running (so it
    counts just their bound pods as held)."""
    wait_for(
        lambda: (
            all(running_pods(kube, namespace, name) == pods for name in names)
            and all(controller_state(muster, namespace, name) == "Running" for name in names)
        ),
        timeout=90,
        what=f"{', '.join(names)} running on the node group, as the controller sees them",
    )


def test_a_reclaiming_queue_preempts_the_youngest_borrowed_gangs(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """a's four gangs (8 cpu each) fill the cohort; b's gang of 16 cpu (8 pods of 2 cpu, so it
    fits wherever a's pods were) preempts a's two
    youngest (reclaimWithinCohort: Any: a borrows the 16 cpu above its nominal quota, and b's
    gang is within b's). They are suspended
    with reason Preempted (annotation, Event, status service, metric), not counted as
    evictions, b's gang runs, and every gang finishes."""
    with borrowing_cohort(kube, namespace, {"reclaimWithinCohort": "Any"}) as (a, b, select):
        path = jobs_path(namespace)
        with sampling(kube, namespace) as samples:
            for i in range(4):
                body = builders.job(
                    f"a-{i}", a, pods=4, cpu="2", runtime="25s", node_selector=select
                )
                create_through_webhook(kube, path, body)
            wait_all_running(kube, muster, namespace, [f"a-{i}" for i in range(4)])
            before = preemptions_metric(muster.metrics_url, a)
            preemptor = builders.job("b-0", b, pods=8, cpu="2", runtime="5s", node_selector=select)
            create_through_webhook(kube, path, preemptor)
            wait_for(
                lambda: admitted(kube.get(f"{path}/b-0")), timeout=60, what="b's gang admitted"
            )
            jobs = {j["metadata"]["name"]: j for j in kube.get(path)["items"]}
            victims = sorted(n for n, j in jobs.items() if PREEMPTIONS in annotations_of(j))
            assert victims == ["a-2", "a-3"], {n: annotations_of(j) for n, j in jobs.items()}
            for name in victims:
                notes = annotations_of(jobs[name])
                assert notes[PREEMPTIONS] == "1" and notes[EVICTED_REASON] == "Preempted"
                assert notes[PREEMPTED_BY].startswith(f"preempted by {namespace}/b-0 (")
                assert EVICTIONS not in notes  # not an eviction: no backoff, no limit
            # While it waits again, the status service says it was preempted, and by whom.
            status = wait_for(
                lambda: pending_reason(
                    f"{muster.status_url}/v1/gangs/{namespace}/a-3", "Preempted"
                ),
                timeout=30,
                what="a-3's status: Preempted",
            )
            assert f"preempted by {namespace}/b-0" in status["reason"]["message"]
            assert status["preemptions"] == 1 and status["evictions"] == 0
            wait_for(
                lambda: all(
                    "Preempted" in event_reasons(kube, namespace, name) for name in victims
                ),
                timeout=30,
                what="a Preempted Event on each victim",
            )
            assert preemptions_metric(muster.metrics_url, a) == before + 2
            wait_for(
                lambda: running_pods(kube, namespace, "b-0") == 8,
                timeout=60,
                what="b's gang running on the freed capacity",
            )
            wait_all_finished(kube, namespace, 5, 240)
        jobs_after = kube.get(path)["items"]
        for job in jobs_after:
            size = job["spec"]["completions"]
            assert job["status"].get("succeeded") == size, (job["metadata"]["name"], job["status"])
            assert admitted(job), job["metadata"]["name"]
        assert_within_quota(samples)
        assert_each_admission_accounted(samples, jobs_after)
        queues = http_json(f"{muster.status_url}/v1/queues")["queues"]
        assert queues[a]["pending"] == 0 and queues[b]["pending"] == 0


def test_kill_9_during_preemptions_loses_nothing_and_admits_nothing_twice(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """a keeps the cohort full with eight 8-cpu gangs; b's four gangs arrive one by one and
    each preempts; meanwhile the controller is killed with SIGKILL and restarted again and
    again. Every gang finishes, each admission is accounted for by a preemption, and the
    admitted Jobs never hold more than the cohort's quota."""
    with borrowing_cohort(kube, namespace, {"reclaimWithinCohort": "Any"}) as (a, b, select):
        path = jobs_path(namespace)
        stop = threading.Event()

        def create(body: dict[str, Any]) -> None:
            # The webhook is down while the controller restarts (failurePolicy Fail): retried.
            create_through_webhook(kube, path, body, timeout=90)

        def kill_loop() -> None:
            while not stop.wait(4.0):
                muster.restart(signal.SIGKILL)

        with sampling(kube, namespace) as samples:
            for i in range(8):
                create(
                    builders.job(f"a-{i}", a, pods=4, cpu="2", runtime="15s", node_selector=select)
                )
            wait_for(
                lambda: sum(running_pods(kube, namespace, f"a-{i}") for i in range(8)) == 16,
                timeout=90,
                what="a's gangs filling the node group",
            )
            killer = threading.Thread(target=kill_loop)
            killer.start()
            try:
                for i in range(4):
                    create(
                        builders.job(
                            f"b-{i}", b, pods=4, cpu="2", runtime="5s", node_selector=select
                        )
                    )
                    time.sleep(3)
                time.sleep(8)
            finally:
                stop.set()
                killer.join()
            wait_all_finished(kube, namespace, 12, 400)
        jobs = kube.get(path)["items"]
    assert len(jobs) == 12
    for job in jobs:
        name = job["metadata"]["name"]
        assert job["status"].get("succeeded") == 4, (name, job["status"])
        assert not annotations_of(job).get("muster.dev/state"), name
    preempted = sum(int(annotations_of(j).get(PREEMPTIONS, "0")) for j in jobs)
    assert preempted >= 1, "no preemption happened: the test did not exercise what it names"
    assert all(
        not annotations_of(j).get(PREEMPTIONS) for j in jobs if j["metadata"]["name"][0] == "b"
    )
    assert_within_quota(samples)
    assert_each_admission_accounted(samples, jobs)


VAP = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
VAP_BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"


@contextmanager
def refusing_preemption_writes(kube: KubeClient, namespace: str) -> Iterator[None]:
    """The apiserver itself refuses (403) any update that records a preemption on a Job
    labelled refuse-preemption=yes in `namespace` (a ValidatingAdmissionPolicy)."""
    name = f"refuse-{namespace}"[:63]
    kube.create(
        VAP,
        {
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["batch"],
                            "apiVersions": ["v1"],
                            "operations": ["UPDATE"],
                            "resources": ["jobs"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": "!has(object.metadata.annotations) || "
                        f"!('{PREEMPTIONS}' in object.metadata.annotations)",
                        "message": "preemption refused by the test's policy",
                        "reason": "Forbidden",
                    }
                ],
            },
        },
    )
    kube.create(
        VAP_BINDINGS,
        {
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": namespace}
                    },
                    "objectSelector": {"matchLabels": {"refuse-preemption": "yes"}},
                },
            },
        },
    )
    try:
        # The apiserver loads the policy through an informer: wait until it refuses.
        probe = builders.job("probe", pods=1, suspend=True)
        probe["metadata"]["labels"]["refuse-preemption"] = "yes"
        kube.create(jobs_path(namespace), probe)

        def refused() -> bool:
            try:
                kube.patch(
                    f"{jobs_path(namespace)}/probe",
                    {"metadata": {"annotations": {PREEMPTIONS: "1"}}},
                )
            except ApiError as exc:
                return exc.status == 403
            kube.patch(
                f"{jobs_path(namespace)}/probe", {"metadata": {"annotations": {PREEMPTIONS: None}}}
            )
            return False

        wait_for(refused, timeout=60, interval=1, what="the test's admission policy in force")
        kube.delete(f"{jobs_path(namespace)}/probe")
        yield
    finally:
        kube.delete(f"{VAP_BINDINGS}/{name}")
        kube.delete(f"{VAP}/{name}")


def test_a_refused_victim_write_admits_no_preemptor(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """The apiserver refuses to suspend the victim the plan picks (a-3, the youngest): the
    preemptor is not admitted on capacity that was not freed; it is admitted once a's gangs
    finish, and the cohort's quota is never exceeded. The refused victim is written to again
    only after a backoff (each PATCH is one refusal the backoff counts), and the preemptor
    waits with reason PreemptionRefused, quoting the apiserver."""
    with (
        borrowing_cohort(kube, namespace, {"reclaimWithinCohort": "Any"}) as (a, b, select),
        refusing_preemption_writes(kube, namespace),
    ):
        path = jobs_path(namespace)
        with sampling(kube, namespace) as samples:
            for i in range(4):
                body = builders.job(
                    f"a-{i}", a, pods=4, cpu="2", runtime="25s", node_selector=select
                )
                if i == 3:
                    body["metadata"]["labels"]["refuse-preemption"] = "yes"
                create_through_webhook(kube, path, body)
            wait_all_running(kube, muster, namespace, [f"a-{i}" for i in range(4)])
            create_through_webhook(
                kube,
                path,
                builders.job("b-0", b, pods=4, cpu="2", runtime="3s", node_selector=select),
            )
            writes_before = metric(muster.metrics_url, "muster_api_writes_total")
            preempts_before = _preempt_writes(muster)
            wait_for(
                lambda: f"preempting {namespace}/a-3: refused" in muster.text(),
                timeout=60,
                what="the controller's plan to preempt a-3, refused",
            )
            waiting = wait_for(
                lambda: pending_reason(
                    f"{muster.status_url}/v1/gangs/{namespace}/b-0", "PreemptionRefused"
                ),
                timeout=30,
                what="b-0 waiting with reason PreemptionRefused",
            )
            message = waiting["reason"]["message"]
            assert f"preempts {namespace}/a-3" in message and "preemption refused" in message
            time.sleep(10)  # more cycles: each plans the same preemption, refused or held
            sent = _preempt_writes(muster) - preempts_before
            refusals = _refusals(muster, f"{namespace}/a-3")
            writes = metric(muster.metrics_url, "muster_api_writes_total") - writes_before
            print(f"REFUSED-VICTIM preempts {sent:.0f}, refusals {refusals}, writes {writes:.0f}")
            assert sent <= refusals + 1, "a refused victim was written to within its backoff"
            jobs = {j["metadata"]["name"]: j for j in kube.get(path)["items"]}
            if all(not finished(jobs[f"a-{i}"]) for i in range(4)):
                assert not admitted(jobs["b-0"]), "b-0 admitted while a-3 still holds its room"
            assert admitted(jobs["a-3"]) and PREEMPTIONS not in annotations_of(jobs["a-3"])
            wait_all_finished(kube, namespace, 5, 240)
        jobs_after = kube.get(path)["items"]
        assert_within_quota(samples)
        assert_each_admission_accounted(samples, jobs_after)
        assert all(PREEMPTIONS not in annotations_of(j) for j in jobs_after)
