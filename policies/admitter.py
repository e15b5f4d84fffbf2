"""Step 5 for one gang (see `policies.planner`): can it be admitted now, at what size and on
which nodes, and admitting it into the plan.

The checks, in order: the size-ratio slot and the node-blind hold (`policies.reservation`),
quota (`policies.shares`), then node fit on the plan's overlay of free capacity
(`policies.fit.Cluster`), off the reserved nodes for gangs the reservation holds back. A gang of
several pod sets places its other pod sets first, each whole, then its main pod set; a what-if
(or a failure) gives back what it placed.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from policies import reasons
from policies.decisions import Admission, Reason
from policies.domainfit import DomainFit
from policies.domains import Domain
from policies.fit import FitClass
from policies.model import Gang, Queue
from policies.overlay import PlanOverlay
from policies.planstate import PlanState, elastic_now
from policies.reservation import Reservation
from policies.resources import Resources
from policies.shares import Shares

__all__ = ["Admitter"]

# Plans format the same few node-fit messages over and over.
_no_fit = lru_cache(maxsize=4096)(reasons.no_fit)


class Admitter:
    """Whether a gang can be admitted now, and its admission (see the module docstring)."""

    __slots__ = (
        "admitted",
        "admitted_gangs",
        "domain",
        "domain_fit",
        "now",
        "overlay",
        "quota",
        "reservation",
        "shares",
        "state",
    )

    def __init__(
        self,
        state: PlanState,
        shares: Shares,
        reservation: Reservation,
        now: float,
        admitted: list[Admission],
        admitted_gangs: list[Gang],
    ) -> None:
        self.state = state
        self.shares = shares
        self.quota = state.quota
        self.overlay: PlanOverlay = state.overlay
        self.reservation = reservation
        self.now = now
        self.admitted = admitted  # the plan's admissions, in the order made
        self.admitted_gangs = admitted_gangs  # their gangs, in step
        self.domain_fit = DomainFit(state.catalog, state.overlay)
        self.domain: Domain | None = None  # pod sets are placed within it (DomainFit)

    def consider(
        self, gang: Gang, fit: FitClass, big: bool, queue: Queue, admit: bool
    ) -> Reason | None:
        """None if ``gang`` can be admitted now (and, if ``admit``, admit it); else why not."""
        reservation = self.reservation
        if big and reservation.blocker is not None:
            return reasons.size_ratio_serialized(reservation.blocker)
        if reservation.blind_hold is not None and not queue.node_fit:
            return reservation.blind_hold
        if gang.others:
            return self._consider_sets(gang, fit, big, queue, admit)
        leaf = queue.name
        size = gang.size
        minimum = gang.min_size
        if minimum is None:
            minimum = floor = size
            elastic = False
        else:
            elastic = minimum < size and self.now - gang.submitted.time >= gang.elastic_after
            floor = minimum if elastic else size

        # Quota: how many pods the queue may still take.
        available = self.shares.available(leaf)
        request = fit.request
        most = size
        for i in fit.nonzero:
            left = available[i]
            if left < request[i] * most:
                most = int(left // request[i])
        if most < floor:
            if minimum < size and not elastic and most >= minimum:
                fits = min(most, self.overlay.room(fit)) if queue.node_fit else most
                if fits >= minimum:
                    return self.elastic_waiting(gang, fits)
            return self.shares.quota_reason(leaf, fit, floor, available)

        # Nodes: place the pods, at least ``floor`` of them.
        if not queue.node_fit:
            if admit:
                self.record(gang, fit, big, leaf, most, {})
            return None
        usable = fit
        if reservation.holder is not None and reservation.held_back(gang, leaf):
            assert reservation.reserved is not None
            usable = self.state.catalog.restricted(fit, reservation.reserved)
        if fit.topology is not None:
            reserved = reservation.reserved if usable is not fit else None
            found = self.domain_fit.place(gang, fit, usable, reserved, most, floor, admit)
            if isinstance(found, Reason):
                return found
            if admit:
                self.record(gang, fit, big, leaf, sum(found.values()), found)
            return None
        cluster = self.overlay
        if admit:
            placed = cluster.place(usable, most, floor)
            if placed is not None:
                placement = placed[0]
                self.record(gang, fit, big, leaf, sum(placement.values()), placement)
                return None
        elif cluster.fits(usable, floor, most):
            return None
        room = cluster.room(usable)
        if usable is not fit and cluster.room(fit) >= floor:
            return reservation.reserved_reason(gang)
        if minimum < size and not elastic and room >= minimum:
            return self.elastic_waiting(gang, room)
        return _no_fit(floor, gang.pod_requests, fit.one_pod_per_node, room, fit.restricted)

    def _consider_sets(
        self, gang: Gang, fit: FitClass, big: bool, queue: Queue, admit: bool
    ) -> Reason | None:
        """`consider` for a gang of several pod sets: quota for all of them, then the other
        pod sets placed whole, then the main one (at least its floor); what is placed is given
        back if the rest does not fit, or when only asked (not ``admit``)."""
        info = self.state.classes[gang.screen_key]
        leaf = queue.name
        fixed = gang.fixed
        size = gang.size - fixed
        minimum = gang.min - fixed
        elastic = elastic_now(gang, self.now)
        floor = minimum if elastic else size
        available = self.shares.available(leaf)
        left = list(available)
        for i, amount in info.fixed:
            left[i] -= amount
        request = fit.request
        most = size
        for i in fit.nonzero:
            if left[i] < request[i] * most:
                most = max(int(left[i] // request[i]), -1)
        if most < floor or any(amount < 0 for amount in left):
            if minimum < size and not elastic and most >= minimum:
                return self.elastic_waiting(gang, fixed + most)
            short = self.shares.demand_reason(
                leaf, self.state.catalog.demand(gang, fixed + floor), available
            )
            assert short is not None
            return short
        if not queue.node_fit:
            if admit:
                self.record(gang, fit, big, leaf, fixed + most, {}, tuple({} for _ in info.sets))
            return None
        reservation = self.reservation
        held = reservation.holder is not None and reservation.held_back(gang, leaf)
        if fit.topology is None:
            return self._place_sets(gang, fit, big, leaf, held, most, floor, admit)

        def attempt(domain: Domain | None) -> Reason | None:
            self.domain = domain
            try:
                return self._place_sets(gang, fit, big, leaf, held, most, floor, admit)
            finally:
                self.domain = None

        reserved = reservation.reserved if held else None
        return self.domain_fit.place_sets(fit, reserved, most, floor, gang.pod_requests, attempt)

    def _place_sets(
        self,
        gang: Gang,
        fit: FitClass,
        big: bool,
        leaf: str,
        held: bool,
        most: int,
        floor: int,
        admit: bool,
    ) -> Reason | None:
        """`_consider_sets`' node part: the other pod sets whole, then the main one (at least
        ``floor``, at most ``most`` pods); within `domain` if one is set."""
        info = self.state.classes[gang.screen_key]
        fixed = gang.fixed
        size = gang.size - fixed
        minimum = gang.min - fixed
        elastic = elastic_now(gang, self.now)
        placed: list[tuple[FitClass, dict[str, int]]] = []
        for other, (set_fit, count) in zip(gang.others, info.sets, strict=True):
            found = self._place(gang, set_fit, other.requests, held, count, count)
            if isinstance(found, Reason):
                self._give_back(placed)
                return reasons.in_pod_set(other.name, found)
            placed.append((set_fit, found))
        found = self._place(gang, fit, gang.pod_requests, held, most, floor)
        if isinstance(found, Reason):
            room = self.overlay.room(self._usable(fit, held))
            self._give_back(placed)
            if minimum < size and not elastic and room >= minimum:
                return self.elastic_waiting(gang, fixed + room)
            return reasons.in_pod_set(gang.set_name, found)
        if not admit:
            self._give_back([*placed, (fit, found)])
            return None
        others = tuple(placement for _, placement in placed)
        self.record(gang, fit, big, leaf, fixed + sum(found.values()), found, others)
        return None

    def _place(
        self,
        gang: Gang,
        fit: FitClass,
        requests: Resources,
        held: bool,
        want: int,
        floor: int,
    ) -> dict[str, int] | Reason:
        """Place up to ``want`` pods of one of ``gang``'s pod sets (``fit``, each pod asking
        for ``requests``; at least ``floor``), off the reserved nodes if ``held``; why not, if
        they do not fit."""
        usable = self._usable(fit, held)
        overlay = self.overlay
        placed = overlay.place(usable, want, floor)
        if placed is not None:
            return placed[0]
        room = overlay.room(usable)
        if held and overlay.room(fit) >= floor:
            return self.reservation.reserved_reason(gang)
        return _no_fit(floor, requests, fit.one_pod_per_node, room, fit.restricted)

    def _usable(self, fit: FitClass, held: bool) -> FitClass:
        """``fit``, or its variant off the reserved nodes for a gang the reservation holds
        back."""
        domain = self.domain
        if domain is not None:
            reserved = self.reservation.reserved if held else None
            return self.state.catalog.in_domain(fit, domain, reserved)
        if not held:
            return fit
        reserved = self.reservation.reserved
        assert reserved is not None
        return self.state.catalog.restricted(fit, reserved)

    def _give_back(self, placed: Sequence[tuple[FitClass, dict[str, int]]]) -> None:
        """Undo placements of this plan (a restricted variant of a fit class has its request,
        so the class itself gives its pods' capacity back)."""
        for fit, placement in reversed(placed):
            self.overlay.release(fit, placement)

    def record(
        self,
        gang: Gang,
        fit: FitClass,
        big: bool,
        leaf: str,
        size: int,
        placement: dict[str, int],
        others: tuple[dict[str, int], ...] = (),
    ) -> None:
        """Admit ``gang`` at ``size`` pods into the plan: its quota, its admission."""
        if gang.others:
            demand = [(i, amount) for i, amount in self.state.catalog.demand(gang, size) if amount]
        else:
            request = fit.request
            demand = [(i, request[i] * size) for i in fit.nonzero]
        self.shares.take(leaf, demand)
        self.shares.holds.release(gang)
        self.admitted.append(Admission(gang.id, leaf, size, placement, others))
        self.admitted_gangs.append(gang)
        self.reservation.note_admitted(gang, big)

    def elastic_waiting(self, gang: Gang, fits: int) -> Reason:
        waited = self.now - gang.submitted.time
        return reasons.elastic_waiting(
            gang.size, fits, gang.min, gang.elastic_after, gang.elastic_after - waited
        )
