"""The one Queue spec reader (policies/queuespec.py): what it reads, and what it says about a
field it cannot read (the field, the value, what to write), for the controller and traces."""

from __future__ import annotations

from typing import Any

import pytest

from admission.cache import Cache
from policies import Backoff, BorrowWithinCohort, PolicyError, Resources, SizeRatio
from policies.objects import queue_from
from policies.queuespec import parse_queue
from simulator.trace import TraceError, from_dict

WHERE = 'queue "q": spec'


def test_reads_every_field() -> None:
    queue = parse_queue(
        "q",
        {
            "parent": "org",
            "weight": 2,
            "nominal": {"cpu": "16", "nvidia.com/gpu": 0},
            "borrowingLimit": {"cpu": "4"},
            "lendingLimit": {"cpu": "2"},
            "strategy": "StrictFIFO",
            "sizeRatio": {"ratio": 0.5, "action": "Reject"},
            "clogTimeout": "90s",
            "backoff": {"base": "2s", "max": "1m", "limit": 3},
            "nodeFit": False,
            "preemption": {"reclaimWithinCohort": "Any"},
            "limits": {"maxPending": 5},
            "namespaceSelector": {"matchLabels": {"team": "a"}},
        },
        WHERE,
    )
    assert queue.name == "q" and queue.parent == "org" and queue.weight == 2.0
    assert queue.nominal == Resources(cpu=16000)
    assert queue.quota_names == frozenset({"cpu", "nvidia.com/gpu"})
    assert queue.borrowing_limit == Resources(cpu=4000)
    assert queue.lending_limit == Resources(cpu=2000)
    assert queue.strategy == "StrictFIFO"
    assert queue.size_ratio == SizeRatio(ratio=0.5, action="Reject")
    assert queue.clog_timeout == 90.0
    assert queue.backoff == Backoff(base=2.0, max=60.0, limit=3)
    assert not queue.node_fit
    assert queue.preemption.reclaim_within_cohort == "Any"
    borrow = parse_queue(
        "q",
        {
            "preemption": {
                "reclaimWithinCohort": "LowerPriority",
                "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100},
            }
        },
        WHERE,
    ).preemption.borrow_within_cohort
    assert borrow == BorrowWithinCohort(policy="LowerPriority", max_priority_threshold=100)
    assert parse_queue("q", {}, WHERE).preemption.borrow_within_cohort == BorrowWithinCohort()


@pytest.mark.parametrize("threshold", [-(2**31), -10, 0, 2**31 - 1])
def test_max_priority_threshold_takes_every_int32(threshold: int) -> None:
    # The CRD stores any int32 and priorities may be negative: the reader refuses none of them.
    spec = {
        "preemption": {
            "reclaimWithinCohort": "Any",
            "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": threshold},
        }
    }
    borrow = parse_queue("q", spec, WHERE).preemption.borrow_within_cohort
    assert borrow.max_priority_threshold == threshold


def test_defaults() -> None:
    queue = parse_queue("q", {}, WHERE)
    assert queue.parent is None and queue.weight == 1.0 and queue.nominal is None
    assert queue.strategy == "BestEffortFIFO" and queue.size_ratio == SizeRatio()
    assert queue.clog_timeout == 300.0 and queue.backoff == Backoff() and queue.node_fit


def test_size_ratio_forms() -> None:
    assert parse_queue("q", {"sizeRatio": 0.2}, WHERE).size_ratio == SizeRatio(ratio=0.2)
    assert parse_queue("q", {"sizeRatio": None}, WHERE).size_ratio is None
    assert parse_queue("q", {"sizeRatio": False}, WHERE).size_ratio is None
    assert parse_queue("q", {"sizeRatio": {}}, WHERE).size_ratio == SizeRatio()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"weigth": 2},
            "queue \"q\": spec: unknown field 'weigth'; known fields: parent, weight,",
        ),
        ({"weight": 0}, 'queue "q": spec.weight: 0.0 must be positive, e.g. 1'),
        ({"weight": "2"}, "queue \"q\": spec.weight: expected a number, got '2'"),
        (
            {"strategy": "LIFO"},
            "queue \"q\": spec.strategy: 'LIFO' is not BestEffortFIFO or StrictFIFO",
        ),
        ({"parent": 3}, 'queue "q": spec.parent: expected a string, got 3'),
        (
            {"nominal": {"cpu": "lots"}},
            'queue "q": spec.nominal.cpu: "lots" is not a Kubernetes quantity; use a number',
        ),
        (
            {"sizeRatio": {"ratio": 2}},
            'queue "q": spec.sizeRatio.ratio: 2.0 must be in (0, 1], e.g. 0.1',
        ),
        (
            {"sizeRatio": {"action": "Drop"}},
            "queue \"q\": spec.sizeRatio.action: 'Drop' is not Serialize or Reject",
        ),
        (
            {"sizeRatio": True},
            'queue "q": spec.sizeRatio: use a ratio such as 0.1, {ratio: 0.1, action: Reject}, '
            "or null",
        ),
        ({"clogTimeout": "soon"}, 'queue "q": spec.clogTimeout: '),
        (
            {"backoff": {"base": "1m", "max": "10s"}},
            'queue "q": spec.backoff.max: 10.0s is below base 60.0s',
        ),
        ({"backoff": {"limit": -1}}, 'queue "q": spec.backoff.limit: -1 is below the minimum 0'),
        ({"nodeFit": "yes"}, "queue \"q\": spec.nodeFit: expected true or false, got 'yes'"),
        (
            {"preemption": {"withinQueue": "Any"}},
            'queue "q": spec.preemption.withinQueue: must be',
        ),
        (
            {"preemption": {"borrowWithinCohort": {"policy": "LowerPriority"}}},
            'queue "q": spec.preemption.borrowWithinCohort: policy LowerPriority needs '
            "reclaimWithinCohort LowerPriority or Any",
        ),
        (
            {"preemption": {"reclaimWithinCohort": "Any", "borrowWithinCohort": {"policy": "Any"}}},
            'queue "q": spec.preemption.borrowWithinCohort.policy: must be one of Never, '
            "LowerPriority, got 'Any'",
        ),
        (
            {"preemption": {"borrowWithinCohort": {"maxPriority": 5}}},
            'queue "q": spec.preemption.borrowWithinCohort: unknown field maxPriority; known: '
            "policy, maxPriorityThreshold",
        ),
        (
            {"preemption": {"borrowWithinCohort": {"maxPriorityThreshold": "high"}}},
            'queue "q": spec.preemption.borrowWithinCohort.maxPriorityThreshold: ',
        ),
        (
            {"preemption": {"borrowWithinCohort": {"maxPriorityThreshold": 2**31}}},
            'queue "q": spec.preemption.borrowWithinCohort.maxPriorityThreshold: 2147483648 is '
            "not a whole number from -2147483648 to 2147483647",
        ),
        (
            {"preemption": {"borrowWithinCohort": {"maxPriorityThreshold": -(2**31) - 1}}},
            'queue "q": spec.preemption.borrowWithinCohort.maxPriorityThreshold: -2147483649 is '
            "not a whole number",
        ),
        (
            {"preemption": {"borrowWithinCohort": "LowerPriority"}},
            'queue "q": spec.preemption.borrowWithinCohort: must be a mapping',
        ),
    ],
)
def test_errors_name_the_field_the_value_and_the_fix(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_queue("q", spec, WHERE)
    assert str(caught.value).startswith(message)


def test_the_controller_reads_queue_objects_with_it() -> None:
    body: dict[str, Any] = {"metadata": {"name": "q"}, "spec": {"weight": 3, "clogTimeout": "2m"}}
    queue = queue_from(body)
    assert queue == parse_queue("q", body["spec"], WHERE)
    with pytest.raises(PolicyError, match=r'queue "q": spec\.weight: -1\.0 must be positive'):
        queue_from({"metadata": {"name": "q"}, "spec": {"weight": -1}})


def test_the_controller_keeps_a_queue_it_cannot_read_out_and_says_why() -> None:
    cache = Cache()
    cache.apply_queue("ADDED", {"metadata": {"name": "q"}, "spec": {"strategy": "LIFO"}})
    view = cache.queues["q"]
    assert view.queue is None
    assert view.error == "queue \"q\": spec.strategy: 'LIFO' is not BestEffortFIFO or StrictFIFO"


def _trace(queue: dict[str, Any]) -> dict[str, Any]:
    return {
        "cluster": {"nodes": [{"count": 1, "allocatable": {"cpu": "8"}}]},
        "queues": [{"name": "q", **queue}],
        "jobs": [
            {"name": "j", "queue": "q", "size": 1, "podRequests": {"cpu": "1"}, "runtime": 10}
        ],
    }


def test_a_trace_reads_its_queues_with_it() -> None:
    trace = from_dict(_trace({"weight": 3, "clogTimeout": "2m", "sizeRatio": None}))
    assert trace.queues[0].to_queue() == parse_queue(
        "q", {"weight": 3, "clogTimeout": "2m", "sizeRatio": None}, WHERE
    )
    with pytest.raises(TraceError, match=r"^queues\[0\] \(q\)\.weight: -1\.0 must be positive"):
        from_dict(_trace({"weight": -1}))
    with pytest.raises(TraceError, match=r"^queues\[0\] \(q\): unknown field 'namespaceSelector'"):
        from_dict(_trace({"namespaceSelector": {}}))


def test_a_status_only_queue_event_changes_nothing_the_planner_reads() -> None:
    """muster's own Queue status writes come back through the watch: same spec, no rebuild (the
    tree stays the same object, so the planner's feed does not re-read the queues), and the
    controller is not woken; a spec change rebuilds; a delete and re-create with the same spec
    is applied again."""
    cache = Cache()
    body: dict[str, Any] = {
        "metadata": {"name": "q", "resourceVersion": "1"},
        "spec": {"nominal": {"cpu": "8"}},
    }
    cache.apply_queue("ADDED", body)
    tree = cache.queues.tree
    cache.changed.clear()
    status = {**body, "metadata": {"name": "q", "resourceVersion": "2"}, "status": {"pending": 3}}
    cache.apply_queue("MODIFIED", status)
    assert cache.queues.tree is tree and not cache.changed.is_set()
    grown = {**status, "metadata": {"name": "q", "resourceVersion": "3"}}
    grown["spec"] = {"nominal": {"cpu": "16"}}
    cache.apply_queue("MODIFIED", grown)
    assert cache.queues.tree is not tree and cache.changed.is_set()
    parsed = cache.queues["q"].queue
    assert parsed is not None and parsed.nominal is not None
    assert parsed.nominal["cpu"] == 16000
    cache.apply_queue("DELETED", {**grown, "metadata": {"name": "q", "resourceVersion": "4"}})
    assert "q" not in cache.queues
    cache.apply_queue("ADDED", {**grown, "metadata": {"name": "q", "resourceVersion": "5"}})
    assert "q" in cache.queues and cache.queues.tree is not None
    assert "q" in cache.queues.tree
