"""`admission.status.queue_positions`: each waiting gang's place in its queue, by priority then
submission; gangs admitted (by the object or assumed by the controller), finished or failed have
no place. The function runs on the controller's event loop every cycle, so it reads record
fields directly: these cases pin that it still means what `JobRecord.admission` means."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from admission.cache import Cache
from admission.status import queue_positions
from policies.kinds.reading import format_admitted
from policies.vocabulary import PRIORITY, QUEUE, SUBMITTED
from tests import builders

NOW = 1_800_000_000.0


def job(name: str, queue: str, seq: int, **annotations: str) -> dict[str, Any]:
    """A stored one-pod gang, suspended, stamped `seq` at NOW, with `annotations` besides."""
    return builders.job(
        name,
        queue,
        namespace="ns",
        suspend=True,
        cpu=None,
        runtime=None,
        tolerations=(),
        annotations={SUBMITTED: builders.stamp(seq, NOW), **annotations},
        resource_version=seq + 1,
    )


def test_places_follow_priority_then_submission_per_queue() -> None:
    cache = Cache()
    for body in (
        job("a1", "a", 1),
        job("a2", "a", 2),
        job("a3-urgent", "a", 3, **{PRIORITY: "10"}),
        job("b1", "b", 4),
        job("a4", "a", 5),
    ):
        cache.apply_job("ADDED", body)
    assert queue_positions(cache) == {
        "ns/a3-urgent": 1,
        "ns/a1": 2,
        "ns/a2": 3,
        "ns/a4": 4,
        "ns/b1": 1,
    }


def test_admitted_assumed_finished_and_failed_gangs_have_no_place() -> None:
    cache = Cache()
    admitted = job("admitted", "a", 1, **{"muster.dev/admitted": format_admitted(NOW, 1)})
    admitted["spec"]["suspend"] = False
    finished = job("finished", "a", 2)
    finished["status"] = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}
    for body in (admitted, finished, job("assumed", "a", 3), job("failing", "a", 4)):
        cache.apply_job("ADDED", body)
    for body in (job("waits", "a", 5), job("waits-too", "a", 6)):
        cache.apply_job("ADDED", body)
    cache.assume_admitted(cache.jobs["ns/assumed"], time.time(), 1, {})
    cache.assume_failed(cache.jobs["ns/failing"], "NeverFits: never fits")
    assert queue_positions(cache) == {"ns/waits": 1, "ns/waits-too": 2}
    # The assumed admission forgotten (its PATCH refused): the gang is back in its place.
    cache.forget_admission(cache.jobs["ns/assumed"])
    assert queue_positions(cache) == {"ns/assumed": 1, "ns/waits": 2, "ns/waits-too": 3}


def test_a_change_the_planner_sees_bumps_the_gangs_version_and_one_it_does_not_does_not() -> None:
    # Long-pollers hear of a new priority, queue or node selector at once (their answer shows
    # it, and the gang's place moves); a change of nothing muster reads (a label of the
    # user's) is not a change of the gang's status.
    cache = Cache()
    body = job("a1", "a", 1)
    cache.apply_job("ADDED", body)
    seen = cache.status.gang_versions["ns/a1"]
    # (A spec change bumps metadata.generation, as the apiserver does.)
    changes: list[Callable[[dict[str, Any]], object]] = [
        lambda b: b["metadata"]["labels"].update({PRIORITY: "5"}),
        lambda b: b["metadata"]["labels"].update({QUEUE: "b"}),
        lambda b: (
            b["spec"]["template"]["spec"].update(nodeSelector={"pool": "a"}),
            b["metadata"].update(generation=2),
        ),
    ]
    for change in changes:
        cache.changed.clear()
        change(body)
        body["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
        cache.apply_job("MODIFIED", body)
        assert cache.status.gang_versions["ns/a1"] > seen
        assert cache.changed.is_set()
        seen = cache.status.gang_versions["ns/a1"]
    body["metadata"]["labels"]["team"] = "x"
    body["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
    cache.apply_job("MODIFIED", body)
    assert cache.status.gang_versions["ns/a1"] == seen
