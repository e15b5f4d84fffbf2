"""The one interface every workload kind implements, and the kinds muster knows.

A kind owns its whole life in muster (Kueue's `GenericJob` plus what its reconciler does per
kind plays this part, `pkg/controller/jobframework/interface.go`): what the webhook asks of a
created object (its queue, its gang size and fields, refusing a bad one, the patch that holds
it), how the controller reads the gang from the stored object (its pod templates, each one pod
set; what the kind's own status says), and what a release, an eviction and a restore change in
the kind's own fields. Pure: plain dicts in, values, patches or `FieldError` out; `admission/`
sends the patches and watches the objects (`policies.kinds.release` builds the patches every
kind shares, `policies.kinds.reading` reads every kind's gang).

The kinds muster admits are registered in `policies.kinds.registry`. Adding a kind is a module
here implementing `Kind`, and its entry there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from policies.kinds.changes import FieldChange
from policies.kinds.drafts import Draft
from policies.kinds.fields import GangFields
from policies.kinds.pinning import Original

KindName = str
"""A kind's name: its objects' `kind` (and the gang's, in `muster.dev/gang-kind`); the kinds
muster admits are `policies.kinds.registry.KINDS`' keys."""


@dataclass(frozen=True, slots=True)
class ApiKind:
    """Where the API serves a kind's objects (namespaced)."""

    group: str  # '' for the core group
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """One pod template of a gang object, and the pod set it makes."""

    name: str
    """The pod set's name: '' for a kind with one template, else the kind's own name for it (a
    JobSet's replicated Job)."""
    pointer: str
    """The JSON Pointer of the template (its `metadata` and `spec`) in the object."""
    count: int
    """Pods it makes when the gang runs at full size."""
    template: Mapping[str, Any]
    waves: bool = False
    """Its pods run in waves, not all at once (a Job whose completions exceed its parallelism):
    its last wave may be smaller than the set, which no native gang minimum would ever let
    bind, so such a gang is never linked to PodGroups (`policies.kinds.nativegroups`)."""


@dataclass(frozen=True, slots=True)
class KindStatus:
    """What a gang object's own status says."""

    finished: bool = False  # it ended (completed or failed)
    ready: int = 0  # pods ready, where the kind counts them (else the controller counts pods)
    succeeded: int = 0
    started: bool = False  # it started running since it was last released
    active: int = 0
    """Pods its own controller still counts as running (a Job's status.active): Kubernetes 1.36
    and later let a suspended Job's template change only once none are
    (MutableSchedulingDirectivesForSuspendedJobs, on by default)."""
    start_time: float | None = None
    end_time: float | None = None
    incomplete: str | None = None
    """The gang object is not whole yet (a pod group with fewer pods than its size): why. The
    gang is kept out of the plan with this reason until `incomplete_until`, then fails."""
    incomplete_until: float | None = None


class Kind(Protocol):
    """A workload kind as a gang (see the module docstring). Implemented by
    `policies.kinds.job.JobKind`, `policies.kinds.minicluster.MiniClusterKind`,
    `policies.kinds.jobset.JobSetKind` and `policies.kinds.podgroup.PodGroupKind` (whose gang
    object is assembled from pods: `policies.kinds.members.PodGang`)."""

    @property
    def name(self) -> KindName:
        """The object's `kind` (and the gang's, in `muster.dev/gang-kind`)."""
        ...

    @property
    def api(self) -> ApiKind: ...

    @property
    def size_fields(self) -> str:
        """The fields that set the gang's size, as a refusal names them."""
        ...

    @property
    def spreads(self) -> bool:
        """Its pods prefer one per node (a preferred anti-affinity that the planner holds them
        to), besides a required one any kind may have."""
        ...

    @property
    def holds_itself(self) -> bool:
        """The object is the gang object muster holds and releases (a Job, a JobSet); False for
        a kind whose operator makes the gang object (a MiniCluster's Job), or whose gang object
        is a set of pods (a pod group: `policies.kinds.members`)."""
        ...

    @property
    def pins_affinity(self) -> bool:
        """A release may add a required node affinity to the kind's pod templates (the kind's
        API allows changing it while held); else only the placement gate and each pod's own
        node selector pin it."""
        ...

    @property
    def unfreeze(self) -> Mapping[str, Any] | None:
        """The status merge patch that lets a held gang object's pod templates change again
        after it ran (a Job's `status.startTime`); None if the kind needs none."""
        ...

    @property
    def operator(self) -> str | None:
        """The operator that runs its objects, by the name `muster cluster up --operators`
        takes ("jobset", "flux"); None for a kind Kubernetes runs by itself."""
        ...

    @property
    def labels_pod_sets(self) -> bool:
        """Its pods carry their pod set's name (`muster.dev/pod-set`), even for a gang of one set
        (a kind of several pod templates: a JobSet, a pod group)."""
        ...

    def compose(self, draft: Draft) -> list[dict[str, Any]]:
        """The object (or, for a pod group, the pods) that submits ``draft`` as this kind: what
        the kwok engine and the benches create. Raises ValueError for a draft the kind cannot
        run (several pod sets for a kind of one)."""
        ...

    # --- the webhook, at create ------------------------------------------------------------

    def queue(self, obj: Mapping[str, Any]) -> str:
        """The queue the object names: its `muster.dev/queue` label ('' when unlabelled)."""
        ...

    def gang_fields(self, obj: Mapping[str, Any]) -> tuple[int, GangFields]:
        """(gang size, gang fields) of the object; raises `FieldError` saying what to fix."""
        ...

    def hold(
        self,
        obj: Mapping[str, Any],
        queue: str,
        stamp: str,
        groups: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """The merge patch that holds a created object for muster: suspended (or, for a kind
        that does not hold itself, labelled so its gang object is), queue and stamp written,
        every pod template labelled with the gang and its pod set, and, with ``groups`` (pod
        set -> PodGroup name, `policies.kinds.nativegroups.group_names`), each pod template linked
        to its set's PodGroup (`spec.schedulingGroup.podGroupName`: immutable once stored). A
        kind whose operator makes the gang object links nothing here (its gang object is
        linked when it is created)."""
        ...

    def gang_object(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """The gang object the controller will read, as stored after the webhook's patch (the
        object itself; a MiniCluster's Job)."""
        ...

    # --- the webhook, at update ------------------------------------------------------------

    def admission_change(
        self, old: Mapping[str, Any], new: Mapping[str, Any]
    ) -> FieldChange | None:
        """The first field that muster's admission decided on and that an update changes
        (``old``: the stored object, ``new``: the update), named as the kind names it; None
        when the update changes none of them. The webhook refuses such an update of an
        admitted, running gang, and of a kind that does not hold itself at any time (its
        gang object was made from it at create: `webhook.decision.decide_update`)."""
        ...

    # --- the controller, from the stored gang object ---------------------------------------

    def original(self, spec: Mapping[str, Any]) -> Original:
        """What a release may change, as the spec has it now (before any release)."""
        ...

    def templates(self, spec: Mapping[str, Any], original: Original) -> tuple[PodTemplate, ...]:
        """The gang's pod templates, their counts as the user wrote them (``original``)."""
        ...

    def status(self, body: Mapping[str, Any]) -> KindStatus: ...

    def runtime_limit(self, spec: Mapping[str, Any]) -> float | None:
        """Seconds the gang may run once released (Kubernetes ends it then), or None; raises
        `policies.durations.DurationError` for a bad value."""
        ...

    # --- what a release, and its undoing, change of the kind's own fields ------------------

    def resize(self, original: Original, spec: Mapping[str, Any], size: int) -> dict[str, int]:
        """The fields (JSON Pointer -> value) that make the gang run exactly ``size`` pods once,
        admitted smaller than it asked; empty at its own size."""
        ...

    def put_back(self, original: Original, spec: Mapping[str, Any]) -> dict[str, int]:
        """The fields (JSON Pointer -> value) that undo `resize`, where they differ now."""
        ...

    def resize_owner(self, size: int, full: int) -> dict[str, Any] | None:
        """For a kind whose operator makes its gang object (a MiniCluster): the merge patch of
        the kind's own object that has its operator make the gang object run ``size`` pods of
        its ``full`` size (an operator that keeps its object's size would undo a resize of the
        gang object alone); None for a kind that holds itself."""
        ...
