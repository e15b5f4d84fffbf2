"""The order a plan scans a queue's waiting gangs in (`spec.ordering`, `policies.model.Ordering`).

A `PlanState` keeps each queue's line in submission order (priority first): that is the
default ordering, and the scans read it as is. A queue that orders ``SmallestFirst`` is read
through `ordered_line`, built for one plan: within a priority, the gangs that have waited the
queue's aging bound come first, by submission, then the rest, smallest dominant share first.

Why: on a burst, small gangs that wait behind big ones in submission order wait for the big
ones' runs (the mean wait grows with the backlog). Letting them go first cuts the mean; the
aging bound is what a bigger gang gets in exchange: once it has waited that long no gang that
has not overtakes it any more, and a big one takes the plan's reservation
(`policies.reservation.Reservation.find_starving`), so it starts as soon as the nodes it needs
are free. The bound defaults to the starvation bound muster already keeps for big gangs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from policies.model import Queue
from policies.planstate import Entry

__all__ = ["aging_bound", "ordered_line"]


def aging_bound(queue: Queue, starvation_after: float) -> float:
    """Seconds a gang of ``queue`` waits before nobody overtakes it and, if big, it takes the
    reservation against younger gangs: a ``SmallestFirst`` queue's ``agingBound`` (unset:
    ``starvation_after``), else ``starvation_after`` (the default ordering's own bound)."""
    ordering = queue.ordering
    if ordering.smallest_first and ordering.aging_bound is not None:
        return ordering.aging_bound
    return starvation_after


def ordered_line(
    entries: Sequence[Entry],
    vkeys: Sequence[int],
    now: float,
    bound: float,
    share: Callable[[Entry], float],
) -> tuple[list[Entry], list[int]]:
    """A ``SmallestFirst`` queue's line (its entries and, in step, their verdict keys) in the
    order a plan scans it at ``now``; ``bound``: the queue's aging bound (`aging_bound`);
    ``share``: an entry's dominant share of the cluster at its gang's size.

    Key: priority; aged (waited ``bound``) before not aged; aged by submission, the others by
    share; then the line's own order (submission stamp and sequence, unique): a total order,
    the same for the same line at the same instant."""
    shares: dict[tuple[object, int], float] = {}

    def key(at: int) -> tuple[int, int, float, int]:
        entry = entries[at]
        gang = entry[2]
        if now - gang.submitted.time >= bound:
            return (entry[0][0], 0, 0.0, at)
        # Gangs alike (screen key and size) have one share: computed once per plan.
        alike = (gang.screen_key, gang.size)
        value = shares.get(alike)
        if value is None:
            value = shares[alike] = share(entry)
        return (entry[0][0], 1, value, at)

    order = sorted(range(len(entries)), key=key)
    return [entries[at] for at in order], [vkeys[at] for at in order]
