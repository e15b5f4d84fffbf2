"""The kwok engine's pure parts: the objects a trace becomes, and the timeline it records.

The objects are read back with muster's own adapters (`admission.gangs`), so what the
controller sees on kwok is the trace's gang, queue and node, with durations compressed.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from admission.gangs import job_record
from policies import BorrowWithinCohort, Preemption, Resources, SizeRatio, gangstate
from policies.gangstate import GangState
from policies.kinds.reading import format_admitted
from policies.objects import node_from, queue_from
from policies.topology import NO_TOPOLOGY, TopologyRequest
from policies.vocabulary import (
    ADMITTED,
    EVICTED_REASON,
    EVICTIONS,
    GANG,
    GANG_KIND,
    PREEMPTIONS,
    STATE,
    SUBMITTED,
)
from simulator.controlplane.minicluster import job_for
from simulator.engine import FAILED, FINISHED, PENDING, RUNNING, STUCK, GangRecord
from simulator.fairness import water_fill
from simulator.kwok_muster import topology_flags
from simulator.kwok_objects import (
    SIM_RUN,
    gang_object,
    node_bodies,
    quantity,
    queue_body,
    wall_deadline_seconds,
    wall_duration,
)
from simulator.kwok_settings import KwokSettings, check_trace
from simulator.kwok_timeline import Timeline
from simulator.trace import expand, from_dict, load
from tests import builders

TRACE: dict[str, Any] = {
    "name": "t",
    "cluster": {
        "nodes": [
            {"count": 2, "name": "cpu", "allocatable": {"cpu": "8", "memory": "30Gi"}},
            {
                "count": 1,
                "name": "gpu",
                "allocatable": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"},
                "labels": {"accel": "a100"},
                "taints": [{"key": "gpu", "value": "yes"}],
            },
        ]
    },
    "queues": [
        {"name": "q", "clogTimeout": "100s", "backoff": {"base": "50s", "max": "500s"}},
        {"name": "r", "sizeRatio": None, "nominal": {"cpu": "8", "memory": "0"}},
    ],
    "jobs": [
        {
            "name": "mc",
            "kind": "MiniCluster",
            "queue": "q",
            "size": 2,
            "minSize": 1,
            "podRequests": {"cpu": "6", "memory": "20Gi"},
            "onePodPerNode": True,
            "runtime": "50s",
        },
        {
            "name": "job",
            "queue": "r",
            "size": 3,
            "podRequests": {"cpu": "500m", "nvidia.com/gpu": "1"},
            "runtime": "10s",
            "nodeSelector": {"accel": "a100"},
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "submit": {"at": "20s"},
        },
    ],
}


def _state(record: GangRecord) -> GangState:
    """The gang's state now (a call, so mypy does not narrow it across observations)."""
    return record.state


def test_priority_and_elastic_wait_are_replayed_in_muster_annotations() -> None:
    data = copy.deepcopy(TRACE)
    data["jobs"][0].update(priority=-2, elasticAfter="100s")  # the MiniCluster
    data["jobs"][1].update(priority=3)  # the Job
    arrivals = expand(from_dict(data))
    shift = -min(a.gang.priority for a in arrivals)
    mc = next(a for a in arrivals if a.gang.kind == "MiniCluster")
    job = next(a for a in arrivals if a.gang.kind == "Job")
    job_body = gang_object(
        job, namespace="ns", admission="muster", scale=10, run="r1", priority_shift=shift
    ).body
    assert job_body["metadata"]["annotations"]["muster.dev/priority"] == "5"
    job_body["metadata"]["annotations"][SUBMITTED] = "2026-01-01T00:00:00.000000Z"
    assert job_record(job_body).gang.priority == 5
    mc_body = gang_object(
        mc, namespace="ns", admission="muster", scale=10, run="r1", priority_shift=shift
    ).body
    # -2 + 2: priority 0 is the default and is not written; the wait is compressed 10x.
    assert mc_body["metadata"]["annotations"] == {"muster.dev/elastic-after": "10s"}


def test_runtime_limits_are_written_as_deadlines_compressed_like_runtimes() -> None:
    data = copy.deepcopy(TRACE)
    data["jobs"][0]["runtimeLimit"] = "61s"  # the MiniCluster
    data["jobs"][1]["runtimeLimit"] = "12s"  # the Job
    arrivals = expand(from_dict(data))
    mc = next(a for a in arrivals if a.gang.kind == "MiniCluster")
    job = next(a for a in arrivals if a.gang.kind == "Job")
    job_body = gang_object(job, namespace="ns", admission="muster", scale=10, run="r1").body
    # 1.2 s of wall time, rounded up to whole seconds: never before the trace's limit.
    assert job_body["spec"]["activeDeadlineSeconds"] == 2
    job_body["metadata"]["annotations"][SUBMITTED] = "2026-01-01T00:00:00.000000Z"
    assert job_record(job_body).gang.runtime_limit == 2.0
    mc_body = gang_object(mc, namespace="ns", admission="none", scale=10, run="r1").body
    assert mc_body["spec"]["deadlineSeconds"] == 7
    # The operator (here its stand-in) copies it to the MiniCluster's Job.
    mc_body["metadata"]["uid"] = "u1"
    assert job_for(mc_body)["spec"]["activeDeadlineSeconds"] == 7
    plain = expand(from_dict(TRACE))
    for arrival in plain:
        body = gang_object(arrival, namespace="ns", admission="muster", scale=10, run="r").body
        assert "activeDeadlineSeconds" not in body["spec"]
        assert "deadlineSeconds" not in body["spec"]
    assert wall_deadline_seconds(300, 25) == 12
    assert wall_deadline_seconds(0.5, 25) == 1


def test_quantities_and_durations_are_exact() -> None:
    assert quantity("cpu", 6000) == "6"
    assert quantity("cpu", 500) == "500m"
    assert quantity("memory", 20 * 2**30) == "20Gi"
    assert quantity("memory", 1000) == "1000"
    assert wall_duration(300, 25) == "12s"
    assert wall_duration(50, 25) == "2s"
    assert wall_duration(10, 25) == "400ms"
    assert wall_duration(0.001, 25) == "1ms"


def test_job_reads_back_as_the_trace_gang() -> None:
    trace = from_dict(TRACE)
    arrivals = expand(trace)
    job = next(a for a in arrivals if a.gang.kind == "Job")
    obj = gang_object(job, namespace="ns", admission="muster", scale=10, run="r1")
    body = obj.body
    assert obj.path == "/apis/batch/v1/namespaces/ns/jobs"
    assert body["metadata"]["labels"]["muster.dev/queue"] == "r"
    template = body["spec"]["template"]
    assert template["metadata"]["labels"] == {GANG: "job-0", SIM_RUN: "r1"}
    assert template["metadata"]["annotations"]["muster.dev/gang-runtime"] == "1s"
    container = template["spec"]["containers"][0]["resources"]
    assert container["limits"] == {"nvidia.com/gpu": "1"}  # extended resources need limits
    # What the controller reads (the webhook adds the stamp) is the trace's gang.
    body["metadata"].setdefault("annotations", {})[SUBMITTED] = "2026-01-01T00:00:00.000000Z"
    record = job_record(body)
    assert record.gang.size == 3 and record.gang.min == 3
    assert record.gang.pod_requests == job.gang.pod_requests
    assert record.gang.node_selector == {"accel": "a100"}
    assert not record.gang.one_pod_per_node
    # Without admission: no queue label, so the webhook leaves it alone.
    none = gang_object(job, namespace="ns", admission="none", scale=10, run="r1").body
    assert "muster.dev/queue" not in none["metadata"]["labels"]


def _minicluster_job(trace: dict[str, Any]) -> dict[str, Any]:
    """The Job of the trace's MiniCluster, as the webhook marks it (stamp, gang kind)."""
    mc = next(a for a in expand(from_dict(trace)) if a.gang.kind == "MiniCluster")
    body = gang_object(mc, namespace="ns", admission="none", scale=25, run="r1").body
    body["metadata"]["uid"] = "u1"
    job = job_for(body)
    job["metadata"]["annotations"] = {
        SUBMITTED: "2026-01-01T00:00:00.000000Z",
        GANG_KIND: "MiniCluster",
    }
    return job


def test_minicluster_carries_gang_minimum_and_one_pod_per_node() -> None:
    trace = from_dict(TRACE)
    mc = next(a for a in expand(trace) if a.gang.kind == "MiniCluster")
    body = gang_object(mc, namespace="ns", admission="none", scale=25, run="r1").body
    assert body["spec"]["size"] == 2 and body["spec"]["minSize"] == 1
    assert body["spec"]["jobLabels"]["muster.dev/min-members"] == "1"
    # A MiniCluster has no affinity field: one pod per node is the operator's own affinity.
    assert "affinity" not in body["spec"]["pod"] and "network" not in body["spec"]
    job = _minicluster_job(TRACE)
    record = job_record(job)
    assert record.gang.one_pod_per_node
    assert record.gang.min == 1 and record.gang.size == 2
    assert job["spec"]["template"]["metadata"]["labels"][GANG] == "mc-0"


def test_minicluster_without_one_pod_per_node_turns_the_operators_affinity_off() -> None:
    data = copy.deepcopy(TRACE)
    data["jobs"][0]["onePodPerNode"] = False
    job = _minicluster_job(data)
    assert "affinity" not in job["spec"]["template"]["spec"]
    assert not job_record(job).gang.one_pod_per_node
    # The operator's preferred anti-affinity counts only on a MiniCluster's Job: on a plain
    # Job, only a required one means one pod per node.
    spread = _minicluster_job(TRACE)
    del spread["metadata"]["annotations"][GANG_KIND]
    assert not job_record(spread).gang.one_pod_per_node


def test_queue_reads_back_with_compressed_durations() -> None:
    trace = from_dict(TRACE)
    specs = trace.queue_specs()
    q = queue_from(queue_body(specs["q"], 25, "r1"))
    assert q.clog_timeout == pytest.approx(4.0)
    # Never compressed below the floor the control plane needs to start a gang.
    assert queue_from(queue_body(specs["q"], 25, "r1", 30)).clog_timeout == 30.0
    assert queue_from(queue_body(specs["q"], 0.5, "r1", 30)).clog_timeout == 200.0
    assert (q.backoff.base, q.backoff.max, q.backoff.limit) == (2.0, 20.0, 5)
    assert q.size_ratio == SizeRatio()
    r = queue_from(queue_body(specs["r"], 25, "r1"))
    assert r.size_ratio == SizeRatio(ratio=1.0)  # "off" on kwok: never larger than the cluster
    assert r.nominal == Resources.parse({"cpu": "8"}, field="x")
    assert r.quota_names == frozenset({"cpu", "memory"})  # memory 0 still limits


def test_nodes_read_back_with_labels_taints_and_pods() -> None:
    trace = from_dict(TRACE)
    plans = node_bodies(trace, "r1", prefix="p-")
    assert [p.name for p in plans] == ["p-cpu-0", "p-cpu-1", "p-gpu-0"]
    gpu = node_from(plans[2].body)
    assert gpu is not None
    assert gpu.allocatable["nvidia.com/gpu"] == 4 and gpu.allocatable["pods"] == 110
    assert gpu.labels["accel"] == "a100"
    assert {t.key for t in gpu.taints} == {"kwok.x-k8s.io/node", "gpu"}


# ------------------------------------------------------------------------------ timeline


def _pod(ns: str, gang: str, node: str | None, phase: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "labels": {GANG: gang}},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase},
    }


def _job(
    ns: str,
    name: str,
    annotations: dict[str, str],
    complete: bool = False,
    *,
    pods: int | None = None,
    suspend: bool | None = None,
) -> Any:
    """A Job as the engine's looks list it; `pods` and `suspend` None leave those fields out."""
    conditions = [{"type": "Complete", "status": "True"}] if complete else []
    return builders.job(
        name,
        namespace=ns,
        pods=pods,
        suspend=suspend,
        runtime=None,
        tolerations=(),
        annotations=annotations,
        status={"conditions": conditions},
    )


def test_timeline_records_a_muster_gang_in_trace_time() -> None:
    trace = load("blog-burst")
    arrivals = expand(trace)[:2]
    timeline = Timeline(trace, arrivals, "muster", 25.0, {"default": "ns"})
    timeline.start(1000.0)
    first, second = timeline.gangs
    name = first.gang.submitted.name
    timeline.submitted(0, 1000.0)
    timeline.submitted(1, 1000.4)
    assert timeline.observe(1000.5, [], [])
    assert _state(first) == PENDING and second.submitted == pytest.approx(10.0)
    admitted = {ADMITTED: format_admitted(1001.0, first.gang.size)}
    timeline.observe(1001.2, [_job("ns", name, admitted)], [_pod("ns", name, "n1", "Pending")])
    assert _state(first) == gangstate.ADMITTED and first.first_admitted == pytest.approx(25.0)
    timeline.run_started(("ns", name), 1002.0, 1002.0 + first.runtime / 25)
    timeline.observe(1002.1, [_job("ns", name, admitted)], [_pod("ns", name, "n1", "Running")])
    assert _state(first) == RUNNING and first.started == pytest.approx(50.0)
    done = 1002.0 + first.runtime / 25
    timeline.observe(done - 0.1, [_job("ns", name, admitted)], [_pod("ns", name, "n1", "Running")])
    timeline.observe(done + 0.05, [_job("ns", name, admitted)], [])  # kwok completed the pods
    assert _state(first) == RUNNING
    timeline.observe(done + 0.3, [_job("ns", name, admitted, complete=True)], [])
    # Finished when the pods were seen completed, not when the Job controller said so.
    assert _state(first) == FINISHED
    assert first.finished == pytest.approx(50.0 + first.runtime + 0.05 * 25)
    # The second gang: evicted twice (clogged), the second time past its limit.
    other = second.gang.submitted.name
    evicted = {EVICTIONS: "2", EVICTED_REASON: "Clogged", STATE: "Failed"}
    timeline.observe(done + 1, [_job("ns", other, evicted)], [])
    assert _state(second) == FAILED and second.evictions == 2 and second.clogs == 2
    assert [i.kind for i in timeline.incidents] == ["clog", "evict", "clog", "fail"]
    assert timeline.finished()
    result = timeline.result(stuck_reasons={}, horizon_reached=False, end_wall=0, wall_seconds=1)
    assert result.admission == "muster"
    times = [s.time for s in result.samples]
    assert times == sorted(times)
    assert 0 < result.utilization_mean <= 1


def test_timeline_counts_a_clog_once_without_admission() -> None:
    trace = load("blog-burst")
    arrivals = expand(trace)[:1]
    timeline = Timeline(trace, arrivals, "none", 25.0, {"default": "ns"})
    timeline.start(0.0)
    (gang,) = timeline.gangs
    name = gang.gang.submitted.name
    timeline.submitted(0, 0.0)
    pods = [_pod("ns", name, "n1", "Running"), _pod("ns", name, None, "Pending")]
    timeline.observe(1.0, [_job("ns", name, {})], pods)
    assert _state(gang) == gangstate.ADMITTED and gang.clogs == 0
    timeline.observe(1.0 + gang.clog_timeout / 25, [_job("ns", name, {})], pods)
    timeline.observe(2.0 + gang.clog_timeout / 25, [_job("ns", name, {})], pods)
    assert gang.clogs == 1 and [i.kind for i in timeline.incidents] == ["clog"]
    assert timeline.quiet(100.0)
    result = timeline.result(stuck_reasons={}, horizon_reached=False, end_wall=0, wall_seconds=1)
    assert _state(gang) == STUCK and gang.reason.startswith("Clogged: 1 of min")
    assert result.gangs[0].first_admitted is None


def test_a_holding_gang_still_stuck_at_the_end_counts_its_clog() -> None:
    trace = load("blog-burst")
    timeline = Timeline(trace, expand(trace)[:1], "none", 25.0, {"default": "ns"})
    timeline.start(0.0)
    (gang,) = timeline.gangs
    name = gang.gang.submitted.name
    timeline.submitted(0, 0.0)
    timeline.observe(1.0, [_job("ns", name, {})], [_pod("ns", name, "n1", "Running")])
    assert _state(gang) == gangstate.ADMITTED and gang.clogs == 0
    result = timeline.result(stuck_reasons={}, horizon_reached=False, end_wall=0, wall_seconds=1)
    assert _state(gang) == STUCK and gang.clogs == 1
    assert result.incidents[0].time == pytest.approx(25.0 + gang.clog_timeout)
    assert result.end == pytest.approx(25.0 + gang.clog_timeout)


def test_rejected_gangs_fail_as_in_process() -> None:
    trace = load("blog-burst")
    timeline = Timeline(trace, expand(trace)[:1], "muster", 25.0, {"default": "ns"})
    timeline.start(0.0)
    timeline.submitted(0, 0.0)
    timeline.observe(0.1, [], [])
    timeline.result(
        stuck_reasons={0: "rejected: NeverFits: too big"},
        horizon_reached=False,
        end_wall=0,
        wall_seconds=1,
    )
    assert timeline.gangs[0].state == FAILED
    assert timeline.gangs[0].reason == "NeverFits: too big"


def test_water_fill_caps_by_demand_and_splits_by_weight() -> None:
    assert water_fill([0.1, 1.0, 1.0], [1, 1, 2], 0.7) == pytest.approx([0.1, 0.2, 0.4])


def test_a_queues_preemption_reaches_its_queue_object() -> None:
    data = {
        **TRACE,
        "queues": [
            {
                "name": "q",
                "preemption": {
                    "reclaimWithinCohort": "Any",
                    "protectAfter": 2,
                    "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 5},
                },
            },
            {"name": "r", "preemption": {"withinQueue": "LowerPriority", "protectFor": "100s"}},
            {"name": "s"},
        ],
    }
    specs = from_dict(data).queue_specs()
    q = queue_body(specs["q"], 25, "r1")
    assert q["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
    assert queue_from(q).preemption == Preemption(
        reclaim_within_cohort="Any",
        protect_after=2,
        protect_for=24.0,
        borrow_within_cohort=BorrowWithinCohort("LowerPriority", 5),
    )
    r = queue_from(queue_body(specs["r"], 25, "r1")).preemption
    assert r == Preemption(within_queue="LowerPriority", protect_for=4.0)
    assert "preemption" not in queue_body(specs["s"], 25, "r1")["spec"]  # no preemption: none


def test_timeline_counts_a_preemption_and_starts_the_run_over() -> None:
    trace = load("blog-burst")
    timeline = Timeline(trace, expand(trace)[:1], "muster", 25.0, {"default": "ns"})
    timeline.start(1000.0)
    (gang,) = timeline.gangs
    name = gang.gang.submitted.name
    timeline.submitted(0, 1000.0)
    admitted = {ADMITTED: format_admitted(1001.0, gang.gang.size)}
    timeline.observe(1001.2, [_job("ns", name, admitted)], [_pod("ns", name, "n1", "Running")])
    timeline.run_started(("ns", name), 1002.0, 1002.0 + gang.runtime / 25)
    # The controller preempted it: suspended, its admission stamp gone, the count up.
    timeline.observe(1003.0, [_job("ns", name, {PREEMPTIONS: "1"})], [])
    assert gang.preemptions == 1 and gang.evictions == 0
    assert [i.kind for i in timeline.incidents] == ["preempt"]
    assert timeline.seen[0].run_started is None


# ------------------------------------------------------------------------------ external


def test_external_objects_are_suspended_and_handed_over_by_label() -> None:
    trace = from_dict(TRACE)
    job_arrival, mc_arrival = (
        next(a for a in expand(trace) if a.gang.kind == kind) for kind in ("Job", "MiniCluster")
    )
    handed = {"kueue.x-k8s.io/queue-name": "sim", "team": "a"}
    job = gang_object(
        job_arrival, namespace="ns", admission="external", scale=25, run="r1", labels=handed
    ).body
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"] == {**handed, SIM_RUN: "r1"}  # no muster.dev/queue
    mc = gang_object(
        mc_arrival, namespace="ns", admission="external", scale=25, run="r1", labels=handed
    ).body
    assert mc["metadata"]["labels"] == {**handed, SIM_RUN: "r1"}
    # The operator's Job carries them too (jobLabels), so the other controller takes it.
    assert (
        job_for({**mc, "metadata": {**mc["metadata"], "uid": "u"}})["metadata"]["labels"][
            "kueue.x-k8s.io/queue-name"
        ]
        == "sim"
    )
    # The labels hand over only an external replay's objects; none and muster are as before.
    for admission in ("none", "muster"):
        body = gang_object(
            job_arrival, namespace="ns", admission=admission, scale=25, run="r1", labels=handed
        ).body
        assert "suspend" not in body["spec"] and "team" not in body["metadata"]["labels"]
        mc_body = gang_object(
            mc_arrival, namespace="ns", admission=admission, scale=25, run="r1", labels=handed
        ).body
        assert set(mc_body["spec"]["jobLabels"]) == {SIM_RUN, "muster.dev/min-members"}


def _suspended_job(ns: str, name: str, suspend: bool, complete: bool = False) -> Any:
    return _job(ns, name, {}, complete, pods=2, suspend=suspend)


def test_timeline_records_an_external_admission_and_eviction() -> None:
    """Admitted when the Job is seen unsuspended; suspended again is an eviction."""
    trace = load("blog-burst")
    timeline = Timeline(trace, expand(trace)[:1], "external", 25.0, {"default": "ns"})
    timeline.start(0.0)
    (gang,) = timeline.gangs
    name = gang.gang.submitted.name
    timeline.submitted(0, 0.0)
    timeline.observe(1.0, [_suspended_job("ns", name, True)], [])
    assert _state(gang) == PENDING and gang.first_admitted is None
    timeline.observe(2.0, [_suspended_job("ns", name, False)], [_pod("ns", name, "n1", "Pending")])
    assert _state(gang) == gangstate.ADMITTED
    assert gang.first_admitted == pytest.approx(50.0) and gang.admitted_size == 2
    timeline.observe(3.0, [_suspended_job("ns", name, True)], [])
    assert _state(gang) == PENDING and gang.evictions == 1
    timeline.observe(4.0, [_suspended_job("ns", name, False)], [])
    assert gang.admitted_at == pytest.approx(100.0) and gang.first_admitted == pytest.approx(50.0)
    timeline.run_started(("ns", name), 4.5, 5.0)
    timeline.observe(4.6, [_suspended_job("ns", name, False)], [_pod("ns", name, "n1", "Running")])
    assert _state(gang) == RUNNING and gang.started == pytest.approx(112.5)
    timeline.observe(5.5, [_suspended_job("ns", name, False, complete=True)], [])
    assert _state(gang) == FINISHED
    result = timeline.result(stuck_reasons={}, horizon_reached=False, end_wall=0, wall_seconds=1)
    assert result.admission == "external"
    assert [i.kind for i in result.incidents] == ["evict"]
    assert "admitted_to_started" in timeline.latency_figures()


def test_an_external_admission_seen_after_the_run_began_is_dated_at_the_start() -> None:
    trace = load("blog-burst")
    timeline = Timeline(trace, expand(trace)[:1], "external", 25.0, {"default": "ns"})
    timeline.start(0.0)
    (gang,) = timeline.gangs
    name = gang.gang.submitted.name
    timeline.submitted(0, 0.0)
    timeline.observe(1.0, [_suspended_job("ns", name, True)], [])
    # The pods ran (the gang runner said so) before the Job watch showed the unsuspend.
    timeline.run_started(("ns", name), 1.5, 3.0)
    timeline.observe(1.6, [_suspended_job("ns", name, False)], [_pod("ns", name, "n", "Running")])
    assert _state(gang) == RUNNING
    assert gang.first_admitted == gang.started == pytest.approx(37.5)


def test_an_external_gang_never_unsuspended_is_stuck_pending() -> None:
    trace = load("blog-burst")
    timeline = Timeline(trace, expand(trace)[:1], "external", 25.0, {"default": "ns"})
    timeline.start(0.0)
    (gang,) = timeline.gangs
    timeline.submitted(0, 0.0)
    timeline.observe(1.0, [_suspended_job("ns", gang.gang.submitted.name, True)], [])
    assert timeline.quiet(2.0)
    timeline.result(stuck_reasons={}, horizon_reached=False, end_wall=0, wall_seconds=1)
    assert _state(gang) == STUCK
    assert gang.reason.startswith("Pending: still suspended, the outside controller")


def test_a_trace_with_racks_is_replayed_with_its_domains_and_requests() -> None:
    """The rack trace on kwok: every node carries its block and rack labels (16 racks), each
    gang its topology request as muster's annotation (read back as the trace's), muster gets
    the levels, and the cross-rack slowdown it cannot replay is said, not refused."""
    trace = load("racks")
    nodes = [node_from(plan.body) for plan in node_bodies(trace, "r1")]
    racks = {(n.labels["block"], n.labels["rack"]) for n in nodes if n is not None}
    assert len(nodes) == 128 and len(racks) == 16
    arrivals = expand(trace)
    for group, request in (("rack8", TopologyRequest("rack", True)), ("half4", None)):
        arrival = next(a for a in arrivals if a.group == group)
        body = gang_object(arrival, namespace="ns", admission="muster", scale=60, run="r1").body
        body["metadata"]["annotations"][SUBMITTED] = "2026-01-01T00:00:00.000000Z"
        read = job_record(body).gang.topology
        assert read == (request or TopologyRequest("rack", False)), (group, read)
    assert topology_flags(trace.topology) == ("--topology-levels", "block,rack")
    assert topology_flags(NO_TOPOLOGY) == ()
    said: list[str] = []
    check_trace(trace, KwokSettings(time_scale=60), said.append)
    assert any("does not apply crossDomainSlowdown (x1.3 across racks)" in s for s in said), said
