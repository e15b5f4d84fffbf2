"""Whether a Job can be admitted as a smaller gang: one rule, for the webhook and the controller."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def elastic_problem(spec: Mapping[str, Any], size: int, minimum: int) -> str | None:
    """Why this Job cannot be admitted smaller than its size, or None if it can (or need not).

    A smaller admission lowers parallelism; a NonIndexed Job's completions cannot change, so
    it would run its other completions as a second wave instead of one gang."""
    if minimum >= size:
        return None
    completions = spec.get("completions")
    if completions is None or spec.get("completionMode") == "Indexed":
        return None
    return (
        f"min-members {minimum} is below the gang's {size} pods, but a NonIndexed Job cannot "
        f"run fewer than its {completions} completions at once: admitted smaller it would run "
        "the rest as a second wave. Set spec.completionMode: Indexed (muster then lowers "
        "parallelism and completions together), or remove muster.dev/min-members"
    )
