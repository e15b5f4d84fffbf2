"""The workload kinds muster admits: one entry per module of `policies.kinds` that implements
`policies.kinds.kind.Kind` (and, for a kind whose gang object is a set of pods, in `POD_GANGS`).
The webhook serves, and the controller watches, what is here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from policies.kinds.job import JOB
from policies.kinds.jobset import JOBSET
from policies.kinds.kind import Kind
from policies.kinds.members import PodGang
from policies.kinds.minicluster import MINICLUSTER
from policies.kinds.podgroup import PODGROUP

KINDS: Final[Mapping[str, Kind]] = {
    kind.name: kind for kind in (JOB, MINICLUSTER, JOBSET, PODGROUP)
}
"""Every kind muster admits, by name."""
POD_GANGS: Final[Mapping[str, PodGang]] = {kind.name: kind for kind in (PODGROUP,)}
"""The kinds whose gang object is a set of pods (`policies.kinds.members`), by name."""


def pod_gang(kind: Kind) -> PodGang | None:
    """``kind`` as a kind whose gang object is a set of pods; None for any other kind."""
    return POD_GANGS.get(kind.name)


def kinds_named(names: Iterable[str]) -> list[Kind]:
    """The kinds ``names`` name (`kind_named`: a Job for an unknown one), each once, by name."""
    return sorted({kind_named(name) for name in names}, key=lambda kind: kind.name)


def made_by_operator(kind: Kind) -> bool:
    """Its operator makes its gang object (a MiniCluster's Job): the webhook keeps the stamps
    of its objects for the gang objects they make."""
    return not kind.holds_itself and kind.name not in POD_GANGS


def kind_named(name: str | None) -> Kind:
    """The kind a `muster.dev/gang-kind` names; a Job when unset (or unknown)."""
    return KINDS.get(name or "", JOB)


def owner_of(meta: Mapping[str, Any]) -> tuple[Kind, str] | None:
    """(kind, name) of an object's controller owner when that owner is a kind muster admits (a
    MiniCluster's Job, a JobSet's Jobs); None otherwise. Matched by kind and API group: another
    project's `MiniCluster` is not the Flux Operator's."""
    for ref in meta.get("ownerReferences") or []:
        if not ref.get("controller"):
            continue
        kind = KINDS.get(str(ref.get("kind") or ""))
        group = str(ref.get("apiVersion") or "").split("/")[0]
        if kind is not None and group == kind.api.group and "/" in str(ref.get("apiVersion")):
            return kind, str(ref.get("name") or "")
        return None
    return None
