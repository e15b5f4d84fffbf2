"""The resources one plan indexes, and the fit class of every pod set it meets.

`FitCatalog` turns requests into vectors over the plan's resources, a gang into the quota it
takes and the share of the cluster it asks for, and each pod set (a gang's main one, or another)
into its `policies.fit.FitClass`: gangs whose pods ask the same of the same nodes are fitted
alike. Kept with a `policies.planstate.PlanState`, for as long as its resource names hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policies.domains import Domain
from policies.fit import Cluster, FitClass, Pool
from policies.model import Gang, PodSet
from policies.quota import INF
from policies.resources import Resources
from policies.topology import TopologyRequest

__all__ = ["FitCatalog", "vector_of"]

Demand = list[tuple[int, int]]
"""Quota as (resource index, amount) pairs."""


def vector_of(
    cache: dict[Resources, tuple[int, ...]],
    names: Sequence[str],
    pods: int | None,
    request: Resources,
) -> tuple[int, ...]:
    """A per-pod request over the plan's resources (cached); every pod takes one of a node's
    pods."""
    values = [request[name] for name in names]
    if pods is not None:
        values[pods] = max(values[pods], 1)
    vector = cache[request] = tuple(values)
    return vector


class FitCatalog:
    """Resource vectors and fit classes of one plan state (see the module docstring)."""

    def __init__(self, cluster: Cluster, names: list[str]) -> None:
        self.cluster = cluster
        self.names = names
        self.index = {name: i for i, name in enumerate(names)}
        self.vectors: dict[Resources, tuple[int, ...]] = {}
        capacity = cluster.capacity
        self.inverse_capacity = [(i, 1.0 / c) for i, c in enumerate(capacity) if c > 0]
        self.fits: dict[tuple[object, ...], FitClass] = {}  # pod set screen key -> fit class
        self.dominant: dict[int, tuple[float, int]] = {}  # id(fit class) -> (share per pod, i)
        # Fit classes minus the nodes reserved for a big gang: (id(fit), id(pool)) -> variant.
        self.variants: dict[tuple[int, int], FitClass] = {}
        # Fit classes within one topology domain, also minus the reserved nodes:
        # (id(fit), domain depth, domain index, id(reserved pool) or 0) -> variant.
        self.in_domains: dict[tuple[int, int, int, int], FitClass] = {}

    def vector(self, request: Resources) -> tuple[int, ...]:
        """Per-pod request over the plan's resources; every pod takes one of a node's pods."""
        vector = self.vectors.get(request)
        if vector is None:
            vector = vector_of(self.vectors, self.names, self.index.get("pods"), request)
        return vector

    def demand(self, gang: Gang, size: int) -> Demand:
        """The quota ``gang`` admitted at ``size`` pods takes, every pod set's."""
        vector = self.vector(gang.pod_requests)
        main = size - gang.fixed
        shared = gang.shared
        if not gang.others and shared is None:
            return [(i, amount * main) for i, amount in enumerate(vector)]
        total = [amount * main for amount in vector]
        for other in gang.others:
            for i, amount in enumerate(self.vector(other.requests)):
                total[i] += amount * other.count
        for name, amount in (shared or {}).items():  # once per gang, and no pod of it
            total[self.index[name]] += amount
        return list(enumerate(total))

    def dominant_share(self, gang: Gang, size: int) -> float:
        """The largest share of the cluster's capacity that ``gang`` at ``size`` pods asks for."""
        inverse = self.inverse_capacity
        if not gang.others and gang.shared is None:
            request = self.vector(gang.pod_requests)
            return max((request[i] * inv for i, inv in inverse), default=0.0) * size
        total = dict(self.demand(gang, size))
        return max((total[i] * inv for i, inv in inverse), default=0.0)

    def fit_class(self, gang: Gang) -> FitClass:
        """The fit class of ``gang``'s main pod set."""
        key = gang.screen_key[1:6]
        topology = gang.topology
        if topology is not None:
            if not self.cluster.domains.topology.levels:
                topology = None  # no levels: placed as before topology
            else:
                key = (*key, topology)
        fit = self.fits.get(key)
        if fit is None:
            fit = self._new_fit(
                key,
                gang.pod_requests,
                gang.one_pod_per_node,
                gang.node_selector,
                gang.tolerations,
                gang.node_terms,
                topology,
            )
        return fit

    def set_fit(self, pod_set: PodSet) -> FitClass:
        """The fit class of one of a gang's other pod sets."""
        key = pod_set.screen_key()
        fit = self.fits.get(key)
        if fit is None:
            fit = self._new_fit(
                key,
                pod_set.requests,
                pod_set.one_pod_per_node,
                pod_set.node_selector,
                pod_set.tolerations,
                pod_set.node_terms,
            )
        return fit

    def _new_fit(
        self,
        key: tuple[object, ...],
        requests: Resources,
        one_pod_per_node: bool,
        selector: Mapping[str, str],
        tolerations: tuple[object, ...],
        terms: tuple[object, ...],
        topology: TopologyRequest | None = None,
    ) -> FitClass:
        request = self.vector(requests)
        fit = FitClass(
            request=request,
            nonzero=tuple(i for i, amount in enumerate(request) if amount > 0),
            one_pod_per_node=one_pod_per_node,
            pool=self.cluster.eligible(selector, tolerations, terms),  # type: ignore[arg-type]
            restricted=bool(selector) or bool(tolerations) or bool(terms),
            serial=len(self.fits) + 1,
            topology=topology,
        )
        self.fits[key] = fit
        best, limiting = 0.0, 0
        for i, inverse in self.inverse_capacity:
            share = request[i] * inverse
            if share > best:
                best, limiting = share, i
        for i in fit.nonzero:
            if self.cluster.capacity[i] == 0:
                best, limiting = INF, i
        self.dominant[id(fit)] = (best, limiting)
        return fit

    def reserve(self, fit: FitClass, pods: int) -> Pool:
        """Set nodes aside for a big gang (see `Cluster.reserve`); variants of fit classes
        without an earlier reservation's nodes are forgotten with it."""
        reserved = self.cluster.reserve(fit, pods)
        if self.variants and next(iter(self.variants))[1] != id(reserved):
            self.variants.clear()
        if self.in_domains:
            for key in [key for key in self.in_domains if key[3] and key[3] != id(reserved)]:
                del self.in_domains[key]
        return reserved

    def in_domain(self, fit: FitClass, domain: Domain, reserved: Pool | None) -> FitClass:
        """``fit`` within ``domain`` (and without the ``reserved`` nodes, if given): a class of
        no topology request of its own, asked like any other."""
        key = (id(fit), len(domain.path), domain.index, id(reserved) if reserved else 0)
        variant = self.in_domains.get(key)
        if variant is None:
            pool = self.cluster.within(fit.pool, domain)
            if reserved is not None:
                pool = self.cluster.without(pool, reserved)
            variant = FitClass(
                request=fit.request,
                nonzero=fit.nonzero,
                one_pod_per_node=fit.one_pod_per_node,
                pool=pool,
                restricted=fit.restricted,
            )
            self.in_domains[key] = variant
        return variant

    def restricted(self, fit: FitClass, reserved: Pool) -> FitClass:
        """``fit`` without the reserved nodes (for gangs after the holder in policy order)."""
        key = (id(fit), id(reserved))
        variant = self.variants.get(key)
        if variant is None:
            variant = FitClass(
                request=fit.request,
                nonzero=fit.nonzero,
                one_pod_per_node=fit.one_pod_per_node,
                pool=self.cluster.without(fit.pool, reserved),
                restricted=fit.restricted,
            )
            self.variants[key] = variant
        return variant
