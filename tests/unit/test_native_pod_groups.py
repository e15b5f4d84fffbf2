"""Native gangs (scheduling.k8s.io PodGroups), not muster's label-based pod groups
(tests/unit/test_pod_groups.py). The native gang path without a cluster (the real one:
tests/cluster/test_native_gangs.py): the
names and links the webhook writes at create (`policies.kinds.nativegroups`, each kind's `hold`),
the links the controller reads back, the PodGroups an admission applies before it releases a
gang, what a restarted controller repairs, and the native gangs a plan leaves out while pods of
their last admission live."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
from collections.abc import Callable
from typing import Any

from admission.cache import Cache
from admission.gangs import job_record
from admission.loop import Controller
from admission.metrics import ControllerMetrics
from admission.settings import ControllerSettings
from admission.writes import JobRef, Writer
from policies.kinds import JOB, JOBSET, MINICLUSTER
from policies.kinds.nativegroups import (
    MAX_NAME,
    POD_GROUPS,
    GroupLink,
    GroupOwner,
    admitted_counts,
    group_body,
    group_name,
    group_names,
    group_writes,
    min_count_of,
    stale_links,
    stamp_mark,
)
from policies.kinds.reading import format_admitted, read_gang
from policies.kinds.writes import Write
from policies.model import Gang, PodSet
from policies.resources import Resources
from policies.vocabulary import ADMITTED, GANG, POD_SET, QUEUE, SUBMITTED
from tests import builders
from tests.unit.test_kind_adapters import jobset
from webhook.configuration import path_of
from webhook.decision import WebhookSettings, decide_create
from webhook.review import WebhookState, review_response

NOW = 1_800_000_000.0
STAMP = builders.stamp(7, NOW)


def _link(template: dict[str, Any]) -> str | None:
    group = (template.get("spec") or {}).get("schedulingGroup")
    return None if group is None else str(group["podGroupName"])


def _decide(kind: Any, obj: dict[str, Any], **extra: Any) -> dict[str, Any]:
    decision = decide_create(
        kind,
        obj,
        namespace="ns",
        namespace_labels={},
        known_queues=None,
        settings=WebhookSettings(),
        stamp=STAMP,
        **extra,
    )
    return decision.patch


# --- names ----------------------------------------------------------------------------------


def test_a_group_is_named_for_its_gang_its_pod_set_and_its_submission() -> None:
    mark = stamp_mark(STAMP)
    assert len(mark) == 10 and mark != stamp_mark(builders.stamp(8, NOW))
    assert group_name("train", "", STAMP) == f"train-{mark}"
    assert group_name("js", "workers", STAMP) == f"js-workers-{mark}"
    # generateName lends its prefix; its dash is not doubled.
    assert group_name("train-", "", STAMP) == f"train-{mark}"
    long = group_name("a" * 250, "workers", STAMP)
    assert len(long) <= MAX_NAME and long.endswith(f"-{mark}")


def test_the_webhook_links_a_gang_only_where_native_gangs_are_served() -> None:
    body = builders.job("train", "q", pods=3)
    held = _decide(JOB, body, native=True)
    assert held["spec"]["template"]["spec"]["schedulingGroup"] == {
        "podGroupName": f"train-{stamp_mark(STAMP)}"
    }
    assert held["spec"]["template"]["metadata"]["labels"][GANG] == "train"
    assert "spec" not in _decide(JOB, body)["spec"]["template"]


def test_what_is_not_linked() -> None:
    # One pod: bound whole by itself.
    assert group_names(JOB, builders.job("one", "q", pods=1), "one", STAMP) == {}
    # Waves: 2 at a time, 6 in all; a last wave smaller than the group would never bind.
    waves = builders.job("waves", "q", pods=2, completions=6)
    assert group_names(JOB, waves, "waves", STAMP) == {}
    # A template that names a group of its own keeps it; muster makes none for it.
    own = builders.job("own", "q", pods=3)
    own["spec"]["template"]["spec"]["schedulingGroup"] = {"podGroupName": "mine"}
    assert group_names(JOB, own, "own", STAMP) == {}
    patch = _decide(JOB, own, native=True)
    assert "spec" not in patch["spec"]["template"]
    # A MiniCluster has no template to link; the Job its operator makes is linked.
    mc = {
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": "mc", "namespace": "ns", "labels": {QUEUE: "q"}},
        "spec": {"size": 4, "containers": [{"image": "x"}]},
    }
    assert group_names(MINICLUSTER, mc, "mc", STAMP) == {}
    assert "jobLabels" in _decide(MINICLUSTER, mc, native=True)["spec"]


def test_a_miniclusters_job_is_linked_under_the_miniclusters_name_and_stamp() -> None:
    owner_stamp = builders.stamp(3, NOW)
    job = builders.job(
        "mc",
        "q",
        pods=4,
        owner={
            "apiVersion": "flux-framework.org/v1alpha2",
            "kind": "MiniCluster",
            "name": "mc",
            "controller": True,
        },
    )
    patch = _decide(JOB, job, native=True, owner_stamp=owner_stamp)
    assert patch["metadata"]["annotations"][SUBMITTED] == owner_stamp
    assert _link(patch["spec"]["template"]) == group_name("mc", "", owner_stamp)


def test_a_jobsets_replicated_jobs_are_each_linked_to_their_own_group() -> None:
    body = jobset("js", workers=2)
    patch = _decide(JOBSET, body, native=True)
    links = {
        rjob["name"]: _link(rjob["template"]["spec"]["template"])
        for rjob in patch["spec"]["replicatedJobs"]
    }
    assert links == {name: group_name("js", name, STAMP) for name in links}
    assert len(set(links.values())) == len(links) == 2


def test_the_review_adds_the_link_as_a_json_patch_op() -> None:
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "r1",
            "operation": "CREATE",
            "namespace": "ns",
            "object": builders.job("train", "q", pods=2),
        },
    }
    answer = review_response(
        review,
        path=path_of(JOB),
        state=WebhookState(native_gangs=True),
        settings=WebhookSettings(),
        stamp=lambda: STAMP,
    )
    ops = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert {
        "op": "add",
        "path": "/spec/template/spec/schedulingGroup",
        "value": {"podGroupName": group_name("train", "", STAMP)},
    } in ops


# --- what the controller reads back ----------------------------------------------------------


def stored_job(
    name: str = "train",
    pods: int = 4,
    *,
    stamp: str = STAMP,
    linked: str | None = "",
    annotations: dict[str, str] | None = None,
    rv: int = 10,
) -> dict[str, Any]:
    """A stored, suspended gang of queue q (pods of 2 cpu) as the webhook stamped it: linked to
    muster's group for `stamp` (`linked=""`), to the group named `linked`, or not (None)."""
    body = builders.job(
        name,
        "q",
        namespace="ns",
        pods=pods,
        suspend=True,
        cpu="2",
        runtime=None,
        tolerations=(),
        annotations={QUEUE: "q", SUBMITTED: stamp, **(annotations or {})},
        gang_label=True,
        resource_version=rv,
    )
    if linked is not None:
        group = linked or group_name(name, "", stamp)
        body["spec"]["template"]["spec"]["schedulingGroup"] = {"podGroupName": group}
    return body


def _reading(body: dict[str, Any]) -> Any:
    meta = body["metadata"]
    return read_gang(
        JOB, "ns", meta["name"], body["spec"], meta["labels"], meta.get("annotations") or {}
    )


def test_a_gang_is_native_only_when_every_template_names_muster_s_group() -> None:
    body = stored_job()
    body["spec"]["template"]["spec"]["priorityClassName"] = "high"
    assert _reading(body).links == (GroupLink("", group_name("train", "", STAMP), "high"),)
    assert job_record(body).links == _reading(body).links
    assert _reading(stored_job(linked=None)).links == ()
    # Another gang's mark (a copied manifest), or the user's own group: not muster's.
    assert _reading(stored_job(linked=group_name("train", "", builders.stamp(1, NOW)))).links == ()
    assert _reading(stored_job(linked="mine")).links == ()


def test_every_pod_set_of_a_jobset_reads_as_linked() -> None:
    body = jobset("js", workers=2)
    held = copy.deepcopy(body)
    held["spec"] = {**body["spec"], **_decide(JOBSET, body, native=True)["spec"]}
    meta = held["metadata"]
    reading = read_gang(
        JOBSET, "ns", "js", held["spec"], meta.get("labels") or {}, {SUBMITTED: STAMP}
    )
    assert {link.pod_set for link in reading.links} == {t.name for t in reading.templates}


# --- the groups an admission applies --------------------------------------------------------


def test_an_elastic_gangs_main_set_is_its_admitted_share_and_other_sets_are_whole() -> None:
    workers = PodSet("workers", 6, Resources(cpu=1000))
    gang = Gang(
        "ns/g", "q", Resources(cpu=1000), size=10, min_size=7, others=(workers,), set_name="ps"
    )
    assert admitted_counts(gang, 8) == {"ps": 2, "workers": 6}


def test_a_group_is_owned_by_its_gang_object_and_carries_the_templates_priority() -> None:
    owner = GroupOwner(JOB.api, "train", "uid-1", "train")
    link = GroupLink("", "train-abc", "high")
    body = group_body(link, 3, owner)
    assert body["metadata"]["name"] == "train-abc" and "namespace" not in body["metadata"]
    assert body["metadata"]["labels"] == {GANG: "train"}
    assert body["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "train",
            "uid": "uid-1",
            "controller": True,
        }
    ]
    assert body["spec"] == {
        "schedulingPolicy": {"gang": {"minCount": 3}},
        "priorityClassName": "high",
    }
    assert min_count_of(body) == 3
    sets = group_writes(
        [GroupLink("workers", "js-workers-abc")],
        {"workers": 4},
        GroupOwner(JOBSET.api, "js", "u", "js"),
    )
    assert sets[0].target is not None and sets[0].target.api == POD_GROUPS
    assert sets[0].body is not None and sets[0].body["metadata"]["labels"][POD_SET] == "workers"
    assert "priorityClassName" not in sets[0].body["spec"]


def test_only_missing_or_wrong_groups_are_stale() -> None:
    links = [GroupLink("", "a"), GroupLink("w", "b"), GroupLink("x", "c")]
    counts = {"": 2, "w": 4, "x": 1}
    assert stale_links(links, counts, {"a": 2, "b": 3}) == links[1:]
    assert min_count_of({"spec": {"schedulingPolicy": {"basic": {}}}}) is None


# --- the controller -------------------------------------------------------------------------


class Sender:
    """A `Writer` that runs each call at once and records what would be sent; all succeed."""

    def __init__(self, groups: dict[tuple[str, str], int | None] | None = None) -> None:
        self.sent: list[tuple[str, list[Write]]] = []
        self.groups = groups or {}

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    def admit(self, ref: JobRef, writes: list[Write]) -> str:
        return self.send(ref, writes)

    def send(self, ref: JobRef, writes: list[Write]) -> str:
        self.sent.append((ref.name, list(writes)))
        return "ok"

    def pod_group_counts(self) -> dict[tuple[str, str], int | None]:
        return dict(self.groups)

    def patch_queue_status(self, name: str, status: dict[str, object]) -> None: ...

    def event(self, *args: Any) -> None: ...


def controller(sender: Sender, *, served: bool = True) -> tuple[Cache, Controller]:
    cache = Cache()
    cache.apply_queue("ADDED", {"metadata": {"name": "q", "resourceVersion": "1"}, "spec": {}})
    cache.apply_node(
        "ADDED",
        {
            "metadata": {"name": "n1", "resourceVersion": "2"},
            "status": {"allocatable": {"cpu": "64", "pods": "110"}},
        },
    )
    cache.synced = True
    writer: Writer = sender  # type: ignore[assignment]
    settings = ControllerSettings(estimate_interval=0, pin=False)
    made = Controller(cache, writer, settings, ControllerMetrics())
    made.native.served = served
    return cache, made


async def settle(made: Controller) -> None:
    while made.inflight:
        await asyncio.gather(*list(made.inflight))


def test_an_admission_applies_the_gangs_groups_before_it_releases_it() -> None:
    async def run() -> None:
        sender = Sender()
        cache, made = controller(sender)
        cache.apply_job("ADDED", stored_job("train", 4))
        cache.apply_job("ADDED", stored_job("plain", 2, linked=None, stamp=builders.stamp(8, NOW)))
        await made.cycle()
        await settle(made)
        sent = dict(sender.sent)
        first, last = sent["train"][0], sent["train"][-1]
        assert first.target is not None and first.target.name == group_name("train", "", STAMP)
        assert first.body is not None and min_count_of(first.body) == 4
        owner = first.body["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", "train", "uid-train")
        assert last.what == "admit"
        assert [w.target for w in sent["plain"]] == [None]

    asyncio.run(run())


def test_without_the_api_a_linked_gang_is_released_by_pins_alone() -> None:
    async def run() -> None:
        sender = Sender()
        cache, made = controller(sender, served=False)
        cache.apply_job("ADDED", stored_job("train", 4))
        await made.cycle()
        await settle(made)
        assert [w.target for w in dict(sender.sent)["train"]] == [None]

    asyncio.run(run())


def test_a_native_gang_waits_while_pods_of_its_last_admission_live() -> None:
    async def run() -> None:
        sender = Sender()
        cache, made = controller(sender)
        cache.apply_job("ADDED", stored_job("train", 2))
        pod = {
            "metadata": {
                "name": "train-0",
                "namespace": "ns",
                "uid": "p0",
                "resourceVersion": "20",
                "labels": {GANG: "train"},
            },
            "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {"cpu": "2"}}}]},
            "status": {"phase": "Running"},
        }
        cache.apply_pod("ADDED", pod)
        assert made.native.draining() == {"ns/train"}
        await made.cycle()
        await settle(made)
        assert sender.sent == []
        cache.apply_pod("DELETED", pod)
        assert made.native.draining() == set()
        await made.cycle()
        await settle(made)
        assert [name for name, _ in sender.sent] == ["train"]

    asyncio.run(run())


def test_a_restarted_controller_repairs_only_missing_or_wrong_groups() -> None:
    async def run() -> None:
        admitted = {ADMITTED: format_admitted(NOW, 4)}
        jobs = {
            "good": stored_job("good", 4, stamp=builders.stamp(1, NOW), annotations=admitted),
            "wrong": stored_job("wrong", 4, stamp=builders.stamp(2, NOW), annotations=admitted),
            "gone": stored_job("gone", 4, stamp=builders.stamp(3, NOW), annotations=admitted),
            "waiting": stored_job("waiting", 4, stamp=builders.stamp(4, NOW)),
        }
        groups: dict[tuple[str, str], int | None] = {
            ("ns", group_name("good", "", builders.stamp(1, NOW))): 4,
            ("ns", group_name("wrong", "", builders.stamp(2, NOW))): 1,
        }
        sender = Sender(groups)
        cache, made = controller(sender)
        for body in jobs.values():
            if ADMITTED in body["metadata"]["annotations"]:
                body["spec"]["suspend"] = False
            cache.apply_job("ADDED", body)
        assert await made.native.repair() == 2
        await settle(made)
        repaired = dict(sender.sent)
        assert sorted(repaired) == ["gone", "wrong"]
        for writes in repaired.values():
            assert len(writes) == 1 and writes[0].body is not None
            assert min_count_of(writes[0].body) == 4

    asyncio.run(run())
