"""The one rule for whether labels satisfy a requirement `key OPERATOR values`: label selectors
(`policies.selectors`: a Queue's namespaceSelector), a pod's required node affinity
(`policies.model.node_affinity_holds`) and the pod affinity terms a kind's template carries
(`policies.kinds.podtemplate.selects`) all ask it, as Kubernetes does.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping


def holds(labels: Mapping[str, str], key: str, operator: str, values: Collection[str]) -> bool:
    """`In`, `NotIn` (which also holds when the label is absent), `Exists`, `DoesNotExist`, and
    for node selectors `Gt` and `Lt` (integer values; false when either is not one). An unknown
    operator never holds."""
    value = labels.get(key)
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and values:
        try:
            number, bound = int(value), int(next(iter(values)))
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    return False
