"""The controller's guard on admissions (issue 28), on its cache and its real write builders,
with the API answered by a recorder: a gang that outgrew its admission is evicted and requeued
at its new size, one suspended while admitted is requeued at its stamp, one that left muster is
let go of, and a refused suspension is tried again only after a backoff (the real controller
against a real apiserver: tests/cluster/test_admitted_updates.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from admission.cache import Cache
from admission.guard import POD_GRACE, AdmissionGuard
from admission.metrics import ControllerMetrics
from admission.suspender import Suspender
from admission.writes import JobRef, Outcome, Writer
from policies.decisions import Reason
from policies.kinds.pinning import PLACEMENT_GATE, Original
from policies.kinds.reading import format_admitted
from policies.kinds.release import Write
from policies.vocabulary import ADMITTED, EVICTED_REASON, GANG, QUEUE, RESTORE, SUBMITTED
from tests import builders

NOW = 1_800_000_000.0


class Api(Writer):
    """A `Writer` whose requests are recorded and answered with ``outcome``; the objects it
    reads are what the test put in ``objects``."""

    def __init__(self, outcome: Outcome = "ok") -> None:
        self.outcome = outcome
        self.sent: list[tuple[str, Write]] = []
        self.events: list[tuple[str, str, str]] = []
        self.objects: dict[str, dict[str, Any]] = {}
        self.refusals = {}

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    def send(self, ref: JobRef, writes: Sequence[Write]) -> Outcome:
        for write in writes:
            self.sent.append((ref.name, write))
            if self.outcome == "refused":
                self.refusals[ref.path] = "HTTP 403: denied by policy"
                return "refused"
        return self.outcome

    def get_object(self, ref: JobRef) -> dict[str, Any] | None:
        return self.objects.get(ref.name)

    def event(self, job: JobRef, reason: str, message: str, kind: Any) -> None:
        self.events.append((job.name, reason, message))

    def what(self) -> list[str]:
        return [write.what for _, write in self.sent]


def admitted_job(
    name: str = "grow", *, pods: int = 2, admitted: int = 2, suspend: bool = False, rv: int = 10
) -> dict[str, Any]:
    """A Job of queue q that muster admitted at ``admitted`` pods, pinned (its original saved at
    2 pods), now asking for ``pods``."""
    original = Original({"parallelism": 2, "completions": 2}, {})
    body = builders.job(
        name,
        "q",
        namespace="ns",
        pods=pods,
        indexed=True,
        suspend=suspend,
        gang_label=True,
        runtime=None,
        tolerations=(),
        annotations={
            SUBMITTED: builders.stamp(1, NOW),
            ADMITTED: format_admitted(NOW, admitted),
            RESTORE: original.encode(),
            "muster.dev/placement": f"n1={admitted}",
        },
        resource_version=rv,
    )
    body["metadata"]["generation"] = pods * 10 + suspend  # the apiserver's, for a spec change
    return body


def guarded(api: Api) -> tuple[Cache, AdmissionGuard, list[Coroutine[Any, Any, object]]]:
    cache = Cache()
    cache.apply_queue(
        "ADDED", {"metadata": {"name": "q", "resourceVersion": "1"}, "spec": {"nominal": {}}}
    )
    cache.synced = True
    spawned: list[Coroutine[Any, Any, object]] = []
    metrics = ControllerMetrics()
    suspender = Suspender(cache, api, metrics, spawned.append)
    return cache, AdmissionGuard(cache, api, metrics, suspender, spawned.append), spawned


def run(spawned: list[Coroutine[Any, Any, object]]) -> None:
    async def all_of() -> None:
        while spawned:
            await spawned.pop(0)

    asyncio.run(all_of())


def undone(guard: AdmissionGuard, reason: str) -> float:
    value = guard.metrics.registry.get_sample_value(
        "muster_admissions_undone_total", {"reason": reason}
    )
    return value or 0.0


def test_a_job_grown_past_its_admission_is_evicted_and_requeued_at_its_new_size() -> None:
    api = Api()
    cache, guard, spawned = guarded(api)
    cache.apply_job("ADDED", admitted_job())
    guard.detect(NOW + 1)
    assert not spawned, "a gang running as admitted is left alone"
    grown = admitted_job(pods=40, rv=11)
    cache.apply_job("MODIFIED", grown)
    assert "ns/grow" in cache.suspects
    api.objects["grow"] = {**grown, "spec": {**grown["spec"], "suspend": True}}
    guard.detect(NOW + 2)
    record = cache.jobs["ns/grow"]
    assert record.admission is None, "its quota is free at once"
    run(spawned)
    evict = api.sent[0][1]
    assert evict.what == "evict" and evict.body is not None
    annotations = evict.body["metadata"]["annotations"]
    assert annotations[EVICTED_REASON] == "Outgrown"
    # Requeued at what it asks for now: the saved original says 40, so restoring keeps 40.
    assert json.loads(annotations[RESTORE])["parallelism"] == 40
    assert api.events[0][1] == "Evicted"
    assert "outgrew its admission: admitted at 2 pods, it asks for 40 pods now" in api.events[0][2]
    assert undone(guard, "Outgrown") == 1


def test_more_live_pods_than_admitted_are_outgrown_after_a_grace() -> None:
    api = Api()
    cache, guard, spawned = guarded(api)
    cache.apply_job("ADDED", admitted_job())
    for i in range(3):
        cache.apply_pod(
            "ADDED",
            {
                "metadata": {
                    "name": f"grow-{i}",
                    "namespace": "ns",
                    "uid": f"p{i}",
                    "resourceVersion": str(20 + i),
                    "labels": {GANG: "grow"},
                },
                "spec": {"nodeName": "n1"},
                "status": {"phase": "Running"},
            },
        )
    guard.detect(NOW)
    assert not spawned and "ns/grow" in cache.suspects, "a pod being replaced gets a grace"
    guard.detect(NOW + POD_GRACE + 0.1)
    run(spawned)
    assert api.what()[:1] == ["evict"]
    assert "3 of its pods live past muster's gate" in api.events[0][2]


def test_a_pod_more_held_at_the_gate_while_the_spec_asks_for_no_more_is_not_outgrown() -> None:
    """After a kube-apiserver restart a Job controller may make a second pod for a Job of one;
    it waits at muster's gate (the admitter releases no more than planned): not an eviction."""
    api = Api()
    cache, guard, spawned = guarded(api)
    cache.apply_job("ADDED", admitted_job(pods=2, admitted=2))
    for i in range(3):
        spec: dict[str, Any] = {"nodeName": "n1"} if i < 2 else {}
        if i == 2:
            spec["schedulingGates"] = [{"name": PLACEMENT_GATE}]
        cache.apply_pod(
            "ADDED",
            {
                "metadata": {
                    "name": f"grow-{i}",
                    "namespace": "ns",
                    "uid": f"p{i}",
                    "resourceVersion": str(20 + i),
                    "labels": {GANG: "grow"},
                },
                "spec": spec,
                "status": {"phase": "Running" if i < 2 else "Pending"},
            },
        )
    guard.detect(NOW)
    guard.detect(NOW + POD_GRACE + 0.1)
    run(spawned)
    assert not api.what() and not api.events


def running_pod(i: int, *, owner: str = "", index: str = "") -> dict[str, Any]:
    """A running pod of gang ``grow`` on n1, made by the controller of uid ``owner`` ('' for
    none), with completion index ``index`` ('' for none)."""
    meta: dict[str, Any] = {
        "name": f"grow-{i}",
        "namespace": "ns",
        "uid": f"p{i}",
        "resourceVersion": str(20 + i),
        "labels": {GANG: "grow"},
    }
    if owner:
        meta["ownerReferences"] = [{"kind": "Job", "uid": owner, "controller": True}]
    if index:
        meta["annotations"] = {"batch.kubernetes.io/job-completion-index": index}
    return {"metadata": meta, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}


def outgrown_after_grace(pods: Sequence[dict[str, Any]]) -> bool:
    """Whether the guard evicts the Job admitted at 2 (uid ``uid-grow``) running ``pods``."""
    api = Api()
    cache, guard, spawned = guarded(api)
    cache.apply_job("ADDED", admitted_job(pods=2, admitted=2))
    for pod in pods:
        cache.apply_pod("ADDED", pod)
    guard.detect(NOW)
    guard.detect(NOW + POD_GRACE + 0.1)
    run(spawned)
    return api.what()[:1] == ["evict"]


def test_a_member_its_job_controller_runs_twice_is_not_a_member_more() -> None:
    """Kubernetes' Job controller may start a pod twice (after a kube-apiserver restart it did,
    in tests/cluster/test_faults.py): for a Job admitted at 2, a second pod of one completion
    index, or a third pod of the Job itself without an index, is not an outgrowth."""
    assert not outgrown_after_grace(
        [running_pod(i, owner="uid-grow", index=x) for i, x in enumerate("011")]
    )
    assert not outgrown_after_grace([running_pod(i, owner="uid-grow") for i in range(3)])


def test_members_of_another_controller_or_of_none_each_count() -> None:
    """Pods a child Job made (its spec grown by hand: three indexes for an admission of two),
    or pods made by hand with the gang's label beside the Job's own, are members more."""
    assert outgrown_after_grace([running_pod(i, owner="uid-child", index=str(i)) for i in range(3)])
    assert outgrown_after_grace(
        [running_pod(0, owner="uid-grow"), running_pod(1, owner="uid-grow"), running_pod(2)]
    )
    assert outgrown_after_grace([running_pod(i, owner="uid-grow", index=str(i)) for i in range(3)])


def test_a_gang_suspended_while_admitted_is_requeued_at_its_stamp() -> None:
    api = Api()
    cache, guard, spawned = guarded(api)
    cache.apply_job("ADDED", admitted_job())
    changed = admitted_job(pods=8, suspend=True, rv=11)  # suspended, grown in the same update
    cache.apply_job("MODIFIED", changed)
    api.objects["grow"] = changed
    guard.detect(NOW + 1)
    run(spawned)
    requeue = api.sent[0][1]
    assert requeue.what == "requeue" and requeue.ops is not None
    assert {"op": "remove", "path": "/metadata/annotations/muster.dev~1admitted"} in requeue.ops
    saved = next(op for op in requeue.ops if op["path"].endswith("restore"))
    assert json.loads(saved["value"])["parallelism"] == 8
    assert api.events[0][1] == "Requeued"
    record = cache.jobs["ns/grow"]
    assert record.evictions == 0 and record.requeue_at == 0.0, "no eviction counted"
    assert undone(guard, "Suspended") == 1


def test_a_gang_that_left_its_queue_while_admitted_is_suspended_and_let_go() -> None:
    api = Api()
    cache, guard, spawned = guarded(api)
    body = admitted_job()
    cache.apply_job("ADDED", body)
    # A watch by label reports the label removed as a deletion, with the object as it was.
    cache.apply_job("DELETED", {**body, "metadata": {**body["metadata"], "resourceVersion": "11"}})
    assert "ns/grow" not in cache.jobs, "its quota is free at once"
    unlabelled = json.loads(json.dumps(body))
    del unlabelled["metadata"]["labels"][QUEUE]
    api.objects["grow"] = unlabelled  # what the guard reads: still there, no longer labelled
    guard.detect(NOW + 1)
    run(spawned)
    assert api.what()[:1] == ["leave"]
    assert api.events[0][1] == "LeftQueue"
    assert undone(guard, "LeftQueue") == 1
    # A real deletion: the guard reads nothing there, and writes nothing.
    cache.apply_job("ADDED", admitted_job("other"))
    cache.apply_job("DELETED", admitted_job("other", rv=12))
    sent = len(api.sent)
    guard.detect(NOW + 2)
    run(spawned)
    assert len(api.sent) == sent and undone(guard, "LeftQueue") == 1


def test_a_refused_suspension_is_tried_again_only_after_a_backoff() -> None:
    api = Api("refused")
    cache, guard, spawned = guarded(api)
    cache.apply_job("ADDED", admitted_job())
    cache.apply_job("MODIFIED", admitted_job(pods=40, rv=11))
    guard.detect(NOW + 1)
    run(spawned)
    assert api.what() == ["evict"]
    assert cache.jobs["ns/grow"].admission is not None, "rolled back: it is still admitted"
    suspender = guard.suspender
    hold = suspender.refused["ns/grow"]
    assert hold.refusals == 1 and "HTTP 403: denied by policy" in hold.why
    # The cycles right after send nothing.
    now = hold.until - 0.5
    guard.detect(now)
    assert not spawned and "ns/grow" in cache.suspects


def test_a_refused_preemption_victim_holds_the_plan_and_says_why() -> None:
    api = Api("refused")
    cache, guard, _ = guarded(api)
    cache.apply_job("ADDED", admitted_job("victim"))
    suspender = guard.suspender
    victims = {"ns/victim": Reason("Preempted", "preempted by ns/b (Any)")}
    assert asyncio.run(suspender.preempt(victims)) is False
    assert api.what() == ["preempt"]
    assert suspender.held is not None and suspender.held[0] == "ns/victim"
    assert "refused once (HTTP 403: denied by policy); tried again in 2s" in suspender.held[
        1
    ].message(suspender.held[1].until - 2.0)
    # Within the backoff the plan is held again without a write.
    assert asyncio.run(suspender.preempt(victims)) is False
    assert api.what() == ["preempt"]
