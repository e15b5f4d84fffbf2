"""The one interface every job kind implements, and the kinds muster knows.

What the webhook, the controller and the kwok engine ask of a kind: the queue an object names,
its gang size and fields (raising `FieldError`: the webhook's refusal, the controller's reason
to keep the gang waiting), the Job the controller reads its gang from, and the words a refusal
uses for the fields that size it. Kueue's `GenericJob` plays this part
(`pkg/controller/jobframework/interface.go`), with one adapter per kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, Protocol

from policies.kinds.fields import GangFields
from policies.kinds.job import JOB
from policies.kinds.minicluster import MINICLUSTER

KindName = Literal["Job", "MiniCluster"]


class Kind(Protocol):
    """A job kind as a gang (implemented by `policies.kinds.job.JobKind` and
    `policies.kinds.minicluster.MiniClusterKind`). Pure: plain dicts in."""

    @property
    def name(self) -> KindName:
        """The object's `kind` (and the gang's, in `muster.dev/gang-kind`)."""
        ...

    @property
    def size_fields(self) -> str:
        """The fields that set the gang's size, as a refusal names them."""
        ...

    @property
    def spreads(self) -> bool:
        """Its pods prefer one per node (a preferred anti-affinity that the planner holds them
        to), besides a required one any kind may have."""
        ...

    def queue(self, obj: Mapping[str, Any]) -> str:
        """The queue the object names: its `muster.dev/queue` label ('' when unlabelled)."""
        ...

    def gang_fields(self, obj: Mapping[str, Any]) -> tuple[int, GangFields]:
        """(gang size, gang fields) of the object; raises `FieldError` saying what to fix."""
        ...

    def gang_job(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """The Job the controller reads the gang from, once the webhook has stamped it."""
        ...


KINDS: Final[Mapping[str, Kind]] = {JOB.name: JOB, MINICLUSTER.name: MINICLUSTER}


def kind_named(name: str | None) -> Kind:
    """The kind a `muster.dev/gang-kind` names; a Job when unset (or unknown)."""
    return KINDS.get(name or "", JOB)
