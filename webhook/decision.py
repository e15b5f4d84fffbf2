"""The admission decision for a created gang object of any kind, as a pure function of the
request.

No I/O here: the caller passes what it knows (namespace labels, known queues, the owner's
stamp, a fresh submission stamp) and gets back a merge patch, warnings, or an
`AdmissionRejected` with a message for the user. What differs by kind comes from its adapter
(`policies.kinds`). kopf's handler (`webhook.handlers`) and the lean server do the I/O; tests
call these functions with plain dicts.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from policies import gangstate
from policies.durations import shown
from policies.kinds import FieldError, Kind, refuse_controller_annotations
from policies.kinds.changes import GANG_FIELDS, first_change, gang_field_pairs, suspended
from policies.kinds.nativegroups import group_names
from policies.kinds.reading import GangParseError, parse_admitted
from policies.kinds.registry import owner_of
from policies.phase import is_managed
from policies.vocabulary import (
    ADMITTED,
    FAILED_REASON,
    GANG,
    GANG_KIND,
    QUEUE,
    STATE,
    SUBMITTED,
)

MergePatch = dict[str, Any]


class AdmissionRejected(ValueError):
    """The object is refused; the message says what is wrong, where, and what to do."""

    code: int = 400
    """The HTTP status the refusal carries (400: bad input)."""


@dataclass(frozen=True)
class WebhookSettings:
    """How the webhook decides which objects muster manages."""

    manage_jobs_without_queue_name: bool = False
    """Manage Jobs with no `muster.dev/queue` label too (in namespaces the webhook sees)."""
    default_queue: str = "default"
    """The queue for unlabelled Jobs when manage_jobs_without_queue_name is on."""
    excluded_namespaces: frozenset[str] = field(
        default_factory=lambda: frozenset({"kube-system", "muster-system"})
    )
    """Never touched (also excluded server-side by the webhook's namespaceSelector)."""


@dataclass(frozen=True)
class Decision:
    """What to do with one created object. `patch` is empty when muster does not manage it."""

    managed: bool
    queue: str | None = None
    patch: MergePatch = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def resolve_queue(
    named: str,
    namespace: str,
    namespace_labels: Mapping[str, str],
    settings: WebhookSettings,
    *,
    owned: bool,
) -> str | None:
    """The queue a new object belongs to (`named`: the one it names, `Kind.queue`), or None
    when muster must leave it alone.

    Owned objects (a Job made by another controller) are managed only when labelled, so muster
    never fights another controller over a Job it did not create (as Kueue's ancestor check).
    """
    if namespace in settings.excluded_namespaces:
        return None
    if named:
        return named
    if owned:
        return None
    if namespace_labels.get(QUEUE):
        return namespace_labels[QUEUE]
    if settings.manage_jobs_without_queue_name:
        return settings.default_queue
    return None


def _queue_warning(queue: str, known_queues: Collection[str] | None) -> tuple[str, ...]:
    if known_queues is not None and queue not in known_queues:
        return (f'queue "{queue}" does not exist yet; the job stays suspended until it does',)
    return ()


def _has_controller(meta: Mapping[str, Any]) -> bool:
    return any(ref.get("controller") for ref in meta.get("ownerReferences") or [])


def decide_create(
    kind: Kind,
    obj: Mapping[str, Any],
    *,
    namespace: str,
    namespace_labels: Mapping[str, str],
    known_queues: Collection[str] | None,
    settings: WebhookSettings,
    stamp: str,
    owner_stamp: str | None = None,
    native: bool = False,
) -> Decision:
    """Decide for an object of ``kind`` being created: the kind's hold patch (`Kind.hold`:
    suspended, or for a MiniCluster its Job labelled through `spec.jobLabels`; stamped with
    `muster.dev/queue` and `muster.dev/submitted`, its pod templates labelled with the gang).

    An object whose controller owner is a kind muster admits is part of that owner's gang: a
    JobSet's Jobs are left alone (the JobSet holds them); a MiniCluster's Job (which arrives
    labelled through the MiniCluster's jobLabels) is its gang object: suspended like any Job,
    with the MiniCluster's stamp (``owner_stamp``), its name as the gang and
    `muster.dev/gang-kind`.

    With ``native`` (the cluster serves PodGroups), each pod template of the gang object is
    also linked to its pod set's PodGroup (`policies.kinds.nativegroups.group_names`), which the
    controller creates at admission.
    """
    meta = obj.get("metadata") or {}
    owner = owner_of(meta)
    if owner is not None and owner[0].holds_itself:
        return Decision(managed=False)
    queue = resolve_queue(
        kind.queue(obj), namespace, namespace_labels, settings, owned=_has_controller(meta)
    )
    if queue is None:
        return Decision(managed=False)
    try:
        kind.gang_fields(obj)
        refuse_controller_annotations(
            meta.get("annotations") or {}, made_by_operator=owner is not None
        )
        stamped = owner_stamp or stamp
        gang = owner[1] if owner is not None else meta.get("name") or meta.get("generateName")
        groups = group_names(kind, obj, gang or "", stamped) if native else {}
        patch = kind.hold(obj, queue, stamped, groups)
    except FieldError as exc:
        raise AdmissionRejected(str(exc)) from None
    if owner is not None:
        owner_kind, owner_name = owner
        patch["metadata"]["annotations"][GANG_KIND] = owner_kind.name
        if owner_name:
            template = patch["spec"].setdefault("template", {}).setdefault("metadata", {})
            template.setdefault("labels", {})[GANG] = owner_name
    return Decision(True, queue, patch, _queue_warning(queue, known_queues))


@dataclass(frozen=True)
class UpdateDecision:
    """What to do with one update that is not refused: allow it with `patch`, or, when it
    brings an object into a queue (`join`), decide it as a create of the updated object (held,
    stamped and counted as a new gang)."""

    join: bool = False
    patch: MergePatch = field(default_factory=dict)


def decide_update(
    kind: Kind,
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    *,
    namespace: str,
    namespace_labels: Mapping[str, str],
    settings: WebhookSettings,
) -> UpdateDecision:
    """Decide an update of an object of ``kind`` (``old``: stored, ``new``: the update).
    Raises AdmissionRejected naming the field, and what to do, for an update that would get
    around the queue (docs/queue-reference.md, "Changes after admission"):

    - an object joins a queue (its label added) only suspended, as a new gang (`join`);
    - a managed object keeps its submission stamp, and leaves muster (its label removed) only
      where its namespace does not send unlabelled objects to a queue;
    - a held object is unsuspended only by muster's admission (the update that adds
      `muster.dev/admitted` to an object that had none);
    - an admitted, running gang keeps everything its admission decided (`Kind.admission_change`)
      unless the same update suspends it; a kind that does not hold itself (a MiniCluster) keeps
      it at any time: its gang object was made from it at create;
    - anything else (a waiting gang's changes, a suspension) is allowed: the controller reads
      the object again, and requeues an admitted gang that was suspended. The gang fields of
      an update that changes what admission reads are checked as at create.
    """
    meta, old_meta = new.get("metadata") or {}, old.get("metadata") or {}
    owner = owner_of(meta)
    if namespace in settings.excluded_namespaces or (owner is not None and owner[0].holds_itself):
        return UpdateDecision()
    queue, was_queue = kind.queue(new), kind.queue(old)
    who = f"{kind.name} {namespace}/{meta.get('name') or old_meta.get('name') or ''}"
    if not is_managed(old):
        if queue and not was_queue:
            return _join(kind, old, new, queue, who)
        return UpdateDecision()
    annotations = meta.get("annotations") or {}
    was_annotations = old_meta.get("annotations") or {}
    if queue and annotations.get(SUBMITTED) != was_annotations.get(SUBMITTED):
        raise AdmissionRejected(
            f"annotation {SUBMITTED}: {_quoted(was_annotations.get(SUBMITTED))} -> "
            f"{_quoted(annotations.get(SUBMITTED))}: the stamp muster's webhook wrote when "
            f"{who} was submitted orders it in queue {was_queue}; leave it as it is"
        )
    if not queue:
        owned = _has_controller(meta)
        default = resolve_queue("", namespace, namespace_labels, settings, owned=owned)
        if default is not None:
            raise AdmissionRejected(
                f"label {QUEUE}: {was_queue} -> (unset): namespace {namespace} sends its "
                f"unlabelled {kind.api.plural} to queue {default}, so {who} cannot leave muster; "
                "set the label to another queue instead"
            )
    if not kind.holds_itself:
        change = kind.admission_change(old, new)
        if change is not None:
            raise AdmissionRejected(
                f"{change.describe()}: muster read {who}'s gang (its queue, size, minimum and "
                "gang fields) when it was created, and holds the Job made from it to that; to "
                f"change it, delete the {kind.name} and create it again with the change"
            )
        return UpdateDecision()
    return _held_update(kind, old, new, queue, who)


def _held_update(
    kind: Kind, old: Mapping[str, Any], new: Mapping[str, Any], queue: str, who: str
) -> UpdateDecision:
    """`decide_update` for a managed object of a kind held by its own `spec.suspend`."""
    annotations = (new.get("metadata") or {}).get("annotations") or {}
    was_annotations = (old.get("metadata") or {}).get("annotations") or {}
    was_admitted = ADMITTED in was_annotations
    was_held, held = suspended(old), suspended(new)
    was_queue = kind.queue(old)
    if was_held and not held:
        if not was_admitted and ADMITTED in annotations:
            return UpdateDecision()  # muster's own admission
        raise AdmissionRejected(_unsuspend_refusal(who, was_queue, was_annotations))
    running = was_admitted and not was_held and not held
    if running and (change := kind.admission_change(old, new)) is not None:
        raise AdmissionRejected(
            f"{change.describe()}: {who} is admitted and runs as muster admitted it "
            f"({_admitted_size(was_annotations)} in queue {was_queue}); muster refuses "
            "changes to what it admitted. To change it, suspend it in the same update "
            "(spec.suspend: true): muster then requeues it at its place in the queue and "
            "admits it again as it asks then"
        )
    gang_fields_changed = first_change(gang_field_pairs(old, new, GANG_FIELDS)) is not None
    if queue and (
        gang_fields_changed or (not running and kind.admission_change(old, new) is not None)
    ):
        try:
            kind.gang_fields(new)
        except FieldError as exc:
            raise AdmissionRejected(str(exc)) from None
    if queue and queue != was_queue:
        # The queue's annotation, written beside the label at create, follows the label.
        return UpdateDecision(patch={"metadata": {"annotations": {QUEUE: queue}}})
    return UpdateDecision()


def _join(
    kind: Kind, old: Mapping[str, Any], new: Mapping[str, Any], queue: str, who: str
) -> UpdateDecision:
    """An object muster does not manage gets a queue label: it joins as a new gang, suspended
    (muster starts it when it admits it), or the update is refused."""
    change = f"label {QUEUE}: (unset) -> {queue}"
    if not kind.holds_itself:
        raise AdmissionRejected(
            f"{change}: a {kind.name} joins a queue when it is created (the Job made from it "
            f"carries the queue); delete {who} and create it again with the label"
        )
    if not suspended(new):
        raise AdmissionRejected(
            f"{change}: {who} runs outside muster's queues; it joins queue {queue} suspended: "
            "set spec.suspend: true in the same update (its pods stop, and muster starts it "
            "again when it admits it), or create it again with the label"
        )
    if kind.status(old).started:
        raise AdmissionRejected(
            f"{change}: {who} has run (its status.startTime is set), so its pod template cannot "
            "take muster's gang label; create it again with the label"
        )
    return UpdateDecision(join=True)


def _unsuspend_refusal(who: str, queue: str, annotations: Mapping[str, str]) -> str:
    if annotations.get(STATE) == gangstate.FAILED:
        why = annotations.get(FAILED_REASON) or "see `muster explain`"
        return (
            f"spec.suspend: true -> false: muster marked {who} Failed ({why}); it stays "
            "suspended: delete it and create it again"
        )
    if ADMITTED in annotations:
        return (
            f"spec.suspend: true -> false: {who} was suspended after its admission, which gave "
            f"the admission up: muster requeues it in queue {queue} and unsuspends it when it "
            "admits it again (see `muster explain`)"
        )
    return (
        f"spec.suspend: true -> false: {who} waits in queue {queue}; muster unsuspends it when "
        "it admits it (see `muster explain`); leave spec.suspend: true"
    )


def _admitted_size(annotations: Mapping[str, str]) -> str:
    try:
        _, size = parse_admitted(annotations.get(ADMITTED, ""))
    except GangParseError:
        return "as admitted"
    return f"{size} pods"


def _quoted(value: str | None) -> str:
    return "(unset)" if value is None else shown(value, 60)
