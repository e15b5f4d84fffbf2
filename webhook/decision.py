"""The admission decision for a created Job or MiniCluster, as a pure function of the request.

No I/O here: the caller passes what it knows (namespace labels, known queues, the owner
MiniCluster's stamp, a fresh submission stamp) and gets back a merge patch, warnings, or an
`AdmissionRejected` with a message for the user. kopf's handler (`webhook.handlers`) does the
I/O; tests call these functions with plain dicts.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from policies.kinds import (
    JOB,
    MINICLUSTER,
    FieldError,
    minicluster_job_labels,
    refuse_controller_annotations,
)
from policies.vocabulary import GANG, GANG_KIND, QUEUE, SUBMITTED

MINICLUSTER_GROUP: Final = "flux-framework.org"

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


def _controller_owner(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return None


def is_minicluster_ref(ref: Mapping[str, Any] | None) -> bool:
    return bool(
        ref
        and ref.get("kind") == "MiniCluster"
        and str(ref.get("apiVersion", "")).split("/")[0] == MINICLUSTER_GROUP
    )


def decide_job(
    job: Mapping[str, Any],
    *,
    namespace: str,
    namespace_labels: Mapping[str, str],
    known_queues: Collection[str] | None,
    settings: WebhookSettings,
    stamp: str,
    owner_stamp: str | None = None,
) -> Decision:
    """Decide for a batch/v1 Job being created.

    Managed Jobs are stored suspended, with `muster.dev/queue` and `muster.dev/submitted`
    annotations and a `muster.dev/gang` label on the pod template. A Job made by a MiniCluster
    (arrives labelled through the MiniCluster's jobLabels) keeps the MiniCluster's stamp.
    """
    meta = job.get("metadata") or {}
    owner = _controller_owner(meta)
    queue = resolve_queue(
        JOB.queue(job), namespace, namespace_labels, settings, owned=owner is not None
    )
    if queue is None:
        return Decision(managed=False)
    from_minicluster = is_minicluster_ref(owner)
    try:
        JOB.gang_fields(job)
        refuse_controller_annotations(
            meta.get("annotations") or {}, minicluster_owned=from_minicluster
        )
    except FieldError as exc:
        raise AdmissionRejected(str(exc)) from None

    name = meta.get("name") or ""
    gang = owner["name"] if from_minicluster and owner else name
    new_annotations = {QUEUE: queue, SUBMITTED: owner_stamp or stamp}
    if from_minicluster:
        new_annotations[GANG_KIND] = MINICLUSTER.name
    patch: MergePatch = {
        "metadata": {"annotations": new_annotations, "labels": {QUEUE: queue}},
        "spec": {"suspend": True},
    }
    if gang:
        patch["spec"]["template"] = {"metadata": {"labels": {GANG: gang}}}
    return Decision(True, queue, patch, _queue_warning(queue, known_queues))


def decide_minicluster(
    minicluster: Mapping[str, Any],
    *,
    namespace: str,
    namespace_labels: Mapping[str, str],
    known_queues: Collection[str] | None,
    settings: WebhookSettings,
    stamp: str,
) -> Decision:
    """Decide for a Flux Operator MiniCluster being created.

    A MiniCluster has no suspend field; muster puts the queue, the gang minimum and the gang's
    priority, elastic-after and clog-timeout into `spec.jobLabels`, so the Indexed Job the
    operator creates arrives labelled and is suspended by `decide_job`. The gang is the
    MiniCluster: size = spec.size, min = spec.minSize.
    """
    queue = resolve_queue(
        MINICLUSTER.queue(minicluster), namespace, namespace_labels, settings, owned=False
    )
    if queue is None:
        return Decision(managed=False)
    try:
        _, fields = MINICLUSTER.gang_fields(minicluster)
    except FieldError as exc:
        raise AdmissionRejected(str(exc)) from None
    # The minimum, priority, elastic-after and clog-timeout travel to the MiniCluster's Job as
    # labels: the operator copies spec.jobLabels onto the Job, where the controller reads them.
    job_labels = minicluster_job_labels(queue, fields)
    patch: MergePatch = {
        "metadata": {
            "annotations": {QUEUE: queue, SUBMITTED: stamp},
            "labels": {QUEUE: queue},
        },
        "spec": {"jobLabels": job_labels},
    }
    return Decision(True, queue, patch, _queue_warning(queue, known_queues))
