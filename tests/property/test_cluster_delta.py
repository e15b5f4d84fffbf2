"""`policies.fit.Cluster.take_placement` (a gang's whole placement taken or given back in one
pass, steps looked up in a table) leaves the cluster as building it from scratch with the same
holdings does: the same free vectors, and in every pool the same buckets in the same order.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import Node
from policies.fit import Cluster, FitClass, Pool
from policies.overlay import PlanOverlay

NAMES = ["cpu", "memory", "pods"]
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_REQUESTS = st.sampled_from(((500, 2**30, 1), (1_000, 0, 1), (250, 2**29, 1), (0, 0, 0)))


def _cluster(draw: st.DrawFn) -> list[Node]:
    from tests.strategies import nodes

    return draw(nodes(max_nodes=8, with_pods=True))


def _buckets(pool: Pool) -> list[tuple[tuple[int, ...], list[int]]]:
    assert sorted(pool.buckets) == pool.vectors  # the fit order is the sorted bucket vectors
    return [(vector, pool.buckets[vector].sorted()) for vector in pool.vectors]


@st.composite
def _deltas(
    draw: st.DrawFn,
) -> tuple[list[Node], list[tuple[dict[str, int], tuple[int, ...], int]]]:
    """Nodes, then a sequence of (placement, per-pod request, sign): gangs taken, some given
    back later (never more than was taken: a placement is given back at most once)."""
    cluster = _cluster(draw)
    names = [node.name for node in cluster] + ["gone"]  # a node the cluster does not know
    taken: list[tuple[dict[str, int], tuple[int, ...]]] = []
    steps: list[tuple[dict[str, int], tuple[int, ...], int]] = []
    for _ in range(draw(st.integers(1, 12))):
        if len(taken) > 0 and draw(st.booleans()):
            placement, request = taken.pop(draw(st.integers(0, len(taken) - 1)))
            steps.append((placement, request, -1))
            continue
        chosen = draw(st.lists(st.sampled_from(names), min_size=0, max_size=4, unique=True))
        placement = {name: draw(st.integers(1, 3)) for name in chosen}
        request = draw(_REQUESTS)
        taken.append((placement, request))
        steps.append((placement, request, 1))
    return cluster, steps


def _fit(pool: Pool) -> FitClass:
    """A fit class of one-cpu pods over ``pool``."""
    return FitClass(
        request=(1_000, 0, 1), nonzero=(0, 2), one_pod_per_node=False, pool=pool, restricted=False
    )


@SETTINGS
@given(_deltas())
def test_take_placement_matches_a_cluster_built_with_the_holdings(
    world: tuple[list[Node], list[tuple[dict[str, int], tuple[int, ...], int]]],
) -> None:
    nodes, steps = world
    kept = Cluster(nodes, NAMES)
    pools = [kept.eligible({}, ()), kept.eligible({"pool": "a"}, ())]
    held: dict[str, list[int]] = {}
    overlay = PlanOverlay(kept)
    for placement, request, sign in steps:
        kept.take_placement(placement, request, sign)
        for name, pods in placement.items():
            if name in kept.index:
                amounts = held.setdefault(name, [0, 0, 0])
                for i, amount in enumerate(request):
                    amounts[i] += sign * pods * amount
        fresh = Cluster(nodes, NAMES, held)
        assert kept.free == fresh.free
        fresh_pools = [fresh.eligible({}, ()), fresh.eligible({"pool": "a"}, ())]
        for pool, expected in zip(pools, fresh_pools, strict=True):
            assert _buckets(pool) == _buckets(expected)
        # A plan that begins after the change sees it (fit answers cached before are stale).
        overlay.begin()
        fresh_overlay = PlanOverlay(fresh)
        fresh_overlay.begin()
        for pool, expected in zip(pools, fresh_pools, strict=True):
            assert overlay.room(_fit(pool)) == fresh_overlay.room(_fit(expected))
