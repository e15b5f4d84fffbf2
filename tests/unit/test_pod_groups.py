"""Pod groups (issue 29): plain pods labelled `muster.dev/pod-group` with the group's size are one
gang. The webhook gates, stamps and labels each pod at create, or refuses it naming the field;
the controller assembles the group's virtual gang object from its pods and its record, keeps
it out of the plan until all of its pods exist, takes its first `size` pods as the gang (pods
beyond stay gated, and are none of the gang's pods), records its admission on its record and
evicts it by deleting the pods it released."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from typing import Any

import pytest

from admission.admitter import Admitter
from admission.cache import INCOMPLETE, Cache
from admission.metrics import ControllerMetrics
from admission.nativegangs import NativeGangs
from admission.reasons import Rejections
from admission.settings import ControllerSettings
from policies.kinds.members import (
    evict_writes,
    member_of,
    preempt_writes,
    release_writes,
    shape_name,
)
from policies.kinds.pinning import HOSTNAME, PLACEMENT_GATE
from policies.kinds.podgroup import PODGROUP
from policies.kinds.release import Release
from policies.vocabulary import (
    ADMITTED,
    GANG,
    GANG_RECORD,
    MIN_MEMBERS,
    PLACEMENT,
    POD_GROUP_SIZE,
    POD_GROUP_TIMEOUT,
    POD_SET,
    QUEUE,
    STATE,
    SUBMITTED,
)
from tests import builders
from webhook.decision import AdmissionRejected, WebhookSettings
from webhook.review import WebhookState, decide, json_patch

PATH = "muster-podgroup-create"


def _state() -> WebhookState:
    return WebhookState(namespace_labels={"ns": {}}, queues={"q"})


def _stamps() -> Any:
    seq = iter(range(1, 10_000))
    return lambda: builders.stamp(next(seq), 1_000.0)


def _decide(pod: Mapping[str, Any], state: WebhookState | None = None) -> Any:
    return decide(
        PATH,
        pod,
        namespace="ns",
        state=state or _state(),
        settings=WebhookSettings(),
        stamp=_stamps(),
    )


def _refusal(pod: Mapping[str, Any], state: WebhookState | None = None) -> str:
    with pytest.raises(AdmissionRejected) as refused:
        _decide(pod, state)
    return str(refused.value)


def test_an_opted_in_pod_is_gated_stamped_and_labelled_with_its_gang_and_pod_set() -> None:
    pod = builders.group_pod("p-0", "train", size=4, queue="q", namespace="ns", tolerations=())
    pod["spec"]["schedulingGates"] = [{"name": "someone.else/gate"}]
    decision = _decide(pod)
    assert decision.managed and decision.queue == "q"
    labels = decision.patch["metadata"]["labels"]
    assert labels[QUEUE] == "q" and labels[GANG] == "train"
    assert labels[POD_SET] == shape_name(pod["spec"])
    assert SUBMITTED in decision.patch["metadata"]["annotations"]
    gated = [{"name": "someone.else/gate"}, {"name": PLACEMENT_GATE}]
    assert decision.patch["spec"]["schedulingGates"] == gated
    gates = {"op": "replace", "path": "/spec/schedulingGates", "value": [*gated]}
    assert gates in json_patch(pod, decision.patch)


def test_a_pod_takes_its_namespace_s_default_queue() -> None:
    state = _state()
    state.namespace_labels["ns"] = {QUEUE: "q"}
    decision = _decide(builders.group_pod("p-0", "g", namespace="ns"), state)
    assert decision.queue == "q"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"size": None}, f"label {POD_GROUP_SIZE}: missing"),
        ({"size": "four"}, f"label {POD_GROUP_SIZE}: 'four' is not a whole number"),
        ({"size": "0"}, f"label {POD_GROUP_SIZE}: 0 is not from 1 to"),
        ({"labels": {MIN_MEMBERS: "5"}}, f"label {MIN_MEMBERS}: 5 is out of range"),
        ({"labels": {POD_GROUP_TIMEOUT: "soon"}}, f"label {POD_GROUP_TIMEOUT}"),
        ({"group": "Train_1"}, "label muster.dev/pod-group: 'Train_1' is not"),
        ({"queue": None}, f"label {QUEUE}: missing"),
    ],
)
def test_bad_input_is_refused_naming_the_field(change: dict[str, Any], field: str) -> None:
    args: dict[str, Any] = {"size": 4, "queue": "q", "labels": {}, "group": "g", **change}
    group = args.pop("group")
    pod = builders.group_pod("p-0", group, namespace="ns", **args)
    message = _refusal(pod)
    assert message.startswith(field), message


def test_a_pod_bound_at_create_is_refused() -> None:
    pod = builders.group_pod("p-0", "g", size=2, queue="q", namespace="ns")
    pod["spec"]["nodeName"] = "n-1"
    assert _refusal(pod).startswith("spec.nodeName: 'n-1'")


def test_a_size_that_disagrees_with_the_group_s_pods_is_refused_naming_the_field() -> None:
    state = _state()
    first = builders.group_pod("p-0", "g", size=4, queue="q", namespace="ns")
    _decide(first, state)  # allowed: the book counts it until its stream shows it
    second = builders.group_pod("p-1", "g", size=3, queue="q", namespace="ns")
    message = _refusal(second, state)
    assert message.startswith(f"label {POD_GROUP_SIZE}: pod p-1 says '3' but pod p-0"), message
    # The same pod with the group's size, or a pod of another group, is allowed.
    assert _decide(builders.group_pod("p-1", "g", size=4, queue="q", namespace="ns"), state)
    assert _decide(builders.group_pod("o-0", "other", size=3, queue="q", namespace="ns"), state)
    # A queue that disagrees is refused too.
    elsewhere = builders.group_pod("p-2", "g", size=4, queue="r", namespace="ns")
    assert _refusal(elsewhere, state).startswith(f"label {QUEUE}: pod p-2 says 'r'")


def test_a_pod_of_a_gang_another_kind_holds_is_left_alone() -> None:
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}
    pod = builders.group_pod("j-0", "g", size=2, queue="q", namespace="ns", owner=owner)
    pod["metadata"]["labels"][GANG] = "j"  # the managed Job's template says so
    assert not _decide(pod).managed
    del pod["metadata"]["labels"][GANG]  # an unmanaged Job's pods may be a pod group
    assert _decide(pod).managed


# ------------------------------------------------------------------ the controller


def _stored(name: str, group: str, seq: int, **kwargs: Any) -> dict[str, Any]:
    """A pod of `group` as stored after the webhook's patch (uid `uid-NAME`)."""
    pod = builders.group_pod(name, group, namespace="ns", tolerations=(), **kwargs)
    patch = PODGROUP.hold(pod, "q", builders.stamp(seq, 1_000.0 + seq))
    meta = pod["metadata"]
    meta["labels"].update(patch["metadata"]["labels"])
    meta["annotations"].update(patch["metadata"]["annotations"])
    meta["uid"] = f"uid-{name}"
    meta["resourceVersion"] = str(seq)
    pod["spec"].update(patch["spec"])
    pod["status"] = {"phase": "Pending"}
    return pod


def _cache(*pods: Mapping[str, Any]) -> Cache:
    cache = Cache()
    cache.apply_node(
        "ADDED",
        {
            "metadata": {"name": "n-1", "labels": {HOSTNAME: "n-1"}},
            "status": {"allocatable": {"cpu": "64", "pods": "110"}},
        },
    )
    for pod in pods:
        cache.apply_pod("ADDED", pod)
    return cache


def test_a_group_waits_out_of_the_plan_until_all_its_pods_exist() -> None:
    cache = _cache(*(_stored(f"p-{i}", "g", i, size=3) for i in range(2)))
    record = cache.jobs["ns/g"]
    assert record.kind == "PodGroup" and record.gang.size == 3 and record.suspended
    reason = cache.refusals()["ns/g"]
    assert reason.code == INCOMPLETE and reason.message.startswith("2 of the 3 pods of pod group g")
    assert "ns/g" not in {g.id for g in cache.snapshot(2_000.0, cache.refusals()).pending}
    cache.apply_pod("ADDED", _stored("p-2", "g", 2, size=3))
    assert "ns/g" not in cache.refusals()
    (gang,) = cache.snapshot(2_000.0, cache.refusals()).pending
    assert gang.id == "ns/g" and gang.size == 3 and gang.queue == "q"
    assert gang.submitted.time == pytest.approx(1_000.0)  # its first pod's stamp


def test_pods_of_other_shapes_make_pod_sets_and_pods_beyond_the_count_are_not_the_gang() -> None:
    pods = [_stored(f"w-{i}", "g", i, size=4, cpu="2") for i in range(3)]
    pods.append(_stored("driver", "g", 3, size=4, cpu="1"))
    pods.append(_stored("extra", "g", 4, size=4, cpu="2"))  # the fifth of a group of 4
    cache = _cache(*pods)
    record = cache.jobs["ns/g"]
    assert record.gang.size == 4
    counts = sorted((s.count, str(s.requests)) for s in record.gang.pod_sets)
    assert [c for c, _ in counts] == [1, 3]
    # Gated pods of a pod group are candidates, none of the gang's pods yet: not waiting, not
    # unbound (its clog clock and the deadlock detector see only the pods muster released).
    assert "ns/g" not in cache.pods.gang_unbound and "ns/g" not in cache.pods.gang_waiting
    assert len(cache.pods.gated) == 5


def test_pods_that_disagree_keep_the_group_waiting_naming_the_field() -> None:
    cache = _cache(_stored("p-0", "g", 0, size=2), _stored("p-1", "g", 1, size=3))
    error = cache.jobs["ns/g"].parse_error
    assert error is not None and error.startswith(f"label {POD_GROUP_SIZE}: pod p-1 says '3'")


def _record(annotations: Mapping[str, str], version: str = "9") -> dict[str, Any]:
    return {
        "apiVersion": "muster.dev/v1alpha1",
        "kind": "GangRecord",
        "metadata": {
            "name": "podgroup-g",
            "namespace": "ns",
            "resourceVersion": version,
            "labels": {GANG_RECORD: "PodGroup", GANG: "g"},
            "annotations": dict(annotations),
        },
        "spec": {"kind": "PodGroup", "gang": "g"},
    }


def test_a_restarted_controller_reads_the_admission_from_the_group_s_record() -> None:
    pods = [_stored(f"p-{i}", "g", i, size=2) for i in range(2)]
    cache = _cache(*pods)
    pod_set = pods[0]["metadata"]["labels"][POD_SET]
    admitted = {ADMITTED: "2026-01-01T00:00:00.000000Z/2", PLACEMENT: f"{pod_set}:n-1=2"}
    cache.apply_gangrecord("ADDED", _record(admitted))
    record = cache.jobs["ns/g"]
    assert record.admission is not None and record.admission[1] == 2
    assert not record.suspended and record.resource_version == "9"
    assert record.pinned == {pod_set: {"n-1": 2}}
    # Every gated member of the admitted group is placed on its planned node.
    admitter, placed = _admitter(cache)
    admitter.place_pods()
    assert sorted(placed) == [("ns/p-0", "n-1"), ("ns/p-1", "n-1")]


def _admitter(cache: Cache) -> tuple[Admitter, list[tuple[str, str | None]]]:
    placed: list[tuple[str, str | None]] = []

    class Writer:
        async def call_place(self, ref: str, host: str | None) -> str:
            placed.append((ref, host))
            return "ok"

    def spawn(coro: Coroutine[Any, Any, object]) -> None:
        asyncio.run(coro)

    writer = Writer()
    native = NativeGangs(cache, writer, spawn)  # type: ignore[arg-type]
    admitter = Admitter(cache, writer, ControllerSettings(), ControllerMetrics(), spawn, native)  # type: ignore[arg-type]
    return admitter, placed


def test_pods_beyond_the_plan_stay_gated() -> None:
    pods = [_stored(f"p-{i}", "g", i, size=2) for i in range(3)]
    pod_set = pods[0]["metadata"]["labels"][POD_SET]
    cache = _cache(*pods)
    cache.apply_gangrecord(
        "ADDED", _record({ADMITTED: "2026-01-01T00:00:00.000000Z/2", PLACEMENT: f"{pod_set}:n-1=2"})
    )
    admitter, placed = _admitter(cache)
    admitter.place_pods()
    assert len(placed) == 2 and all(host == "n-1" for _, host in placed)
    # Released and bound now, the two are the gang's; the third stays gated, none of its pods.
    for pod in pods:
        if f"ns/{pod['metadata']['name']}" in {ref for ref, _ in placed}:
            pod["spec"] = {
                **pod["spec"],
                "schedulingGates": [],
                "nodeName": "n-1",
                "nodeSelector": {HOSTNAME: "n-1"},
            }
            pod["metadata"]["resourceVersion"] = "50"
            cache.apply_pod("MODIFIED", pod)
    placed.clear()
    admitter.placing.clear()
    admitter.place_pods()
    assert placed == []
    assert cache.pods.gang_bound["ns/g"] == {"n-1": 2}


def test_an_admission_without_a_placement_releases_only_its_count() -> None:
    pods = [_stored(f"p-{i}", "g", i, size=2) for i in range(3)]
    cache = _cache(*pods)
    cache.apply_gangrecord("ADDED", _record({ADMITTED: "2026-01-01T00:00:00.000000Z/2"}))
    admitter, placed = _admitter(cache)
    admitter.place_pods()
    assert len(placed) == 2 and all(host is None for _, host in placed)


def test_a_group_not_whole_in_its_time_is_marked_failed() -> None:
    pods = [_stored("p-0", "g", 0, size=2, labels={POD_GROUP_TIMEOUT: "1m"})]
    cache = _cache(*pods)
    record = cache.jobs["ns/g"]
    assert record.incomplete_until == pytest.approx(1_060.0)
    sent: list[Any] = []

    def spawn(coro: Coroutine[Any, Any, object]) -> None:
        sent.append(coro)
        coro.close()

    rejections = Rejections(cache, None, ControllerSettings(), ControllerMetrics(), spawn)  # type: ignore[arg-type]
    rejections.fail_incomplete(1_059.0)
    assert not sent
    rejections.fail_incomplete(1_061.0)
    assert len(sent) == 1 and record.failed_state
    assert record.failed_reason.startswith(f"{INCOMPLETE}: 1 of the 2 pods of pod group g exist")


# ------------------------------------------------------------------ the writes


def test_an_admission_makes_the_record_then_writes_it_only_as_read() -> None:
    pods = [_stored(f"p-{i}", "g", i, size=2) for i in range(2)]
    virtual = PODGROUP.assemble("ns", "g", [member_of(p) for p in pods], None)
    assert virtual is not None
    release = Release(5.0, 2, {"s": {"n-1": 2}})
    (made,) = release_writes(PODGROUP, "ns", "g", virtual["spec"], release)
    assert made.create and made.record == "podgroup-g" and made.body is not None
    assert made.body["metadata"]["annotations"][PLACEMENT] == "s:n-1=2"
    assert made.body["metadata"]["labels"] == {GANG_RECORD: "PodGroup", GANG: "g"}
    virtual = PODGROUP.assemble("ns", "g", [member_of(p) for p in pods], _record({}, "12"))
    assert virtual is not None
    (patched,) = release_writes(PODGROUP, "ns", "g", virtual["spec"], release)
    assert patched.guarded and not patched.create and patched.body is not None
    assert patched.body["metadata"]["resourceVersion"] == "12"


def test_an_eviction_records_why_and_deletes_the_released_pods() -> None:
    record, delete = evict_writes(
        PODGROUP, "g", evictions=2, requeue_at=0.0, reason="Clogged", failed=True
    )
    assert record.record == "podgroup-g" and record.body is not None
    annotations = record.body["metadata"]["annotations"]
    assert annotations[ADMITTED] is None and annotations[STATE] == "Failed"
    assert delete.members == "muster.dev/pod-group=g"
    preempt, _ = preempt_writes(PODGROUP, "g", "12", preemptions=1, message="by x")
    assert preempt.guarded and preempt.body is not None
    assert preempt.body["metadata"]["resourceVersion"] == "12"


def test_pods_of_one_shape_share_a_pod_set_and_others_get_their_own() -> None:
    one = builders.group_pod("a", "g")["spec"]
    same = builders.group_pod("b", "g")["spec"]
    other = builders.group_pod("c", "g", cpu="2")["spec"]
    assert shape_name(one) == shape_name(same) != shape_name(other)
    assert shape_name(one).startswith("main-")


# ------------------------------------------------------------------ what users see


def test_a_waiting_group_is_shown_by_its_kind_with_why_and_what_to_do() -> None:
    from admission.metrics import ControllerMetrics
    from admission.status import gang_counts, gang_status
    from muster.commands.explain import explain

    cache = _cache(_stored("p-0", "g", 0, size=2))
    cache.status.show_reasons(cache.refusals(), {})
    body = gang_status(cache, "ns/g", 1_001.0)
    assert body is not None and body["kind"] == "PodGroup" and body["size"] == 2
    assert body["reason"]["code"] == INCOMPLETE
    out = explain(body, {}, None)
    assert out["kind"] == "PodGroup, 2 pods"
    assert out["changes"][0].startswith("the rest of its pods are created, each labelled")
    # Failed (not whole in its time): how to delete a pod group is by its label.
    failed = {**body, "state": "Failed", "reason": {"code": INCOMPLETE, "message": "late"}}
    assert (
        "kubectl delete pods -n ns -l muster.dev/pod-group=g"
        in explain(failed, {}, None)["changes"][0]
    )
    assert gang_counts(cache, 1_001.0) == {("PodGroup", "Pending"): 1}
    metrics = ControllerMetrics()
    metrics.set_gangs(gang_counts(cache, 1_001.0))
    metrics.set_gangs({})
    text = metrics.exposition().decode()
    assert 'muster_gangs{kind="PodGroup",state="Pending"} 0.0' in text
