"""Topology domains on a real control plane: gangs land where their topology request says.

Eight kwok nodes of 8 cpu in two blocks of two racks (rack names repeat across blocks: rack r0
of block b0 is not rack r0 of block b1), labelled example.com/block and example.com/rack,
tainted so that only this module's gangs (which tolerate the taint and select the node group)
run there. The session's muster is replaced for the module by one with
`--topology-levels example.com/block,example.com/rack` (one muster per cluster: they share the
webhook configuration), and given back at the end.

Every assertion is on what the pods did: a pod sampler records where each admission's pods were
bound (an admission's pods share the node pin it wrote), and each required gang's admissions
must each lie in one (block, rack), through waves of admissions, a controller killed with -9
and started again, and a preemption. A preferred gang that no rack has room for runs across
racks at once, while a required gang of the same shape waits, and says why.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from kubeport.kubeapi import KubeClient
from policies.vocabulary import PREEMPTIONS, TOPOLOGY_PREFERRED, TOPOLOGY_REQUIRED
from simulator.controlplane.nodes import NODE_GROUP_LABEL
from tests import builders
from tests.cluster.test_pinning import pinned_nodes
from tests.cluster.test_preemption import annotations_of
from tests.conftest import MusterProcess, start_muster
from tests.controller_helpers import (
    admitted,
    create_nodes,
    create_queue,
    delete_nodes,
    delete_queue,
    in_background,
    jobs_path,
    pending_reason,
    wait_all_finished,
)
from tests.kube import create_through_webhook, wait_for, wait_webhook_stamps

pytestmark = [pytest.mark.cluster]

BLOCK, RACK = "example.com/block", "example.com/rack"
TAINT = {"key": "muster.dev/topology-test", "value": "racks", "effect": "NoSchedule"}
TOLERATIONS = (builders.KWOK_TOLERATION, {**TAINT, "operator": "Equal"})

Rack = tuple[str, str]
"""A node's (block, rack): its domain at the rack level."""


@pytest.fixture(scope="module")
def racks(kube: KubeClient) -> Iterator[tuple[dict[str, str], dict[str, Rack]]]:
    """The node group (2 blocks × 2 racks × 2 nodes of 8 cpu); yields its node selector and each
    node's (block, rack) as its labels say."""
    group = f"topo-{os.getpid() % 100000}"
    names = {
        f"{group}-b{b}-r{r}-{i}": {BLOCK: f"b{b}", RACK: f"r{r}"}
        for b in range(2)
        for r in range(2)
        for i in range(2)
    }
    create_nodes(kube, group, names, taints={name: [TAINT] for name in names})
    try:
        nodes = kube.get("/api/v1/nodes", {"labelSelector": f"{NODE_GROUP_LABEL}={group}"})
        where = {
            n["metadata"]["name"]: (n["metadata"]["labels"][BLOCK], n["metadata"]["labels"][RACK])
            for n in nodes["items"]
        }
        assert len(where) == 8, where
        yield {NODE_GROUP_LABEL: group}, where
    finally:
        delete_nodes(kube, group)


@pytest.fixture(scope="module")
def topology_muster(
    kube: KubeClient, kubeconfig: Path, muster: MusterProcess
) -> Iterator[MusterProcess]:
    """The session's muster replaced by one that knows the racks; the session's back after."""
    muster.stop()
    running = start_muster(kubeconfig, "--topology-levels", f"{BLOCK},{RACK}")
    try:
        yield running
    finally:
        running.stop()
        muster.restart(signal.SIGTERM)


@contextmanager
def placements(kube: KubeClient, namespace: str) -> Iterator[dict[tuple[str, str], set[str]]]:
    """(gang, its admission's node pin) -> the nodes its pods were bound to, sampled from the
    namespace's pods in a thread while the body runs, and once more at its end. A preempted
    admission's pods are gone by the end; the sampler saw them while they ran."""
    seen: dict[tuple[str, str], set[str]] = defaultdict(set)

    def sample(client: KubeClient) -> None:
        for pod in client.get(f"/api/v1/namespaces/{namespace}/pods")["items"]:
            node = pod["spec"].get("nodeName")
            gang = (pod["metadata"].get("labels") or {}).get("muster.dev/gang")
            if node and gang:
                pin = ",".join(pinned_nodes({"spec": {"template": {"spec": pod["spec"]}}}))
                seen[(gang, pin)].add(node)

    with in_background(kube, sample, 0.3):
        yield seen
    sample(kube)


def racks_of(
    seen: Mapping[tuple[str, str], set[str]], where: Mapping[str, Rack]
) -> dict[str, list[set[Rack]]]:
    """Each gang's admissions, each as the racks its pods were bound in (every node one of the
    group's: no pod of the module runs elsewhere)."""
    found: dict[str, list[set[Rack]]] = defaultdict(list)
    for (gang, _), nodes in sorted(seen.items()):
        assert nodes <= where.keys(), (gang, sorted(nodes - where.keys()))
        found[gang].append({where[node] for node in nodes})
    return found


def assert_each_in_one_rack(found: Mapping[str, list[set[Rack]]], gangs: list[str]) -> None:
    assert sorted(found) == sorted(gangs), sorted(found)
    for gang in gangs:
        for spread in found[gang]:
            assert len(spread) == 1, f"{gang} ran across racks {sorted(spread)}: {dict(found)}"


def gang(
    name: str, queue: str, select: Mapping[str, str], pods: int, runtime: str, request: str
) -> dict[str, Any]:
    """A Job of ``pods`` pods of 4 cpu (two per node, four per rack) on the node group, with the
    topology annotation ``request`` (TOPOLOGY_REQUIRED or TOPOLOGY_PREFERRED) naming the rack
    level by its name part."""
    return builders.job(
        name,
        queue,
        pods=pods,
        cpu="4",
        runtime=runtime,
        annotations={request: "rack"},
        node_selector=select,
        tolerations=TOLERATIONS,
    )


def wait_webhook(kube: KubeClient, path: str, queue: str, select: Mapping[str, str]) -> None:
    """Right after muster was replaced, the apiserver may still call the old webhook: go on once
    a dry run comes back stamped."""
    probe = gang("probe", queue, select, 1, "1s", TOPOLOGY_REQUIRED)
    wait_webhook_stamps(kube, path, probe)


def admitted_names(kube: KubeClient, namespace: str) -> set[str]:
    return {j["metadata"]["name"] for j in kube.get(jobs_path(namespace))["items"] if admitted(j)}


def wave_admitted(kube: KubeClient, namespace: str, at_least: int) -> set[str] | None:
    names = admitted_names(kube, namespace)
    return names if len(names) >= at_least else None


def test_required_gangs_land_in_one_rack_in_every_wave_and_after_a_restart(
    kube: KubeClient,
    namespace: str,
    racks: tuple[dict[str, str], dict[str, Rack]],
    topology_muster: MusterProcess,
) -> None:
    """Ten required gangs, of 3 and 2 pods alternately (25 pods for 16 slots, in waves): a rack
    holds one gang of 3 and has a slot left, which no gang of 2 may use with a slot of another
    rack. The controller is killed with -9 once the first wave is admitted and started again
    (same flags); every admission of every gang, before and after, ran within one rack, and
    every gang finished."""
    select, where = racks
    queue = f"{namespace}-q"
    create_queue(kube, queue, {})
    path = jobs_path(namespace)
    names = [f"g-{i}" for i in range(10)]
    try:
        wait_webhook(kube, path, queue, select)
        with placements(kube, namespace) as seen:
            for i, name in enumerate(names):
                body = gang(name, queue, select, 3 - i % 2, "8s", TOPOLOGY_REQUIRED)
                create_through_webhook(kube, path, body)
            first = wait_for(
                partial(wave_admitted, kube, namespace, 4),
                timeout=60,
                what="a first wave admitted",
            )
            topology_muster.restart(signal.SIGKILL)
            wait_all_finished(kube, namespace, len(names), 180)
        assert len(first) < len(names), "every gang was admitted before the restart"
        assert_each_in_one_rack(racks_of(seen, where), names)
    finally:
        delete_queue(kube, queue)


def muster_explain(gang: str, status_url: str) -> subprocess.CompletedProcess[str]:
    """`muster explain` as a user in the cluster runs it: from the controller's status service,
    which knows the topology levels (read from the API, the CLI plans without them)."""
    env = {**os.environ, "MUSTER_STATUS_URL": status_url}
    return subprocess.run(
        [sys.executable, "-m", "muster.cli", "explain", gang],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=env,
    )


def admitted_message(kube: KubeClient, namespace: str, name: str) -> str | None:
    """The message of the Admitted Event about ``name``, once there is one."""
    events = kube.get(
        f"/api/v1/namespaces/{namespace}/events", {"fieldSelector": f"involvedObject.name={name}"}
    )["items"]
    return next((str(e.get("message")) for e in events if e.get("reason") == "Admitted"), None)


def test_a_preferred_gang_falls_back_across_racks_a_required_one_waits_and_says_why(
    kube: KubeClient,
    namespace: str,
    racks: tuple[dict[str, str], dict[str, Rack]],
    topology_muster: MusterProcess,
) -> None:
    """Four required gangs of 3 pods fill three slots of each rack (one gang each: the tightest
    rack first), so no rack has room for 2 pods while 4 slots stand free. A preferred gang of
    2 is admitted at once across two racks; a required gang of 2 waits, its reason (status
    service and `muster explain`) names the rack level and the largest free rack, and once the
    fillers finish it runs within one rack."""
    select, where = racks
    queue = f"{namespace}-q"
    create_queue(kube, queue, {})
    path = jobs_path(namespace)
    fillers = [f"fill-{i}" for i in range(4)]
    try:
        wait_webhook(kube, path, queue, select)
        with placements(kube, namespace) as seen:
            for name in fillers:
                create_through_webhook(
                    kube, path, gang(name, queue, select, 3, "20s", TOPOLOGY_REQUIRED)
                )
            wait_for(
                lambda: admitted_names(kube, namespace) >= set(fillers),
                timeout=60,
                what="the fillers admitted",
            )
            create_through_webhook(
                kube, path, gang("spread", queue, select, 2, "5s", TOPOLOGY_PREFERRED)
            )
            wait_for(
                lambda: "spread" in admitted_names(kube, namespace),
                timeout=30,
                what="the preferred gang admitted while no rack has room for it",
            )
            said = wait_for(
                partial(admitted_message, kube, namespace, "spread"),
                timeout=30,
                what="spread's Admitted event",
            )
            assert said.endswith(
                "across 2 racks (preferred one rack: none had room for all of its pods)"
            ), said
            create_through_webhook(
                kube, path, gang("whole", queue, select, 2, "5s", TOPOLOGY_REQUIRED)
            )
            url = f"{topology_muster.status_url}/v1/gangs/{namespace}/whole"
            status = wait_for(
                partial(pending_reason, url, "NoFit"), timeout=30, what="whole's reason"
            )
            message = status["reason"]["message"]
            assert message == (
                "topology rack required: needs one rack with room for 2 pods of 4 cpu; "
                "the largest free has 1"
            ), status
            explained = muster_explain(f"{namespace}/whole", topology_muster.status_url)
            assert explained.returncode == 0, explained.stderr
            assert message in explained.stdout, explained.stdout
            assert "whole" not in admitted_names(kube, namespace)
            wait_all_finished(kube, namespace, 6, 120)
        found = racks_of(seen, where)
        assert_each_in_one_rack(
            {k: v for k, v in found.items() if k != "spread"}, [*fillers, "whole"]
        )
        assert found["spread"] and all(len(spread) == 2 for spread in found["spread"]), found
    finally:
        delete_queue(kube, queue)


def test_preemption_keeps_the_rule_for_the_preemptor_and_its_victims(
    kube: KubeClient,
    namespace: str,
    racks: tuple[dict[str, str], dict[str, Rack]],
    topology_muster: MusterProcess,
) -> None:
    """Queues a and b have 32 cpu of nominal quota each in a cohort; a borrows b's too with four
    required gangs of a whole rack each; b (weight 2, reclaimWithinCohort Any, within its
    nominal quota) submits one required gang of a whole rack, which
    preempts one of a's gangs and runs within one rack; the victim runs again later, within
    one rack; every gang finishes."""
    select, where = racks
    org, a, b = f"{namespace}-org", f"{namespace}-a", f"{namespace}-b"
    create_queue(kube, org, {})
    create_queue(kube, a, {"parent": org, "nominal": {"cpu": "32"}})
    create_queue(
        kube,
        b,
        {
            "parent": org,
            "weight": 2,
            "nominal": {"cpu": "32"},
            "preemption": {"reclaimWithinCohort": "Any"},
        },
    )
    path = jobs_path(namespace)
    holders = [f"a-{i}" for i in range(4)]
    try:
        wait_webhook(kube, path, a, select)
        with placements(kube, namespace) as seen:
            for name in holders:
                create_through_webhook(
                    kube, path, gang(name, a, select, 4, "25s", TOPOLOGY_REQUIRED)
                )
            wait_for(
                lambda: admitted_names(kube, namespace) >= set(holders),
                timeout=60,
                what="a's gangs admitted",
            )
            create_through_webhook(kube, path, gang("b-0", b, select, 4, "5s", TOPOLOGY_REQUIRED))
            wait_for(
                lambda: "b-0" in admitted_names(kube, namespace),
                timeout=60,
                what="b's gang admitted by preemption",
            )
            jobs = {j["metadata"]["name"]: j for j in kube.get(path)["items"]}
            victims = [n for n in holders if PREEMPTIONS in annotations_of(jobs[n])]
            assert len(victims) == 1, {n: annotations_of(j) for n, j in jobs.items()}
            wait_all_finished(kube, namespace, 5, 150)
        found = racks_of(seen, where)
        assert_each_in_one_rack(found, [*holders, "b-0"])
    finally:
        for queue in (a, b, org):
            delete_queue(kube, queue)
