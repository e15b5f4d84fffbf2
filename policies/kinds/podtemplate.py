"""What muster reads from a pod template (or a pod's spec): the requests of one pod, its
tolerations, whether its pods keep one per node, its required node affinity. Pure: plain dicts
in, as the API delivers them; every kind reads its pod sets with these."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.kinds.pinning import HOSTNAME
from policies.labels import holds
from policies.model import NodeTerm, Toleration
from policies.resources import Resources


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """A pod's requests: the sum over containers, at least the largest init container."""
    total = Resources()
    for container in spec.get("containers") or []:
        requests = (container.get("resources") or {}).get("requests") or {}
        if requests:
            total = total + Resources.parse(requests, field="resources.requests")
    for container in spec.get("initContainers") or []:
        requests = (container.get("resources") or {}).get("requests") or {}
        if requests:
            init = Resources.parse(requests, field="initContainers.resources.requests")
            total = Resources({r: max(total[r], init[r]) for r in set(total) | set(init)})
    return total


def tolerations_of(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(
            key=t.get("key") or "",
            operator="Exists" if t.get("operator") == "Exists" else "Equal",
            value=t.get("value") or "",
            effect=t.get("effect") or "",
        )
        for t in spec.get("tolerations") or []
    )


def one_pod_per_node(
    spec: Mapping[str, Any], labels: Mapping[str, str], *, preferred: bool = False
) -> bool:
    """True when the pod template has required anti-affinity to its own pods per hostname.

    With `preferred` (a kind that `spreads`: a MiniCluster's Job), a preferred anti-affinity
    counts too (see `policies.kinds.minicluster.MiniClusterKind.spreads`).
    """
    anti = (spec.get("affinity") or {}).get("podAntiAffinity") or {}
    terms = list(anti.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
    if preferred:
        terms.extend(
            weighted.get("podAffinityTerm") or {}
            for weighted in anti.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        )
    return any(
        term.get("topologyKey") == HOSTNAME and selects(term.get("labelSelector") or {}, labels)
        for term in terms
    )


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """True when a non-empty label selector (matchLabels, matchExpressions) matches `labels`."""
    wanted = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not wanted and not expressions:
        return False
    if not all(labels.get(k) == v for k, v in wanted.items()):
        return False
    return all(
        holds(labels, str(e.get("key") or ""), str(e.get("operator") or ""), e.get("values") or ())
        for e in expressions
    )


def node_terms(affinity: Mapping[str, Any] | None) -> tuple[NodeTerm, ...]:
    """The required node affinity's terms as the planner matches them (matchExpressions;
    `matchFields` name single nodes, which the planner does not model, and are left out)."""
    required = ((affinity or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms: list[NodeTerm] = []
    for term in required.get("nodeSelectorTerms") or []:
        terms.append(
            tuple(
                (
                    str(e.get("key") or ""),
                    str(e.get("operator") or ""),
                    tuple(str(v) for v in e.get("values") or ()),
                )
                for e in term.get("matchExpressions") or []
            )
        )
    return tuple(terms)
