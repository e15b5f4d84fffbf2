"""The webhook's never-fits check at create (issue #15): a gang that can never run in its queue
is allowed with a warning (`spec.neverFits: Warn`) or refused (`Reject`), with the planner's
numbers and message."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from kubeport.kubeapi import parse_warning
from policies.kinds import JOB
from policies.model import PolicyError
from policies.queuespec import parse_queue
from policies.vocabulary import (
    ELASTIC_AFTER,
    GANG_KIND,
    MIN_MEMBERS,
    PREEMPTIONS,
    PRIORITY,
    RESTORE,
    SUBMITTED,
)
from tests import builders
from webhook.configuration import JOB_PATH, MINICLUSTER_PATH
from webhook.decision import WebhookSettings
from webhook.handlers import set_queue
from webhook.metrics import registry_for
from webhook.review import WebhookState, review_response

STAMP = "2026-11-22T03:05:07.000000001Z/000000000001"
QUOTA_MESSAGE = (
    "never fits: needs 8 cpu, queue prod can get at most 4 cpu (nominal plus what it may "
    "borrow); raise the queue's quota or shrink the job"
)


def queue(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


def node(name: str, cpu: str = "4", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": spec,
        "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"}},
    }


def job(queue_name: str, pods: int, cpu: str = "1", **labels: str) -> dict[str, Any]:
    """A Job "train" of team-a as created (no spec.suspend: the webhook adds it)."""
    return builders.job(
        "train",
        queue_name,
        namespace="team-a",
        pods=pods,
        cpu=cpu,
        suspend=None,
        runtime=None,
        tolerations=(),
        labels=labels,
    )


def minicluster(queue_name: str, size: int, cpu: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {
            "name": "flux",
            "namespace": "team-a",
            "labels": {"muster.dev/queue": queue_name},
        },
        "spec": {
            "size": size,
            "containers": [{"image": "x", "resources": {"requests": {"cpu": cpu}}}],
        },
    }


def state_with(*queues: dict[str, Any], nodes: int | None = 2) -> WebhookState:
    state = WebhookState(queues=set())
    for body in queues:
        assert state.queues is not None
        state.queues.add(body["metadata"]["name"])
        set_queue(state, body)
    if nodes is not None:
        state.never_fits.relist_nodes([node(f"n{i}") for i in range(nodes)])
    return state


def review(state: WebhookState, obj: dict[str, Any], path: str = JOB_PATH) -> dict[str, Any]:
    request = {"uid": "u", "operation": "CREATE", "namespace": "team-a", "object": obj}
    answer = review_response(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request},
        path=path,
        state=state,
        settings=WebhookSettings(),
        stamp=lambda: STAMP,
    )
    response: dict[str, Any] = answer["response"]
    return response


def test_a_gang_above_its_queues_potential_is_warned_with_the_planners_numbers() -> None:
    state = state_with(queue("prod", nominal={"cpu": "4"}))
    response = review(state, job("prod", 8))
    assert response["allowed"] is True
    assert "patch" in response  # still suspended and labelled as any managed Job
    (warning,) = response["warnings"]
    assert warning.startswith(QUOTA_MESSAGE)
    assert "raise queue prod's spec.nominal or spec.borrowingLimit" in warning
    assert state.never_fits.warnings() == {"prod": 1}


def test_what_the_queue_may_borrow_counts() -> None:
    state = state_with(
        queue("org", nominal={"cpu": "16"}),
        queue("prod", parent="org", nominal={"cpu": "4"}, borrowingLimit={"cpu": "2"}),
        queue("dev", parent="org", nominal={"cpu": "4"}),
        nodes=4,
    )
    assert "warnings" not in review(state, job("prod", 6))
    (warning,) = review(state, job("prod", 7))["warnings"]
    assert warning.startswith("never fits: needs 7 cpu, queue prod can get at most 6 cpu")
    assert "warnings" not in review(state, job("dev", 16))  # may borrow all of the cohort's


def test_the_minimum_size_is_what_must_fit() -> None:
    state = state_with(queue("prod", nominal={"cpu": "4"}))
    elastic = job("prod", 8, **{"muster.dev/min-members": "4"})
    elastic["spec"]["completionMode"] = "Indexed"
    elastic["spec"].pop("completions")
    assert "warnings" not in review(state, elastic)


def test_reject_refuses_the_create_and_counts_nothing_as_pending() -> None:
    state = state_with(queue("prod", nominal={"cpu": "4"}, neverFits="Reject"))
    response = review(state, job("prod", 8))
    assert response["allowed"] is False
    assert response["status"]["code"] == 400
    message = response["status"]["message"]
    assert message.startswith(QUOTA_MESSAGE)
    assert "queue prod has spec.neverFits: Reject" in message
    assert "spec.parallelism" in message
    assert dict(state.backlog.depths()) == {}
    assert state.never_fits.refusals() == {"prod": 1}
    assert review(state, job("prod", 4))["allowed"] is True


def test_a_gang_larger_than_every_node_together() -> None:
    state = state_with(queue("prod"), nodes=2)  # 2 nodes of 4 cpu
    (warning,) = review(state, job("prod", 3, cpu="3"))["warnings"]
    assert warning.startswith("never fits: needs 3 pods of 3 cpu, the whole cluster holds 2")
    assert "resources.requests" in warning
    assert "warnings" not in review(state, job("prod", 8))


def test_the_node_rule_waits_for_the_nodes_and_skips_node_blind_queues() -> None:
    unsynced = state_with(queue("prod"), nodes=None)
    assert "warnings" not in review(unsynced, job("prod", 100))
    blind = state_with(queue("prod", nodeFit=False), nodes=2)
    assert "warnings" not in review(blind, job("prod", 100))


def test_node_watch_events_change_the_room() -> None:
    state = state_with(queue("prod"), nodes=2)
    assert "warnings" in review(state, job("prod", 9))
    state.never_fits.apply_node("ADDED", node("n9", cpu="8"))
    assert "warnings" not in review(state, job("prod", 9))
    state.never_fits.apply_node("MODIFIED", node("n9", cpu="8", unschedulable=True))
    assert "warnings" in review(state, job("prod", 9))
    state.never_fits.apply_node("DELETED", node("n9"))
    assert "warnings" in review(state, job("prod", 9))


def test_queue_status_events_keep_the_screen_and_spec_changes_rebuild_it() -> None:
    """The controller writes each Queue's status as it admits; rebuilding the screen walks every
    node, so an event that leaves the spec as it was must not cost a rebuild at the next create."""
    state = state_with(queue("prod", nominal={"cpu": "4"}), nodes=2)
    assert "warnings" in review(state, job("prod", 8))
    screen = state.never_fits._screen
    assert screen is not None
    with_status = {**queue("prod", nominal={"cpu": "4"}), "status": {"usage": {"cpu": "1"}}}
    set_queue(state, with_status)
    assert state.never_fits._screen is screen
    set_queue(state, queue("prod", nominal={"cpu": "8"}))
    assert "warnings" not in review(state, job("prod", 8))
    assert state.never_fits._screen is not screen
    broken = queue("prod", nominal={"cpu": "-1"})
    set_queue(state, broken)
    assert "warnings" not in review(state, job("prod", 8))  # not Ready: its own message says why
    errors = dict(state.never_fits._errors)
    set_queue(state, queue("prod", nominal={"cpu": "-2"}))
    assert state.never_fits._errors != errors  # a new reason is kept, though the spec is None


def test_a_minicluster_too_big_is_warned_and_its_job_is_not_checked_again() -> None:
    state = state_with(queue("prod", nominal={"cpu": "4"}), nodes=10)
    response = review(state, minicluster("prod", 8), path=MINICLUSTER_PATH)
    (warning,) = response["warnings"]
    assert warning.startswith(QUOTA_MESSAGE) and "spec.size" in warning
    mc_job = job("prod", 8)
    mc_job["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "flux-framework.org/v1alpha2",
            "kind": "MiniCluster",
            "name": "flux",
            "controller": True,
        }
    ]
    assert "warnings" not in review(state, mc_job)


def test_a_minicluster_wants_one_node_per_pod() -> None:
    """The operator's anti-affinity: one Flux broker per node, as the controller reads it."""
    state = state_with(queue("prod"), nodes=2)
    (warning,) = review(state, minicluster("prod", 3), path=MINICLUSTER_PATH)["warnings"]
    assert warning.startswith("never fits: needs 3 nodes with 1 cpu allocatable")


def test_unknown_or_unready_queues_are_left_to_their_own_messages() -> None:
    state = state_with(queue("child", parent="nowhere", nominal={"cpu": "1"}))
    assert "warnings" not in review(state, job("child", 8))
    (warning,) = review(state, job("missing", 8))["warnings"]
    assert "does not exist yet" in warning


def test_metrics_count_warnings_and_refusals() -> None:
    state = state_with(
        queue("prod", nominal={"cpu": "4"}),
        queue("strict", nominal={"cpu": "4"}, neverFits="Reject"),
    )
    review(state, job("prod", 8))
    review(state, job("strict", 8))
    text = json.dumps(
        [
            (sample.name, sample.labels, sample.value)
            for metric in registry_for(state).collect()
            for sample in metric.samples
        ]
    )
    assert (
        '["muster_webhook_warnings_total", {"queue": "prod", "reason": "NeverFits"}, 1.0]' in text
    )
    assert (
        '["muster_webhook_refusals_total", {"queue": "strict", "reason": "NeverFits"}, 1.0]' in text
    )


def test_queue_spec_never_fits() -> None:
    assert parse_queue("q", {}, "spec").never_fits == "Warn"
    assert parse_queue("q", {"neverFits": "Reject"}, "spec").never_fits == "Reject"
    with pytest.raises(PolicyError, match=r"spec.neverFits: 'Refuse' is not Warn or Reject"):
        parse_queue("q", {"neverFits": "Refuse"}, "spec")


def test_warning_headers_are_read_as_kubectl_prints_them() -> None:
    assert parse_warning('299 - "never fits: needs 8 cpu"') == "never fits: needs 8 cpu"
    assert parse_warning('299 - "a \\"b\\" c" "Wed, 25 Nov 2026 04:00:00 GMT"') == 'a "b" c'
    assert parse_warning("garbage") == "garbage"


def test_patch_of_a_warned_job_still_suspends_it() -> None:
    state = state_with(queue("prod", nominal={"cpu": "4"}))
    ops = json.loads(base64.b64decode(review(state, job("prod", 8))["patch"]))
    assert {"op": "add", "path": "/spec/suspend", "value": True} in ops


def _body(spec: dict[str, Any], labels: dict[str, str], annotations: dict[str, str]) -> Any:
    template = {
        "metadata": {"labels": {"app": "x"}},
        "spec": {"containers": [{"name": "m", "resources": {"requests": {"cpu": "2"}}}]},
    }
    return {
        "metadata": {
            "name": "j",
            "namespace": "team",
            "uid": "u",
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {"template": template, **spec},
        "status": {"ready": 1},
    }


@pytest.mark.parametrize(
    "body",
    [
        _body({"parallelism": 4}, {"muster.dev/queue": "q"}, {}),
        _body(
            {
                "parallelism": 8,
                "completions": 8,
                "completionMode": "Indexed",
                "activeDeadlineSeconds": 60,
            },
            {"muster.dev/queue": "q"},
            {MIN_MEMBERS: "2", PRIORITY: "5", ELASTIC_AFTER: "30s", PREEMPTIONS: "1"},
        ),
        _body({"parallelism": 3}, {}, {SUBMITTED: "not a stamp", RESTORE: "garbled"}),
        _body({"parallelism": 2}, {"muster.dev/queue": "q"}, {GANG_KIND: "MiniCluster"}),
        _body({"parallelism": -1}, {"muster.dev/queue": "q"}, {MIN_MEMBERS: "x"}),
    ],
)
def test_the_webhooks_gang_reader_reads_the_controllers_gang(body: Any) -> None:
    """`gang_of` (the never-fits screen's reader) is `job_record(...).gang`, field for field."""
    from admission.gangs import job_record
    from policies.kinds.reading import gang_of

    assert gang_of(JOB, body) == job_record(body).gang


def test_the_gang_is_read_only_for_a_queue_the_screen_knows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Reading the gang is most of a review's decision; for a queue the screen has no verdict on
    # (unknown, not Ready, a cohort) it is skipped, and the answer is the same.
    from webhook import neverfits
    from webhook import review as review_module

    read: list[str] = []
    original = neverfits.gang_at_create

    def counted(*args: Any) -> Any:
        read.append(args[1]["metadata"]["labels"]["muster.dev/queue"])
        return original(*args)

    monkeypatch.setattr(review_module, "gang_at_create", counted)
    state = state_with(
        queue("parent", nominal={"cpu": "4"}),
        queue("leaf", parent="parent"),
        queue("orphan", parent="nowhere", nominal={"cpu": "1"}),
    )
    for name in ("parent", "orphan", "missing"):
        assert "patch" in review(state, job(name, 8))
    assert read == []
    assert "can get at most" in review(state, job("leaf", 8))["warnings"][0]
    assert read == ["leaf"]
