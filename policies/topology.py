"""Topology domains: the cluster's levels (node label keys, outermost first, as Kueue's Topology
object lists them: block, rack, kubernetes.io/hostname) and what a gang asks of them.

A node's *domain* at a level is the path of its label values from the outermost level down to
that one (a rack is a rack of its block), so rack names may repeat across blocks. A node missing
one of those labels is in no domain at that level.

A gang asks for a level with `TopologyRequest`: ``required`` (all of its pods in one domain of
that level, or it waits) or preferred (in the fewest domains: one if any has room). A request
names a level by its whole label key or by the key's name part (``rack`` for
``example.com/rack``): a MiniCluster carries its gang fields to its Job as labels, whose values
cannot hold a ``/``. Pure; imports nothing of muster (`policies.model` imports it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "NO_TOPOLOGY",
    "Topology",
    "TopologyError",
    "TopologyRequest",
    "check_level",
    "short_name",
]

_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class TopologyError(ValueError):
    """A level that is not a node label key, or levels that cannot be told apart."""


def short_name(level: str) -> str:
    """The name part of a label key: ``rack`` for ``example.com/rack``."""
    return level.rpartition("/")[2]


def check_level(value: str, where: str) -> str:
    """``value`` as a level: a node label key ([prefix/]name, as Kubernetes checks it)."""
    text = value.strip()
    prefix, slash, name = text.rpartition("/")
    if (
        not _NAME.fullmatch(name)
        or (slash and (not _PREFIX.fullmatch(prefix) or len(prefix) > 253))
        or len(name) > 63
    ):
        raise TopologyError(
            f"{where}: {value!r} is not a node label key; name a topology level such as rack, "
            "block or kubernetes.io/hostname"
        )
    return text


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """Where a gang's pods go: within one domain of ``level`` (``required``), or in as few
    domains of it as free capacity allows (preferred)."""

    level: str
    required: bool

    def describe(self) -> str:
        return f"{'required' if self.required else 'preferred'}: {self.level}"


@dataclass(frozen=True, slots=True)
class Topology:
    """The cluster's topology levels, outermost first; empty: no topology (requests are
    ignored, as before topology existed)."""

    levels: tuple[str, ...] = ()

    @staticmethod
    def parse(levels: Iterable[str], where: str = "topology levels") -> Topology:
        """Levels checked: label keys, no two alike, no two with the same name part."""
        checked = tuple(check_level(level, f"{where}[{i}]") for i, level in enumerate(levels))
        seen: dict[str, str] = {}
        for level in checked:
            short = short_name(level)
            if short in seen:
                raise TopologyError(
                    f"{where}: {seen[short]!r} and {level!r} have the same name {short!r}; a "
                    "gang names a level by either, so levels must differ in it"
                )
            seen[short] = level
        return Topology(checked)

    def depth(self, level: str) -> int:
        """How many levels a domain of ``level`` spans (1 for the outermost); 0 when ``level``
        (a whole key or a name part) is not one of the levels."""
        for i, known in enumerate(self.levels):
            if level == known or level == short_name(known):
                return i + 1
        return 0

    def domain_of(self, labels: Mapping[str, str], depth: int) -> tuple[str, ...] | None:
        """A node's domain at the level of ``depth``: its label values from the outermost
        level down; None if it lacks one of them."""
        path: list[str] = []
        for level in self.levels[:depth]:
            value = labels.get(level)
            if value is None:
                return None
            path.append(value)
        return tuple(path)

    def names(self) -> Sequence[str]:
        return self.levels


def placement_note(
    topology: Topology,
    request: TopologyRequest | None,
    nodes: Iterable[str],
    labels_of: Callable[[str], Mapping[str, str] | None],
) -> str:
    """What an admission's message says of where its pods went among the domains of the level
    its gang asked for: '' without a request (or without levels); " within rack r1"; or, for a
    preferred gang placed over several, " across 2 racks (preferred one rack: none had room
    for all of its pods)"."""
    if request is None or not topology.levels:
        return ""
    depth = topology.depth(request.level)
    if not depth:
        return ""
    name = short_name(topology.levels[depth - 1])
    domains = set()
    for node in nodes:
        labels = labels_of(node)
        domain = None if labels is None else topology.domain_of(labels, depth)
        if domain is not None:
            domains.add(domain)
    if len(domains) == 1:
        return f" within {name} {'/'.join(next(iter(domains)))}"
    if not domains:
        return ""
    why = "" if request.required else f" (preferred one {name}: none had room for all of its pods)"
    return f" across {len(domains)} {name}s{why}"


NO_TOPOLOGY = Topology()
"""No topology levels: the default of a cluster, a plan and the simulator."""
