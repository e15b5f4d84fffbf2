"""One request the controller sends for a gang (`Write`): what the pure builders of
`policies.kinds.release`, `policies.kinds.members` and `policies.kinds.nativegroups` return and
`admission.writes.Writer` sends, in order; and what one admission sets (`Release`), which they
build from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from policies.kinds.kind import ApiKind


class Target(NamedTuple):
    """An object of the gang's namespace other than the gang object (a PodGroup)."""

    api: ApiKind
    name: str


class Write(NamedTuple):
    """One request for a gang: a JSON Patch (``ops``), or a merge patch (``body``) of the gang
    object or of its ``subresource``; or, with ``target``, a server-side apply of ``body`` (the
    whole object as muster wants it: created if missing, else the fields muster owns set) to
    that object. A guarded JSON Patch's failed `test` means the object is not what the caller
    saw."""

    what: str  # for logs and the writes metric: admit, evict, preempt, restore, clear-start
    ops: list[dict[str, Any]] | None = None
    body: dict[str, Any] | None = None
    subresource: str = ""
    owner: bool = False
    """To the object that made the gang object (a MiniCluster), not to the gang object."""
    target: Target | None = None
    """Applied to this object, not written to the gang object (`body` is the object)."""
    record: str = ""
    """To the gang's record of this name (a GangRecord in its namespace), not to the gang
    object: a gang whose gang object is a set of pods (`policies.kinds.members`)."""
    create: bool = False
    """Create the record with ``body``; one that exists already is a conflict."""
    guarded: bool = False
    """A merge patch carrying the `metadata.resourceVersion` it was made from: a 409 Conflict
    means the object is not what the caller saw (as a failed `test` of a JSON Patch)."""
    members: str = ""
    """Delete the gang's member pods muster released (not held at its gate), selected by this
    label selector: a pod cannot be gated again, so a pod gang is evicted by deleting them."""
    missing: dict[str, Any] | None = None
    """The record to create when the merge patch finds none."""


@dataclass(frozen=True)
class Release:
    """What one admission sets on a gang object."""

    when: float
    size: int
    placements: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Pod set name -> node name -> pods; empty: not pinned (node-blind, or pinning off)."""
    hostnames: Mapping[str, str | None] = field(default_factory=dict)
    """The planned nodes' `kubernetes.io/hostname` labels (None: the node has none)."""
    gate: bool = True
    """Gate the pod templates (each pod then waits for muster to name its node)."""
    started: bool = False
    """The object ran before (a Job's status.startTime): its kind's `unfreeze` comes first."""
