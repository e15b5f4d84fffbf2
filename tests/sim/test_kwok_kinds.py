"""The kwok engine's JobSets and pod groups (issue 29): a trace's JobSet becomes a JobSet of one
replicated Job per pod set, which the real JobSet controller runs; a pod group becomes its plain
pods (opted in with admission muster); both read back as the trace's gang, and a look at a pod
group reads muster's record of it and its pods' completion."""

from __future__ import annotations

from typing import Any

import pytest

from policies.kinds import JOBSET
from policies.kinds.members import member_of
from policies.kinds.podgroup import PODGROUP
from policies.kinds.reading import format_admitted, gang_of
from policies.vocabulary import (
    ADMITTED,
    GANG,
    GANG_RECORD,
    MIN_MEMBERS,
    POD_GROUP,
    POD_SET,
    QUEUE,
    SUBMITTED,
)
from simulator.engine import FINISHED, RUNNING
from simulator.kwok_objects import gang_object
from simulator.kwok_settings import KwokError, refuse_pod_sets
from simulator.kwok_timeline import Timeline
from simulator.trace import expand, from_dict

STAMP = "2026-01-01T00:00:00.000000000Z/000000000001"


def _trace(kind: str) -> dict[str, Any]:
    return {
        "name": "t",
        "cluster": {"nodes": [{"count": 4, "allocatable": {"cpu": "8"}, "labels": {"p": "x"}}]},
        "queues": [{"name": "q"}],
        "jobs": [
            {
                "name": "g",
                "kind": kind,
                "queue": "q",
                "size": 5,
                "runtime": "50s",
                "podSets": [
                    {"name": "head", "count": 1, "podRequests": {"cpu": "1"}},
                    {
                        "name": "worker",
                        "podRequests": {"cpu": "4"},
                        "onePodPerNode": True,
                        "nodeSelector": {"p": "x"},
                    },
                ],
            }
        ],
    }


def test_a_jobset_has_a_replicated_job_per_pod_set_and_reads_back_as_the_gang() -> None:
    (arrival,) = expand(from_dict(_trace("JobSet")))
    obj = gang_object(arrival, namespace="ns", admission="muster", scale=10, run="r1")
    assert obj.path == "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets" and not obj.more
    body = obj.body
    assert body["metadata"]["labels"][QUEUE] == "q"
    jobs = {r["name"]: r for r in body["spec"]["replicatedJobs"]}
    assert {n: r["template"]["spec"]["parallelism"] for n, r in jobs.items()} == {
        "worker": 4,
        "head": 1,
    }
    template = jobs["worker"]["template"]["spec"]["template"]
    assert template["metadata"]["annotations"][MIN_MEMBERS] == "5"  # the whole JobSet's
    assert template["metadata"]["labels"][POD_SET] == "worker"
    body["metadata"]["annotations"] = {SUBMITTED: STAMP}
    gang = gang_of(JOBSET, {**body, "metadata": {**body["metadata"], "namespace": "ns"}})
    assert gang.size == 5 and gang.main.count == 4 and gang.main.one_pod_per_node
    assert gang.node_selector == {"p": "x"} and [o.count for o in gang.others] == [1]


def test_a_pod_group_is_its_pods_and_reads_back_as_the_gang() -> None:
    (arrival,) = expand(from_dict(_trace("PodGroup")))
    obj = gang_object(arrival, namespace="ns", admission="muster", scale=10, run="r1")
    pods = [obj.body, *obj.more]
    assert obj.path == "/api/v1/namespaces/ns/pods" and len(pods) == 5
    assert {p["metadata"]["labels"][POD_GROUP] for p in pods} == {"g-0"}
    # As the webhook stores them: what the controller reads is the trace's gang.
    stored = []
    for i, pod in enumerate(pods):
        patch = PODGROUP.hold(pod, "q", STAMP[:-1] + str(i))
        pod["metadata"]["labels"].update(patch["metadata"]["labels"])
        pod["metadata"]["annotations"].update(patch["metadata"]["annotations"])
        pod["spec"].update(patch["spec"])
        stored.append(member_of(pod))
    virtual = PODGROUP.assemble("ns", "g-0", stored, None)
    assert virtual is not None
    gang = gang_of(PODGROUP, virtual)
    assert gang.size == 5 and gang.main.count == 4 and gang.main.one_pod_per_node
    assert gang.set_name == "worker" and [o.name for o in gang.others] == ["head"]
    # Without admission: plain pods of the gang, which no webhook gates.
    plain = gang_object(arrival, namespace="ns", admission="none", scale=10, run="r1").body
    assert POD_GROUP not in plain["metadata"]["labels"] and plain["metadata"]["labels"][GANG]


def test_a_look_at_a_pod_group_reads_its_record_and_its_pods() -> None:
    trace = from_dict(
        {
            **_trace("PodGroup"),
            "jobs": [
                {**_trace("PodGroup")["jobs"][0], "podSets": None, "podRequests": {"cpu": "1"}}
            ],
        }
    )
    arrivals = expand(trace)
    timeline = Timeline(trace, arrivals, "muster", 10.0, {"default": "ns"})
    timeline.start(1000.0)
    (record,) = timeline.gangs
    timeline.submitted(0, 1000.0)
    admitted = {ADMITTED: format_admitted(1001.0, 5)}
    gang_record = {
        "metadata": {
            "namespace": "ns",
            "name": "podgroup-g-0",
            "labels": {GANG_RECORD: "PodGroup", GANG: "g-0"},
            "annotations": admitted,
        }
    }
    running = [
        {
            "metadata": {"namespace": "ns", "labels": {GANG: "g-0"}},
            "spec": {"nodeName": "n"},
            "status": {"phase": "Running"},
        }
    ] * 5
    timeline.observe(1001.1, [gang_record], running)
    timeline.run_started(("ns", "g-0"), 1001.2, 1006.2)
    timeline.observe(1001.3, [gang_record], running)
    assert record.state == RUNNING and record.admitted_at == pytest.approx(10.0)
    timeline.observe(1006.5, [gang_record], [])  # kwok completed its pods
    finished: str = record.state  # read again: the look above changed it
    assert finished == FINISHED


def test_the_kwok_engine_refuses_what_it_cannot_replay() -> None:
    with pytest.raises(KwokError) as error:
        refuse_pod_sets(from_dict(_trace("PodGroup")), ["external"])
    assert "a pod group cannot be handed to a controller muster does not run" in str(error.value)
    refuse_pod_sets(from_dict(_trace("JobSet")), ["external"])
    refuse_pod_sets(from_dict(_trace("PodGroup")), ["none", "muster"])
