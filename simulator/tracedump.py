"""Writing a trace document in the compact style of the shipped traces, and a gang's pod sets
as a trace job's `podSets` (what gangs.csv's `pod_sets` column holds)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from policies import PodSet, Toleration
from policies.resources import format_quantity, parse_quantity


def dump_yaml(document: Mapping[str, Any]) -> str:
    """Write a trace document in the compact style of the shipped traces (one job per line).

    Hand-written because yaml.dump is slow for 100k-line traces and puts each field on a line.
    """
    lines: list[str] = []
    for key, value in document.items():
        if key in ("cluster",):
            lines.append(f"{key}:")
            lines.append("  nodes:")
            for node in value["nodes"]:
                lines.append(f"    - {_flow(node)}")
        elif isinstance(value, list):
            lines.append(f"{key}:")
            lines.extend(f"  - {_flow(item)}" for item in value)
        else:
            lines.append(f"{key}: {_flow(value)}")
    return "\n".join(lines) + "\n"


def _flow(value: object) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if value is None:
        return "null"  # e.g. a queue's `sizeRatio: null` (off)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    if _PLAIN_RE.fullmatch(text) and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text)


_PLAIN_RE = re.compile(r"[A-Za-z][A-Za-z0-9_./-]*")
_YAML_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "y", "n", "null"})


def pod_sets_document(main: PodSet, others: Sequence[PodSet]) -> list[dict[str, Any]]:
    """A gang's pod sets as a trace job's `podSets` (docs/simulator.md): the main set first,
    without `count` (it takes the rest of the job's size), then the others; fields at their
    default are left out. `simulator.traceparse` reads it back to the same pod sets."""
    document = [_pod_set_document(main, count=False)]
    document.extend(_pod_set_document(other, count=True) for other in others)
    return document


def _pod_set_document(pod_set: PodSet, *, count: bool) -> dict[str, Any]:
    item: dict[str, Any] = {"name": pod_set.name}
    if count:
        item["count"] = pod_set.count
    item["podRequests"] = {
        name: exact_quantity(name, amount) for name, amount in pod_set.requests.items() if amount
    }
    if pod_set.one_pod_per_node:
        item["onePodPerNode"] = True
    if pod_set.node_selector:
        item["nodeSelector"] = dict(pod_set.node_selector)
    if pod_set.tolerations:
        item["tolerations"] = [_toleration_document(t) for t in pod_set.tolerations]
    return item


def _toleration_document(toleration: Toleration) -> dict[str, str]:
    item = {
        "key": toleration.key,
        "operator": toleration.operator,
        "value": toleration.value,
        "effect": toleration.effect,
    }
    return {name: value for name, value in item.items() if value}


def exact_quantity(resource: str, amount: int) -> str:
    """An amount in internal units as a quantity that parses back to it exactly: the short form
    (`6`, `500m`, `20Gi`) when it does, else every digit."""
    short = format_quantity(resource, amount)
    if parse_quantity(short, field=resource, resource=resource) == amount:
        return short
    return f"{amount}m" if resource == "cpu" else str(amount)
