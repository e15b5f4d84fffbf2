"""The webhook's pending-gang count and `spec.limits` (webhook.backlog, policies.phase): pure."""

from __future__ import annotations

from typing import Any

import pytest

from policies.kinds import JOB, MINICLUSTER
from policies.kinds.reading import gang_pending
from policies.model import PolicyError
from policies.phase import NO_LIMITS, QueueLimits, parse_queue_limits
from policies.vocabulary import ADMITTED, QUEUE, STATE, SUBMITTED
from tests import builders
from webhook.backlog import Backlog
from webhook.decision import WebhookSettings
from webhook.review import WebhookState, review_response

STAMP = "2026-01-01T00:00:00.000000001Z/1"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def stored_job(
    name: str,
    queue: str = "prod",
    namespace: str = "team-a",
    *,
    admitted: bool = False,
    finished: bool = False,
    failed: bool = False,
    owner: str | None = None,
) -> dict[str, Any]:
    """A Job of `queue` as stored after the webhook stamped it: waiting, admitted (unsuspended),
    finished or marked failed; `owner` names the MiniCluster that made it."""
    annotations = {QUEUE: queue, SUBMITTED: STAMP}
    if admitted:
        annotations[ADMITTED] = "2026-01-01T00:00:01.000000Z/4"
    if failed:
        annotations[STATE] = "Failed"
    reference = {
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "name": owner,
        "controller": True,
    }
    return builders.job(
        name,
        queue,
        namespace=namespace,
        suspend=not admitted,
        runtime=None,
        tolerations=(),
        annotations=annotations,
        owner=reference if owner else None,
        status={"conditions": [{"type": "Complete", "status": "True"}]} if finished else {},
    )


def stored_minicluster(name: str, queue: str = "prod", namespace: str = "team-a") -> Any:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"muster.dev/queue": queue},
            "annotations": {"muster.dev/queue": queue, "muster.dev/submitted": STAMP},
        },
        "spec": {"size": 2},
    }


def test_pending_is_stored_not_admitted_not_finished_not_failed() -> None:
    assert gang_pending(JOB, stored_job("a"))
    assert not gang_pending(JOB, stored_job("a", admitted=True))
    assert not gang_pending(JOB, stored_job("a", finished=True))
    assert not gang_pending(JOB, stored_job("a", failed=True))


def test_the_watch_counts_pending_gangs_per_queue_and_namespace() -> None:
    backlog = Backlog(Clock())
    backlog.observe_job(None, stored_job("a"))
    backlog.observe_job("ADDED", stored_job("b", namespace="team-b"))
    backlog.observe_job("ADDED", stored_job("c", queue="dev"))
    backlog.observe_job("ADDED", stored_job("d", admitted=True))
    assert backlog.pending("prod") == 2
    assert backlog.pending("prod", "team-a") == 1
    assert backlog.pending("dev") == 1
    # Admission, completion and deletion each take a gang out; an eviction puts it back.
    backlog.observe_job("MODIFIED", stored_job("a", admitted=True))
    assert backlog.pending("prod") == 1
    backlog.observe_job("MODIFIED", stored_job("a"))
    assert backlog.pending("prod") == 2
    backlog.observe_job("DELETED", stored_job("a"))
    backlog.observe_job("MODIFIED", stored_job("b", namespace="team-b", finished=True))
    assert backlog.pending("prod") == 0
    assert dict(backlog.depths()) == {"dev": 1}


def test_unmanaged_job_is_not_counted() -> None:
    backlog = Backlog(Clock())
    job = stored_job("a")
    del job["metadata"]["annotations"]["muster.dev/submitted"]
    backlog.observe_job("ADDED", job)
    assert backlog.pending("prod") == 0


def test_the_queue_is_the_label_as_the_controller_reads_it() -> None:
    # The one queue reader (policies.kinds): the label, not an annotation that says otherwise.
    backlog = Backlog(Clock())
    job = stored_job("a")
    job["metadata"]["annotations"]["muster.dev/queue"] = "dev"
    backlog.observe_job("ADDED", job)
    mc = stored_minicluster("m")
    mc["metadata"]["annotations"]["muster.dev/queue"] = "dev"
    backlog.observe_owner(MINICLUSTER, "ADDED", mc)
    assert backlog.pending("prod") == 2 and backlog.pending("dev") == 0


def test_a_minicluster_and_its_job_are_one_gang() -> None:
    backlog = Backlog(Clock())
    backlog.observe_owner(MINICLUSTER, "ADDED", stored_minicluster("mc"))
    assert backlog.pending("prod") == 1
    backlog.observe_job("ADDED", stored_job("mc", owner="mc"))
    assert backlog.pending("prod") == 1
    backlog.observe_job("MODIFIED", stored_job("mc", owner="mc", admitted=True))
    assert backlog.pending("prod") == 0
    # Its finished Job cleaned up while the MiniCluster stays: still not pending.
    backlog.observe_job("DELETED", stored_job("mc", owner="mc", admitted=True))
    assert backlog.pending("prod") == 0
    backlog.observe_owner(MINICLUSTER, "DELETED", stored_minicluster("mc"))
    assert dict(backlog.depths()) == {}


def test_limits_refuse_at_the_limit_with_the_fix() -> None:
    backlog = Backlog(Clock())
    limits = QueueLimits(max_pending=2)
    for name in ("a", "b"):
        backlog.observe_job("ADDED", stored_job(name))
    refusal = backlog.admit("Job", "team-a", "c", "prod", limits)
    assert refusal is not None and refusal.reason == "MaxPending"
    assert refusal.message == (
        "queue prod holds 2 pending gangs, its limit; retry later or raise spec.limits.maxPending"
    )
    assert backlog.admit("Job", "team-a", "c", "prod", NO_LIMITS) is None
    lowered = backlog.admit("Job", "team-a", "d", "prod", QueueLimits(max_pending=1))
    assert lowered is not None and "holds 3 pending gangs, above its limit of 1" in lowered.message
    closed = backlog.admit("Job", "team-a", "e", "prod", QueueLimits(max_pending=0))
    assert closed is not None and "takes no new gangs" in closed.message


def test_per_namespace_limit_names_the_namespace() -> None:
    backlog = Backlog(Clock())
    limits = QueueLimits(max_pending_per_namespace=1)
    backlog.observe_job("ADDED", stored_job("a"))
    assert backlog.admit("Job", "team-b", "b", "prod", limits) is None
    refusal = backlog.admit("Job", "team-a", "c", "prod", limits)
    assert refusal is not None and refusal.reason == "MaxPendingPerNamespace"
    assert refusal.message == (
        "queue prod holds 1 pending gang from namespace team-a, its limit per namespace; "
        "retry later or raise spec.limits.maxPendingPerNamespace"
    )


def test_allowed_creates_count_until_the_watch_shows_them() -> None:
    clock = Clock()
    backlog = Backlog(clock, unseen_for=30)
    limits = QueueLimits(max_pending=3)
    # A burst faster than the watch: the fourth is refused although the watch shows none.
    assert [backlog.admit("Job", "team-a", n, "prod", limits) for n in "abc"] == [None] * 3
    assert backlog.admit("Job", "team-a", "d", "prod", limits) is not None
    # The watch shows them: counted once, not twice.
    for name in "abc":
        backlog.observe_job("ADDED", stored_job(name))
    assert backlog.pending("prod") == 3
    backlog.observe_job("DELETED", stored_job("a"))
    assert backlog.admit("Job", "team-a", "d", "prod", limits) is None
    assert backlog.pending("prod") == 3


def test_unseen_creates_expire() -> None:
    clock = Clock()
    backlog = Backlog(clock, unseen_for=30)
    assert backlog.admit("Job", "team-a", "a", "prod", NO_LIMITS) is None
    assert backlog.pending("prod") == 1
    clock.now += 31  # its create failed after the webhook allowed it: never stored
    assert backlog.pending("prod") == 0


def test_unnamed_creates_are_matched_by_queue_and_namespace() -> None:
    backlog = Backlog(Clock())
    # generateName: the review carries no name yet.
    assert backlog.admit("Job", "team-a", "", "prod", NO_LIMITS) is None
    assert backlog.admit("Job", "team-a", "", "prod", NO_LIMITS) is None
    assert backlog.pending("prod") == 2
    backlog.observe_job("ADDED", stored_job("x-1abcd"))
    assert backlog.pending("prod") == 2
    backlog.observe_job("ADDED", stored_job("x-2efgh"))
    backlog.observe_job("ADDED", stored_job("x-3ijkl"))
    assert backlog.pending("prod") == 3


def test_limits_parse_and_refuse_bad_values() -> None:
    assert parse_queue_limits(None, "spec.limits") == NO_LIMITS
    assert parse_queue_limits({"maxPending": 5}, "spec.limits") == QueueLimits(5, None)
    with pytest.raises(PolicyError, match=r"spec.limits.maxPending: -1 is not a whole number"):
        parse_queue_limits({"maxPending": -1}, "spec.limits")
    with pytest.raises(PolicyError, match="unknown field 'maxpending'"):
        parse_queue_limits({"maxpending": 1}, "spec.limits")


def review(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u1", "operation": "CREATE", "namespace": "team-a", "object": obj},
    }


def new_job(name: str, owner: str | None = None) -> dict[str, Any]:
    body = stored_job(name, owner=owner)
    body["metadata"]["annotations"] = {}
    body["status"] = {}
    return body


def test_review_refuses_past_the_limit_with_429_and_counts_the_refusal() -> None:
    state = WebhookState(queues={"prod"}, limits={"prod": QueueLimits(max_pending=1)})
    settings = WebhookSettings()

    def answer(obj: dict[str, Any], path: str = "muster-job-create") -> dict[str, Any]:
        response = review_response(
            review(obj), path=path, state=state, settings=settings, stamp=lambda: STAMP
        )
        return response["response"]  # type: ignore[no-any-return]

    assert answer(new_job("a"))["allowed"] is True
    refused = answer(new_job("b"))
    assert refused["allowed"] is False and refused["status"]["code"] == 429
    assert refused["status"]["reason"] == "TooManyRequests"
    assert "details" not in refused["status"]  # no Retry-After: clients do not retry by themselves
    assert refused["status"]["message"].startswith("queue prod holds 1 pending gang, its limit")
    assert state.backlog.refusals() == {("prod", "MaxPending"): 1}
    # A MiniCluster's Job is not a new gang: never refused nor counted again.
    assert answer(new_job("mc", owner="mc"))["allowed"] is True
    assert state.backlog.pending("prod") == 1
    # Queues without limits behave as before.
    other = new_job("c")
    other["metadata"]["labels"] = {"muster.dev/queue": "dev"}
    assert answer(other)["allowed"] is True


def test_a_dry_run_is_checked_but_not_counted() -> None:
    state = WebhookState(queues={"prod"}, limits={"prod": QueueLimits(max_pending=1)})
    dry = review(new_job("a"))
    dry["request"]["dryRun"] = True
    for _ in range(2):
        answer = review_response(
            dry,
            path="muster-job-create",
            state=state,
            settings=WebhookSettings(),
            stamp=lambda: STAMP,
        )
        assert answer["response"]["allowed"] is True
    assert state.backlog.pending("prod") == 0


def test_a_relist_drops_the_jobs_it_no_longer_shows() -> None:
    backlog = Backlog(Clock())
    backlog.observe_owner(MINICLUSTER, "ADDED", stored_minicluster("mc"))
    for name in ("a", "b"):
        backlog.observe_job("ADDED", stored_job(name))
    backlog.observe_job("ADDED", stored_job("mc", owner="mc"))
    # The watch's history was compacted: a fresh LIST without a, with c; the MiniCluster stays.
    backlog.relist_jobs([stored_job("b"), stored_job("c"), stored_job("mc", owner="mc")])
    assert backlog.pending("prod") == 3
    backlog.relist_jobs([])
    assert backlog.pending("prod") == 1  # the MiniCluster, whose Job was last seen pending
