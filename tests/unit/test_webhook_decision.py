"""The webhook's pure decision, exercised with plain dicts (as kopf's build_response is)."""

from __future__ import annotations

from typing import Any

import pytest

from policies.kinds import JOB, MINICLUSTER, job_gang_size
from policies.vocabulary import (
    CLOG_TIMEOUT,
    CONTROLLER_WRITTEN,
    ELASTIC_AFTER,
    GANG_KIND,
    MIN_MEMBERS,
    PRIORITY,
    QUEUE,
)
from tests import builders
from webhook.configuration import build_configuration
from webhook.decision import (
    AdmissionRejected,
    WebhookSettings,
    decide_create,
)

STAMP = "2026-11-22T03:05:07.000000001Z/000000000001"
SETTINGS = WebhookSettings()


def job(
    name: str = "train",
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    parallelism: int | None = 4,
    completions: int | None = None,
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Job of team-a as created, labelled for queue gpu unless `labels` says otherwise, with
    only the gang fields given (None: left out)."""
    return builders.job(
        name,
        namespace="team-a",
        labels=labels if labels is not None else {QUEUE: "gpu"},
        annotations=annotations or {},
        pods=parallelism,
        completions=completions,
        suspend=None,
        cpu=None,
        runtime=None,
        tolerations=(),
        owner=owner,
    )


def decide(body: dict[str, Any], **kwargs: Any) -> Any:
    params: dict[str, Any] = {
        "namespace": "team-a",
        "namespace_labels": {},
        "known_queues": {"gpu", "cpu"},
        "settings": SETTINGS,
        "stamp": STAMP,
    }
    params.update(kwargs)
    return decide_create(JOB, body, **params)


def test_labelled_job_is_suspended_and_stamped() -> None:
    decision = decide(job())
    assert decision.managed and decision.queue == "gpu"
    assert decision.patch["spec"]["suspend"] is True
    assert decision.patch["metadata"]["annotations"] == {
        "muster.dev/queue": "gpu",
        "muster.dev/submitted": STAMP,
    }
    assert decision.patch["spec"]["template"]["metadata"]["labels"] == {"muster.dev/gang": "train"}
    assert decision.warnings == ()


def test_unlabelled_job_is_left_alone_by_default() -> None:
    decision = decide(job(labels={}))
    assert not decision.managed and decision.patch == {}


def test_namespace_default_queue_manages_unlabelled_jobs() -> None:
    decision = decide(job(labels={}), namespace_labels={"muster.dev/queue": "cpu"})
    assert decision.queue == "cpu"
    assert decision.patch["metadata"]["labels"] == {"muster.dev/queue": "cpu"}


def test_manage_jobs_without_queue_name_uses_the_default_queue() -> None:
    settings = WebhookSettings(manage_jobs_without_queue_name=True, default_queue="batch")
    assert decide(job(labels={}), settings=settings).queue == "batch"


def test_excluded_namespaces_are_never_touched() -> None:
    assert not decide(job(), namespace="kube-system").managed
    assert not decide(job(), namespace="muster-system").managed


def test_jobs_owned_by_other_controllers_need_a_label() -> None:
    owner = {"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "controller": True}
    assert not decide(
        job(labels={}, owner=owner), namespace_labels={"muster.dev/queue": "cpu"}
    ).managed
    assert decide(job(owner=owner)).managed


def test_minicluster_job_is_one_gang_named_after_the_minicluster() -> None:
    owner = {
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "name": "lammps",
        "controller": True,
    }
    mc_stamp = "2026-11-22T03:05:06.000000001Z/000000000007"
    decision = decide(job(name="lammps", owner=owner), owner_stamp=mc_stamp)
    assert decision.patch["metadata"]["annotations"]["muster.dev/submitted"] == mc_stamp
    assert decision.patch["metadata"]["annotations"]["muster.dev/gang-kind"] == "MiniCluster"
    assert decision.patch["spec"]["template"]["metadata"]["labels"]["muster.dev/gang"] == "lammps"


def test_unknown_queue_is_accepted_with_a_warning() -> None:
    decision = decide(job(labels={"muster.dev/queue": "nope"}))
    assert decision.managed
    assert decision.warnings == (
        'queue "nope" does not exist yet; the job stays suspended until it does',
    )
    # Without knowledge of queues (CRD not installed) there is nothing to warn about.
    assert decide(job(labels={"muster.dev/queue": "nope"}), known_queues=None).warnings == ()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("abc", r"annotation muster.dev/min-members: 'abc' is not an integer"),
        ("2.5", r"'2.5' is not an integer"),
        (
            "0",
            r"0 is out of range; the gang has 4 members, so set it to a whole number from 1 to 4",
        ),
        ("5", r"5 is out of range"),
        ("-1", r"-1 is out of range"),
    ],
)
def test_bad_min_members_is_rejected(value: str, message: str) -> None:
    with pytest.raises(AdmissionRejected, match=message):
        decide(job(annotations={"muster.dev/min-members": value}))


def test_min_members_label_is_checked_too() -> None:
    with pytest.raises(AdmissionRejected, match=r"label muster.dev/min-members: 9 is out of range"):
        decide(job(labels={"muster.dev/queue": "gpu", "muster.dev/min-members": "9"}))


def test_bad_clog_timeout_is_rejected() -> None:
    with pytest.raises(
        AdmissionRejected, match=r"muster.dev/clog-timeout: 'soon' is not a duration"
    ):
        decide(job(annotations={"muster.dev/clog-timeout": "soon"}))
    assert decide(job(annotations={"muster.dev/clog-timeout": "1h30m"})).managed


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (PRIORITY, "high", r"annotation muster.dev/priority: 'high' is not an integer"),
        (PRIORITY, "-1", r"muster.dev/priority: -1 is out of range; set it to a whole number"),
        (PRIORITY, "2000000000", r"2000000000 is out of range"),
        (ELASTIC_AFTER, "later", r"muster.dev/elastic-after: 'later' is not a duration"),
    ],
)
def test_bad_priority_and_elastic_after_are_rejected(key: str, value: str, message: str) -> None:
    with pytest.raises(AdmissionRejected, match=message):
        decide(job(annotations={key: value}))
    with pytest.raises(AdmissionRejected, match=message.replace("annotation", "label")):
        decide(job(labels={"muster.dev/queue": "gpu", key: value}))


def test_good_priority_and_elastic_after_are_accepted_as_they_are() -> None:
    fields = {"muster.dev/priority": "7", "muster.dev/elastic-after": "90s"}
    decision = decide(job(annotations=fields))
    assert decision.managed
    assert "muster.dev/priority" not in decision.patch["metadata"]["annotations"]  # user's own


def test_zero_size_gang_is_rejected() -> None:
    with pytest.raises(AdmissionRejected, match=r"spec.parallelism: 0 gives the gang no members"):
        decide(job(parallelism=0))
    with pytest.raises(AdmissionRejected, match=r"spec.completions: 0 gives the gang no members"):
        decide(job(parallelism=3, completions=0))
    # The apiserver validates after the mutating webhooks: muster sees (and names) a negative.
    with pytest.raises(AdmissionRejected, match=r"spec.parallelism: -1 gives the gang no"):
        decide(job(parallelism=-1))


@pytest.mark.parametrize("key", [*CONTROLLER_WRITTEN, GANG_KIND])
def test_a_new_job_carrying_what_only_muster_writes_is_refused(key: str) -> None:
    with pytest.raises(AdmissionRejected, match=rf"annotation {key}: 'x' is written by muster"):
        decide(job(annotations={key: "x"}))


def test_unicode_digits_are_not_numbers() -> None:
    """`int` refuses a superscript that `str.isdigit` takes: refused, not a crash (a 500)."""
    for value in ("²", "٣"):
        with pytest.raises(AdmissionRejected, match=rf"min-members: '{value}' is not an integer"):
            decide(job(annotations={MIN_MEMBERS: value}))
        with pytest.raises(AdmissionRejected, match=rf"priority: '{value}' is not an integer"):
            decide(job(annotations={PRIORITY: value}))


def test_gang_size_is_parallelism_or_smaller_completions() -> None:
    assert job_gang_size({}) == 1
    assert job_gang_size({"parallelism": 8}) == 8
    assert job_gang_size({"parallelism": 8, "completions": 3}) == 3


def minicluster(size: Any = 4, min_size: Any = None, labels: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"size": size, "jobLabels": {"app": "lammps"}}
    if min_size is not None:
        spec["minSize"] = min_size
    return {
        "metadata": {
            "name": "lammps",
            "namespace": "team-a",
            "labels": labels if labels is not None else {"muster.dev/queue": "gpu"},
        },
        "spec": spec,
    }


def decide_mc(body: dict[str, Any]) -> Any:
    return decide_create(
        MINICLUSTER,
        body,
        namespace="team-a",
        namespace_labels={},
        known_queues={"gpu"},
        settings=SETTINGS,
        stamp=STAMP,
    )


def test_minicluster_gets_queue_and_minimum_in_job_labels() -> None:
    decision = decide_mc(minicluster(size=8, min_size=6))
    assert decision.patch["spec"]["jobLabels"] == {
        "muster.dev/queue": "gpu",
        "muster.dev/min-members": "6",
    }
    assert decision.patch["metadata"]["annotations"]["muster.dev/submitted"] == STAMP
    assert (
        decide_mc(minicluster(size=8)).patch["spec"]["jobLabels"]["muster.dev/min-members"] == "8"
    )


def test_minicluster_priority_and_elastic_after_travel_in_job_labels() -> None:
    body = minicluster(size=8, min_size=6)
    body["metadata"]["annotations"] = {
        "muster.dev/priority": "5",
        "muster.dev/elastic-after": "2m",
    }
    labels = decide_mc(body).patch["spec"]["jobLabels"]
    assert labels["muster.dev/priority"] == "5"
    assert labels["muster.dev/elastic-after"] == "2m"
    body["metadata"]["annotations"]["muster.dev/priority"] = "soon"
    with pytest.raises(AdmissionRejected, match=r"annotation muster.dev/priority: 'soon'"):
        decide_mc(body)


def _merged(body: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """`body` with a merge patch (no deletions) applied, as the apiserver stores it."""
    out = dict(body)
    for key, value in patch.items():
        old = out.get(key)
        out[key] = (
            _merged(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
        )
    return out


def test_minicluster_clog_timeout_reaches_the_controllers_gang_record() -> None:
    """The per-gang clog timeout on a MiniCluster takes the path the other gang fields take:
    webhook -> spec.jobLabels -> the operator's Job -> webhook again -> the controller's record
    (which reads gang fields from the Job only)."""
    from admission.gangs import job_record
    from simulator.controlplane.minicluster import job_for

    body = minicluster(size=4, min_size=2)
    body["metadata"]["annotations"] = {CLOG_TIMEOUT: "90s"}
    patch = decide_mc(body).patch
    assert patch["spec"]["jobLabels"][CLOG_TIMEOUT] == "90s"
    stored = _merged(body, patch)
    assert stored["spec"]["jobLabels"]["app"] == "lammps"  # the user's own jobLabels stay
    stored.update(apiVersion="flux-framework.org/v1alpha2", kind="MiniCluster")
    stored["metadata"]["uid"] = "uid-lammps"
    mc_job = job_for(stored)
    assert mc_job["metadata"]["labels"][CLOG_TIMEOUT] == "90s"
    decision = decide(mc_job, owner_stamp=STAMP)
    assert decision.managed
    admitted_job = _merged(mc_job, decision.patch)
    record = job_record(admitted_job)
    assert record.parse_error is None
    assert record.clog_timeout == 90.0
    assert record.kind == "MiniCluster" and record.gang.min == 2


def test_minicluster_clog_timeout_label_travels_and_bad_ones_are_refused() -> None:
    body = minicluster(labels={"muster.dev/queue": "gpu", CLOG_TIMEOUT: "2m"})
    assert decide_mc(body).patch["spec"]["jobLabels"][CLOG_TIMEOUT] == "2m"
    body["metadata"]["annotations"] = {CLOG_TIMEOUT: "soon"}
    with pytest.raises(AdmissionRejected, match=r"annotation muster.dev/clog-timeout: 'soon'"):
        decide_mc(body)
    with pytest.raises(AdmissionRejected, match=r"label muster.dev/clog-timeout: 'soon'"):
        decide(job(labels={"muster.dev/queue": "gpu", CLOG_TIMEOUT: "soon"}))


def test_bad_minicluster_sizes_are_rejected() -> None:
    with pytest.raises(AdmissionRejected, match=r"spec\.size: 0 gives the MiniCluster no members"):
        decide_mc(minicluster(size=0))
    with pytest.raises(AdmissionRejected, match=r"spec\.size: 100001 is more than the 100000"):
        decide_mc(minicluster(size=100_001))
    body = minicluster(size=4)
    body["spec"]["deadlineSeconds"] = -5
    with pytest.raises(AdmissionRejected, match=r"spec\.deadlineSeconds: -5 is below 1 second"):
        decide_mc(body)
    with pytest.raises(AdmissionRejected, match=r"spec.minSize: 9 is out of range"):
        decide_mc(minicluster(size=8, min_size=9))


def test_configuration_selects_only_what_muster_manages() -> None:
    config = build_configuration(SETTINGS, url="https://127.0.0.1:9443", ca_bundle="Q0E=")
    hooks = {h["name"]: h for h in config["webhooks"]}
    labelled = hooks["jobs-labelled.muster.dev"]
    assert labelled["clientConfig"] == {
        "url": "https://127.0.0.1:9443/muster-job-create",
        "caBundle": "Q0E=",
    }
    assert labelled["failurePolicy"] == "Fail"
    assert labelled["timeoutSeconds"] == 3
    assert labelled["sideEffects"] == "None"
    assert labelled["objectSelector"] == {
        "matchExpressions": [{"key": "muster.dev/queue", "operator": "Exists"}]
    }
    excluded = labelled["namespaceSelector"]["matchExpressions"][0]
    assert excluded["operator"] == "NotIn"
    assert set(excluded["values"]) == {"kube-system", "muster-system"}
    assert "minicluster-labelled.muster.dev" not in hooks
    assert "miniclusters-labelled.muster.dev" in hooks
    everything = build_configuration(
        WebhookSettings(manage_jobs_without_queue_name=True), url="https://x"
    )
    creates = [h for h in everything["webhooks"] if h["rules"][0]["operations"] == ["CREATE"]]
    # Every object of the kinds that hold themselves; pods only when they opt into a pod group
    # (whatever the settings: no other pod is ever sent to muster).
    pods = [h for h in everything["webhooks"] if h["rules"][0]["resources"] == ["pods"]]
    assert creates and all("objectSelector" not in h for h in creates if h not in pods)
    assert [h["objectSelector"] for h in pods] == [
        {"matchExpressions": [{"key": "muster.dev/pod-group", "operator": "Exists"}]}
    ]
    assert [h["rules"][0]["operations"] for h in pods] == [["CREATE"]]
    (member,) = [h for h in config["webhooks"] if h["rules"][0]["resources"] == ["pods"]]
    assert member["name"] == "pods-podgroup.muster.dev"
    assert member["failurePolicy"] == "Fail"
    assert member["rules"][0]["apiGroups"] == [""] and member["rules"][0]["apiVersions"] == ["v1"]
    assert member["clientConfig"]["url"].endswith("/muster-podgroup-create")


def test_json_patch_touches_only_the_paths_it_sets() -> None:
    from webhook.review import json_patch

    obj = {"metadata": {"name": "j", "labels": {"a": "1"}}, "spec": {"suspend": False}}
    merge = {
        "metadata": {"labels": {"muster.dev/queue": "gpu"}, "annotations": {"x/y": "1"}},
        "spec": {"suspend": True, "template": {"metadata": {"labels": {"g": "j"}}}},
    }
    assert json_patch(obj, merge) == [
        {"op": "add", "path": "/metadata/labels/muster.dev~1queue", "value": "gpu"},
        {"op": "add", "path": "/metadata/annotations", "value": {"x/y": "1"}},
        {"op": "replace", "path": "/spec/suspend", "value": True},
        {"op": "add", "path": "/spec/template", "value": {"metadata": {"labels": {"g": "j"}}}},
    ]
    assert json_patch({"spec": {"suspend": True}}, {"spec": {"suspend": True}}) == []


def test_review_response_allows_patches_and_refuses_bad_input() -> None:
    import base64
    import json

    from webhook.review import WebhookState, review_response

    state = WebhookState(queues={"gpu"})
    review: dict[str, Any] = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u1", "operation": "CREATE", "namespace": "team-a", "object": job()},
    }
    answer = review_response(
        review, path="muster-job-create", state=state, settings=SETTINGS, stamp=lambda: STAMP
    )
    response = answer["response"]
    assert response["uid"] == "u1" and response["allowed"] is True
    ops = json.loads(base64.b64decode(response["patch"]))
    assert {"op": "add", "path": "/spec/suspend", "value": True} in ops

    review["request"]["object"] = job(annotations={"muster.dev/min-members": "x"})
    refused = review_response(
        review, path="muster-job-create", state=state, settings=SETTINGS, stamp=lambda: STAMP
    )["response"]
    assert refused["allowed"] is False
    assert refused["status"]["code"] == 400
    assert "is not an integer" in refused["status"]["message"]
    assert "patch" not in refused


def test_shipped_webhook_manifest_matches_the_builder() -> None:
    from pathlib import Path

    from webhook.configuration import render_manifest

    shipped = Path(__file__).resolve().parents[2] / "manifests/base/webhook.yaml"
    assert shipped.read_text() == render_manifest(), (
        "manifests/base/webhook.yaml is stale: regenerate it with "
        "python -m webhook.configuration > manifests/base/webhook.yaml"
    )
