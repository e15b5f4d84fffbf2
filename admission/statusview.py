"""What the status service shows of each gang beyond its record, and when that changed.

`StatusView` is the only writer of: each gang's version (bumped by `touch` when its visible
state changes, which wakes the long-polls waiting on it), and the controller's word on each
waiting gang: why it waits and whether it is rejected (the admit cycle's reasons step,
`show_reasons`), its place in its queue (`show_positions`) and its wait-time estimate (the
background refresh, `show_estimates`). `StateMark` says whether anything the queues' status and
the estimates read moved since it was taken.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

from policies import QueueTree, Reason, Resources
from policies.estimate import Estimate

DEMAND_WINDOW = 600.0
"""Seconds after a reader last asked for a wait-time estimate during which the controller keeps
refreshing them: twice the longest long-poll (300 s), so a gang's poller keeps them fresh. A
controller nobody asks spends nothing on them (in Kueue's scheduler benchmark they were a third
of muster's CPU: docs/benchmarks.md)."""


class StateMark(NamedTuple):
    """`Cache.mark`: compared by identity for the tree and the capacity (each object is
    replaced, never changed in place)."""

    version: int
    tree: QueueTree | None
    capacity: Resources


class StatusView:
    """Gangs' versions and long-poll waiters; reasons, positions and estimates of waiting gangs."""

    def __init__(self) -> None:
        self.version = 0
        """Bumped by every `touch`: any gang's visible state changed."""
        self.gang_versions: dict[str, int] = {}
        """Per gang: `version` at its last visible change."""
        self.reasons: dict[str, Reason] = {}
        """From the last plan: why each waiting gang waits (also the refused ones)."""
        self.rejected: dict[str, Reason] = {}
        """From the last plan: the gangs that can never be admitted as things stand."""
        self._positions: dict[str, int] = {}
        self._positions_of: Callable[[], dict[str, int]] | None = None
        self.estimates: dict[str, Estimate] = {}
        """Wait-time estimates (admission/estimates.py computes them in the background)."""
        self.estimated_at: float | None = None
        self.estimates_asked_at: float | None = None
        """`time.monotonic()` when a reader last asked for a gang's estimate (`ask_estimate`):
        estimates are computed while someone reads them."""
        self.on_first_ask: Callable[[], None] | None = None
        """Called when an estimate is asked for after none was for `DEMAND_WINDOW` (the
        refresher then starts one at once instead of at the next admit cycle)."""
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}

    def touch(self, key: str) -> None:
        """A gang's visible state changed: bump its version and wake its long-polls."""
        self.version += 1
        self.gang_versions[key] = self.version
        for waiter in self._waiters.pop(key, ()):
            if not waiter.done():
                waiter.set_result(None)

    def waiter(self, key: str) -> asyncio.Future[None]:
        """A future done at the gang's next visible change (`drop_waiter` it when done)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, []).append(future)
        return future

    def drop_waiter(self, key: str, future: asyncio.Future[None]) -> None:
        waiters = self._waiters.get(key)
        if waiters and future in waiters:
            waiters.remove(future)
            if not waiters:
                del self._waiters[key]

    def show_reasons(self, reasons: dict[str, Reason], rejected: Mapping[str, Reason]) -> None:
        """The last plan's reasons (held as given, not copied) and rejected gangs."""
        self.reasons = reasons
        self.rejected = dict(rejected)

    def forget_reason(self, key: str) -> None:
        """The gang no longer waits (admitted): its reason is history."""
        self.reasons.pop(key, None)

    @property
    def positions(self) -> dict[str, int]:
        """Each waiting gang's 1-based place in its queue (`admission.status.queue_positions`),
        worked out when read if the admit loop said they may have moved (`positions_moved`):
        nobody reading them costs nothing, and an admit cycle at 10,000 waiting gangs spent a
        tenth of its time numbering the queues."""
        compute = self._positions_of
        if compute is not None:
            self._positions_of = None
            self._positions = compute()
        return self._positions

    def show_positions(self, positions: dict[str, int]) -> None:
        self._positions, self._positions_of = positions, None

    def positions_moved(self, compute: Callable[[], dict[str, int]]) -> None:
        """The positions may have moved: ``compute`` gives them when they are next read."""
        self._positions_of = compute

    def ask_estimate(self, at: float | None = None) -> None:
        """A reader asked for an estimate (`estimate_body`): keep them computed."""
        now = time.monotonic() if at is None else at
        idle = self.estimates_asked_at is None or now - self.estimates_asked_at > DEMAND_WINDOW
        self.estimates_asked_at = now
        if idle and self.on_first_ask is not None:
            self.on_first_ask()

    def estimates_wanted(self, at: float | None = None) -> bool:
        """Someone asked for an estimate in the last `DEMAND_WINDOW` seconds."""
        asked = self.estimates_asked_at
        now = time.monotonic() if at is None else at
        return asked is not None and now - asked <= DEMAND_WINDOW

    def show_estimates(self, estimates: dict[str, Estimate], at: float) -> None:
        self.estimates, self.estimated_at = estimates, at
