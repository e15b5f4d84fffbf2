"""webhook.backlog.Backlog against a model: whatever the order of watch events and creates,

- its count per queue and per namespace is the number of gangs whose objects, as last seen, make
  them pending, plus the creates it allowed that the watch has not shown yet;
- a queue with `maxPending: N` never holds more than N once every allowed create is stored
  (one replica never overshoots its limit).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.phase import QueueLimits
from policies.vocabulary import ADMITTED, QUEUE, SUBMITTED
from tests import builders
from webhook.backlog import Backlog

STAMP = "2026-01-01T00:00:00.000000001Z/1"
QUEUES = ("a", "b")
SPACES = ("x", "y")
NAMES = ("j0", "j1", "j2", "j3")


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def job(name: str, queue: str, space: str, phase: str) -> dict[str, Any]:
    """A stored Job of `queue` in namespace `space`, pending, admitted or finished."""
    annotations = {QUEUE: queue, SUBMITTED: STAMP}
    status: dict[str, Any] = {}
    if phase == "admitted":
        annotations[ADMITTED] = "2026-01-01T00:00:01.000000Z/1"
    elif phase == "finished":
        status["conditions"] = [{"type": "Failed", "status": "True"}]
    return builders.job(
        name,
        queue,
        namespace=space,
        suspend=phase == "pending",
        runtime=None,
        annotations=annotations,
        tolerations=(),
        status=status,
    )


events = st.lists(
    st.tuples(
        st.sampled_from(NAMES),
        st.sampled_from(QUEUES),
        st.sampled_from(SPACES),
        st.sampled_from(["pending", "admitted", "finished", "DELETED"]),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(events)
def test_count_is_the_pending_gangs_as_last_seen(sequence: list[tuple[str, str, str, str]]) -> None:
    backlog = Backlog(Clock())
    model: dict[tuple[str, str], tuple[str, bool]] = {}
    for name, queue, space, phase in sequence:
        if phase == "DELETED":
            backlog.observe_job("DELETED", job(name, queue, space, "pending"))
            model.pop((space, name), None)
        else:
            backlog.observe_job("MODIFIED", job(name, queue, space, phase))
            model[(space, name)] = (queue, phase == "pending")
    for queue in QUEUES:
        assert backlog.pending(queue) == sum(
            1 for q, pending in model.values() if q == queue and pending
        )
        for space in SPACES:
            assert backlog.pending(queue, space) == sum(
                1 for (s, _), (q, pending) in model.items() if q == queue and s == space and pending
            )


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 4),
    st.lists(
        st.tuples(st.sampled_from(["create", "see", "admit"]), st.integers(0, 11)), max_size=60
    ),
)
def test_one_replica_never_overshoots(limit: int, steps: list[tuple[str, int]]) -> None:
    """Creates race the watch: each is shown (`see`) at some later step, or never."""
    backlog = Backlog(Clock())
    limits = QueueLimits(max_pending=limit)
    allowed: list[str] = []
    shown: set[str] = set()
    admitted: set[str] = set()
    for action, index in steps:
        name = f"j{index}"
        if action == "create" and name not in allowed:
            if backlog.admit("Job", "x", name, "a", limits) is None:
                allowed.append(name)
        elif action == "see" and name in allowed and name not in shown:
            shown.add(name)
            backlog.observe_job("ADDED", job(name, "a", "x", "pending"))
        elif action == "admit" and name in shown:
            admitted.add(name)
            backlog.observe_job("MODIFIED", job(name, "a", "x", "admitted"))
        stored_pending = [n for n in allowed if n not in admitted]
        assert len(stored_pending) <= limit
        assert backlog.pending("a") == len(stored_pending)
