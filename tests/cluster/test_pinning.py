"""What muster plans is what runs: admitted gangs are pinned to their planned nodes.

Against the real apiserver, kube-scheduler and Job controller with kwok nodes: (a) a pinned
gang's pods land on its planned nodes while other gangs' pods are created in between; (b) a
preempted pinned gang is suspended again with its original pod template; (c) an elastic
Indexed Job admitted at k of n pods runs exactly k pods and finishes; (d) a controller killed
with -9 and restarted keeps every pin (they live on the Jobs).

Each test runs on its own node group that only its gangs select.
"""

from __future__ import annotations

import copy
import signal
from collections import Counter
from collections.abc import Mapping
from functools import partial
from typing import Any

import pytest

from kubeport.kubeapi import KubeClient
from policies.kinds.pinning import HOSTNAME, NODE_NAME, decode_placement
from policies.vocabulary import EVICTIONS, PLACEMENT, PREEMPTIONS, RESTORE
from simulator.controlplane.nodes import NODE_GROUP_LABEL
from tests import builders
from tests.cluster.test_preemption import annotations_of, borrowing_cohort
from tests.conftest import MusterProcess
from tests.controller_helpers import (
    admitted,
    create_nodes,
    create_queue,
    delete_nodes,
    delete_queue,
    finished,
    jobs_path,
    wait_all_finished,
)
from tests.kube import create_through_webhook, wait_for

pytestmark = [pytest.mark.cluster]


def pods_of(kube: KubeClient, namespace: str, gang: str) -> list[dict[str, Any]]:
    return list(
        kube.get(
            f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": f"muster.dev/gang={gang}"}
        )["items"]
    )


def bound_nodes(kube: KubeClient, namespace: str, gang: str) -> Counter[str]:
    return Counter(
        p["spec"]["nodeName"] for p in pods_of(kube, namespace, gang) if p["spec"].get("nodeName")
    )


def pinned_nodes(job: Mapping[str, Any]) -> list[str]:
    """The nodes the pod template's required node affinity pins (kwok nodes' hostname labels
    are their names)."""
    affinity = job["spec"]["template"]["spec"].get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    names: set[str] = set()
    for term in required.get("nodeSelectorTerms") or []:
        for field in [*(term.get("matchExpressions") or []), *(term.get("matchFields") or [])]:
            if field["key"] in (HOSTNAME, NODE_NAME) and field["operator"] == "In":
                names.update(field["values"])
    return sorted(names)


def all_admitted(kube: KubeClient, path: str, names: list[str]) -> dict[str, dict[str, Any]] | None:
    """The Jobs by name once every one is admitted, else None."""
    jobs = {name: kube.get(f"{path}/{name}") for name in names}
    return jobs if all(admitted(job) for job in jobs.values()) else None


def node_group(kube: KubeClient, group: str, count: int, cpu: str = "8") -> dict[str, str]:
    create_nodes(kube, group, {f"{group}-{i}": {} for i in range(count)}, cpu=cpu)
    return {NODE_GROUP_LABEL: group}


def test_pinned_gangs_land_on_their_planned_nodes(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """Six gangs submitted back to back onto twelve nodes of 8 cpu (3 pods of 4 cpu each: 18
    of the 24 slots, so the scheduler has room to put pods elsewhere than planned): each Job's
    template is pinned to the nodes of its muster.dev/placement, and every pod is bound on a
    node of its gang's plan, as many as planned on each."""
    group = f"pin-{namespace}"[:60]
    select = node_group(kube, group, 12)
    queue = f"{namespace}-q"
    create_queue(kube, queue, {})
    path = jobs_path(namespace)
    names = [f"g-{i}" for i in range(6)]
    try:
        for name in names:
            body = builders.job(name, queue, pods=3, cpu="4", runtime="20s", node_selector=select)
            create_through_webhook(kube, path, body)
        jobs = wait_for(
            partial(all_admitted, kube, path, names),
            timeout=60,
            what="every gang admitted",
        )
        plans = {}
        for name, job in jobs.items():
            notes = annotations_of(job)
            plan = decode_placement(notes[PLACEMENT], PLACEMENT)[""]
            assert sum(plan.values()) == 3, (name, plan)
            assert pinned_nodes(job) == sorted(plan), (name, plan, job["spec"]["template"])
            assert RESTORE in notes
            plans[name] = plan
        wait_for(
            lambda: all(sum(bound_nodes(kube, namespace, n).values()) == 3 for n in names),
            timeout=60,
            what="every pod bound",
        )
        for name in names:
            bound = bound_nodes(kube, namespace, name)
            assert set(bound) <= set(plans[name]), (name, dict(bound), plans[name])
            assert dict(bound) == plans[name], (name, dict(bound), plans[name])
        wait_all_finished(kube, namespace, len(names), timeout=120)
        for name in names:
            assert EVICTIONS not in annotations_of(kube.get(f"{path}/{name}"))
    finally:
        delete_queue(kube, queue)
        delete_nodes(kube, group)


def test_a_preempted_pinned_gang_gets_its_original_template_back(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """a's gangs carry a node affinity of their own (a required term on the node group and a
    preferred one); pinned while admitted, each term also names the planned nodes. b preempts
    two of them: those are suspended with exactly the template they were created with (and no
    muster.dev/restore or muster.dev/placement), then admitted and pinned again, and finish."""
    with borrowing_cohort(kube, namespace, {"reclaimWithinCohort": "Any"}) as (a, b, select):
        path = jobs_path(namespace)
        own_affinity: dict[str, Any] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": NODE_GROUP_LABEL,
                                    "operator": "In",
                                    "values": [select[NODE_GROUP_LABEL]],
                                }
                            ]
                        }
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 1,
                        "preference": {
                            "matchExpressions": [
                                {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}
                            ]
                        },
                    }
                ],
            }
        }
        created: dict[str, dict[str, Any]] = {}
        for i in range(4):
            body = builders.job(f"a-{i}", a, pods=4, cpu="2", runtime="25s")
            body["spec"]["template"]["spec"]["affinity"] = copy.deepcopy(own_affinity)
            created[f"a-{i}"] = create_through_webhook(kube, path, body)
        wait_for(
            lambda: all(
                sum(bound_nodes(kube, namespace, f"a-{i}").values()) == 4 for i in range(4)
            ),
            timeout=90,
            what="a's gangs bound",
        )
        for i in range(4):
            job = kube.get(f"{path}/a-{i}")
            terms = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"]
            # The user's term is kept and ANDed with the pin.
            assert (
                terms[0]["matchExpressions"][:1]
                == own_affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                    "nodeSelectorTerms"
                ][0]["matchExpressions"]
            )
            assert pinned_nodes(job), job["spec"]["template"]
        preemptor = builders.job("b-0", b, pods=8, cpu="2", runtime="5s", node_selector=select)
        create_through_webhook(kube, path, preemptor)
        victims = wait_for(
            lambda: sorted(
                j["metadata"]["name"]
                for j in kube.get(path)["items"]
                if PREEMPTIONS in annotations_of(j)
            ),
            timeout=60,
            what="b's preemption",
        )
        assert victims, "nothing was preempted"

        def restored(name: str) -> dict[str, Any] | None:
            job = kube.get(f"{path}/{name}")
            notes = annotations_of(job)
            if RESTORE in notes or PLACEMENT in notes or not job["spec"].get("suspend"):
                return None
            return job

        for name in victims:
            job = wait_for(partial(restored, name), timeout=30, what=f"{name} restored")
            assert job["spec"]["template"] == created[name]["spec"]["template"], name
            assert job["spec"]["parallelism"] == 4 and job["spec"]["completions"] == 4
        wait_all_finished(kube, namespace, 5, timeout=180)
        for name in victims:
            job = kube.get(f"{path}/{name}")
            assert int(annotations_of(job)[PREEMPTIONS]) >= 1 and finished(job)


def test_an_elastic_indexed_job_admitted_smaller_runs_exactly_that_many_pods(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """An Indexed Job of 4 pods (min 2) on a node group with room for 2: admitted at 2, its
    parallelism and completions are 2, it runs 2 pods (indexes 0 and 1) once and completes; no
    second wave. Its muster.dev/restore keeps the 4."""
    group = f"el-{namespace}"[:60]
    select = node_group(kube, group, 1)
    queue = f"{namespace}-q"
    create_queue(kube, queue, {})
    path = jobs_path(namespace)
    try:
        body = builders.job("elastic", queue, pods=4, cpu="4", runtime="3s", node_selector=select)
        body["spec"]["completionMode"] = "Indexed"
        body["metadata"]["annotations"] = {"muster.dev/min-members": "2"}
        create_through_webhook(kube, path, body)
        job = wait_for(
            lambda: j if admitted(j := kube.get(f"{path}/elastic")) else None,
            timeout=60,
            what="the elastic gang admitted",
        )
        assert str(admitted(job)).endswith("/2"), admitted(job)
        assert job["spec"]["parallelism"] == 2 and job["spec"]["completions"] == 2
        notes = annotations_of(job)
        assert '"parallelism":4' in notes[RESTORE] and '"completions":4' in notes[RESTORE]
        done = wait_for(
            lambda: j if finished(j := kube.get(f"{path}/elastic")) else None,
            timeout=90,
            what="the elastic gang finished",
        )
        assert done["status"].get("succeeded") == 2, done["status"]
        indexes = sorted(
            p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
            for p in pods_of(kube, namespace, "elastic")
        )
        assert indexes == ["0", "1"], indexes
    finally:
        delete_queue(kube, queue)
        delete_nodes(kube, group)


def test_a_restarted_controller_keeps_every_pin(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """Four gangs admitted and pinned; the controller is killed with -9 at once and started
    again, and three more gangs are submitted. The first four keep their templates and
    placements exactly (nothing re-pinned, nothing admitted twice), every gang's pods are on
    its planned nodes, and all seven finish without an eviction."""
    group = f"rs-{namespace}"[:60]
    select = node_group(kube, group, 5)
    queue = f"{namespace}-q"
    create_queue(kube, queue, {})
    path = jobs_path(namespace)
    first = [f"r-{i}" for i in range(4)]
    later = [f"s-{i}" for i in range(3)]
    try:
        for name in first:
            body = builders.job(name, queue, pods=2, cpu="4", runtime="15s", node_selector=select)
            create_through_webhook(kube, path, body)
        before = wait_for(
            partial(all_admitted, kube, path, first),
            timeout=60,
            what="the first gangs admitted",
        )
        muster.restart(signal.SIGKILL)
        for name in later:
            body = builders.job(name, queue, pods=2, cpu="4", runtime="5s", node_selector=select)
            create_through_webhook(kube, path, body, timeout=90)
        for name in first:
            job = kube.get(f"{path}/{name}")
            old = before[name]
            assert admitted(job) == admitted(old), name
            assert annotations_of(job)[PLACEMENT] == annotations_of(old)[PLACEMENT], name
            assert job["spec"]["template"] == old["spec"]["template"], name
        wait_all_finished(kube, namespace, 7, timeout=180)
        for name in first + later:
            job = kube.get(f"{path}/{name}")
            notes = annotations_of(job)
            assert EVICTIONS not in notes, (name, notes)
            plan = decode_placement(notes[PLACEMENT], PLACEMENT)[""]
            bound = bound_nodes(kube, namespace, name)
            assert set(bound) <= set(plan), (name, dict(bound), plan)
    finally:
        delete_queue(kube, queue)
        delete_nodes(kube, group)
