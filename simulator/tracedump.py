"""Writing a trace document in the compact style of the shipped traces."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any


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
