"""Patches applied to plain dicts as the apiserver applies them, for tests that follow an
object through muster's writes and users' updates without a cluster."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


class PatchTestFailed(ValueError):
    """A JSON Patch `test` op that does not hold (the apiserver answers 422)."""


def apply_json_patch(body: Mapping[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """A JSON Patch (add, replace, remove, test) applied to a copy of ``body``."""
    out: dict[str, Any] = copy.deepcopy(dict(body))
    for op in ops:
        *parents, last = [
            part.replace("~1", "/").replace("~0", "~") for part in op["path"].split("/")[1:]
        ]
        node: Any = out
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        key: Any = int(last) if isinstance(node, list) else last
        if op["op"] == "test":
            if (node.get(key) if isinstance(node, dict) else node[key]) != op["value"]:
                raise PatchTestFailed(f"test failed: {op}")
        elif op["op"] == "remove":
            del node[key]
        else:
            node[key] = copy.deepcopy(op["value"])
    return out


def apply_merge_patch(body: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386: null removes) applied to a copy of ``body``."""
    out: dict[str, Any] = copy.deepcopy(dict(body))
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = apply_merge_patch(out[key], value)
        elif isinstance(value, Mapping):
            out[key] = apply_merge_patch({}, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def pruned(value: Any) -> Any:
    """``value`` without null fields: the apiserver stores a field set to null as unset."""
    if isinstance(value, dict):
        return {k: pruned(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [pruned(v) for v in value]
    return value
