"""Pod groups through muster on the real control plane (issue 29): plain pods labelled
`muster.dev/pod-group` with the group's size are gated at create, admitted only whole (pods
beyond the count stay gated), refused at create naming the field for bad input, evicted as a
clog by deleting the pods muster released (their ReplicaSet makes them again, gated), and never
admitted twice across SIGKILLs of the controller. A webhook outage does not block pods that do
not opt in: only opted-in pods are sent to muster's webhook."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient, Resource
from policies.kinds.pinning import PLACEMENT_GATE, decode_placement
from policies.vocabulary import (
    ADMITTED,
    CLOG_TIMEOUT,
    EVICTED_REASON,
    EVICTIONS,
    FAILED_REASON,
    GANG,
    PLACEMENT,
    POD_GROUP,
    POD_GROUP_SIZE,
    POD_GROUP_TIMEOUT,
    POD_SET,
    PREEMPTIONS,
    PRIORITY,
    QUEUE,
    STATE,
    SUBMITTED,
)
from tests import builders
from tests.cluster.test_cli import muster_cli
from tests.cluster.test_faults import webhook_pid
from tests.conftest import MusterProcess
from tests.controller_helpers import (
    create_queue,
    delete_queue,
    http_json,
    jobs_path,
    metric,
    pending_reason,
)
from tests.faults import WEBHOOK_DOWN
from tests.kube import create_through_webhook, wait_for

pytestmark = pytest.mark.cluster

RECORDS = Resource("muster.dev", "v1alpha1", "gangrecords")
REPLICASETS = Resource("apps", "v1", "replicasets")
HOSTNAME = "kubernetes.io/hostname"


@contextmanager
def queue(kube: KubeClient, name: str, spec: dict[str, Any]) -> Iterator[str]:
    create_queue(kube, name, spec)
    time.sleep(1.0)  # the webhook learns queues from its watch
    try:
        yield name
    finally:
        delete_queue(kube, name)


def pods_of(kube: KubeClient, namespace: str, group: str) -> list[dict[str, Any]]:
    selector = {"labelSelector": f"{POD_GROUP}={group}"}
    return list(kube.get(kubeapi.PODS.path(namespace), selector)["items"])


def live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        and not p["metadata"].get("deletionTimestamp")
    ]


def gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == PLACEMENT_GATE for g in pod["spec"].get("schedulingGates") or [])


def record(kube: KubeClient, namespace: str, group: str) -> dict[str, Any] | None:
    try:
        return kube.get(RECORDS.path(namespace, f"podgroup-{group}"))
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def notes(obj: dict[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


def create_pod(kube: KubeClient, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
    return create_through_webhook(kube, kubeapi.PODS.path(namespace), pod)


def test_a_pod_group_is_gated_at_create_admitted_only_whole_and_extras_stay_gated(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """Three of a group of four: each stored gated, stamped and labelled, and the group waits
    (Incomplete). The fourth: the group is admitted at 4 (its record says so), each pod placed
    on its planned node. A fifth pod of the group stays gated, none of the gang."""
    with queue(kube, f"{namespace}-q", {"nominal": {"cpu": "8"}}) as q:

        def pod(i: int) -> dict[str, Any]:
            return builders.group_pod(f"w-{i}", "train", size=4, queue=q, runtime="30s")

        for i in range(3):
            stored = create_pod(kube, namespace, pod(i))
            assert gated(stored), stored["spec"]
            labels = stored["metadata"]["labels"]
            assert labels[GANG] == "train" and labels[QUEUE] == q and labels[POD_SET]
            assert SUBMITTED in notes(stored)
        time.sleep(3.0)
        assert record(kube, namespace, "train") is None, "admitted before it was whole"
        assert all(gated(p) for p in pods_of(kube, namespace, "train"))
        url = f"{muster.status_url}/v1/gangs/{namespace}/train"
        waiting = wait_for(
            lambda: pending_reason(url, "Incomplete"), timeout=30, what="the group's reason"
        )
        assert waiting["kind"] == "PodGroup"
        assert waiting["reason"]["message"].startswith("3 of the 4 pods of pod group train")
        pending = 'muster_gangs{kind="PodGroup",state="Pending"}'
        wait_for(
            lambda: metric(muster.metrics_url, pending) >= 1 or None,
            timeout=30,
            what=f"{pending} counted",
        )
        create_pod(kube, namespace, pod(3))
        admitted = wait_for(
            lambda: r if ADMITTED in notes(r := record(kube, namespace, "train")) else None,
            timeout=60,
            what="the pod group admitted",
        )
        assert notes(admitted)[ADMITTED].endswith("/4")
        plans = decode_placement(notes(admitted)[PLACEMENT], PLACEMENT)
        bound = wait_for(
            lambda: (
                p
                if len(p := pods_of(kube, namespace, "train")) == 4
                and all(x["spec"].get("nodeName") for x in p)
                else None
            ),
            timeout=90,
            what="the group's 4 pods bound",
        )
        for p in bound:
            assert not gated(p)
            planned = plans[p["metadata"]["labels"][POD_SET]]
            assert p["spec"]["nodeName"] in planned
            assert p["spec"]["nodeSelector"][HOSTNAME] == p["spec"]["nodeName"]
        extra = create_pod(kube, namespace, pod(4))
        assert gated(extra)
        time.sleep(5.0)
        now = kube.get(kubeapi.PODS.path(namespace, "w-4"))
        assert gated(now) and not now["spec"].get("nodeName"), "a fifth pod of 4 was released"
        assert notes(record(kube, namespace, "train"))[ADMITTED] == notes(admitted)[ADMITTED]


def test_a_group_that_never_reaches_its_count_times_out_with_a_reason_in_explain(
    kube: KubeClient, namespace: str, muster: MusterProcess, kubeconfig: Path
) -> None:
    """Two of a group of four with a pod-group timeout of 5 s: the group waits (Incomplete),
    and past its time muster marks it Failed, its record and `muster explain` (from the API and
    from the status service) saying why: Incomplete, 2 of the 4 pods, did not come whole."""
    with queue(kube, f"{namespace}-t", {"nominal": {"cpu": "8"}}) as q:
        for i in range(2):
            pod = builders.group_pod(
                f"h-{i}", "half", size=4, queue=q, labels={POD_GROUP_TIMEOUT: "5s"}
            )
            assert gated(create_pod(kube, namespace, pod))
        failed = wait_for(
            lambda: (
                r if notes(r := record(kube, namespace, "half")).get(STATE) == "Failed" else None
            ),
            timeout=60,
            what="the incomplete pod group marked Failed",
        )
        why = notes(failed)[FAILED_REASON]
        assert why.startswith("Incomplete: 2 of the 4 pods of pod group half"), why
        assert why.endswith("it did not come whole in time"), why
        assert all(gated(p) for p in pods_of(kube, namespace, "half"))
        gang = f"{namespace}/half"
        for env, args in (
            ({}, ("--kubeconfig", str(kubeconfig))),
            ({"MUSTER_STATUS_URL": muster.status_url}, ()),
        ):
            done = muster_cli("explain", gang, *args, env=env)
            assert done.returncode == 0, done.stderr
            assert "PodGroup" in done.stdout or "pod group" in done.stdout, done.stdout
            assert "Incomplete" in done.stdout and "did not come whole in time" in done.stdout, (
                done.stdout
            )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"size": None}, f"label {POD_GROUP_SIZE}: missing"),
        ({"size": "lots"}, f"label {POD_GROUP_SIZE}: 'lots' is not a whole number"),
        ({"labels": {"muster.dev/min-members": "9"}}, "label muster.dev/min-members: 9 is out"),
    ],
)
def test_bad_input_is_refused_at_create_naming_the_field(
    kube: KubeClient, namespace: str, muster: MusterProcess, change: dict[str, Any], field: str
) -> None:
    args: dict[str, Any] = {"size": 4, "queue": "any", **change}
    with pytest.raises(ApiError) as refused:
        create_pod(kube, namespace, builders.group_pod("bad", "g", **args))
    assert refused.value.status == 400 and field in refused.value.message, refused.value.message


def test_a_size_that_disagrees_with_its_group_is_refused_naming_the_field(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    create_pod(kube, namespace, builders.group_pod("a-0", "g", size=4, queue="any"))
    with pytest.raises(ApiError) as refused:
        create_pod(kube, namespace, builders.group_pod("a-1", "g", size=5, queue="any"))
    message = refused.value.message
    assert refused.value.status == 400, message
    assert f"label {POD_GROUP_SIZE}: pod a-1 says '5' but pod a-0 of pod group g says '4'" in (
        message
    )


def test_a_webhook_outage_does_not_block_pods_that_do_not_opt_in(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """The webhook child stopped (SIGSTOP: it stays down however long the test looks, where a
    killed one is started again within seconds), in a namespace whose Jobs muster manages: a
    plain pod, even one labelled with a queue, is created at once (it is never sent to
    muster); a pod of a pod group is refused (failurePolicy Fail), as is a managed Job."""
    kube.patch(kubeapi.NAMESPACES.path(name=namespace), {"metadata": {"labels": {QUEUE: "any"}}})
    child = webhook_pid(muster)
    os.kill(child, signal.SIGSTOP)
    try:
        for name, labels in (("plain", {}), ("queued", {QUEUE: "any"})):
            body = builders.job(name, None, labels=labels)["spec"]["template"]
            pod = {"metadata": {"name": name, "labels": labels}, "spec": body["spec"]}
            started = time.monotonic()
            kube.create(kubeapi.PODS.path(namespace), pod)
            assert time.monotonic() - started < 2.5, "the create waited for the webhook"
        with pytest.raises(ApiError) as refused:
            kube.create(
                kubeapi.PODS.path(namespace), builders.group_pod("opted-in", "g", queue="any")
            )
        assert WEBHOOK_DOWN in refused.value.message, refused.value.message
        with pytest.raises(ApiError) as job_refused:
            kube.create(jobs_path(namespace), builders.job("j", "any"))
        assert WEBHOOK_DOWN in job_refused.value.message
    finally:
        os.kill(child, signal.SIGCONT)
    names = {p["metadata"]["name"] for p in kube.get(kubeapi.PODS.path(namespace))["items"]}
    assert {"plain", "queued"} <= names and "opted-in" not in names


def replicaset(name: str, queue: str, replicas: int, labels: dict[str, str]) -> dict[str, Any]:
    """A ReplicaSet whose pods are a pod group of `replicas` (it makes deleted pods again)."""
    pod = builders.group_pod("x", name, size=replicas, queue=queue, runtime=None, labels=labels)
    pod["spec"]["restartPolicy"] = "Always"
    pod["spec"]["nodeSelector"] = {"muster.dev/test-no-such-node": "true"}
    template = {"metadata": {"labels": pod["metadata"]["labels"]}, "spec": pod["spec"]}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {POD_GROUP: name}},
            "template": template,
        },
    }


def test_a_clogged_pod_group_is_evicted_by_deleting_its_pods_and_comes_back_gated(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """A ReplicaSet's pod group whose pods select no node, with its own clog timeout of 4 s, in
    a node-blind queue: admitted, released, never ready, evicted as Clogged: the record says so
    (and no longer admitted), the pods muster released are deleted, and the ReplicaSet's new
    pods are gated again at create, the group waiting out its backoff."""
    spec = {"nodeFit": False, "clogTimeout": "10m", "backoff": {"base": "5m", "max": "5m"}}
    with queue(kube, f"{namespace}-blind", spec) as q:
        body = replicaset("stuck", q, 3, {CLOG_TIMEOUT: "4s"})
        kube.create(REPLICASETS.path(namespace), body)
        first = wait_for(
            lambda: r if ADMITTED in notes(r := record(kube, namespace, "stuck")) else None,
            timeout=60,
            what="the pod group admitted",
        )
        assert first["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
        released = wait_for(
            lambda: (
                {p["metadata"]["uid"] for p in live(ps) if not gated(p)}
                if len(ps := pods_of(kube, namespace, "stuck")) == 3
                else None
            ),
            timeout=60,
            what="its 3 pods released",
        )
        evicted = wait_for(
            lambda: (
                r
                if notes(r := record(kube, namespace, "stuck")).get(EVICTED_REASON) == "Clogged"
                else None
            ),
            timeout=90,
            what="the pod group evicted as Clogged",
        )
        assert ADMITTED not in notes(evicted) and notes(evicted)[EVICTIONS] == "1"

        def again() -> list[dict[str, Any]] | None:
            pods = live(pods_of(kube, namespace, "stuck"))
            uids = {p["metadata"]["uid"] for p in pods}
            return pods if len(pods) == 3 and not uids & released else None

        pods = wait_for(again, timeout=90, what="the ReplicaSet's pods made again")
        assert all(gated(p) for p in pods), [p["spec"].get("schedulingGates") for p in pods]
        status = http_json(f"{muster.status_url}/v1/gangs/{namespace}/stuck")
        assert status["state"] == "BackingOff" and status["evictions"] == 1


def test_a_preempted_pod_group_comes_back_gated_and_the_preemptor_runs(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """A ReplicaSet's pod group of 4 one-cpu pods that run for ever holds its queue's 4 cpus; a
    pod group of priority 10 in the same queue preempts it (withinQueue: LowerPriority): the
    victim's record counts the preemption, its released pods are deleted and the ReplicaSet's
    new ones are gated; the preemptor runs and ends, and the victim is admitted again."""
    spec = {"nominal": {"cpu": "4"}, "preemption": {"withinQueue": "LowerPriority"}}
    with queue(kube, f"{namespace}-p", spec) as q:
        body = replicaset("low", q, 4, {})
        del body["spec"]["template"]["spec"]["nodeSelector"]  # runs (for ever, on kwok)
        kube.create(REPLICASETS.path(namespace), body)
        released = wait_for(
            lambda: (
                {p["metadata"]["uid"] for p in ps if p["spec"].get("nodeName")}
                if len(ps := live(pods_of(kube, namespace, "low"))) == 4
                and all(p["spec"].get("nodeName") for p in ps)
                else None
            ),
            timeout=90,
            what="the low-priority group running",
        )
        for i in range(4):
            pod = builders.group_pod(
                f"high-{i}", "high", size=4, queue=q, runtime="3s", annotations={PRIORITY: "10"}
            )
            create_pod(kube, namespace, pod)
        preempted = wait_for(
            lambda: r if PREEMPTIONS in notes(r := record(kube, namespace, "low")) else None,
            timeout=60,
            what="the low-priority group preempted",
        )
        assert notes(preempted)[PREEMPTIONS] == "1"

        def high_done() -> bool:
            pods = pods_of(kube, namespace, "high")
            return len(pods) == 4 and all(p["status"].get("phase") == "Succeeded" for p in pods)

        wait_for(high_done, timeout=120, what="the preemptor's pods succeeded")
        for p in pods_of(kube, namespace, "high"):
            assert p["metadata"]["uid"] not in released

        def back() -> list[dict[str, Any]] | None:
            pods = live(pods_of(kube, namespace, "low"))
            again = [p for p in pods if p["metadata"]["uid"] not in released]
            ok = len(again) == 4 and all(p["spec"].get("nodeName") for p in again)
            return again if ok and ADMITTED in notes(record(kube, namespace, "low")) else None

        again = wait_for(back, timeout=120, what="the victim admitted again on new pods")
        assert all(not gated(p) for p in again)


def test_kill_9_while_pod_groups_are_admitted_admits_nothing_twice(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """Six pod groups of 4 one-cpu pods in a queue of 8 cpus, the controller killed with SIGKILL
    twice while they are admitted: every pod of every group runs once and succeeds, and at no
    look are more than 8 of their pods released."""
    groups = [f"g-{i}" for i in range(6)]
    with queue(kube, f"{namespace}-k", {"nominal": {"cpu": "8"}}) as q:
        for group in groups:
            for i in range(4):
                pod = builders.group_pod(f"{group}-{i}", group, size=4, queue=q, runtime="4s")
                create_pod(kube, namespace, pod)
        most = kills = 0
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            pods = [p for g in groups for p in pods_of(kube, namespace, g)]
            released = [p for p in live(pods) if not gated(p)]
            most = max(most, len(released))
            if kills < 2 and len(released) >= 4:
                muster.restart(signal.SIGKILL)
                kills += 1
            if len(pods) == 24 and all(p["status"].get("phase") == "Succeeded" for p in pods):
                break
            time.sleep(1.0)
        assert kills == 2
        phases = sorted(
            p["status"].get("phase") for g in groups for p in pods_of(kube, namespace, g)
        )
        assert phases == ["Succeeded"] * 24
        assert most <= 8, f"{most} pods of the groups were released at once on 8 cpus of quota"

        def history() -> dict[str, dict[str, Any]] | None:
            rows = http_json(f"{muster.status_url}/v1/history")["gangs"]
            mine = {r["gang"]: r for r in rows if r["gang"].startswith(f"{namespace}/")}
            return mine if len(mine) == len(groups) else None

        # The history names the kind; each group finished once, at its whole size.
        rows = wait_for(history, timeout=60, what="the groups in /v1/history")
        for row in rows.values():
            assert (row["kind"], row["state"], row["admitted_size"]) == ("PodGroup", "finished", 4)
