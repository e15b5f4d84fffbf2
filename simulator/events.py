"""The in-process engine's clock: a heap of future events keyed (time, kind, sequence), so that
events of one instant run in a fixed order (capacity is freed before anything else happens)
and ties are broken deterministically. Time never goes back.
"""

from __future__ import annotations

import heapq

# Event kinds; the value is also the order among events of one instant: capacity is freed before
# anything else happens at that instant.
FINISH = 0
DEADLINE = 1  # the gang's runtime limit (activeDeadlineSeconds) passed: Kubernetes ends it
PODS_RUNNING = 2
CLOG_CHECK = 3
REQUEUE = 4
REPLAN = 5  # only wakes the loop (an admission cycle or an elastic timer is due)
RESERVATION_END = 6  # placement "scheduler": the controller's cache drops a young gang's plan

Event = tuple[float, int, int, int, int, int, int]
"""(time, kind, sequence, gang index, the gang's attempt, pods, their pod set: its index in
`GangRecord.sets`, 0 for a gang of one)."""


class EventQueue:
    """Future events of one run, and the instant the run is at (``now``, set by its loop)."""

    __slots__ = ("heap", "now", "seq")

    def __init__(self) -> None:
        self.heap: list[Event] = []
        self.seq = 0
        self.now = 0.0

    def push(
        self, at: float, kind: int, gang: int, attempt: int, pods: int = 0, pod_set: int = 0
    ) -> None:
        """An event for attempt ``attempt`` of gang ``gang`` (skipped if the gang was evicted
        or finished in between: its attempt moved on)."""
        self.seq += 1
        heapq.heappush(self.heap, (at, kind, self.seq, gang, attempt, pods, pod_set))

    def wake(self, at: float) -> None:
        """Wake the loop at ``at`` with nothing to handle."""
        self.seq += 1
        heapq.heappush(self.heap, (at, REPLAN, self.seq, 0, 0, 0, 0))

    def pop(self) -> Event:
        return heapq.heappop(self.heap)
