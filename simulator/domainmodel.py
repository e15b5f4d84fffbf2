"""The trace's topology domains as the in-process engine sees them (`DomainModel`): the domain
of each node at the *measured* level (the trace's `crossDomainSlowdown` level, else its
innermost level), how many domains a started gang spans, its runtime (times the slowdown
factor when it spans more than one), and how long whole domains stood free (no pod on any of
their nodes): the room a gang needing a whole domain would have found.

The engine owns time and the cluster model, never the policy: the planner places gangs with or
without knowing the levels (`EngineConfig.topology_blind`); the slowdown holds either way.
"""

from __future__ import annotations

from typing import Any

from simulator.podscheduler import ClusterModel
from simulator.records import GangRecord
from simulator.tracemodel import Trace

__all__ = ["DomainModel"]


class DomainModel:
    """Domains of the measured level, gangs' spread over them, and free whole domains."""

    __slots__ = (
        "_cluster",
        "_empty",
        "_free_since",
        "_last",
        "_members",
        "domain_of",
        "factor",
        "free_seconds",
        "level",
    )

    def __init__(self, trace: Trace, cluster: ClusterModel) -> None:
        topology = trace.topology
        slowdown = trace.slowdown
        self.level = slowdown.level if slowdown is not None else topology.levels[-1]
        self.factor = slowdown.factor if slowdown is not None else 1.0
        depth = topology.depth(self.level)
        index: dict[tuple[str, ...], int] = {}
        self.domain_of: list[int] = []  # node index -> domain, -1: in none
        self._members: list[list[int]] = []
        for n, node in enumerate(cluster.nodes):
            path = topology.domain_of(node.labels, depth)
            if path is None:
                self.domain_of.append(-1)
                continue
            d = index.get(path)
            if d is None:
                d = index[path] = len(self._members)
                self._members.append([])
            self._members[d].append(n)
            self.domain_of.append(d)
        self._cluster = cluster
        self._empty = [list(vector) for vector in cluster.free]  # at the start: nothing runs
        self.free_seconds = 0.0  # domain-seconds of whole domains free
        self._free_since = 0
        self._last: float | None = None

    def spread(self, record: GangRecord) -> int:
        """Domains the gang's bound pods span (a node in no domain counts as one of its own)."""
        nodes = set(record.bound)
        for part in record.sets:
            nodes.update(part.bound)
        domain_of = self.domain_of
        return len({domain_of[n] if domain_of[n] >= 0 else -1 - n for n in nodes})

    def runtime(self, record: GangRecord) -> float:
        """``record``'s runtime as it starts now, noting its spread on the record."""
        record.domains = self.spread(record)
        return record.runtime * self.factor if record.domains > 1 else record.runtime

    def sample(self, now: float) -> None:
        """Count the whole free domains from the last instant to ``now``, then look again."""
        if self._last is not None:
            self.free_seconds += self._free_since * (now - self._last)
        self._last = now
        free, empty = self._cluster.free, self._empty
        self._free_since = sum(
            1 for members in self._members if all(free[n] == empty[n] for n in members)
        )

    def figures(self, gangs: list[GangRecord], span: float) -> dict[str, Any]:
        """The report's topology figures (docs/simulator.md)."""
        started = [r for r in gangs if r.domains]
        required = [r for r in started if r.gang.topology is not None and r.gang.topology.required]
        one = sum(1 for r in started if r.domains == 1)
        return {
            "level": self.level,
            "domains": len(self._members),
            "slowdown": self.factor,
            "gangs_started": len(started),
            "within_one_domain": one,
            "within_one_domain_share": round(one / len(started), 4) if started else None,
            "required_within_one_domain_share": (
                round(sum(1 for r in required if r.domains == 1) / len(required), 4)
                if required
                else None
            ),
            "spread_gangs": len(started) - one,
            "whole_domains_free_mean": round(self.free_seconds / span, 3) if span else None,
        }
