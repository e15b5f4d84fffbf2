"""The in-process engine's pending gangs (``muster`` admission): each queue's pending gangs in
queue order and the lookahead windows the one `policies.Planner` sees (its feed,
`simulator.planfeed.PlanFeed`, owns the planner and hands it in).

A queue's window is its first ``lookahead`` pending gangs in queue order, which is what a
snapshot of the instant would list, so the planner decides exactly as `policies.plan` on that
snapshot. Pending lists use lazy deletion: ``stale`` counts the entries of gangs no longer
pending. What a decision does to a gang (admission, preemption, rejection, eviction) is the
lifecycle's (`simulator.lifecycle`), not this module's.
"""

from __future__ import annotations

import bisect
import time as wallclock
from collections.abc import Sequence

from policies import Admission, Decisions, Gang, Node, Planner, QueueTree, Snapshot, plan
from simulator.records import PENDING, GangRecord

Entry = tuple[tuple[int, float, int, str], int]
"""A pending list entry: (the gang's queue order key, gang index)."""


class PendingQueues:
    """Pending gangs per queue, the lookahead windows, and the planner that sees them."""

    def __init__(
        self,
        planner: Planner,
        nodes: Sequence[Node],
        tree: QueueTree,
        queues: Sequence[str],
        gangs: Sequence[GangRecord],
        policy: str,
        lookahead: int,
    ) -> None:
        self.nodes = nodes
        self.tree = tree
        self.queue_names = tuple(queues)
        self.gangs = gangs
        self.policy = policy
        self.lookahead = lookahead
        nq = len(self.queue_names)
        self.pending_lists: list[list[Entry]] = [[] for _ in range(nq)]
        self.stale = [0] * nq
        self.planner = planner
        # Window members (gang indices), the entry of the last one taken (every pending entry
        # up to it is a member), and whether an entry was inserted before it since the last
        # cycle (then the window is taken again from the start of the list).
        self.window: list[set[int]] = [set() for _ in range(nq)]
        self.window_last: list[Entry | None] = [None for _ in range(nq)]
        self.window_moved = [False] * nq
        self.elastic_members: set[int] = set()  # window members that may be ElasticWaiting
        self.last_decisions: Decisions | None = None
        self.plan_calls = 0
        self.plan_seconds = 0.0

    def enqueue(self, record: GangRecord) -> None:
        """``record`` is pending (again) in its queue."""
        q = record.queue
        entry = (record.gang.order_key, record.index)
        if not record.in_pending_list:
            record.in_pending_list = True
            entries = self.pending_lists[q]
            if not entries or entries[-1] < entry:
                entries.append(entry)
            else:
                bisect.insort(entries, entry)
        else:
            self.stale[q] -= 1  # its old entry is live again
        last = self.window_last[q]
        if last is not None and entry <= last:
            # It goes before (or is) a gang the window took: the window is taken again.
            self.window_moved[q] = True

    def taken(self, record: GangRecord) -> None:
        """``record`` leaves the pending gangs: admitted or rejected."""
        self.leave_window(record)
        self.stale[record.queue] += 1

    def plan(self, now: float) -> Decisions | None:
        """The planner's decisions at ``now``, None if no queue has a gang in its window."""
        if not self.refresh_windows():
            return None
        began = wallclock.perf_counter()
        decisions = self.planner.plan(now)
        self.plan_seconds += wallclock.perf_counter() - began
        self.plan_calls += 1
        return decisions

    def refresh_windows(self) -> int:
        """Bring each queue's window up to date in the planner: the first ``lookahead``
        pending gangs of the queue, in queue order (what a snapshot of this instant would list).
        Returns how many gangs the windows hold."""
        window = self.lookahead
        total = 0
        for q, entries in enumerate(self.pending_lists):
            if self.stale[q] > 64 and self.stale[q] > len(entries) // 2:
                self._compact(q)
            members = self.window[q]
            if self.window_moved[q]:
                self._retake_window(q)
            elif not window or len(members) < window:
                gangs = self.gangs
                last = self.window_last[q]
                at = bisect.bisect_right(entries, last) if last is not None else 0
                for k in range(at, len(entries)):
                    entry = entries[k]
                    record = gangs[entry[1]]
                    if record.state != PENDING:
                        continue
                    self.enter_window(record)
                    self.window_last[q] = entry
                    if window and len(members) >= window:
                        break
            total += len(members)
        return total

    def _retake_window(self, q: int) -> None:
        """Take queue ``q``'s window again from the start (a gang went before its members)."""
        self.window_moved[q] = False
        window = self.lookahead
        gangs = self.gangs
        chosen: list[int] = []
        last = None
        for entry in self.pending_lists[q]:
            if gangs[entry[1]].state == PENDING:
                chosen.append(entry[1])
                last = entry
                if window and len(chosen) >= window:
                    break
        members = self.window[q]
        keep = set(chosen)
        for index in sorted(members - keep):
            # Pushed out while still pending: its reason stays the one of the last plan that
            # saw it, as if every plan's reasons had been copied to every gang.
            record = gangs[index]
            self.leave_window(record)
            self.remember_reason(record)
        for index in chosen:
            if index not in members:
                self.enter_window(gangs[index])
        self.window_last[q] = last

    def _compact(self, q: int) -> None:
        gangs = self.gangs
        live = []
        for entry in self.pending_lists[q]:
            record = gangs[entry[1]]
            if record.state == PENDING:
                live.append(entry)
            else:
                record.in_pending_list = False
        self.pending_lists[q] = live
        self.stale[q] = 0

    def enter_window(self, record: GangRecord) -> None:
        self.planner.add_pending(record.gang)
        self.window[record.queue].add(record.index)
        gang = record.gang
        if gang.min < gang.size and gang.elastic_after > 0:
            self.elastic_members.add(record.index)

    def leave_window(self, record: GangRecord) -> None:
        """``record`` leaves the window: admitted, rejected or pushed out."""
        self.planner.remove_pending(record.gang.id)
        self.window[record.queue].discard(record.index)
        self.elastic_members.discard(record.index)

    def remember_reason(self, record: GangRecord) -> None:
        """``waiting_for`` = the last plan's reason for ``record``, if that plan saw it."""
        if self.last_decisions is not None:
            reason = self.last_decisions.pending.get(record.gang.id)
            if reason is not None:
                record.waiting_for = reason

    def check_decisions(self, decisions: Decisions, now: float) -> None:
        """The planner saw what a snapshot of this instant shows (each queue's first
        ``lookahead`` pending gangs, the admitted gangs) and decided as `policies.plan` does."""
        window = self.lookahead
        pending: list[Gang] = []
        for q, entries in enumerate(self.pending_lists):
            taken = [i for _, i in entries if self.gangs[i].state == PENDING]
            taken = taken[:window] if window else taken
            if set(taken) != self.window[q]:
                raise AssertionError(f"queue {self.queue_names[q]}: window out of sync at {now}")
            pending.extend(self.gangs[i].gang for i in taken)
        admitted = list(self.planner.admitted.values())
        snapshot = Snapshot(
            self.nodes,
            self.tree,
            admitted,
            pending,
            now,
            self.planner.topology,
            self.planner.packing,
        )
        expected = plan(snapshot, self.policy)
        if (
            [_admission_key(a) for a in decisions.admitted]
            != [_admission_key(a) for a in expected.admitted]
            or dict(decisions.pending.items()) != dict(expected.pending.items())
            or decisions.rejected != expected.rejected
        ):
            raise AssertionError(f"planner decisions differ from policies.plan at {now}")


def _admission_key(admission: Admission) -> tuple[object, ...]:
    """What an admission decides: the gang, its size and where each of its pod sets goes."""
    return (
        admission.gang_id,
        admission.size,
        dict(admission.placement),
        [dict(where) for where in admission.other_placements],
    )
