"""Whether a gang's pod sets fit the cluster *together* with nothing else running: the part of
the NeverFits screen (step 2 of a plan) that a gang of several pod sets needs, as each set alone
may fit the empty cluster where all of them do not.

The planner's own placement (`policies.overlay.PlanOverlay` over a `policies.fit.Cluster` of
the same nodes, empty) places the other pod sets whole, then the main one at the gang's minimum,
in the order a plan does; what it cannot place there, no plan places."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from policies.fit import Cluster, FitClass
from policies.model import Gang, Node, PodSet
from policies.overlay import PlanOverlay
from policies.resources import Resources

__all__ = ["EmptyCluster"]


class EmptyCluster:
    """The nodes of a plan state with nothing running on them, for `holds` (kept while the
    nodes are; its answers are cached per gang shape and minimum)."""

    __slots__ = ("_answers", "_cluster", "_overlay", "_vector")

    def __init__(self, nodes: Sequence[Node], names: list[str], vector: object) -> None:
        empty = [dataclasses.replace(node, used=Resources()) for node in nodes]
        self._cluster = Cluster(empty, names)
        self._overlay = PlanOverlay(self._cluster)
        self._vector = vector  # FitCatalog.vector: a per-pod request over the plan's resources
        self._answers: dict[tuple[object, int], bool] = {}

    def holds(self, gang: Gang, minimum: int) -> bool:
        """True if ``gang``'s other pod sets (whole) and its main one (at ``minimum`` pods in
        all) fit the empty cluster together."""
        key = (gang.screen_key, minimum)
        answer = self._answers.get(key)
        if answer is None:
            if len(self._answers) >= 4096:
                self._answers.clear()
            main = dataclasses.replace(gang.main, count=minimum - gang.fixed)
            answer = self._answers[key] = self._places((*gang.others, main))
        return answer

    def _places(self, sets: Sequence[PodSet]) -> bool:
        overlay = self._overlay
        overlay.begin()
        for pod_set in sets:
            request = self._vector(pod_set.requests)  # type: ignore[operator]
            fit = FitClass(
                request=request,
                nonzero=tuple(i for i, amount in enumerate(request) if amount > 0),
                one_pod_per_node=pod_set.one_pod_per_node,
                pool=self._cluster.eligible(
                    pod_set.node_selector, pod_set.tolerations, pod_set.node_terms
                ),
                restricted=False,
            )
            if overlay.place(fit, pod_set.count, pod_set.count) is None:
                return False
        return True
