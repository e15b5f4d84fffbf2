"""Pure parts of the controller: the gang adapter, the cache's bookkeeping, the wait-for graph."""

from __future__ import annotations

from typing import Any

import pytest

from admission.cache import Cache
from admission.deadlock import PartialGang, gangs_to_evict, wait_for_graph
from admission.gangs import job_record
from policies import (
    Gang,
    Node,
    PolicyError,
    Preemption,
    Resources,
    SubmitStamp,
    Taint,
    Toleration,
    plan,
)
from policies.kinds.reading import format_admitted, parse_admitted
from policies.objects import queue_from
from policies.vocabulary import EVICTED_REASON, PREEMPTED_BY, PREEMPTIONS, QUEUE, SUBMITTED
from tests import builders

KWOK = Taint("kwok.x-k8s.io/node", "fake", "NoSchedule")
TOLERATE = (Toleration("kwok.x-k8s.io/node", "Exists", "", "NoSchedule"),)


def job(
    name: str, *, pods: int = 4, annotations: dict[str, str] | None = None, **status: Any
) -> dict[str, Any]:
    """A stored gang of queue q (resourceVersion 10): `pods` pods of 2 cpu, suspended, as the
    webhook stamped it, with `annotations` besides and `status`."""
    stamped = {QUEUE: "q", SUBMITTED: "2026-01-02T03:04:05.000000001Z/000000000001"}
    return builders.job(
        name,
        "q",
        namespace="ns",
        pods=pods,
        suspend=True,
        cpu="2",
        runtime=None,
        tolerations=(),
        annotations={**stamped, **(annotations or {})},
        gang_label=True,
        resource_version=10,
        status=status,
    )


def test_job_record_reads_the_gang() -> None:
    body = job("a", annotations={"muster.dev/min-members": "2"})
    body["spec"]["completionMode"] = "Indexed"  # a NonIndexed Job cannot be admitted smaller
    record = job_record(body)
    assert record.gang.size == 4 and record.gang.min == 2 and record.parse_error is None
    assert record.gang.pod_requests == Resources(cpu=2000)
    assert record.admission is None and record.suspended
    assert record.gang.submitted.seq == 1


def test_job_record_reads_priority_and_elastic_wait_from_annotation_or_label() -> None:
    record = job_record(
        job("a", annotations={"muster.dev/priority": "9", "muster.dev/elastic-after": "2m"})
    )
    assert record.gang.priority == 9 and record.gang.elastic_after == 120.0
    assert record.parse_error is None
    labelled = job("b")
    labelled["metadata"]["labels"]["muster.dev/priority"] = "4"
    assert job_record(labelled).gang.priority == 4
    assert job_record(job("c")).gang.priority == 0


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        ("muster.dev/priority", "top", "muster.dev/priority: 'top' is not an integer"),
        (
            "muster.dev/priority",
            "-3",
            "muster.dev/priority: -3 is out of range; "
            "set it to a whole number from 0 to 1000000000",
        ),
        ("muster.dev/elastic-after", "later", "muster.dev/elastic-after: 'later' is not a"),
    ],
)
def test_a_bad_priority_or_elastic_wait_keeps_the_gang_waiting_with_why(
    key: str, value: str, error: str
) -> None:
    record = job_record(job("a", annotations={key: value}))
    # The webhook's refusal, word for word: where it was read, the value, what to do.
    assert record.parse_error is not None and record.parse_error.startswith(f"annotation {error}")


def test_job_record_reads_the_clog_timeout_from_annotation_or_label() -> None:
    assert job_record(job("a")).clog_timeout is None
    assert job_record(job("a", annotations={"muster.dev/clog-timeout": "1h30m"})).clog_timeout == (
        5400.0
    )
    # A MiniCluster's Job: the webhook carried the MiniCluster's value in spec.jobLabels.
    labelled = job("b")
    labelled["metadata"]["labels"]["muster.dev/clog-timeout"] = "90s"
    record = job_record(labelled)
    assert record.clog_timeout == 90.0 and record.parse_error is None
    labelled["metadata"]["labels"]["muster.dev/clog-timeout"] = "soon"
    bad = job_record(labelled, previous=record)  # a changed label is read again
    assert bad.clog_timeout is None
    assert bad.parse_error is not None
    assert bad.parse_error.startswith("label muster.dev/clog-timeout: 'soon' is not a duration")


def test_job_record_reads_the_runtime_limit_from_active_deadline_seconds() -> None:
    assert job_record(job("a")).gang.runtime_limit is None
    limited = job("b")
    limited["spec"]["activeDeadlineSeconds"] = 600
    record = job_record(limited)
    assert record.gang.runtime_limit == 600.0 and record.parse_error is None
    # The planner backfills with it: the controller's plans and the simulator's agree.
    limited["spec"]["activeDeadlineSeconds"] = "600"
    bad = job_record(limited)
    assert bad.gang.runtime_limit is None
    assert bad.parse_error == (
        "spec.activeDeadlineSeconds: '600' is not a whole number of seconds; set it to a whole "
        "number of seconds >= 1, or remove it for no limit"
    )
    limited["spec"]["activeDeadlineSeconds"] = 0
    zero = job_record(limited)
    assert zero.parse_error is not None and "0 is below 1 second" in zero.parse_error


def test_admitted_annotation_round_trips() -> None:
    value = format_admitted(1_800_000_000.25, 3)
    assert parse_admitted(value) == (1_800_000_000.25, 3)
    record = job_record(job("a", annotations={"muster.dev/admitted": value}))
    assert record.admission == (1_800_000_000.25, 3)
    assert record.gang.size == 4  # an elastic admission does not shrink the gang


def test_queue_from_reads_durations_and_quota() -> None:
    queue = queue_from(
        {
            "metadata": {"name": "q"},
            "spec": {
                "nominal": {"cpu": "16"},
                "clogTimeout": "90s",
                "backoff": {"base": "2s", "max": "1m", "limit": 3},
                "nodeFit": False,
            },
        }
    )
    assert queue.nominal == Resources(cpu=16000)
    assert queue.clog_timeout == 90 and queue.backoff.max == 60 and not queue.node_fit


def test_stale_events_do_not_undo_newer_state() -> None:
    cache = Cache()
    newer = job("a", annotations={"muster.dev/admitted": format_admitted(1.0, 4)})
    newer["metadata"]["resourceVersion"] = "20"
    cache.apply_job("MODIFIED", newer)
    cache.apply_job("MODIFIED", job("a"))  # resourceVersion 10: older
    assert cache.jobs["ns/a"].admission == (1.0, 4)


def test_snapshot_counts_admitted_gangs_against_quota() -> None:
    cache = Cache()
    cache.apply_queue("ADDED", {"metadata": {"name": "q"}, "spec": {"nominal": {"cpu": "8"}}})
    cache.apply_node(
        "ADDED",
        {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "64", "pods": "110"}}},
    )
    admitted = job("a", annotations={"muster.dev/admitted": format_admitted(1.0, 4)})
    admitted["spec"]["suspend"] = False
    cache.apply_job("ADDED", admitted)
    cache.apply_job("ADDED", job("b"))
    snapshot = cache.snapshot(now=10.0)
    assert [g.id for g in snapshot.pending] == ["ns/b"]
    decisions = plan(snapshot)
    assert not decisions.admitted and decisions.pending["ns/b"].code == "QuotaExhausted"
    done = dict(admitted, status={"conditions": [{"type": "Complete", "status": "True"}]})
    done["metadata"] = dict(admitted["metadata"], resourceVersion="30")
    cache.apply_job("MODIFIED", done)
    assert [a.gang_id for a in plan(cache.snapshot(now=11.0)).admitted] == ["ns/b"]


def test_pods_of_other_workloads_count_as_node_usage() -> None:
    cache = Cache()
    cache.apply_node("ADDED", {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4"}}})
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "x", "uid": "p1", "resourceVersion": "5"},
        "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {"cpu": "3"}}}]},
        "status": {"phase": "Running"},
    }
    cache.apply_pod("ADDED", pod)
    assert cache.snapshot(0.0).nodes[0].used["cpu"] == 3000
    cache.apply_pod(
        "MODIFIED",
        {
            **pod,
            "status": {"phase": "Succeeded"},
            "metadata": {**pod["metadata"], "resourceVersion": "6"},
        },
    )
    assert cache.snapshot(0.0).nodes[0].used["cpu"] == 0


def _gang(name: str, seq: int, selector: dict[str, str]) -> Gang:
    return Gang(
        f"ns/{name}",
        "q",
        Resources(cpu=6000),
        3,
        submitted=SubmitStamp(1.0, seq, name),
        node_selector=selector,
        tolerations=TOLERATE,
    )


def test_wait_for_cycle_evicts_the_youngest_gang() -> None:
    alloc = Resources(cpu=8000, pods=110)
    nodes = [
        Node("a1", alloc, {"a": "1"}, (KWOK,)),
        Node("s1", alloc, {"a": "1", "b": "1"}, (KWOK,)),
        Node("s2", alloc, {"a": "1", "b": "1"}, (KWOK,)),
        Node("b1", alloc, {"b": "1"}, (KWOK,)),
    ]
    a, b = _gang("a", 1, {"a": "1"}), _gang("b", 2, {"b": "1"})
    used = {n.name: Resources(cpu=6000, pods=1) for n in nodes}
    partial = [PartialGang(a, 1, {"a1": 1, "s1": 1}), PartialGang(b, 1, {"b1": 1, "s2": 1})]
    graph = wait_for_graph(nodes, used, partial)
    assert set(graph.edges) == {("ns/a", "ns/b"), ("ns/b", "ns/a")}
    assert gangs_to_evict(graph, {"ns/a": a, "ns/b": b}) == ["ns/b"]


def test_no_cycle_when_a_waiting_gang_fits_somewhere() -> None:
    alloc = Resources(cpu=8000, pods=110)
    nodes = [Node("s1", alloc), Node("free", alloc)]
    a, b = _gang("a", 1, {}), _gang("b", 2, {})
    a = Gang(a.id, "q", a.pod_requests, 3, submitted=a.submitted)
    b = Gang(b.id, "q", b.pod_requests, 3, submitted=b.submitted)
    used = {"s1": Resources(cpu=6000, pods=1)}
    partial = [PartialGang(a, 2, {"s1": 1}), PartialGang(b, 2, {"s1": 1})]
    assert gangs_to_evict(wait_for_graph(nodes, used, partial), {a.id: a, b.id: b}) == []


def test_status_only_events_reuse_the_parsed_gang() -> None:
    body = job("a")
    body["metadata"]["generation"] = 1
    body["spec"]["completionMode"] = "Indexed"
    first = job_record(body)
    body["status"] = {"ready": 3, "succeeded": 1}
    body["metadata"]["resourceVersion"] = "11"
    second = job_record(body, first)
    assert second.gang is first.gang
    assert (second.ready, second.succeeded, second.resource_version) == (3, 1, "11")
    # An annotation (or spec) change is read again.
    body["metadata"]["annotations"]["muster.dev/min-members"] = "2"
    third = job_record(body, second)
    assert third.gang is not second.gang and third.gang.min == 2
    body["metadata"]["generation"] = 2
    body["spec"]["parallelism"] = 8
    body["spec"]["completions"] = 8
    fourth = job_record(body, third)
    assert fourth.gang.size == 8


def test_queue_from_reads_preemption_through_the_one_parser() -> None:
    body = {
        "metadata": {"name": "q"},
        "spec": {"preemption": {"reclaimWithinCohort": "Any", "protectFor": "2m"}},
    }
    preemption = queue_from(body).preemption
    assert preemption == Preemption(reclaim_within_cohort="Any", protect_for=120.0)
    assert queue_from({"metadata": {"name": "q"}, "spec": {}}).preemption == Preemption()
    bad = {"metadata": {"name": "q"}, "spec": {"preemption": {"withinQueue": "Any"}}}
    with pytest.raises(PolicyError, match=r'queue "q": spec\.preemption\.withinQueue: must be'):
        queue_from(bad)


def test_a_queue_with_a_bad_preemption_is_kept_out_with_why() -> None:
    cache = Cache()
    cache.apply_queue(
        "ADDED", {"metadata": {"name": "q"}, "spec": {"preemption": {"protectAfter": 0}}}
    )
    view = cache.queues["q"]
    assert view.queue is None
    assert view.error is not None and "spec.preemption.protectAfter" in view.error


def test_job_record_reads_preemptions_and_why_it_was_preempted() -> None:
    annotations = {
        PREEMPTIONS: "2",
        EVICTED_REASON: "Preempted",
        PREEMPTED_BY: "preempted by ns/b (reclaimWithinCohort: Any, queue q borrows)",
    }
    record = job_record(job("a", annotations=annotations))
    assert record.gang.preemptions == 2 and record.evictions == 0
    assert record.evicted_reason == "Preempted"
    assert record.preempted_by.startswith("preempted by ns/b")
    assert record.parse_error is None
    assert job_record(job("a")).gang.preemptions == 0


@pytest.mark.parametrize("value", ["-1", "two"])
def test_a_bad_preemptions_count_keeps_the_gang_waiting_with_why(value: str) -> None:
    record = job_record(job("a", annotations={PREEMPTIONS: value}))
    assert record.parse_error is not None
    assert record.parse_error.startswith(f"annotation {PREEMPTIONS}: {value!r}")
    assert record.gang.preemptions == 0


def test_a_young_gang_holds_its_plan_until_its_minimum_is_ready() -> None:
    """The plan put all 4 pods on n1; the scheduler bound 3 of them on n2 and n3. Until the
    gang's minimum is ready it holds its planned nodes as well as where its pods went (slack
    for the scheduler's divergence); once ready, only its bound pods, which is what a
    preemption of it frees."""
    cache = Cache()
    for name in ("n1", "n2", "n3"):
        body = {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "8", "pods": "9"}}}
        cache.apply_node("ADDED", body)
    admitted = job("a", annotations={"muster.dev/admitted": format_admitted(1.0, 4)})
    admitted["spec"]["suspend"] = False
    cache.apply_job("ADDED", admitted)
    cache.reservations["ns/a"] = {"": {"n1": 4}}
    for i, node in enumerate(("n2", "n2", "n3", "n3")):
        pod = {
            "metadata": {
                "name": f"a-{i}",
                "namespace": "ns",
                "uid": f"p{i}",
                "labels": {"muster.dev/gang": "a"},
            },
            "spec": {"nodeName": node, "containers": [{"resources": {"requests": {"cpu": "2"}}}]},
            "status": {"phase": "Running"},
        }
        cache.apply_pod("ADDED", pod)
    record = cache.jobs["ns/a"]
    assert cache.reservations.placement(record, now=2.0) == {"n1": 4, "n2": 2, "n3": 2}
    ready = dict(admitted, status={"ready": 4})
    cache.apply_job("MODIFIED", ready)
    record = cache.jobs["ns/a"]
    assert cache.reservations.placement(record, now=2.0) == {"n2": 2, "n3": 2}
    (held,) = cache.snapshot(now=2.0).admitted
    assert sum(held.placement.values()) == 4


def _gang_pod(i: int, spec: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"a-{i}",
            "namespace": "ns",
            "uid": f"p{i}",
            "resourceVersion": str(100 + i),
            "labels": {"muster.dev/gang": "a"},
        },
        "spec": {"containers": [{"resources": {"requests": {"cpu": "2"}}}], **spec},
        "status": status,
    }


def test_a_gang_waits_on_the_control_plane_until_its_pods_are_tried_and_reported() -> None:
    """The clog clock's view (PodLedger.gang_waits, start_measure): an admitted Job the Job
    controller has not started waits; so does a gang with a pod in the scheduler's queue or
    bound and not reported on by its kubelet; a pod the scheduler found unschedulable, or
    one its kubelet reports on, does not wait. The measure rises with each step."""
    cache = Cache()
    admitted = job("a", annotations={"muster.dev/admitted": format_admitted(100.0, 2)}, pods=2)
    admitted["spec"]["suspend"] = False
    cache.apply_job("ADDED", admitted)
    record = cache.jobs["ns/a"]
    assert cache.pods.gang_waits(record) and cache.pods.start_measure(record) == 0
    started = dict(admitted, status={"startTime": "1970-01-01T00:01:40Z"})
    cache.apply_job("MODIFIED", started)
    record = cache.jobs["ns/a"]
    assert not cache.pods.gang_waits(record)

    queued = _gang_pod(0, {}, {"phase": "Pending"})
    cache.apply_pod("ADDED", queued)
    assert cache.pods.gang_waits(record) and cache.pods.start_measure(record) == 1
    unschedulable = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    }
    cache.apply_pod("MODIFIED", _gang_pod(0, {}, unschedulable))
    assert not cache.pods.gang_waits(record) and cache.pods.start_measure(record) == 1

    cache.apply_pod("ADDED", _gang_pod(1, {"nodeName": "n1"}, {"phase": "Pending"}))
    assert cache.pods.gang_waits(record) and cache.pods.start_measure(record) == 3
    failing = {"phase": "Pending", "containerStatuses": [{"ready": False}]}
    cache.apply_pod("MODIFIED", _gang_pod(1, {"nodeName": "n1"}, failing))
    assert not cache.pods.gang_waits(record)
    ready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    cache.apply_pod("MODIFIED", _gang_pod(1, {"nodeName": "n1"}, ready))
    assert not cache.pods.gang_waits(record) and cache.pods.start_measure(record) == 4


def test_a_job_started_before_this_admission_has_not_started_for_it() -> None:
    """status.startTime of an earlier run (a re-admitted Job whose resume the Job controller
    has not seen yet) does not count: the gang still waits for its Job controller."""
    cache = Cache()
    admitted = job(
        "a",
        annotations={"muster.dev/admitted": format_admitted(500.0, 2)},
        pods=2,
        startTime="1970-01-01T00:01:40Z",
    )
    admitted["spec"]["suspend"] = False
    cache.apply_job("ADDED", admitted)
    assert cache.pods.gang_waits(cache.jobs["ns/a"])


def test_an_elastic_gang_holds_its_plan_until_every_admitted_pod_is_bound() -> None:
    """Admitted at 4 with a minimum of 2: once 2 pods are bound and ready its minimum is, but
    the other 2 are still coming to the nodes they are pinned to, so the plan stays held (it
    was released at the minimum, and the planner gave those nodes to GPU gangs that then
    deadlocked with it on the kwok replay of mixed-queues)."""
    cache = Cache()
    for name in ("n1", "n2"):
        body = {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "4", "pods": "9"}}}
        cache.apply_node("ADDED", body)
    admitted = job(
        "a",
        annotations={"muster.dev/admitted": format_admitted(1.0, 4), "muster.dev/min-members": "2"},
    )
    admitted["spec"]["suspend"] = False
    admitted["spec"]["completionMode"] = "Indexed"
    cache.apply_job("ADDED", admitted)
    cache.reservations["ns/a"] = {"": {"n1": 2, "n2": 2}}
    ready_pod = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    for i in range(2):
        cache.apply_pod("ADDED", _gang_pod(i, {"nodeName": "n1"}, ready_pod))
    cache.apply_job(
        "MODIFIED", dict(admitted, status={"ready": 2, "startTime": "1970-01-01T00:00:01Z"})
    )
    record = cache.jobs["ns/a"]
    cache.reservations.release(now=2.0)
    assert cache.reservations.placement(record, now=2.0) == {"n1": 2, "n2": 2}
    for i in range(2, 4):
        cache.apply_pod("ADDED", _gang_pod(i, {"nodeName": "n2"}, ready_pod))
    cache.reservations.release(now=3.0)
    assert "ns/a" not in cache.reservations
    assert cache.reservations.placement(record, now=3.0) == {"n1": 2, "n2": 2}


def test_succeeded_pods_count_before_the_job_controller_counts_them() -> None:
    """A gang whose pod succeeded while its Job's status still says 0 succeeded (the Job
    controller counts it after removing its finalizer) is not below its minimum."""
    cache = Cache()
    admitted = job("a", annotations={"muster.dev/admitted": format_admitted(1.0, 1)}, pods=1)
    admitted["spec"]["suspend"] = False
    cache.apply_job("ADDED", admitted)
    record = cache.jobs["ns/a"]
    cache.apply_pod("ADDED", _gang_pod(0, {"nodeName": "n1"}, {"phase": "Succeeded"}))
    assert cache.pods.succeeded_pods(record) == 1 and cache.pods.ready_pods(record) == 0
    assert not cache.pods.gang_waits(record) and cache.pods.start_measure(record) == 3
    cache.apply_pod("DELETED", _gang_pod(0, {"nodeName": "n1"}, {"phase": "Succeeded"}))
    assert cache.pods.succeeded_pods(record) == 0
