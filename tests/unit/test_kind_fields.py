"""Every `muster.dev/*` gang field, walked through the webhook and the controller for both kinds.

For each field, each way of setting it (annotation, label) and a good, an absent and a bad
value: the webhook's decision (`webhook.decision`) and the controller's reading of the stored
object (`admission.gangs.job_record`) must agree on the value, on the default, and on the
refusal (the controller keeps a gang it would have refused waiting with the same message).
A MiniCluster's gang is the Job its operator creates from `spec.jobLabels`, so its walk goes
webhook (MiniCluster) -> operator (Job from jobLabels) -> webhook (Job) -> controller.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from admission.gangs import JobRecord, job_record
from policies.kinds import JOB, KINDS, MINICLUSTER, Kind, kind_named
from policies.kinds.fields import pointer
from policies.topology import TopologyRequest
from tests import builders
from webhook.decision import (
    AdmissionRejected,
    Decision,
    WebhookSettings,
    decide_create,
)

STAMP = "2026-11-22T03:05:07.000000001Z/000000000001"
SIZE = 4

# (field, good value, what the controller's gang then says, bad value, refusal text)
FIELDS: list[tuple[str, str, Any, str, str]] = [
    ("muster.dev/min-members", "2", 2, "5", "5 is out of range; the gang has 4 members"),
    ("muster.dev/priority", "7", 7, "top", "'top' is not an integer"),
    ("muster.dev/elastic-after", "2m", 120.0, "later", "'later' is not a"),
    ("muster.dev/clog-timeout", "1h30m", 5400.0, "soon", "'soon' is not a duration"),
    (
        "muster.dev/topology-required",
        "rack",
        TopologyRequest("rack", True),
        "rack row",
        "'rack row' is not a node label key",
    ),
    (
        "muster.dev/topology-preferred",
        "block",
        TopologyRequest("block", False),
        "-x",
        "'-x' is not a node label key",
    ),
]
DEFAULTS: dict[str, Any] = {
    "muster.dev/min-members": SIZE,
    "muster.dev/priority": 0,
    "muster.dev/elastic-after": 0.0,
    "muster.dev/clog-timeout": None,
    "muster.dev/topology-required": None,
    "muster.dev/topology-preferred": None,
}


def reading(record: JobRecord, key: str) -> Any:
    """What the controller's record says about one field."""
    return {
        "muster.dev/min-members": record.gang.min,
        "muster.dev/priority": record.gang.priority,
        "muster.dev/elastic-after": record.gang.elastic_after,
        "muster.dev/clog-timeout": record.clog_timeout,
        "muster.dev/topology-required": _topology(record, required=True),
        "muster.dev/topology-preferred": _topology(record, required=False),
    }[key]


def _topology(record: JobRecord, *, required: bool) -> TopologyRequest | None:
    """The gang's topology request if it is of that kind (one field reads both)."""
    found = record.gang.topology
    return found if found is not None and found.required == required else None


def merged(body: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch applied (what the apiserver stores after the webhook's mutation)."""
    out = copy.deepcopy(dict(body))
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def stored(body: dict[str, Any]) -> dict[str, Any]:
    """What the apiserver keeps of a created object: a uid and a resourceVersion."""
    body["metadata"].setdefault("uid", "uid-" + body["metadata"]["name"])
    body["metadata"].setdefault("resourceVersion", "1")
    return body


def indexed_job(
    name: str, labels: dict[str, str], annotations: dict[str, str], owner: Any = None
) -> dict[str, Any]:
    """An Indexed Job of SIZE pods of team-a as created, with these labels and annotations."""
    return builders.job(
        name,
        namespace="team-a",
        pods=SIZE,
        indexed=True,
        suspend=None,
        runtime=None,
        tolerations=(),
        labels=labels,
        annotations=annotations,
        owner=owner,
    )


def through_webhook_job(body: dict[str, Any], owner_stamp: str | None = None) -> dict[str, Any]:
    decision = decide_create(
        JOB,
        body,
        namespace="team-a",
        namespace_labels={},
        known_queues={"gpu"},
        settings=WebhookSettings(),
        stamp=STAMP,
        owner_stamp=owner_stamp,
    )
    assert decision.managed
    return stored(merged(body, decision.patch))


def job_walk(labels: dict[str, str], annotations: dict[str, str]) -> JobRecord:
    """A Job created with these labels/annotations, through the webhook, read by the
    controller. Raises AdmissionRejected when the webhook refuses it."""
    body = indexed_job("train", {"muster.dev/queue": "gpu", **labels}, annotations)
    return job_record(through_webhook_job(body))


def decide_mc(mc: dict[str, Any]) -> Decision:
    """The webhook's decision for a MiniCluster created in team-a (queue gpu exists)."""
    return decide_create(
        MINICLUSTER,
        mc,
        namespace="team-a",
        namespace_labels={},
        known_queues={"gpu"},
        settings=WebhookSettings(),
        stamp=STAMP,
    )


def minicluster_walk(labels: dict[str, str], annotations: dict[str, str]) -> JobRecord:
    """A MiniCluster created with these labels/annotations, through the webhook, its Job made by
    the operator from spec.jobLabels, through the webhook again, read by the controller."""
    mc: dict[str, Any] = {
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {
            "name": "flux",
            "namespace": "team-a",
            "labels": {"muster.dev/queue": "gpu", **labels},
            "annotations": annotations,
        },
        "spec": {"size": SIZE},
    }
    decision = decide_mc(mc)
    assert decision.managed
    created = merged(mc, decision.patch)
    owner = {
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "name": "flux",
        "controller": True,
    }
    job = indexed_job("flux", dict(created["spec"]["jobLabels"]), {}, owner)
    return job_record(through_webhook_job(job, owner_stamp=STAMP))


WALKS = {"Job": job_walk, "MiniCluster": minicluster_walk}


@pytest.mark.parametrize("kind", sorted(WALKS))
@pytest.mark.parametrize("where", ["annotation", "label"])
@pytest.mark.parametrize(("key", "good", "value", "bad", "refusal"), FIELDS)
def test_each_field_is_read_the_same_by_webhook_and_controller(
    kind: str, where: str, key: str, good: str, value: Any, bad: str, refusal: str
) -> None:
    walk = WALKS[kind]
    field = {key: good}
    record = walk(field, {}) if where == "label" else walk({}, field)
    assert record.parse_error is None
    assert reading(record, key) == value
    # Every other field keeps its default.
    for other, default in DEFAULTS.items():
        if other != key:
            assert reading(record, other) == default, other

    field = {key: bad}
    with pytest.raises(AdmissionRejected) as refused:
        walk(field, {}) if where == "label" else walk({}, field)
    message = str(refused.value)
    assert refusal in message and f"{where} {key}" in message
    # An object the webhook never saw (created while it was down, or before muster was
    # installed) with the same value: the controller keeps it waiting with the same words.
    body = indexed_job("raw", {"muster.dev/queue": "gpu"}, {"muster.dev/submitted": STAMP})
    body["metadata"]["labels" if where == "label" else "annotations"][key] = bad
    raw = job_record(stored(body))
    assert raw.parse_error == message


@pytest.mark.parametrize("kind", sorted(WALKS))
def test_absent_fields_read_as_the_same_defaults(kind: str) -> None:
    record = WALKS[kind]({}, {})
    assert record.parse_error is None
    for key, default in DEFAULTS.items():
        assert reading(record, key) == default, key
    assert record.queue == "gpu" and record.gang.size == SIZE


@pytest.mark.parametrize("kind", sorted(WALKS))
def test_the_annotation_wins_over_the_label_in_both(kind: str) -> None:
    record = WALKS[kind]({"muster.dev/priority": "3"}, {"muster.dev/priority": "9"})
    assert record.gang.priority == 9
    # A bad label under a good annotation is not read, by either.
    record = WALKS[kind]({"muster.dev/priority": "top"}, {"muster.dev/priority": "9"})
    assert record.gang.priority == 9 and record.parse_error is None


def test_the_queue_is_the_label_for_both() -> None:
    record = job_walk({}, {"muster.dev/queue": "other"})
    # The webhook writes the label's queue into the annotation; the controller reads the label.
    assert record.queue == "gpu" and record.gang.queue == "gpu"


def test_a_minicluster_min_size_is_its_minimum_unless_min_members_says_otherwise() -> None:
    mc: dict[str, Any] = {
        "metadata": {"name": "flux", "namespace": "team-a", "labels": {"muster.dev/queue": "q"}},
        "spec": {"size": SIZE, "minSize": 3},
    }
    decision = decide_mc(mc)
    assert decision.patch["spec"]["jobLabels"]["muster.dev/min-members"] == "3"
    mc["metadata"]["annotations"] = {"muster.dev/min-members": "2"}
    decision = decide_mc(mc)
    assert decision.patch["spec"]["jobLabels"]["muster.dev/min-members"] == "2"


def test_a_job_of_no_members_is_refused_and_waits_with_the_same_words() -> None:
    body = indexed_job("empty", {"muster.dev/queue": "gpu"}, {"muster.dev/submitted": STAMP})
    body["spec"]["parallelism"] = 0
    with pytest.raises(AdmissionRejected) as refused:
        through_webhook_job(copy.deepcopy(body))
    assert "spec.parallelism: 0 gives the gang no members" in str(refused.value)
    assert job_record(stored(body)).parse_error == str(refused.value)


@pytest.mark.parametrize("kind", [JOB, MINICLUSTER])
def test_each_kind_is_named_by_its_gang_kind_annotation(kind: Kind) -> None:
    assert KINDS[kind.name] is kind_named(kind.name) is kind
    assert kind_named(None) is JOB and kind_named("Unknown") is JOB


def test_a_minicluster_gang_is_read_from_the_job_its_operator_makes() -> None:
    mc: dict[str, Any] = {
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"generateName": "flux-", "namespace": "team-a"},
        "spec": {"size": SIZE, "jobLabels": {"muster.dev/queue": "gpu", "team": "a"}},
    }
    assert MINICLUSTER.queue(mc) == "" and MINICLUSTER.gang_fields(mc)[0] == SIZE
    job = MINICLUSTER.gang_object(mc)
    assert job["metadata"]["name"] == "flux-"
    assert job["metadata"]["labels"] == {"muster.dev/queue": "gpu", "team": "a"}
    assert job["metadata"]["annotations"] == {"muster.dev/gang-kind": "MiniCluster"}
    gang = job_record(job).gang
    # The operator's preferred one-broker-per-node anti-affinity counts for a MiniCluster only.
    assert gang.kind == "MiniCluster" and gang.one_pod_per_node and gang.queue == "gpu"
    del job["metadata"]["annotations"]
    assert not job_record(job).gang.one_pod_per_node


def test_a_pointer_escapes_slashes_and_tildes_once() -> None:
    assert pointer("metadata", "annotations", "muster.dev/a~b") == (
        "/metadata/annotations/muster.dev~1a~0b"
    )
    assert pointer() == ""
