"""The Queue CRD's schema and CEL rules, enforced by the real apiserver: a bad Queue is refused
with the rule's message and nothing is stored."""

from __future__ import annotations

from typing import Any

import pytest

from kubeport.kubeapi import ApiError, KubeClient
from policies import BorrowWithinCohort, Preemption
from policies.objects import queue_from
from tests.controller_helpers import QUEUES, create_queue, delete_queue

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("crds")]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"nominal": {"cpu": "4"}, "lendingLimit": {"cpu": "5"}},
            "lendingLimit must not exceed nominal for any resource",
        ),
        (
            {"nominal": {"cpu": "4"}, "lendingLimit": {"memory": "1Gi"}},
            "needs a nominal for each resource it names): lend at most the nominal of each",
        ),
        # muster reads an absent nominal as 0 (InvalidSpec); the CRD stored it.
        ({"lendingLimit": {"cpu": "1"}}, "lendingLimit must not exceed nominal for any resource"),
        ({"nominal": {"cpu": "-5"}}, "nominal must not be negative: -5; give an amount"),
        (
            {"nominal": {"cpu": "4", "memory": -1}, "borrowingLimit": {"cpu": "-500m"}},
            'spec.borrowingLimit[cpu]: Invalid value: "-500m": borrowingLimit must not be negative',
        ),
        (
            {"nominal": {"cpu": "4"}, "lendingLimit": {"cpu": "-1"}},
            "lendingLimit must not be negative: -1",
        ),
        (
            {"nominal": {"cpu": "4", "memory": -1}},
            "spec.nominal[memory]: Invalid value: -1: nominal must not be negative",
        ),
        ({"weight": 0}, "weight must be greater than 0"),
        ({"weight": -1.5}, "weight must be greater than 0"),
        ({"sizeRatio": {"ratio": 1.5}}, "ratio must be in (0, 1]"),
        ({"sizeRatio": {"ratio": 0.2, "action": "Drop"}}, 'Unsupported value: "Drop"'),
        ({"clogTimeout": "soon"}, "spec.clogTimeout"),
        ({"backoff": {"limit": -1}}, "spec.backoff.limit"),
        ({"strategy": "Lottery"}, "spec.strategy"),
        ({"preemption": {"reclaimWithinCohort": "Always"}}, "spec.preemption.reclaimWithinCohort"),
        ({"preemption": {"withinQueue": "Any"}}, "spec.preemption.withinQueue"),
        ({"preemption": {"fairShare": "Yes"}}, "spec.preemption.fairShare"),
        ({"preemption": {"protectAfter": 0}}, "spec.preemption.protectAfter"),
        ({"preemption": {"protectFor": "a while"}}, "spec.preemption.protectFor"),
        (
            {"preemption": {"borrowWithinCohort": {"policy": "LowerPriority"}}},
            "borrowWithinCohort needs reclaimWithinCohort LowerPriority or Any",
        ),
        (
            {"preemption": {"reclaimWithinCohort": "Any", "borrowWithinCohort": {"policy": "Yes"}}},
            "spec.preemption.borrowWithinCohort.policy",
        ),
    ],
)
def test_a_bad_queue_is_refused_with_the_rules_message(
    kube: KubeClient, spec: dict[str, Any], message: str, request: pytest.FixtureRequest
) -> None:
    name = f"bad-{request.node.callspec.id}".lower()
    name = "".join(c if c.isalnum() else "-" for c in name)[:60].strip("-")
    with pytest.raises(ApiError) as refused:
        create_queue(kube, name, spec)
    assert refused.value.status == 422, refused.value
    assert message in refused.value.message, refused.value.message
    with pytest.raises(ApiError) as missing:
        kube.get(f"{QUEUES}/{name}")
    assert missing.value.status == 404


def test_a_good_queue_gets_the_schemas_defaults(kube: KubeClient) -> None:
    name = "crd-defaults"
    create_queue(kube, name, {"nominal": {"cpu": "4"}, "lendingLimit": {"cpu": "4"}})
    try:
        spec = kube.get(f"{QUEUES}/{name}")["spec"]
        assert spec["weight"] == 1
        assert spec["strategy"] == "BestEffortFIFO"
        assert spec["clogTimeout"] == "5m"
        assert spec["nodeFit"] is True
    finally:
        delete_queue(kube, name)


def test_a_queues_preemption_gets_the_schemas_defaults_and_reads_back(kube: KubeClient) -> None:
    name = "crd-preemption-defaults"
    create_queue(kube, name, {"preemption": {"fairShare": "Reclaim"}})
    try:
        body = kube.get(f"{QUEUES}/{name}")
        assert body["spec"]["preemption"] == {
            "reclaimWithinCohort": "Never",
            "withinQueue": "Never",
            "fairShare": "Reclaim",
            "protectAfter": 3,
            "protectFor": "10m",
        }
        assert queue_from(body).preemption == Preemption(fair_share="Reclaim")
    finally:
        delete_queue(kube, name)


def test_a_queues_borrow_within_cohort_reads_back(kube: KubeClient) -> None:
    name = "crd-borrow-within-cohort"
    borrow = {"policy": "LowerPriority", "maxPriorityThreshold": 100}
    create_queue(
        kube, name, {"preemption": {"reclaimWithinCohort": "Any", "borrowWithinCohort": borrow}}
    )
    try:
        body = kube.get(f"{QUEUES}/{name}")
        assert body["spec"]["preemption"]["borrowWithinCohort"] == borrow
        assert queue_from(body).preemption == Preemption(
            reclaim_within_cohort="Any",
            borrow_within_cohort=BorrowWithinCohort("LowerPriority", 100),
        )
    finally:
        delete_queue(kube, name)
