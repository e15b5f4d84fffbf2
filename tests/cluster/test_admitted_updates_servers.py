"""Admitted means admitted (issue 28) through both webhook servers, muster's lean endpoint and
kopf's handlers (the `webhook_server` fixture, module-scoped: a module of its own, so that the
kopf server it starts is gone before tests/cluster/test_admitted_updates.py stops the webhook):

- an admitted Job grown the three ways the issue tried (an Indexed Job's parallelism and
  completions 2 -> 40; parallelism alone 2 -> 400, or 2 -> 300 while removing the queue label;
  a work-queue Job's parallelism 2 -> 40) is refused with the field named, and the pods the
  test's own `Watchman` sees running never exceed the admission;
- a waiting Job is unsuspended by muster only;
- absurd durations and whole numbers (a clog timeout of 90 digits and an h) are refused at
  create and in an update, naming the field.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kubeport.kubeapi import ApiError, KubeClient
from policies.vocabulary import CLOG_TIMEOUT, MIN_MEMBERS, PRIORITY, QUEUE
from tests.cluster.test_admitted_updates import (
    QUOTA_CPU,
    Watchman,
    admitted_size,
    get,
    job,
    queues,
    refused,
    wait_running,
)
from tests.conftest import MusterProcess
from tests.controller_helpers import jobs_path
from tests.kube import create_through_webhook

pytestmark = [pytest.mark.cluster]


def test_growing_an_admitted_job_is_refused_the_three_ways_the_issue_tried(
    kube: KubeClient, namespace: str, muster: MusterProcess, webhook_server: str
) -> None:
    q = f"{namespace}-q"
    path = jobs_path(namespace)
    with queues(kube, (q, str(QUOTA_CPU))), Watchman(kube, namespace, {q: QUOTA_CPU * 1000}) as w:
        create_through_webhook(kube, path, job("indexed", q))
        create_through_webhook(kube, path, job("parallel", q))
        create_through_webhook(kube, path, job("queue", q, completions=None, indexed=False))
        for name in ("indexed", "parallel", "queue"):
            wait_running(kube, namespace, name, 2)
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("indexed", {"spec": {"parallelism": 40, "completions": 40}}, "spec.parallelism"),
            ("parallel", {"spec": {"parallelism": 400}}, "spec.parallelism: 2 -> 400"),
            (
                "parallel",
                {"metadata": {"labels": {QUEUE: None}}, "spec": {"parallelism": 300}},
                f"label {QUEUE}: '{q}' -> (unset)",
            ),
            ("queue", {"spec": {"parallelism": 40}}, "spec.parallelism: 2 -> 40"),
        ]
        for name, patch, field in cases:
            message = refused(kube, f"{path}/{name}", patch)
            assert field in message, message
            assert f"Job {namespace}/{name} is admitted" in message, message
            assert "suspend it in the same update (spec.suspend: true)" in message, message
        time.sleep(3)  # cycles pass: nothing changed
        for name in ("indexed", "parallel", "queue"):
            stored = get(kube, namespace, name)
            assert stored["spec"]["parallelism"] == 2 and admitted_size(stored) == 2
            assert stored["metadata"]["labels"][QUEUE] == q
    w.check()
    assert all(w.most_running[name] == 2 for name in ("indexed", "parallel", "queue")), dict(
        w.most_running
    )


def test_a_waiting_job_is_unsuspended_by_muster_only(
    kube: KubeClient, namespace: str, muster: MusterProcess, webhook_server: str
) -> None:
    q = f"{namespace}-full"
    with queues(kube, (q, "1m")):
        create_through_webhook(kube, jobs_path(namespace), job("sneaky", q))
        message = refused(kube, f"{jobs_path(namespace)}/sneaky", {"spec": {"suspend": False}})
        assert message.endswith(
            f"spec.suspend: true -> false: Job {namespace}/sneaky waits in queue {q}; muster "
            "unsuspends it when it admits it (see `muster explain`); leave spec.suspend: true"
        ), message
        assert get(kube, namespace, "sneaky")["spec"]["suspend"] is True


def test_absurd_numbers_and_durations_are_refused_naming_the_field(
    kube: KubeClient, namespace: str, muster: MusterProcess, webhook_server: str
) -> None:
    """The issue's fourth finding: a clog timeout of about 90 digits and an h was stored at
    create. Now it, and whole numbers beyond what muster reads, are refused at create and in an
    update, naming the field, and nothing is stored or changed."""
    q = f"{namespace}-q"
    path = jobs_path(namespace)
    absurd = {
        CLOG_TIMEOUT: "9" * 90 + "h",
        PRIORITY: "9" * 30,
        MIN_MEMBERS: "9" * 30,
    }
    with queues(kube, (q, str(QUOTA_CPU))):
        for key, value in absurd.items():
            body = job(f"absurd-{key.split('/')[1]}", q)
            body["metadata"].setdefault("annotations", {})[key] = value
            with pytest.raises(ApiError) as caught:
                create_through_webhook(kube, path, body)
            assert caught.value.status == 400, caught.value
            assert f"annotation {key}: " in caught.value.message, caught.value.message
        assert not kube.get(path)["items"], "a refused create stored nothing"
        create_through_webhook(kube, path, job("fine", q))
        wait_running(kube, namespace, "fine", 2)
        before = get(kube, namespace, "fine")
        for key, value in absurd.items():
            message = refused(kube, f"{path}/fine", {"metadata": {"annotations": {key: value}}})
            assert f"annotation {key}: " in message, message
        after = get(kube, namespace, "fine")
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
