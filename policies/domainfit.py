"""Node fit for a gang with a topology request (`policies.topology`), on the plan's overlay.

- **Required** at a level: the gang's pods all go within one domain of that level, or it waits
  ("needs one rack with room for 16 pods; the largest free has 9"). Never split.
- **Preferred**: within one domain if any has room; else in the fewest domains, the roomiest
  first (then on nodes in no domain of the level).
- **Which domain**: the tightest that holds the gang (the least room for its pods, ties by the
  domain's path): it leaves the roomiest domains, often whole ones, to the gangs that need them
  (least fragmentation). One that holds the gang at full size beats one that holds only its
  elastic minimum.

Each (fit class, domain) pair is a fit class of its own over the domain's nodes
(`policies.fitcatalog.FitCatalog.in_domain`), so the overlay's questions (room, place) are the
same as any gang's; off the reserved nodes for a gang the reservation holds back. A gang of
several pod sets places every set in the same domain (the request is the gang's).
"""

from __future__ import annotations

from collections.abc import Callable

from policies import reasons
from policies.decisions import Reason
from policies.domains import Domain
from policies.fit import FitClass, Pool
from policies.fitcatalog import FitCatalog
from policies.model import Gang
from policies.overlay import PlanOverlay
from policies.resources import Resources

__all__ = ["DomainFit"]


class DomainFit:
    """Where a gang with a topology request goes (see the module docstring)."""

    __slots__ = ("catalog", "overlay")

    def __init__(self, catalog: FitCatalog, overlay: PlanOverlay) -> None:
        self.catalog = catalog
        self.overlay = overlay

    def domains(self, fit: FitClass) -> tuple[Domain, ...] | None:
        """The domains of ``fit``'s level; None when the cluster has no such level."""
        assert fit.topology is not None
        return self.catalog.cluster.domains.at(fit.topology.level)

    def unknown(self, fit: FitClass) -> Reason:
        assert fit.topology is not None
        return reasons.topology_unknown_level(
            fit.topology.level, self.catalog.cluster.domains.topology.levels
        )

    def ranked(
        self, fit: FitClass, reserved: Pool | None, want: int, floor: int
    ) -> tuple[list[Domain], int]:
        """The domains that hold at least ``floor`` pods of ``fit`` now, best first (tightest,
        full size first), and the most pods any one domain holds."""
        room_of = self.overlay.room
        in_domain = self.catalog.in_domain
        ranked: list[tuple[bool, int, int, Domain]] = []
        largest = 0
        for domain in self.domains(fit) or ():
            room = room_of(in_domain(fit, domain, reserved))
            if room > largest:
                largest = room
            if room >= floor:
                ranked.append((room < want, room, domain.index, domain))
        ranked.sort(key=lambda item: item[:3])
        return [item[3] for item in ranked], largest

    def place(
        self,
        gang: Gang,
        fit: FitClass,
        usable: FitClass,
        reserved: Pool | None,
        want: int,
        floor: int,
        admit: bool,
    ) -> dict[str, int] | Reason:
        """Place up to ``want`` pods of a one-pod-set gang (at least ``floor``; ``usable``:
        ``fit`` off the reserved nodes, or ``fit``); only whether they fit unless ``admit``
        (then an empty placement)."""
        topology = fit.topology
        assert topology is not None
        if self.domains(fit) is None:
            if topology.required:
                return self.unknown(fit)
            return self._anywhere(gang, usable, want, floor, admit)
        ranked, largest = self.ranked(fit, reserved, want, floor)
        if ranked:
            if not admit:
                return {}
            placed = self.overlay.place(
                self.catalog.in_domain(fit, ranked[0], reserved), want, floor
            )
            assert placed is not None  # it has room for floor pods
            return placed[0]
        if topology.required:
            return reasons.topology_no_domain(topology.level, floor, gang.pod_requests, largest)
        return self._spread(gang, fit, usable, reserved, want, floor, admit)

    def _anywhere(
        self, gang: Gang, usable: FitClass, want: int, floor: int, admit: bool
    ) -> dict[str, int] | Reason:
        overlay = self.overlay
        if admit:
            placed = overlay.place(usable, want, floor)
            if placed is not None:
                return placed[0]
        elif overlay.fits(usable, floor, want):
            return {}
        return reasons.no_fit(
            floor, gang.pod_requests, usable.one_pod_per_node, overlay.room(usable), False
        )

    def _spread(
        self,
        gang: Gang,
        fit: FitClass,
        usable: FitClass,
        reserved: Pool | None,
        want: int,
        floor: int,
        admit: bool,
    ) -> dict[str, int] | Reason:
        """A preferred gang no one domain holds: the roomiest domains first; where the domains
        together hold fewer than its floor, first fit over every node it may use instead."""
        overlay = self.overlay
        if overlay.room(usable) < floor:
            return self._anywhere(gang, usable, want, floor, False)
        if not admit:
            return {}
        in_domain = self.catalog.in_domain
        rooms = sorted(
            (-overlay.room(in_domain(fit, domain, reserved)), domain.index, domain)
            for domain in self.domains(fit) or ()
        )
        placement: dict[str, int] = {}
        total = 0
        for negative, _, domain in rooms:
            if total >= want or negative == 0:
                break
            placed = overlay.place(in_domain(fit, domain, reserved), want - total, 1)
            if placed is not None:
                _merge(placement, placed[0])
                total += placed[1]
        if total < floor:
            # Given back and placed from scratch: a second placement beside the domains' knows
            # the capacity their pods took but not the nodes they went to, and put a second pod
            # of a one-pod-per-node gang whose pods request nothing on one of them
            # (tests/unit/test_topology.py).
            overlay.release(usable, placement)
            placed = overlay.place(usable, want, floor)
            assert placed is not None  # the usable nodes hold floor pods
            return placed[0]
        return placement

    def place_sets(
        self,
        fit: FitClass,
        reserved: Pool | None,
        want: int,
        floor: int,
        requests: Resources,
        attempt: Callable[[Domain | None], Reason | None],
    ) -> Reason | None:
        """A gang of several pod sets: ``attempt`` (the admitter's placement of every set,
        within a domain, or anywhere for None) in the best domains in turn; a preferred gang
        no domain holds tries anywhere last. The reason of the first try if all fail."""
        topology = fit.topology
        assert topology is not None
        domains = self.domains(fit)
        if domains is None:
            return self.unknown(fit) if topology.required else attempt(None)
        ranked, largest = self.ranked(fit, reserved, want, floor)
        first: Reason | None = None
        for domain in ranked:
            reason = attempt(domain)
            if reason is None:
                return None
            first = first or reason
        if not topology.required:
            return attempt(None)
        return first or reasons.topology_no_domain(topology.level, floor, requests, largest)


def _merge(into: dict[str, int], placement: dict[str, int]) -> None:
    for node, pods in placement.items():
        into[node] = into.get(node, 0) + pods
