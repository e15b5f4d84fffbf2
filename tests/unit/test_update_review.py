"""The webhook's review of updates (issue 28): what an update of a managed object may change, by
its state, for every kind; muster's own writes pass; refusals name the field and what to do.
Pure: plain dicts, as the apiserver sends them (`webhook.decision.decide_update`,
`webhook.review.review_response`)."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
import yaml

from policies.kinds import JOB, JOBSET, MINICLUSTER
from policies.kinds.reading import read_gang
from policies.kinds.release import (
    Release,
    evict_writes,
    leave_writes,
    preempt_writes,
    release_writes,
    requeue_writes,
    restore_writes,
)
from policies.vocabulary import (
    ADMITTED,
    CLOG_TIMEOUT,
    MIN_MEMBERS,
    PRIORITY,
    QUEUE,
    RESIZED_FROM,
    SUBMITTED,
)
from tests import builders
from tests.patches import apply_json_patch, apply_merge_patch
from tests.unit.test_kind_adapters import jobset
from webhook.configuration import (
    CONTROLLER_USER,
    IN_CLUSTER_USER,
    build_configuration,
    own_identity,
    render_manifest,
    update_path_of,
)
from webhook.decision import AdmissionRejected, UpdateDecision, WebhookSettings, decide_update
from webhook.review import WebhookState, review_response

STAMP = "2026-11-22T03:05:07.000000001Z/000000000001"
SETTINGS = WebhookSettings()


def stored(
    pods: int = 2, *, indexed: bool = True, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A Job as the webhook stored it: suspended, queue gpu, stamped, its template labelled."""
    body = builders.job(
        "train",
        "gpu",
        namespace="team-a",
        pods=pods,
        indexed=indexed,
        suspend=True,
        gang_label=True,
        annotations={QUEUE: "gpu", SUBMITTED: STAMP, **(annotations or {})},
        resource_version=1,
    )
    return body


def released(body: dict[str, Any], size: int | None = None) -> dict[str, Any]:
    """``body`` after muster's admission: pinned to two nodes (gated), maybe resized."""
    kind = JOB if body["kind"] == "Job" else JOBSET
    meta = body["metadata"]
    reading = read_gang(
        kind,
        meta["namespace"],
        meta["name"],
        body["spec"],
        meta.get("labels") or {},
        meta.get("annotations") or {},
    )
    total = size if size is not None else reading.gang.size
    placements = {t.name: {"n1": t.count} for t in reading.templates}
    writes = release_writes(
        kind,
        meta["uid"],
        body["spec"],
        reading.marks.original,
        reading.templates,
        Release(1.0, total, placements, {"n1": "n1"}),
    )
    out = body
    for write in writes:
        if write.ops is not None:
            after = apply_json_patch(out, write.ops)
            review(kind, out, after)
            out = after
    return out


def review(kind: Any, old: dict[str, Any], new: dict[str, Any], **settings: Any) -> UpdateDecision:
    return decide_update(
        kind,
        old,
        new,
        namespace="team-a",
        namespace_labels=settings.pop("namespace_labels", {}),
        settings=WebhookSettings(**settings),
    )


def refusal(kind: Any, old: dict[str, Any], new: dict[str, Any], **settings: Any) -> str:
    with pytest.raises(AdmissionRejected) as refused:
        review(kind, old, new, **settings)
    return str(refused.value)


def merged(body: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    return apply_merge_patch(body, patch)


# --- an admitted, running gang keeps what its admission decided ---------------------------


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"spec": {"parallelism": 40, "completions": 40}}, "spec.parallelism: 2 -> 40"),
        ({"spec": {"parallelism": 400}}, "spec.parallelism: 2 -> 400"),
        ({"spec": {"completions": 3}}, "spec.completions: 2 -> 3"),
        ({"metadata": {"labels": {QUEUE: None}}, "spec": {"parallelism": 300}}, "label muster"),
        ({"metadata": {"labels": {QUEUE: "other"}}}, "label muster.dev/queue: 'gpu' -> 'other'"),
        ({"metadata": {"annotations": {PRIORITY: "9"}}}, f"annotation {PRIORITY}: (unset) -> '9'"),
        ({"metadata": {"labels": {MIN_MEMBERS: "1"}}}, f"label {MIN_MEMBERS}"),
        ({"metadata": {"annotations": {ADMITTED: None}}}, f"annotation {ADMITTED}"),
        (
            {"spec": {"template": {"spec": {"nodeSelector": {"pool": "big"}}}}},
            "spec.template.spec.nodeSelector",
        ),
        (
            {
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "main", "resources": {"requests": {"cpu": "64"}}}
                            ]
                        }
                    }
                }
            },
            "spec.template.spec.containers[0].resources",
        ),
    ],
)
def test_a_change_to_what_was_admitted_is_refused_naming_the_field(
    patch: dict[str, Any], field: str
) -> None:
    running = released(stored())
    message = refusal(JOB, running, merged(running, patch))
    assert field in message, message
    assert "team-a/train is admitted" in message
    assert "spec.suspend: true" in message, "says what to do"
    assert "2 pods in queue gpu" in message


def test_a_work_queue_job_cannot_grow_either() -> None:
    running = released(stored(indexed=False))
    running["spec"].pop("completions")
    grown = merged(running, {"spec": {"parallelism": 40}})
    assert "spec.parallelism: 2 -> 40" in refusal(JOB, running, grown)


def test_what_admission_did_not_decide_may_change() -> None:
    running = released(stored())
    for patch in (
        {"metadata": {"labels": {"team": "x"}, "annotations": {"note": "hi"}}},
        {"metadata": {"annotations": {CLOG_TIMEOUT: "20m"}}},
        {"spec": {"activeDeadlineSeconds": 600}},
    ):
        assert review(JOB, running, merged(running, patch)) == UpdateDecision()


def test_suspending_with_the_change_is_allowed() -> None:
    """The way to change an admitted gang: suspend it in the same update; the controller then
    requeues it at what it asks for."""
    running = released(stored())
    patch = {"spec": {"suspend": True, "parallelism": 40, "completions": 40}}
    assert review(JOB, running, merged(running, patch)) == UpdateDecision()
    moved = merged(running, {"spec": {"suspend": True}, "metadata": {"labels": {QUEUE: "b"}}})
    assert review(JOB, running, moved).patch == {"metadata": {"annotations": {QUEUE: "b"}}}


# --- a held gang is unsuspended by muster's admission only --------------------------------


def test_unsuspending_a_waiting_gang_is_refused() -> None:
    waiting = stored()
    message = refusal(JOB, waiting, merged(waiting, {"spec": {"suspend": False}}))
    assert message.startswith("spec.suspend: true -> false: Job team-a/train waits in queue gpu")
    # A gang suspended after its admission waits to be requeued and admitted again.
    suspended = merged(released(waiting), {"spec": {"suspend": True}})
    message = refusal(JOB, suspended, merged(suspended, {"spec": {"suspend": False}}))
    assert "was suspended after its admission" in message
    failed = stored(
        annotations={"muster.dev/state": "Failed", "muster.dev/failed-reason": "NeverFits"}
    )
    message = refusal(JOB, failed, merged(failed, {"spec": {"suspend": False}}))
    assert "muster marked Job team-a/train Failed (NeverFits)" in message


def test_musters_own_writes_pass() -> None:
    """Release (suspended before), eviction and preemption (suspended after), restore (both),
    a requeue of a gang suspended while admitted, and leaving: each passes the review."""
    waiting = stored(pods=4, annotations={MIN_MEMBERS: "2"})
    running = released(waiting, size=2)  # elastic: admitted smaller, parallelism lowered
    assert running["spec"]["parallelism"] == 2
    for writes in (
        evict_writes("uid-train", evictions=1, requeue_at=5.0, reason="Clogged", failed=False),
        leave_writes("uid-train", reason="LeftQueue"),
    ):
        (write,) = writes
        assert write.body is not None
        evicted = merged(running, write.body)
        review(JOB, running, evicted)
        restored = evicted
        restore = restore_writes(JOB, evicted)
        assert restore is not None, "no pod of it is active: its restore is made now"
        for step in restore:
            if step.ops is not None:
                restored = apply_json_patch(evicted, step.ops)
                review(JOB, evicted, restored)
        assert restored["spec"]["parallelism"] == 4
    (preempt,) = preempt_writes("uid-train", preemptions=1, message="by x")
    assert preempt.ops is not None
    review(JOB, running, apply_json_patch(running, preempt.ops))
    user_suspended = merged(running, {"spec": {"suspend": True}})
    (requeue,) = requeue_writes("uid-train", reason="Suspended", restore=None)
    assert requeue.ops is not None
    review(JOB, user_suspended, apply_json_patch(user_suspended, requeue.ops))


# --- the queue label, both ways -----------------------------------------------------------


def test_a_running_job_joins_a_queue_only_suspended() -> None:
    plain = builders.job("train", namespace="team-a", pods=2, resource_version=1)
    labelled = merged(plain, {"metadata": {"labels": {QUEUE: "gpu"}}})
    message = refusal(JOB, plain, labelled)
    assert message.startswith("label muster.dev/queue: (unset) -> gpu: Job team-a/train runs")
    assert "spec.suspend: true" in message
    joining = merged(labelled, {"spec": {"suspend": True}})
    assert review(JOB, plain, joining).join
    ran = merged(plain, {"status": {"startTime": "2026-01-01T00:00:00Z"}})
    assert "has run" in refusal(JOB, ran, merged(joining, {"status": ran["status"]}))


def test_a_joining_job_is_stamped_and_held_as_at_create() -> None:
    plain = builders.job("train", namespace="team-a", pods=2, resource_version=1)
    joining = merged(plain, {"metadata": {"labels": {QUEUE: "gpu"}}, "spec": {"suspend": True}})
    answer = review_response(
        {
            "request": {
                "uid": "r1",
                "operation": "UPDATE",
                "namespace": "team-a",
                "object": joining,
                "oldObject": plain,
            }
        },
        path=update_path_of(JOB),
        state=WebhookState(queues={"gpu"}),
        settings=SETTINGS,
        stamp=lambda: STAMP,
    )["response"]
    assert answer["allowed"], answer
    ops = json.loads(base64.b64decode(answer["patch"]))
    after = apply_json_patch(joining, ops)
    assert after["metadata"]["annotations"][SUBMITTED] == STAMP
    assert after["spec"]["template"]["metadata"]["labels"]["muster.dev/gang"] == "train"


def test_leaving_a_queue() -> None:
    waiting = stored()
    left = merged(waiting, {"metadata": {"labels": {QUEUE: None}}})
    assert review(JOB, waiting, left) == UpdateDecision()  # a waiting gang may leave
    message = refusal(JOB, waiting, left, namespace_labels={QUEUE: "default"})
    assert "namespace team-a sends its unlabelled jobs to queue default" in message
    running = released(waiting)
    assert "label muster.dev/queue: 'gpu' -> (unset)" in refusal(
        JOB, running, merged(running, {"metadata": {"labels": {QUEUE: None}}})
    )


def test_the_submission_stamp_is_never_rewritten() -> None:
    waiting = stored()
    earlier = merged(waiting, {"metadata": {"annotations": {SUBMITTED: "2020-01-01T00:00:00Z/1"}}})
    assert refusal(JOB, waiting, earlier).startswith(f"annotation {SUBMITTED}: ")


def test_a_waiting_gangs_change_is_checked_as_at_create() -> None:
    waiting = stored()
    assert review(JOB, waiting, merged(waiting, {"spec": {"parallelism": 8}})) == UpdateDecision()
    bad = merged(waiting, {"metadata": {"annotations": {CLOG_TIMEOUT: "9" * 90 + "h"}}})
    assert refusal(JOB, waiting, bad).startswith(f"annotation {CLOG_TIMEOUT}: ")
    bad = merged(waiting, {"metadata": {"annotations": {MIN_MEMBERS: "0"}}})
    assert refusal(JOB, waiting, bad).startswith(f"annotation {MIN_MEMBERS}: 0 is out of range")


# --- other kinds ----------------------------------------------------------------------------


def minicluster() -> dict[str, Any]:
    return {
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {
            "name": "mc",
            "namespace": "team-a",
            "labels": {QUEUE: "gpu"},
            "annotations": {QUEUE: "gpu", SUBMITTED: STAMP},
        },
        "spec": {
            "size": 4,
            "jobLabels": {QUEUE: "gpu", MIN_MEMBERS: "4"},
            "containers": [{"image": "lammps"}],
        },
    }


def test_a_miniclusters_gang_is_fixed_from_its_create() -> None:
    mc = minicluster()
    message = refusal(MINICLUSTER, mc, merged(mc, {"spec": {"size": 8}}))
    assert message.startswith("spec.size: 4 -> 8: muster read MiniCluster team-a/mc's gang")
    assert "delete the MiniCluster and create it again" in message
    labels = merged(mc, {"spec": {"jobLabels": {MIN_MEMBERS: "1"}}})
    assert "spec.jobLabels[muster.dev/min-members]" in refusal(MINICLUSTER, mc, labels)
    assert "label muster.dev/queue" in refusal(
        MINICLUSTER, mc, merged(mc, {"metadata": {"labels": {QUEUE: None}}})
    )
    unrelated = merged(mc, {"spec": {"containers": [{"image": "other"}]}})
    assert review(MINICLUSTER, mc, unrelated) == UpdateDecision()
    plain = merged(mc, {"metadata": {"labels": {QUEUE: None}, "annotations": None}})
    assert "joins a queue when it is created" in refusal(MINICLUSTER, plain, mc)


def test_an_elastic_miniclusters_resize_by_muster_passes_and_nothing_else_moves_its_size() -> None:
    """muster admits an elastic MiniCluster smaller by resizing it (the Flux Operator keeps its
    Job at spec.size) and puts it back at the restore (`MiniClusterKind.resize_owner`): those
    two steps pass the review; a size set any other way, or above what it was, is refused."""
    mc = minicluster()
    mc["spec"]["jobLabels"][MIN_MEMBERS] = "2"
    small = merged(mc, MINICLUSTER.resize_owner(2, 4) or {})
    assert small["spec"]["size"] == 2
    assert review(MINICLUSTER, mc, small) == UpdateDecision()
    back = merged(small, MINICLUSTER.resize_owner(4, 4) or {})
    assert back["spec"]["size"] == 4 and RESIZED_FROM not in back["metadata"]["annotations"]
    assert review(MINICLUSTER, small, back) == UpdateDecision()
    # Below its minimum, above its size, or back to another size than it left: refused.
    below = merged(mc, MINICLUSTER.resize_owner(1, 4) or {})
    assert refusal(MINICLUSTER, mc, below).startswith("spec.size: 4 -> 1")
    grown = merged(mc, {"metadata": {"annotations": {RESIZED_FROM: "4"}}, "spec": {"size": 8}})
    assert refusal(MINICLUSTER, mc, grown).startswith("spec.size: 4 -> 8")
    beyond = merged(small, {"metadata": {"annotations": {RESIZED_FROM: None}}, "spec": {"size": 8}})
    assert refusal(MINICLUSTER, small, beyond).startswith("spec.size: 2 -> 8")
    # The mark alone is muster's: neither set nor moved by hand.
    marked = merged(mc, {"metadata": {"annotations": {RESIZED_FROM: "40"}}})
    assert refusal(MINICLUSTER, mc, marked).startswith(
        f"annotation {RESIZED_FROM}: (unset) -> '40'"
    )
    moved = merged(small, {"metadata": {"annotations": {RESIZED_FROM: "40"}}})
    assert refusal(MINICLUSTER, small, moved).startswith(f"annotation {RESIZED_FROM}: '4' -> '40'")


def test_a_jobset_keeps_its_replicated_jobs_while_admitted() -> None:
    body = jobset(workers=2)
    body["metadata"]["namespace"] = "team-a"
    running = released(body)
    grown = copy.deepcopy(running)
    grown["spec"]["replicatedJobs"][1]["replicas"] = 8
    assert "spec.replicatedJobs[1].replicas: 2 -> 8" in refusal(JOBSET, running, grown)
    fewer = copy.deepcopy(running)
    del fewer["spec"]["replicatedJobs"][0]
    assert "spec.replicatedJobs: " in refusal(JOBSET, running, fewer)
    message = refusal(JOBSET, body, merged(body, {"spec": {"suspend": False}}))
    assert message.startswith("spec.suspend: true -> false: JobSet team-a/train waits")
    # A JobSet's own Jobs are its business, not reviewed as gangs.
    child = builders.job(
        "train-worker-0",
        "gpu",
        namespace="team-a",
        owner={"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "train"}
        | {"controller": True},
        resource_version=1,
    )
    assert review(JOB, child, merged(child, {"spec": {"parallelism": 9}})) == UpdateDecision()


# --- the configuration and the wire -------------------------------------------------------


def test_updates_are_reviewed_for_labelled_objects_and_fail_open() -> None:
    config = build_configuration(SETTINGS, url="https://127.0.0.1:9443")
    hooks = {h["name"]: h for h in config["webhooks"]}
    for plural, kind in (("jobs", JOB), ("miniclusters", MINICLUSTER), ("jobsets", JOBSET)):
        hook = hooks[f"{plural}-updates.muster.dev"]
        assert hook["rules"][0]["operations"] == ["UPDATE"]
        assert hook["failurePolicy"] == "Ignore"
        assert hook["clientConfig"]["url"].endswith(update_path_of(kind))
        assert hook["objectSelector"] == {
            "matchExpressions": [{"key": QUEUE, "operator": "Exists"}]
        }
    creates = [h for h in config["webhooks"] if h["rules"][0]["operations"] == ["CREATE"]]
    assert creates and all(h["failurePolicy"] == "Fail" for h in creates)


def test_only_musters_own_identity_skips_the_update_review() -> None:
    assert own_identity("system:serviceaccount:muster-system:muster") is not None
    assert own_identity(CONTROLLER_USER) == CONTROLLER_USER
    for shared in ("muster-admin", "kubernetes-admin", "alice@example.com", None):
        assert own_identity(shared) is None  # a person's identity: their updates are reviewed
    plain = build_configuration(SETTINGS, url="https://127.0.0.1:9443")
    assert all("matchConditions" not in h for h in plain["webhooks"])
    own = build_configuration(SETTINGS, url="https://127.0.0.1:9443", own_user=CONTROLLER_USER)
    for hook in own["webhooks"]:
        if hook["rules"][0]["operations"] == ["UPDATE"]:
            assert hook["matchConditions"] == [
                {
                    "name": "not-muster-itself",
                    "expression": 'request.userInfo.username != "muster-controller"',
                }
            ]
        else:  # creates are reviewed whoever sends them
            assert "matchConditions" not in hook
    shipped = yaml.safe_load(render_manifest().split("\n", 3)[3])
    expressions = {
        c["expression"] for h in shipped["webhooks"] for c in h.get("matchConditions") or []
    }
    assert expressions == {f'request.userInfo.username != "{IN_CLUSTER_USER}"'}


def test_an_update_review_answers_the_refusal() -> None:
    running = released(stored())
    answer = review_response(
        {
            "request": {
                "uid": "r2",
                "operation": "UPDATE",
                "namespace": "team-a",
                "object": merged(running, {"spec": {"parallelism": 40}}),
                "oldObject": running,
            }
        },
        path=update_path_of(JOB),
        state=WebhookState(),
        settings=SETTINGS,
        stamp=lambda: STAMP,
    )["response"]
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 400
    assert answer["status"]["message"].startswith("spec.parallelism: 2 -> 40")
