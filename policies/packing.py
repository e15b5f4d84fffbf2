"""Packing strategies: the order in which the planner offers a gang the nodes it may use.

Placement is first fit over one node order, fixed for a plan (`policies.fit`); the strategy
chooses that order, cluster-wide. Nodes are compared by their free capacity at the start of
the plan, ties by name. A topology request (`policies.domainfit`) still chooses the domain
first; the strategy orders the nodes within it.

``lexicographic`` (the default, muster's behaviour before strategies existed): least free
first, compared resource by resource in name order (``cpu`` before ``memory`` before
``nvidia.com/gpu``), so in practice the node with the least free CPU comes first.

The other strategies compare a *score*: the node's free amount of each resource over the
largest amount any node offers of it, weighted, summed (``pods`` does not count):

- ``best-fit`` (most allocated): lowest score first, every weight 1. Nodes of one shape that
  are partly used all come before the whole ones, so a gang takes a whole node only when the
  partly used nodes it may use hold no more of its pods: it leaves the most whole nodes free.
- ``worst-fit`` (least allocated): highest score first. A gang starts on the emptiest nodes
  it may use: no node it leaves unused with room for a pod scores higher than one it uses.
  Gangs spread over nodes rather than share them.
- ``weighted``: lowest score first, a GPU (a resource named ``gpu`` or ``*/gpu``) weighing
  ``gpu_weight`` times a unit of any other resource: nodes are packed by their free GPUs
  first, so a CPU-only gang fills nodes without free GPUs before any node with some, and
  GPU gangs fill partly used GPU nodes before whole ones.

Pure; imports nothing of muster (`policies.model` imports it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

__all__ = [
    "DEFAULT_GPU_WEIGHT",
    "DEFAULT_PACKING",
    "STRATEGIES",
    "Packing",
    "PackingError",
    "Strategy",
]

Strategy = Literal["lexicographic", "best-fit", "worst-fit", "weighted"]
STRATEGIES: tuple[str, ...] = get_args(Strategy)
DEFAULT_GPU_WEIGHT = 4.0

Vector = tuple[int, ...]
OrderKey = Callable[[Vector], tuple[float, Vector]]


class PackingError(ValueError):
    """A packing strategy or GPU weight that muster does not know."""


def is_gpu(name: str) -> bool:
    """True for a resource that counts as a GPU in the weighted score."""
    return name.rpartition("/")[2] == "gpu"


@dataclass(frozen=True, slots=True)
class Packing:
    """A packing strategy (see the module docstring) and the weight of a GPU in ``weighted``."""

    strategy: Strategy = "lexicographic"
    gpu_weight: float = DEFAULT_GPU_WEIGHT

    @classmethod
    def parse(
        cls,
        strategy: object,
        gpu_weight: object = None,
        where: str = "packing",
        weight_where: str | None = None,
    ) -> Packing:
        """A packing from user input; a bad value raises `PackingError` naming ``where`` (or
        ``weight_where``, for the GPU weight)."""
        if not isinstance(strategy, str) or strategy not in STRATEGIES:
            raise PackingError(
                f"{where}: {strategy!r} is not a packing strategy; use one of: "
                + ", ".join(STRATEGIES)
            )
        weight = DEFAULT_GPU_WEIGHT
        there = weight_where or f"{where} GPU weight"
        if gpu_weight is not None:
            if isinstance(gpu_weight, bool) or not isinstance(gpu_weight, int | float | str):
                raise PackingError(f"{there}: {gpu_weight!r} is not a number")
            try:
                weight = float(gpu_weight)
            except ValueError:
                raise PackingError(f"{there}: {gpu_weight!r} is not a number") from None
            if not math.isfinite(weight) or weight <= 0:
                raise PackingError(f"{there}: {gpu_weight!r} must be a positive number, e.g. 4")
        return cls(strategy, weight)  # type: ignore[arg-type]

    def describe(self) -> str:
        if self.strategy == "weighted":
            return f"weighted (gpu weight {self.gpu_weight:g})"
        return self.strategy

    def order_key(
        self, names: Sequence[str], shapes: Sequence[Sequence[int]], unlimited: int
    ) -> OrderKey | None:
        """The sort key of a free vector in fit order (smallest first), or None for
        ``lexicographic`` (the vector itself is its key). ``names``: the vector's resources;
        ``shapes``: the nodes' allocatable vectors; ``unlimited``: an undeclared amount."""
        if self.strategy == "lexicographic":
            return None
        weights: list[tuple[int, float]] = []
        for i, name in enumerate(names):
            if name == "pods":
                continue
            largest = max((shape[i] for shape in shapes if shape[i] < unlimited), default=0)
            if largest <= 0:
                continue
            weight = self.gpu_weight if self.strategy == "weighted" and is_gpu(name) else 1.0
            weights.append((i, weight / largest))
        sign = -1.0 if self.strategy == "worst-fit" else 1.0
        cache: dict[Vector, tuple[float, Vector]] = {}

        def key(vector: Vector) -> tuple[float, Vector]:
            found = cache.get(vector)
            if found is None:
                if len(cache) >= 65536:
                    cache.clear()
                score = math.fsum(vector[i] * w for i, w in weights)
                found = cache[vector] = (sign * score, vector)
            return found

        return key


DEFAULT_PACKING = Packing()
