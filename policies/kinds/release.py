"""The writes that release, evict, preempt and restore a gang object, for every kind that holds
itself by `spec.suspend` (a Job, a MiniCluster's Job, a JobSet). Pure: each function returns the
`Write`s to send, in order; `admission.writes.Writer` sends them to the object's path.

A release unsuspends the object, records the admission (`muster.dev/admitted`), and, with a
placement, saves what it changes (`muster.dev/restore`), records where each pod set goes
(`muster.dev/placement`), gates each pod template (each pod waits for muster to name its node)
and, for a kind whose API allows it, pins each template to its set's planned nodes
(`policies.kinds.pinning.pinned_affinity`); an elastic gang admitted smaller gets the kind's
`resize` fields. Eviction and preemption suspend it again and record why; `restore` then puts
back what the release changed, read from the object itself (`muster.dev/restore`).

Guarded JSON Patches `test` the object's uid and `spec.suspend`: a patch made from a stale view
(a restarted or second controller) fails ("conflict") instead of admitting twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from policies import gangstate
from policies.kinds.fields import pointer
from policies.kinds.kind import Kind, PodTemplate
from policies.kinds.pinning import Original, encode_placement, pinned_affinity
from policies.kinds.reading import as_written, format_admitted, format_time
from policies.kinds.registry import kind_named
from policies.kinds.writes import Release as Release
from policies.kinds.writes import Write as Write
from policies.vocabulary import (
    ADMITTED,
    EVICTED_REASON,
    EVICTIONS,
    GANG_KIND,
    PLACEMENT,
    PREEMPTED_BY,
    PREEMPTIONS,
    REQUEUE_AT,
    RESTORE,
    STATE,
)

__all__ = [
    "SUSPEND",
    "Release",
    "Write",
    "as_changed",
    "evict_writes",
    "leave_writes",
    "preempt_writes",
    "release_writes",
    "requeue_writes",
    "restore_writes",
]

SUSPEND: Final = "/spec/suspend"
"""Where every kind that holds itself is held."""


def _annotation(key: str) -> str:
    return pointer("metadata", "annotations", key)


def _guards(uid: str, suspended: bool) -> list[dict[str, Any]]:
    return [
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "test", "path": SUSPEND, "value": suspended},
    ]


def release_writes(
    kind: Kind,
    uid: str,
    spec: Mapping[str, Any],
    original: Original,
    templates: tuple[PodTemplate, ...],
    release: Release,
    gang_kind: Kind | None = None,
) -> list[Write]:
    """Unsuspend with the admitted annotation, only if still suspended; with a placement, pin
    each pod set to its planned nodes and set an elastic gang's size in the same PATCH, saving
    what it changes. ``spec``, ``original`` and ``templates``: the object as the caller last saw
    it (its record); ``gang_kind``: the gang's kind when another kind's operator made the object
    (a MiniCluster's Job): an elastic size is written to that object first
    (`Kind.resize_owner`)."""
    ops = _guards(uid, True)
    ops += [
        {"op": "replace", "path": SUSPEND, "value": False},
        {
            "op": "add",
            "path": _annotation(ADMITTED),
            "value": format_admitted(release.when, release.size),
        },
    ]
    # A full-size admission puts back a size a past admission lowered whose restore has not
    # landed yet (it waits for the pods to be gone): else the object runs the old, smaller
    # size while muster, and a native gang's PodGroup, count the admitted one.
    resize = kind.resize(original, as_written(kind, spec, original), release.size) or dict(
        kind.put_back(original, spec)
    )
    placements = release.placements
    writes = []
    owner = None
    if resize and gang_kind is not None:
        full = sum(template.count for template in templates)
        owner = gang_kind.resize_owner(release.size, full)
    if owner is not None:
        writes.append(Write("resize-owner", body=owner, owner=True))
    if not (resize or placements):
        return [*writes, Write("admit", ops=ops)]
    if release.started and placements and kind.unfreeze is not None:
        writes.append(Write("clear-start", body=dict(kind.unfreeze), subresource="status"))
    ops.append({"op": "add", "path": _annotation(RESTORE), "value": original.encode()})
    ops += [{"op": "add", "path": path, "value": value} for path, value in resize.items()]
    if placements:
        ops.append(
            {"op": "add", "path": _annotation(PLACEMENT), "value": encode_placement(placements)}
        )
        for template in templates:
            saved = original.template(template.name)
            planned = placements.get(template.name) or {}
            if release.gate:
                path = f"{template.pointer}/spec/schedulingGates"
                ops.append({"op": "add", "path": path, "value": saved.gated()})
            if kind.pins_affinity and planned:
                nodes = {n: release.hostnames.get(n, n) for n in planned}
                path = f"{template.pointer}/spec/affinity"
                ops.append(
                    {"op": "add", "path": path, "value": pinned_affinity(saved.affinity, nodes)}
                )
    writes.append(Write("admit", ops=ops))
    return writes


def evict_writes(
    uid: str,
    *,
    evictions: int,
    requeue_at: float,
    reason: str,
    failed: bool,
    restore: Original | None = None,
) -> list[Write]:
    """Suspend again (the kind's controller deletes the pods), record why and until when; the
    caller then restores (`restore_writes`). With ``restore`` (`as_changed`), the saved original
    is replaced by it in the same write, so that restoring keeps what the object asks for now."""
    annotations: dict[str, Any] = {
        ADMITTED: None,
        EVICTIONS: str(evictions),
        REQUEUE_AT: format_time(requeue_at),
        EVICTED_REASON: reason,
    }
    if failed:
        annotations[STATE] = gangstate.FAILED
    if restore is not None:
        annotations[RESTORE] = restore.encode()
    body = {"metadata": {"uid": uid, "annotations": annotations}, "spec": {"suspend": True}}
    return [Write("evict", body=body)]


def as_changed(
    kind: Kind, spec: Mapping[str, Any], original: Original, admitted_size: int
) -> Original | None:
    """The saved original with the kind's own fields as someone changed them in ``spec`` since
    the release, or None when no one did.

    A gang changed while admitted (a Job's parallelism raised behind the webhook's back, or in
    the update that suspended it) is requeued at what it asks for now: restoring the saved
    fields would quietly undo the user's change and plan it again at its old size. A field is
    the user's when it differs both from the saved original and from what the release wrote
    there (`Kind.resize` to ``admitted_size``: an elastic gang admitted smaller)."""
    live = kind.original(spec).fields
    released = kind.resize(original, as_written(kind, spec, original), admitted_size)
    changed = {
        name: value
        for name, value in live.items()
        if value != original.fields.get(name)
        and value != released.get(f"/spec/{name}", original.fields.get(name))
    }
    if not changed:
        return None
    return Original({**original.fields, **changed}, original.templates)


def requeue_writes(uid: str, *, reason: str, restore: Original | None) -> list[Write]:
    """Give up the admission of a gang that was suspended while admitted (by its user, or
    another controller), only while it is still suspended, and record why; requeued at once at
    its submission stamp (no eviction counted). The caller then restores (`restore_writes`);
    with ``restore`` (`as_changed`), it restores to what the object asks for now."""
    ops = _guards(uid, True)
    ops += [
        {"op": "remove", "path": _annotation(ADMITTED)},
        {"op": "add", "path": _annotation(EVICTED_REASON), "value": reason},
    ]
    if restore is not None:
        ops.append({"op": "add", "path": _annotation(RESTORE), "value": restore.encode()})
    return [Write("requeue", ops=ops)]


def leave_writes(uid: str, *, reason: str) -> list[Write]:
    """A gang object that left muster (its `muster.dev/queue` label or stamp removed) while it
    held an admission: suspended (it ran on an admission of a queue it left) and the admission
    given up; the caller then restores what the release changed. It stays suspended, as any Job
    outside muster that its user resumes when they choose."""
    annotations = {ADMITTED: None, EVICTED_REASON: reason}
    body = {"metadata": {"uid": uid, "annotations": annotations}, "spec": {"suspend": True}}
    return [Write("leave", body=body)]


def preempt_writes(uid: str, *, preemptions: int, message: str) -> list[Write]:
    """Suspend a preemption's victim, only while it is admitted and not suspended, and record
    it. No requeue time and no eviction counted: the victim is planned again at once at its
    submission stamp."""
    ops = _guards(uid, False)
    ops += [
        {"op": "remove", "path": _annotation(ADMITTED)},
        {"op": "replace", "path": SUSPEND, "value": True},
        {"op": "add", "path": _annotation(PREEMPTIONS), "value": str(preemptions)},
        {"op": "add", "path": _annotation(PREEMPTED_BY), "value": message},
        {"op": "add", "path": _annotation(EVICTED_REASON), "value": "Preempted"},
    ]
    return [Write("preempt", ops=ops)]


def restore_writes(kind: Kind, body: Mapping[str, Any]) -> list[Write] | None:
    """Put a suspended gang object back as it was before its release, read from the object as
    it is now: the kind's own fields and each pod template's affinity and gates as saved in
    `muster.dev/restore`, and drop that and `muster.dev/placement`. Empty when there is nothing
    to restore; None while its pods are still active (`KindStatus.active`: its templates cannot
    change yet; restore later); raises PinError when the saved value is unreadable."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    annotations = meta.get("annotations") or {}
    if RESTORE not in annotations:
        return []
    original = Original.decode(annotations[RESTORE], f"annotation {RESTORE}")
    ops = _guards(meta.get("uid") or "", True)
    ops.append({"op": "remove", "path": _annotation(RESTORE)})
    if PLACEMENT in annotations:
        ops.append({"op": "remove", "path": _annotation(PLACEMENT)})
    put_back = kind.put_back(original, spec)
    ops += [{"op": "add", "path": path, "value": value} for path, value in put_back.items()]
    changed = False
    for template in kind.templates(as_written(kind, spec, original), original):
        pod_spec = template.template.get("spec") or {}
        saved = original.template(template.name)
        for key, value in (("affinity", saved.affinity), ("schedulingGates", saved.gates)):
            if (pod_spec.get(key) or None) != value:
                changed = True
                path = f"{template.pointer}/spec/{key}"
                ops.append({"op": "add", "path": path, "value": value})
    status = kind.status(body)
    if status.active > 0:
        return None
    writes = []
    gang_kind = kind_named(annotations.get(GANG_KIND))
    owner = None
    if put_back and gang_kind is not kind:  # admitted smaller: its owner was resized too
        written = kind.templates(as_written(kind, spec, original), original)
        full = sum(template.count for template in written)
        owner = gang_kind.resize_owner(full, full)
    if owner is not None:
        writes.append(Write("restore-owner", body=owner, owner=True))
    if changed and status.started and kind.unfreeze is not None:
        writes.append(Write("clear-start", body=dict(kind.unfreeze), subresource="status"))
    writes.append(Write("restore", ops=ops))
    return writes
