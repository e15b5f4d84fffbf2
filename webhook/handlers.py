"""kopf registration of muster's mutating webhooks: the I/O around `webhook.decision`.

`register(registry, settings)` adds, to a kopf registry:
- indices of namespace labels, Queue names and MiniCluster stamps (kept by kopf's watches, so a
  webhook call makes no API request);
- `@on.mutate` handlers for Job and MiniCluster CREATE that call the pure decision and apply its
  merge patch, warnings or rejection.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from policies.submitted import SubmissionClock
from policies.vocabulary import SUBMITTED
from webhook.configuration import JOB_PATH, MINICLUSTER_PATH
from webhook.decision import (
    AdmissionRejected,
    Decision,
    WebhookSettings,
    decide_job,
    decide_minicluster,
    is_minicluster_ref,
)

QUEUE_RESOURCE = ("muster.dev", "v1alpha1", "queues")
MINICLUSTER_RESOURCE = ("flux-framework.org", "v1alpha2", "miniclusters")


def _first(index: Any, key: object) -> Any:
    """The single value an index holds for `key`, or None."""
    try:
        store = index[key]
    except KeyError:
        return None
    for value in store:
        return value
    return None


def _apply(decision: Decision, patch: kopf.Patch, warnings: list[str]) -> None:
    for key, value in decision.patch.items():
        patch[key] = value
    warnings.extend(decision.warnings)


def register(
    registry: kopf.OperatorRegistry,
    settings: WebhookSettings,
    clock: SubmissionClock | None = None,
    *,
    queues_installed: bool = True,
) -> None:
    """Register the webhook handlers and the indices they read on `registry`.

    kopf passes each index to handlers as a keyword argument named by the index's id.
    """
    clock = clock or SubmissionClock()

    @kopf.index("namespaces", id="muster_namespace_labels", registry=registry)
    def muster_namespace_labels(
        name: str, labels: Mapping[str, str], **_: Any
    ) -> dict[str, dict[str, str]]:
        return {name: dict(labels)}

    if queues_installed:

        @kopf.index(*QUEUE_RESOURCE, id="muster_queue_names", registry=registry)
        def muster_queue_names(name: str, **_: Any) -> dict[str, bool]:
            return {name: True}

    @kopf.index(*MINICLUSTER_RESOURCE, id="muster_minicluster_stamps", registry=registry)
    def muster_minicluster_stamps(
        namespace: str | None, name: str, annotations: Mapping[str, str], **_: Any
    ) -> dict[tuple[str, str], str] | None:
        stamp = annotations.get(SUBMITTED)
        return {(namespace or "", name): stamp} if stamp else None

    def known_queues(kwargs: Mapping[str, Any]) -> set[str] | None:
        index = kwargs.get("muster_queue_names")
        return None if index is None else set(index.keys())

    @kopf.on.mutate(
        "batch",
        "v1",
        "jobs",
        id=JOB_PATH,
        operation="CREATE",
        side_effects=False,
        registry=registry,
    )
    def mutate_job(
        body: Mapping[str, Any],
        patch: kopf.Patch,
        warnings: list[str],
        **kwargs: Any,
    ) -> None:
        meta = body.get("metadata") or {}
        namespace = meta.get("namespace") or ""
        owner_stamp = None
        for ref in meta.get("ownerReferences") or []:
            if ref.get("controller") and is_minicluster_ref(ref):
                owner_stamp = _first(kwargs["muster_minicluster_stamps"], (namespace, ref["name"]))
        try:
            decision = decide_job(
                body,
                namespace=namespace,
                namespace_labels=_first(kwargs["muster_namespace_labels"], namespace) or {},
                known_queues=known_queues(kwargs),
                settings=settings,
                stamp=clock.stamp(),
                owner_stamp=owner_stamp,
            )
        except AdmissionRejected as exc:
            raise kopf.AdmissionError(str(exc), code=400) from None
        _apply(decision, patch, warnings)

    @kopf.on.mutate(
        *MINICLUSTER_RESOURCE,
        id=MINICLUSTER_PATH,
        operation="CREATE",
        side_effects=False,
        registry=registry,
    )
    def mutate_minicluster(
        body: Mapping[str, Any],
        patch: kopf.Patch,
        warnings: list[str],
        **kwargs: Any,
    ) -> None:
        namespace = (body.get("metadata") or {}).get("namespace") or ""
        try:
            decision = decide_minicluster(
                body,
                namespace=namespace,
                namespace_labels=_first(kwargs["muster_namespace_labels"], namespace) or {},
                known_queues=known_queues(kwargs),
                settings=settings,
                stamp=clock.stamp(),
            )
        except AdmissionRejected as exc:
            raise kopf.AdmissionError(str(exc), code=400) from None
        _apply(decision, patch, warnings)
