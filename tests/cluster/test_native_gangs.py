"""Kubernetes 1.37's own gang scheduling on the local control plane (docs/dev/native-gangs.md),
and muster's native gang path on it.

`muster cluster up --feature-gates GenericWorkload=true` serves scheduling.k8s.io/v1beta1, and
kube-scheduler binds a PodGroup's pods all or none: first without muster. Then with `muster
run --local` against the same cluster: every admitted gang (a Job, a JobSet, a MiniCluster) has
its pod templates linked to a PodGroup per pod set, owned by its gang object, of the admitted
size; when kube-scheduler's placement differs from muster's plan, no gang is ever partly bound;
evictions and preemptions leave the groups to the next admission; a controller killed with -9
repairs the groups from the objects; an elastic gang's minimum is its admitted size.

A cluster of its own (small kwok nodes, the operators whose sources are present), since the
session's runs with the default gates (where `test_pinning.py` shows the pin path alone);
`MUSTER_GATED_CLUSTER=NAME` uses a running local cluster of that name instead (left running).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import ssl
import threading
import urllib.request
from collections import Counter
from collections.abc import Iterator
from typing import Any, Final

import pytest

from admission.crd import queue_crd
from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from policies.kinds.nativegroups import stamp_mark
from policies.kinds.pinning import decode_placement
from policies.vocabulary import (
    EVICTED_REASON,
    GANG,
    MIN_MEMBERS,
    PLACEMENT,
    PREEMPTIONS,
    SUBMITTED,
)
from simulator.controlplane.cluster import LocalCluster
from simulator.controlplane.errors import ClusterError
from simulator.controlplane.minicluster import install_crd, job_maker, minicluster_crd
from simulator.controlplane.nodes import NODE_GROUP_LABEL, NodeShape
from simulator.controlplane.operators import FLUX, JOBSET, available
from tests import builders
from tests.builders import KWOK_TOLERATION
from tests.cluster.test_jobset import JOBSETS, jobset
from tests.conftest import MusterProcess, start_muster
from tests.controller_helpers import (
    admitted,
    create_nodes,
    create_queue,
    delete_nodes,
    delete_queue,
    finished,
    jobs_path,
)
from tests.kube import create_through_webhook, wait_for

pytestmark = pytest.mark.cluster

PODGROUPS = "/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/podgroups"


@pytest.fixture(scope="module")
def gated() -> Iterator[LocalCluster]:
    existing = os.environ.get("MUSTER_GATED_CLUSTER")
    if existing:
        yield LocalCluster(name=existing, log=lambda _: None)
        return
    cluster = LocalCluster(name=f"gangs-{os.getpid()}", log=lambda _: None)
    cluster.up(
        nodes=8,
        shape=NodeShape(cpu="4", memory="16Gi"),
        operators=available(),
        feature_gates={"GenericWorkload": True},
    )
    try:
        yield cluster
    finally:
        cluster.down(quiet=True)


@pytest.fixture
def gkube(gated: LocalCluster) -> Iterator[KubeClient]:
    with gated.client() as client:
        yield client


_NAMESPACES = itertools.count()


@pytest.fixture
def gns(gkube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    slug = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower().replace("_", "-"))[:30]
    name = f"g-{slug.strip('-')}-{next(_NAMESPACES)}-{os.getpid() % 10000}"
    gkube.create("/api/v1/namespaces", {"metadata": {"name": name}})
    yield name
    gkube.delete(f"/api/v1/namespaces/{name}")


def _podgroup(name: str, min_count: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def _pod(name: str, group: str, cpu: str = "1", nodes: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulingGroup": {"podGroupName": group},
        "tolerations": [KWOK_TOLERATION],
        "containers": [
            {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
        ],
    }
    if nodes:
        term = {
            "matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}
            ]
        }
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _bound(kube: KubeClient, ns: str, prefix: str) -> dict[str, str]:
    pods = kube.get(f"/api/v1/namespaces/{ns}/pods")["items"]
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName", "")
        for p in pods
        if p["metadata"]["name"].startswith(prefix)
    }


def _gang_held(cluster: LocalCluster) -> int:
    """Pods kube-scheduler holds back for their gang (its GangScheduling PreEnqueue)."""
    port = json.loads((cluster.state_dir / "ports.json").read_text())["kube-scheduler"]
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    pki = cluster.state_dir / "pki"
    ctx.load_cert_chain(pki / "admin.crt", pki / "admin.key")
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=10) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith('scheduler_unschedulable_pods{plugin="GangScheduling"'):
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def test_the_gate_serves_the_api_and_status_shows_it(
    gated: LocalCluster, gkube: KubeClient
) -> None:
    resources = gkube.get("/apis/scheduling.k8s.io/v1beta1")["resources"]
    assert {"podgroups", "workloads"} <= {r["name"] for r in resources}
    assert gkube.serves(kubeapi.POD_GROUPS)
    status = gated.status()
    assert status["featureGates"] == {"GenericWorkload": True}
    assert status["runtimeConfig"] == ["--runtime-config=scheduling.k8s.io/v1beta1=true"]
    with pytest.raises(ClusterError, match="running with feature gates GenericWorkload=true"):
        LocalCluster(name=gated.name, log=lambda _: None).up(feature_gates={})


def test_a_gang_below_its_minimum_binds_nothing_and_its_last_pod_binds_all(
    gated: LocalCluster, gkube: KubeClient, gns: str
) -> None:
    gkube.create(PODGROUPS.format(ns=gns), _podgroup("trio", 3))
    pods = f"/api/v1/namespaces/{gns}/pods"
    gkube.create(pods, _pod("trio-0", "trio"))
    gkube.create(pods, _pod("trio-1", "trio"))
    wait_for(lambda: _gang_held(gated) >= 2, timeout=60, what="the scheduler to hold trio's 2 pods")
    assert set(_bound(gkube, gns, "trio").values()) == {""}
    gkube.create(pods, _pod("trio-2", "trio"))

    def all_bound() -> dict[str, str] | None:
        bound = _bound(gkube, gns, "trio")
        return bound if len(bound) == 3 and all(bound.values()) else None

    wait_for(all_bound, timeout=60, what="trio's 3 pods bound")
    group = gkube.get(f"{PODGROUPS.format(ns=gns)}/trio")
    assert group["metadata"]["finalizers"] == ["scheduling.k8s.io/podgroup-protection"]
    assert group["status"]["conditions"][0]["reason"] == "Scheduled"


def test_a_gang_that_does_not_fit_binds_nothing_until_its_minimum_shrinks(
    gkube: KubeClient, gns: str
) -> None:
    groups = PODGROUPS.format(ns=gns)
    gkube.create(groups, _podgroup("tight", 3))
    two_nodes = ["kwok-default-6", "kwok-default-7"]  # 4 CPU each: two 3-CPU pods fit, not three
    for i in range(3):
        gkube.create(f"/api/v1/namespaces/{gns}/pods", _pod(f"tight-{i}", "tight", "3", two_nodes))

    def refused() -> dict[str, Any] | None:
        conditions = gkube.get(f"{groups}/tight").get("status", {}).get("conditions") or []
        return next((c for c in conditions if c["reason"] == "Unschedulable"), None)

    condition = wait_for(refused, timeout=60, what="tight to be found unschedulable")
    assert "minCount (3) cannot be satisfied" in condition["message"]
    assert set(_bound(gkube, gns, "tight").values()) == {""}
    gkube.patch(f"{groups}/tight", {"spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}})
    wait_for(
        lambda: sum(1 for node in _bound(gkube, gns, "tight").values() if node) == 2,
        timeout=60,
        what="two of tight's pods bound once minCount is 2",
    )
    with pytest.raises(ApiError, match=r"field cannot be cleared once set|immutable"):
        gkube.patch(f"{groups}/tight", {"spec": {"schedulingPolicy": {"gang": None, "basic": {}}}})


# --- muster's native path ------------------------------------------------------------------


class Controller:
    """The module's `muster run --local` against the gated cluster, started with the flags the
    test asks for (`with_flags`; tests that share flags share the process)."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.process: MusterProcess | None = None

    def with_flags(self, *flags: str) -> MusterProcess:
        if self.process is not None and self.process.flags != flags:
            self.process.stop()
            self.process = None
        if self.process is None:
            self.process = start_muster(self.cluster.kubeconfig, *flags)
        return self.process

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None


@pytest.fixture(scope="module")
def controller(gated: LocalCluster) -> Iterator[Controller]:
    with gated.client() as kube:
        from simulator.controlplane.minicluster import apply_crd

        apply_crd(kube, queue_crd())
        install_crd(kube, minicluster_crd())
    holder = Controller(gated)
    try:
        yield holder
    finally:
        holder.stop()


@pytest.fixture
def node_group(gkube: KubeClient, gns: str) -> Iterator[tuple[str, dict[str, str]]]:
    """A node group of this test (its gangs select it) and a queue of no quota limit."""
    group = f"n-{gns}"[:60]
    queue = f"{gns}-q"[:60]
    create_queue(gkube, queue, {})
    try:
        yield queue, {NODE_GROUP_LABEL: group}
    finally:
        delete_queue(gkube, queue)
        delete_nodes(gkube, group)


def _nodes(kube: KubeClient, select: dict[str, str], count: int, cpu: str) -> list[str]:
    group = select[NODE_GROUP_LABEL]
    names = [f"{group}-{i}" for i in range(count)]
    create_nodes(kube, group, {name: {} for name in names}, cpu=cpu)
    return names


def pod_groups(kube: KubeClient, ns: str) -> dict[str, dict[str, Any]]:
    return {g["metadata"]["name"]: g for g in kube.get(PODGROUPS.format(ns=ns))["items"]}


def min_count(group: dict[str, Any]) -> int:
    return int(group["spec"]["schedulingPolicy"]["gang"]["minCount"])


def gang_pods(kube: KubeClient, ns: str, gang: str) -> list[dict[str, Any]]:
    path = f"/api/v1/namespaces/{ns}/pods"
    return list(kube.get(path, {"labelSelector": f"{GANG}={gang}"})["items"])


def bound(kube: KubeClient, ns: str, gang: str) -> Counter[str]:
    return Counter(
        p["spec"]["nodeName"] for p in gang_pods(kube, ns, gang) if p["spec"].get("nodeName")
    )


def _pods_said(
    kube: KubeClient,
    ns: str,
    gang: str,
    plan: dict[str, int],
    notes: dict[str, str],
    controller: Controller,
) -> str:
    """What a gang's pods, its object and muster's log say, for a failure's message (a CI run
    once bound a pinned native gang's three pods on one node of its two planned ones)."""
    pods = [
        (
            p["metadata"]["name"],
            p["spec"].get("nodeName"),
            (p["spec"].get("nodeSelector") or {}).get("kubernetes.io/hostname"),
            [g["name"] for g in p["spec"].get("schedulingGates") or []],
            (p.get("status") or {}).get("phase"),
            p["metadata"]["creationTimestamp"],
            p["metadata"].get("deletionTimestamp"),
        )
        for p in gang_pods(kube, ns, gang)
    ]
    said = controller.process.text() if controller.process is not None else ""
    lines = [line for line in said.splitlines() if f"/{gang}" in line or f" {gang}" in line]
    muster = {k: v for k, v in notes.items() if k.startswith("muster.dev/")}
    return f"{gang}: plan {plan}; pods {pods}; annotations {muster}; log {lines[-20:]}"


def linked_group(template: dict[str, Any]) -> str:
    return str(((template.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName"))


class PartialWatch:
    """Samples the pods of a namespace while the body runs (a thread of its own, every 0.2 s)
    and records each gang seen partly bound (`partly_bound`) in two looks running: a gang bound
    part way stays so while its other pods are held back (seconds, till room frees), while a
    look that falls between kube-scheduler's bind calls for a group it let through may see a
    pod not bound yet that still carries the Unschedulable condition of an earlier attempt
    (seen once in CI, for a preemptor whose victim's pods were still going: 3 bound, 1 such)."""

    def __init__(self, kube: KubeClient, ns: str) -> None:
        self.kube, self.ns = kube, ns
        self.partial: list[tuple[str, int, int]] = []
        self.looks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def __enter__(self) -> PartialWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        last: list[tuple[str, int, int]] = []
        with KubeClient(self.kube.credentials) as own:
            while not self._stop.wait(0.2):
                try:
                    pods = own.get(f"/api/v1/namespaces/{self.ns}/pods")["items"]
                except (ApiError, OSError):
                    continue
                self.looks += 1
                seen = partly_bound(pods)
                self.partial += [sight for sight in seen if sight in last]
                last = seen


def _held_back(pod: dict[str, Any]) -> bool:
    """A pod the scheduler will not bind now: still gated, or found unschedulable."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return bool(pod["spec"].get("schedulingGates")) or any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions
    )


def partly_bound(pods: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    """(gang, bound, held back) of each gang with pods bound while others of it are held back
    (`_held_back`: gated, or found unschedulable), none of them ended or being deleted. A pod
    merely not bound yet is not held back: kube-scheduler binds a group's pods one API call
    each once it let the whole group through, so a look may fall between those calls."""
    bound_pods: Counter[str] = Counter()
    held: Counter[str] = Counter()
    settled: set[str] = set()
    for pod in pods:
        gang = (pod["metadata"].get("labels") or {}).get(GANG)
        if gang is None:
            continue
        if pod["status"].get("phase") in ("Succeeded", "Failed") or pod["metadata"].get(
            "deletionTimestamp"
        ):
            settled.add(gang)
        elif pod["spec"].get("nodeName"):
            bound_pods[gang] += 1
        elif _held_back(pod):
            held[gang] += 1
    return [
        (gang, count, held[gang])
        for gang, count in bound_pods.items()
        if held[gang] and gang not in settled
    ]


@pytest.mark.parametrize("pin", [True, False], ids=["pins-too", "native-alone"])
def test_every_admitted_job_gets_its_pod_group_and_is_bound_whole(
    controller: Controller,
    gkube: KubeClient,
    gns: str,
    node_group: tuple[str, dict[str, str]],
    pin: bool,
) -> None:
    """Six Jobs of 3 pods on four nodes of 4 cpu (room for 5 at once): each Job's template names
    its PodGroup (its name ends with the mark of the Job's submission stamp), the group is owned
    by the Job, labelled with the gang and a gang of 3, and no Job is ever seen partly bound;
    all finish. With pins too, each pod is also where muster planned it (the gate composes)."""
    controller.with_flags(*(() if pin else ("--no-pin",)))
    queue, select = node_group
    _nodes(gkube, select, 4, "4")
    path = jobs_path(gns)
    names = [f"j-{i}" for i in range(6)]
    with PartialWatch(gkube, gns) as watch:
        for name in names:
            body = builders.job(name, queue, pods=3, cpu="1", runtime="6s", node_selector=select)
            create_through_webhook(gkube, path, body)
        wait_for(
            lambda: all(finished(gkube.get(f"{path}/{n}")) for n in names),
            timeout=180,
            what="every Job finished",
        )
    groups = pod_groups(gkube, gns)
    # Once (of 3 runs, the first muster start on a cluster up for a minute) the Jobs finished
    # with no group made; what each Job says then tells whether the webhook linked it.
    assert len(groups) == len(names), (sorted(groups), _jobs_said(gkube, path, names))
    for name in names:
        job = gkube.get(f"{path}/{name}")
        link = linked_group(job["spec"]["template"])
        mark = stamp_mark(job["metadata"]["annotations"][SUBMITTED])
        assert link == f"{name}-{mark}", link
        group = groups[link]
        owner = group["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", name, job["metadata"]["uid"])
        assert owner["controller"] is True
        assert group["metadata"]["labels"][GANG] == name
        assert min_count(group) == 3
    assert watch.looks > 10 and not watch.partial, watch.partial
    for name in names:
        notes = gkube.get(f"{path}/{name}")["metadata"]["annotations"]
        if not pin:
            assert PLACEMENT not in notes, notes
            continue
        # The pin composes with the group: each pod is where muster planned it.
        plan = decode_placement(notes[PLACEMENT], PLACEMENT)[""]
        assert dict(bound(gkube, gns, name)) == plan, _pods_said(
            gkube, gns, name, plan, notes, controller
        )


def _jobs_said(kube: KubeClient, path: str, names: list[str]) -> dict[str, Any]:
    """Each Job's link and conditions, for a failure's message."""
    said = {}
    for name in names:
        job = kube.get(f"{path}/{name}")
        conditions = [c["type"] for c in (job.get("status") or {}).get("conditions") or []]
        said[name] = (linked_group(job["spec"]["template"]), conditions)
    return said


HOLD: Final = "example.com/hold"
"""A scheduling gate of the test's own: it orders when kube-scheduler sees each gang's pods."""


def _held(body: dict[str, Any]) -> dict[str, Any]:
    body["spec"]["template"]["spec"]["schedulingGates"] = [{"name": HOLD}]
    return body


def _release_held(kube: KubeClient, ns: str, gang: str, count: int) -> None:
    """Lift the test's gate from the gang's `count` pods (once the Job controller made them)."""
    pods = wait_for(
        lambda: p if len(p := gang_pods(kube, ns, gang)) == count else None,
        timeout=60,
        what=f"{gang}'s {count} pods created",
    )
    for pod in pods:
        path = f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}"
        kube.patch(path, {"spec": {"schedulingGates": None}})


def test_kube_schedulers_own_placement_never_binds_part_of_a_gang(
    controller: Controller, gkube: KubeClient, gns: str, node_group: tuple[str, dict[str, str]]
) -> None:
    """Native gangs without pins, where kube-scheduler does not place a gang as muster planned.
    Three nodes of 4 cpu; a (2 pods of 2 cpu, 20 s) and b (2 pods of 4 cpu), their pods held
    by a gate of the test's own until both are admitted: muster packs a on one node and b on
    the other two. Then a's pods are let go: kube-scheduler spreads them over two nodes (it
    scores emptier nodes higher). Then b's: its two pods no longer fit together, and its group
    is found unschedulable with none of it bound (pinned or not, one pod of it would have
    bound alone). Once a ends, b binds whole and finishes; no gang is ever partly bound."""
    controller.with_flags("--no-pin")
    queue, select = node_group
    _nodes(gkube, select, 3, "4")
    path = jobs_path(gns)
    with PartialWatch(gkube, gns) as watch:
        a = builders.job("a", queue, pods=2, cpu="2", runtime="20s", node_selector=select)
        b = builders.job("b", queue, pods=2, cpu="4", runtime="3s", node_selector=select)
        create_through_webhook(gkube, path, _held(a))
        created = create_through_webhook(gkube, path, _held(b))
        wait_for(
            lambda: admitted(gkube.get(f"{path}/a")) and admitted(gkube.get(f"{path}/b")),
            timeout=60,
            what="a and b admitted together",
        )
        _release_held(gkube, gns, "a", 2)
        spread = wait_for(
            lambda: a if sum((a := bound(gkube, gns, "a")).values()) == 2 else None,
            timeout=60,
            what="a bound",
        )
        assert len(spread) == 2, f"kube-scheduler packed a as muster planned: {dict(spread)}"
        _release_held(gkube, gns, "b", 2)
        group_path = f"{PODGROUPS.format(ns=gns)}/{linked_group(created['spec']['template'])}"

        def refused() -> dict[str, Any] | None:
            conditions = (gkube.get(group_path).get("status") or {}).get("conditions") or []
            return next((c for c in conditions if c.get("reason") == "Unschedulable"), None)

        condition = wait_for(refused, timeout=60, what="b's group found unschedulable")
        assert "minCount (2) cannot be satisfied" in condition["message"], condition
        assert not bound(gkube, gns, "b")
        assert not finished(gkube.get(f"{path}/a"))
        wait_for(lambda: finished(gkube.get(f"{path}/b")), timeout=180, what="b finished after a")
    notes = gkube.get(f"{path}/b")["metadata"]["annotations"]
    assert "muster.dev/evictions" not in notes, notes
    assert watch.looks > 10 and not watch.partial, watch.partial


def test_an_evicted_native_gang_keeps_its_group_for_the_next_admission(
    controller: Controller, gkube: KubeClient, gns: str
) -> None:
    """A gang that can never run (its queue does not fit gangs to nodes; 2 pods of 8 cpu on
    nodes of 4): admitted, its group of 2 made, kube-scheduler binds none of it, it clogs and is
    evicted (suspended, its pods gone). Its template still names the same group, the group is
    still there (inert without pods) and still a gang of 2; no pod of it was ever bound."""
    controller.with_flags()
    queue = f"{gns}-blind"[:60]
    create_queue(
        gkube,
        queue,
        {"nodeFit": False, "clogTimeout": "3s", "backoff": {"base": "5m", "max": "5m"}},
    )
    path = jobs_path(gns)
    try:
        body = builders.job("stuck", queue, pods=2, cpu="8", runtime="3s")
        created = create_through_webhook(gkube, path, body)
        link = linked_group(created["spec"]["template"])
        evicted = wait_for(
            lambda: (
                j
                if (j := gkube.get(f"{path}/stuck"))["metadata"]["annotations"].get(EVICTED_REASON)
                else None
            ),
            timeout=90,
            what="stuck evicted as a clog",
        )
        assert evicted["metadata"]["annotations"][EVICTED_REASON] == "Clogged"
        assert evicted["spec"]["suspend"] is True
        assert linked_group(evicted["spec"]["template"]) == link
        wait_for(lambda: not gang_pods(gkube, gns, "stuck"), timeout=60, what="its pods gone")
        group = pod_groups(gkube, gns)[link]
        assert min_count(group) == 2 and "deletionTimestamp" not in group["metadata"]
    finally:
        delete_queue(gkube, queue)


def test_a_preempted_native_gang_is_admitted_again_through_the_same_group(
    controller: Controller, gkube: KubeClient, gns: str
) -> None:
    """Queues a and b have 8 cpu of nominal quota each in a cohort; a borrows b's too with two
    gangs of 4 pods of 2 cpu; b's gang of 4 pods of 2 cpu preempts one of them. The victim is
    suspended with its template as linked (the link never changes) and its group kept; once b
    ends it is admitted again, its group a gang of 4 again, and every gang finishes whole."""
    controller.with_flags()
    group = f"p-{gns}"[:60]
    select = {NODE_GROUP_LABEL: group}
    _nodes(gkube, select, 4, "4")
    org, a, b = f"{gns}-org"[:60], f"{gns}-a"[:60], f"{gns}-b"[:60]
    create_queue(gkube, org, {})
    create_queue(gkube, a, {"parent": org, "nominal": {"cpu": "8"}})
    create_queue(
        gkube,
        b,
        {
            "parent": org,
            "weight": 2,
            "nominal": {"cpu": "8"},  # reclaims only within its own nominal quota, as Kueue
            "preemption": {"reclaimWithinCohort": "Any"},
        },
    )
    path = jobs_path(gns)
    sizes = ("a-0", "a-1", "b-0")
    try:
        with PartialWatch(gkube, gns) as watch:
            links = {}
            for name in ("a-0", "a-1"):
                body = builders.job(name, a, pods=4, cpu="2", runtime="20s", node_selector=select)
                links[name] = linked_group(
                    create_through_webhook(gkube, path, body)["spec"]["template"]
                )
            wait_for(
                lambda: all(sum(bound(gkube, gns, n).values()) == 4 for n in ("a-0", "a-1")),
                timeout=90,
                what="a's gangs bound",
            )
            body = builders.job("b-0", b, pods=4, cpu="2", runtime="5s", node_selector=select)
            create_through_webhook(gkube, path, body)
            victim = wait_for(
                lambda: next(
                    (
                        n
                        for n in ("a-0", "a-1")
                        if PREEMPTIONS in gkube.get(f"{path}/{n}")["metadata"]["annotations"]
                    ),
                    None,
                ),
                timeout=60,
                what="b's preemption",
            )
            suspended = gkube.get(f"{path}/{victim}")
            assert linked_group(suspended["spec"]["template"]) == links[victim]
            assert links[victim] in pod_groups(gkube, gns)
            wait_for(
                lambda: all(finished(gkube.get(f"{path}/{n}")) for n in sizes),
                timeout=240,
                what="every gang finished",
            )
        groups = pod_groups(gkube, gns)
        assert len(groups) == 3 and all(min_count(g) == 4 for g in groups.values())
        assert watch.looks > 10 and not watch.partial, watch.partial
    finally:
        for q in (a, b, org):
            delete_queue(gkube, q)
        delete_nodes(gkube, group)


def test_an_elastic_gangs_group_is_a_gang_of_its_admitted_size(
    controller: Controller, gkube: KubeClient, gns: str, node_group: tuple[str, dict[str, str]]
) -> None:
    """An Indexed Job of 4 pods of 4 cpu (min 2) on one node of 8 cpu: admitted at 2, its group
    is a gang of 2 (a gang of 4 would never bind), its 2 pods run and it completes."""
    controller.with_flags()
    queue, select = node_group
    _nodes(gkube, select, 1, "8")
    path = jobs_path(gns)
    body = builders.job("elastic", queue, pods=4, cpu="4", runtime="3s", node_selector=select)
    body["spec"]["completionMode"] = "Indexed"
    body["metadata"]["annotations"] = {MIN_MEMBERS: "2"}
    created = create_through_webhook(gkube, path, body)
    job = wait_for(
        lambda: j if admitted(j := gkube.get(f"{path}/elastic")) else None,
        timeout=60,
        what="the elastic gang admitted",
    )
    assert str(admitted(job)).endswith("/2")
    group = pod_groups(gkube, gns)[linked_group(created["spec"]["template"])]
    assert min_count(group) == 2
    done = wait_for(
        lambda: j if finished(j := gkube.get(f"{path}/elastic")) else None,
        timeout=90,
        what="the elastic gang finished",
    )
    assert done["status"].get("succeeded") == 2, done["status"]


def test_a_restarted_controller_repairs_the_groups_from_the_objects(
    controller: Controller, gkube: KubeClient, gns: str, node_group: tuple[str, dict[str, str]]
) -> None:
    """Three gangs of 2 pods of 2 cpu admitted on three nodes of 4 cpu (all of it), a fourth of
    2 pods of 4 cpu waiting. The controller is killed with -9; meanwhile the first gang's group
    is set to a gang of 1 by hand. The restarted controller finds that from the objects alone
    and sets it back to 2, admits the fourth through its own group, admits nothing twice, and every
    gang finishes whole with one group each."""
    muster = controller.with_flags()
    queue, select = node_group
    _nodes(gkube, select, 3, "4")
    path = jobs_path(gns)
    names = [f"r-{i}" for i in range(4)]
    links = {}
    with PartialWatch(gkube, gns) as watch:
        for i, name in enumerate(names):
            runtime = "40s" if i < 3 else "5s"
            body = builders.job(name, queue, pods=2, cpu="2", runtime=runtime, node_selector=select)
            if i == 3:
                body["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"][
                    "cpu"
                ] = "4"
            links[name] = linked_group(
                create_through_webhook(gkube, path, body)["spec"]["template"]
            )
        first = wait_for(
            lambda: all(admitted(gkube.get(f"{path}/{n}")) for n in names[:3]) or None,
            timeout=60,
            what="three gangs admitted",
        )
        assert first and not admitted(gkube.get(f"{path}/r-3"))
        admissions = {n: admitted(gkube.get(f"{path}/{n}")) for n in names[:3]}
        muster.stop(signal.SIGKILL)
        group_path = f"{PODGROUPS.format(ns=gns)}/{links['r-0']}"
        gkube.patch(group_path, {"spec": {"schedulingPolicy": {"gang": {"minCount": 1}}}})
        controller.process = None
        controller.with_flags()
        wait_for(
            lambda: min_count(gkube.get(group_path)) == 2,
            timeout=60,
            what="r-0's group repaired to a gang of 2",
        )
        wait_for(
            lambda: all(finished(gkube.get(f"{path}/{n}")) for n in names),
            timeout=240,
            what="every gang finished",
        )
    for name in names[:3]:
        assert admitted(gkube.get(f"{path}/{name}")) == admissions[name], name
    groups = pod_groups(gkube, gns)
    assert sorted(groups) == sorted(links.values())
    assert watch.looks > 10 and not watch.partial, watch.partial


def test_a_jobsets_pod_sets_each_get_a_group(
    controller: Controller, gated: LocalCluster, gkube: KubeClient, gns: str
) -> None:
    """A JobSet (a leader Job of 1 pod, two worker Jobs of 2 pods) through the real JobSet
    controller: each replicated Job's template names its own group, which its child Jobs' pods
    carry; the leader's group is a gang of 1, the workers' of 4; it finishes."""
    from simulator.controlplane.cluster import operators_of

    if JOBSET not in operators_of(gated.kubeconfig):
        pytest.skip("no JobSet controller beside this cluster (its source is not present)")
    controller.with_flags()
    queue = f"{gns}-q"[:60]
    create_queue(gkube, queue, {})
    path = JOBSETS.path(gns)
    try:
        created = create_through_webhook(gkube, path, jobset("js", queue, runtime="4s"))
        links = {
            r["name"]: linked_group(r["template"]["spec"]["template"])
            for r in created["spec"]["replicatedJobs"]
        }
        assert links["leader"] != links["workers"]
        wait_for(
            lambda: any(
                c.get("type") == "Completed" and c.get("status") == "True"
                for c in (gkube.get(f"{path}/js").get("status") or {}).get("conditions") or []
            ),
            timeout=180,
            what="the JobSet completed",
        )
        groups = pod_groups(gkube, gns)
        assert min_count(groups[links["leader"]]) == 1
        assert min_count(groups[links["workers"]]) == 4
        owner = groups[links["workers"]]["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("JobSet", "js")
    finally:
        delete_queue(gkube, queue)


def test_a_miniclusters_job_is_linked_when_its_operator_makes_it(
    controller: Controller, gated: LocalCluster, gkube: KubeClient, gns: str
) -> None:
    """A MiniCluster of 2: the Job its operator (or the stand-in) makes is linked by the webhook
    to a group owned by that Job, a gang of 2; its pods run."""
    from simulator.controlplane.cluster import operators_of

    controller.with_flags()
    queue = f"{gns}-q"[:60]
    create_queue(gkube, queue, {})
    minicluster = {
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": "mc", "labels": {"muster.dev/queue": queue}},
        "spec": {
            "size": 2,
            "containers": [{"image": "lammps", "resources": {"requests": {"cpu": "1"}}}],
            "pod": {"tolerations": [KWOK_TOLERATION]},
        },
    }
    real = FLUX in operators_of(gated.kubeconfig)
    reconciler = job_maker(gkube, gns, real=real).start()
    try:
        create_through_webhook(
            gkube, f"/apis/flux-framework.org/v1alpha2/namespaces/{gns}/miniclusters", minicluster
        )
        job = wait_for(
            lambda: j if admitted(j := _get(gkube, f"{jobs_path(gns)}/mc")) else None,
            timeout=90,
            what="the MiniCluster's Job admitted",
        )
        link = linked_group(job["spec"]["template"])
        group = pod_groups(gkube, gns)[link]
        owner = group["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", "mc", job["metadata"]["uid"])
        assert min_count(group) == 2
        wait_for(
            lambda: sum(bound(gkube, gns, "mc").values()) == 2, timeout=90, what="its pods bound"
        )
    finally:
        reconciler.stop()
        delete_queue(gkube, queue)


def _get(kube: KubeClient, path: str) -> dict[str, Any]:
    try:
        return kube.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return {}
        raise
