"""Kubernetes label selectors (`matchLabels` + `matchExpressions`), parsed and matched purely.

A Queue's `spec.namespaceSelector` says which namespaces' gangs may use it, with the semantics of
`metav1.LabelSelector`: every `matchLabels` pair and every expression must hold; an empty
selector matches every namespace; operators `In`, `NotIn`, `Exists`, `DoesNotExist`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from policies.labels import holds
from policies.model import PolicyError

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist"]
_OPERATORS: tuple[Operator, ...] = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def holds(self, labels: Mapping[str, str]) -> bool:
        return holds(labels, self.key, self.operator, self.values)

    def describe(self) -> str:
        if self.operator == "Exists":
            return self.key
        if self.operator == "DoesNotExist":
            return f"!{self.key}"
        word = "in" if self.operator == "In" else "notin"
        return f"{self.key} {word} ({','.join(sorted(self.values))})"


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.holds(labels) for r in self.requirements)

    def describe(self) -> str:
        """kubectl's selector syntax, e.g. `team=a,tier in (gold,silver)`; `everything` if empty."""
        parts = []
        for r in self.requirements:
            if r.operator == "In" and len(r.values) == 1:
                parts.append(f"{r.key}={next(iter(r.values))}")
            else:
                parts.append(r.describe())
        return ",".join(parts) or "everything"


def parse_label_selector(value: Any, field: str) -> LabelSelector:
    """A LabelSelector from its API form; raise PolicyError naming `field` if malformed."""
    if value is None:
        return LabelSelector()
    if not isinstance(value, Mapping):
        raise PolicyError(f"{field}: must be a label selector (matchLabels, matchExpressions)")
    unknown = set(value) - {"matchLabels", "matchExpressions"}
    if unknown:
        raise PolicyError(
            f"{field}: unknown field(s) {', '.join(sorted(unknown))}; "
            "a label selector has matchLabels and matchExpressions"
        )
    requirements: list[Requirement] = []
    labels = value.get("matchLabels")
    labels = {} if labels is None else labels
    if not isinstance(labels, Mapping):
        raise PolicyError(f"{field}.matchLabels: must be a map of label keys to values")
    for key, wanted in sorted(labels.items()):
        if not isinstance(key, str) or not isinstance(wanted, str):
            raise PolicyError(f"{field}.matchLabels: {key!r}: keys and values must be strings")
        requirements.append(Requirement(key, "In", frozenset({wanted})))
    expressions = value.get("matchExpressions")
    expressions = [] if expressions is None else expressions
    if not isinstance(expressions, list):
        raise PolicyError(f"{field}.matchExpressions: must be a list")
    for i, expression in enumerate(expressions):
        where = f"{field}.matchExpressions[{i}]"
        if not isinstance(expression, Mapping) or not isinstance(expression.get("key"), str):
            raise PolicyError(f"{where}: needs a key (string) and an operator")
        operator = expression.get("operator")
        if operator not in _OPERATORS:
            raise PolicyError(
                f"{where}.operator: {operator!r} is not one of {', '.join(_OPERATORS)}"
            )
        values = expression.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise PolicyError(f"{where}.values: must be a list of strings")
        if operator in ("In", "NotIn") and not values:
            raise PolicyError(f"{where}.values: {operator} needs at least one value")
        if operator in ("Exists", "DoesNotExist") and values:
            raise PolicyError(f"{where}.values: {operator} takes no values")
        requirements.append(Requirement(expression["key"], operator, frozenset(values)))
    return LabelSelector(tuple(requirements))
