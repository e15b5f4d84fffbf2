"""The pin, the saved original and the elastic rule, as pure functions (policies/kinds/pinning.py,
policies/elastic.py), and the planner honouring a gang's required node affinity."""

from __future__ import annotations

import pytest

from admission.gangs import job_record
from policies import plan
from policies.elastic import elastic_problem
from policies.kinds import JOB
from policies.kinds.pinning import (
    HOSTNAME,
    NAME_PIN_TERMS,
    NODE_NAME,
    PLACEMENT_GATE,
    Original,
    PinError,
    decode_placement,
    encode_placement,
    pinned_affinity,
)
from policies.kinds.podtemplate import node_terms
from policies.model import Gang, Node, Queue, QueueTree, Snapshot, node_affinity_holds
from policies.resources import Resources
from tests.unit.test_idle_cycle import controller, job

FOUR = Resources.parse({"cpu": "4"}, field="cpu")
USER_TERM = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}


def test_the_pin_is_anded_into_every_required_term_and_keeps_the_rest() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [USER_TERM, {"matchExpressions": []}]
            }
        },
        "podAntiAffinity": {"x": 1},
    }
    pinned = pinned_affinity(affinity, {"n1": "h1", "n2": "h2"})
    assert isinstance(affinity["nodeAffinity"], dict)
    terms = pinned["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]

    def name(node: str) -> dict[str, object]:
        return {"key": NODE_NAME, "operator": "In", "values": [node]}

    # (user term 1 or user term 2) and (n1 or n2): four terms, each naming one node by name.
    assert terms == [
        {**USER_TERM, "matchFields": [name("n1")]},
        {**USER_TERM, "matchFields": [name("n2")]},
        {"matchExpressions": [], "matchFields": [name("n1")]},
        {"matchExpressions": [], "matchFields": [name("n2")]},
    ]
    assert pinned["podAntiAffinity"] == {"x": 1}
    # The input is not changed (it is the saved original).
    assert (
        affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ][0]
        == USER_TERM
    )


def test_every_term_of_a_small_pin_names_nodes_so_the_scheduler_prefilters_to_them() -> None:
    """kube-scheduler's NodeAffinity PreFilter narrows the candidates to the named nodes only
    when every term has a `metadata.name In` field; the user's own terms are kept in each."""
    terms = pinned_affinity(None, {"n1": "h1"})["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": NODE_NAME, "operator": "In", "values": ["n1"]}]}]
    nodes = {f"n{i}": f"h{i}" for i in range(NAME_PIN_TERMS)}
    terms = pinned_affinity(None, nodes)["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert len(terms) == NAME_PIN_TERMS
    assert all(t["matchFields"][0]["key"] == NODE_NAME for t in terms)
    assert sorted(t["matchFields"][0]["values"][0] for t in terms) == sorted(nodes)


def test_a_large_pin_names_nodes_by_hostname_and_a_bare_node_by_name() -> None:
    nodes: dict[str, str | None] = {f"n{i}": f"h{i}" for i in range(NAME_PIN_TERMS)}
    nodes["bare"] = None
    pinned = pinned_affinity(None, nodes)
    terms = pinned["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    hosts = sorted(h for h in nodes.values() if h)
    assert terms[0] == {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": hosts}]}
    assert terms[1] == {"matchFields": [{"key": NODE_NAME, "operator": "In", "values": ["bare"]}]}
    assert len(terms) == 2
    # Two user terms double the term count: (limit / 2 + 1) nodes × 2 is past the limit.
    two = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [USER_TERM, USER_TERM]
            }
        }
    }
    few = {f"n{i}": f"h{i}" for i in range(NAME_PIN_TERMS // 2 + 1)}
    terms = pinned_affinity(two, few)["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert [t["matchExpressions"][-1]["key"] for t in terms] == [HOSTNAME, HOSTNAME]


def test_the_original_round_trips_and_bad_values_say_what_is_wrong() -> None:
    spec = {
        "parallelism": 4,
        "completions": 4,
        "template": {
            "spec": {"affinity": {"nodeAffinity": {}}, "schedulingGates": [{"name": "x"}]}
        },
    }
    original = JOB.original(spec)
    assert Original.decode(original.encode(), "r") == original
    assert original.template("").gated() == [{"name": "x"}, {"name": PLACEMENT_GATE}]
    with pytest.raises(PinError, match="r: not JSON"):
        Original.decode("{", "r")
    with pytest.raises(PinError, match="parallelism and completions must be integers"):
        Original.decode('{"parallelism": [1]}', "r")


def test_placement_round_trips_and_rejects_nonsense() -> None:
    placement = encode_placement({"": {"b": 2, "a": 1}})
    assert decode_placement(placement, "p") == {"": {"a": 1, "b": 2}}
    with pytest.raises(PinError, match="'a=0' is not node=pods"):
        decode_placement("a=0", "p")


def test_elastic_fields_lower_completions_only_for_an_indexed_job_of_equal_completions() -> None:
    indexed = {"completionMode": "Indexed"}
    both = JOB.original({"parallelism": 16, "completions": 16})
    assert JOB.resize(both, indexed, 9) == {"/spec/parallelism": 9, "/spec/completions": 9}
    assert JOB.resize(both, {}, 9) == {"/spec/parallelism": 9}
    assert JOB.resize(both, indexed, 16) == {}
    work_queue = JOB.original({"parallelism": 4, "completions": 100})
    assert JOB.resize(work_queue, indexed, 2) == {"/spec/parallelism": 2}


def test_a_nonindexed_job_with_completions_cannot_be_elastic() -> None:
    spec = {"parallelism": 4, "completions": 4}
    problem = elastic_problem(spec, 4, 2)
    assert problem is not None and "second wave" in problem and "Indexed" in problem
    assert elastic_problem({**spec, "completionMode": "Indexed"}, 4, 2) is None
    assert elastic_problem({"parallelism": 4}, 4, 2) is None  # no completions: a work queue
    assert elastic_problem(spec, 4, 4) is None


def test_node_affinity_matching_follows_kubernetes() -> None:
    terms = node_terms(
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "pool", "operator": "In", "values": ["a", "b"]},
                                {"key": "gpu", "operator": "DoesNotExist"},
                            ]
                        },
                        {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["8"]}]},
                    ]
                }
            }
        }
    )
    assert node_affinity_holds({"pool": "a"}, terms)
    assert not node_affinity_holds({"pool": "a", "gpu": "1"}, terms)
    assert node_affinity_holds({"cores": "16"}, terms)
    assert not node_affinity_holds({"cores": "8"}, terms)
    assert not node_affinity_holds({"cores": "many"}, terms)
    assert node_affinity_holds({}, ())


def test_the_planner_places_a_gang_only_where_its_required_affinity_holds() -> None:
    nodes = [
        Node(
            name=f"n{i}",
            allocatable=FOUR,
            labels={"pool": pool},
        )
        for i, pool in enumerate(["x", "x", "a", "a"])
    ]
    terms = node_terms(
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [USER_TERM]}
            }
        }
    )
    gang = Gang(
        id="ns/g",
        queue="q",
        pod_requests=FOUR,
        size=2,
        node_terms=terms,
    )
    snapshot = Snapshot(
        nodes=nodes, queues=QueueTree.build([Queue(name="q")]), admitted=[], pending=[gang], now=0.0
    )
    decisions = plan(snapshot, "drf")
    assert [dict(a.placement) for a in decisions.admitted] == [{"n2": 1, "n3": 1}]


def test_a_pinned_job_reads_its_own_affinity_and_size_from_the_saved_original() -> None:
    original = JOB.original({"parallelism": 4, "completions": 4})
    body = {
        "metadata": {
            "name": "j",
            "namespace": "ns",
            "uid": "u",
            "labels": {"muster.dev/queue": "q"},
            "annotations": {
                "muster.dev/submitted": "2026-11-24T00:00:00.000000000Z/000000000001",
                "muster.dev/admitted": "2026-11-24T00:00:01.000000Z/2",
                "muster.dev/restore": original.encode(),
                "muster.dev/placement": "n1=2",
                "muster.dev/min-members": "2",
            },
        },
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "completionMode": "Indexed",
            "template": {
                "spec": {
                    "affinity": pinned_affinity(None, {"n1": "n1"}),
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                }
            },
        },
        "status": {"startTime": "2026-11-24T00:00:01Z"},
    }
    record = job_record(body)
    assert record.parse_error is None, record.parse_error
    assert record.gang.size == 4 and record.gang.min == 2
    assert record.gang.node_terms == ()  # the pin is not the user's affinity
    assert record.pinned == {"": {"n1": 2}} and record.started


def test_a_pin_goes_without_the_gate_only_where_empty_nodes_could_hold_no_more() -> None:
    # Two 4-cpu nodes, one with 2 cpu of other pods bound: a 3-pod gang of 1 cpu planned 2 + 1
    # fills what they have free, but the other pods may end before the scheduler binds, and
    # then the affinity alone would let all three go to one node: the pods wait at the gate.
    cache, made, _ = controller()
    for name in ("m0", "m1"):
        cache.apply_node(
            "ADDED",
            {
                "metadata": {"name": name, "resourceVersion": "3"},
                "status": {"allocatable": {"cpu": "4", "pods": "110"}},
            },
        )
    cache.apply_job("ADDED", job("a", 0))
    record = cache.jobs["ns/a"]
    cache.pods.used["m0"] = Resources({"cpu": 2_000})
    cache.pods.used["m1"] = Resources({"cpu": 3_000})
    assert made.admitter._inexact(record, {"m0": 2, "m1": 1})
    assert not made.admitter._inexact(record, {"m0": 3})  # one node: nowhere else to go
    assert not made.admitter._inexact(record, {"m0": 4, "m1": 4})  # they could hold no more
