"""An AdmissionReview in, an AdmissionReview response out: pure, like kopf's `build_response`.

The JSON patch is built from the decision's merge patch along the paths it sets only, instead of
deep-copying and diffing the whole object (what made kopf's generic path cost ~3 ms per call).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache, partial
from typing import Any

import orjson

from policies.kinds import JOB, MINICLUSTER, Kind, KindName
from policies.kinds.fields import pointer
from policies.model import Gang
from policies.phase import QueueLimits
from webhook.backlog import Backlog
from webhook.configuration import JOB_PATH, MINICLUSTER_PATH
from webhook.decision import (
    AdmissionRejected,
    Decision,
    WebhookSettings,
    decide_job,
    decide_minicluster,
    is_minicluster_ref,
)
from webhook.neverfits import NeverFitsCheck, gang_at_create

JsonPatch = list[dict[str, Any]]


@dataclass
class WebhookState:
    """What the webhook knows of the cluster, kept current by watches: no API call per review."""

    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    queues: set[str] | None = None
    """Names of existing Queues; None when the Queue CRD is not installed (nothing to check)."""
    minicluster_stamps: dict[tuple[str, str], str] = field(default_factory=dict)
    limits: dict[str, QueueLimits] = field(default_factory=dict)
    """Each Queue's `spec.limits`, for the queues that set one."""
    backlog: Backlog = field(default_factory=lambda: Backlog(time.monotonic))
    """Pending gangs per queue and namespace, fed by the Job and MiniCluster watches."""
    never_fits: NeverFitsCheck = field(default_factory=NeverFitsCheck)
    """The Queues' specs and the Nodes, to tell a gang that can never run (issue #15)."""
    limits_changed: Callable[[], None] | None = None
    """Called after a Queue's `spec.limits` came, changed or went (`muster run` follows the
    managed Jobs only while some Queue sets limits)."""

    def note_limits_changed(self) -> None:
        if self.limits_changed is not None:
            self.limits_changed()

    def known_queues(self) -> Collection[str] | None:
        return self.queues


class QueueFull(AdmissionRejected):
    """A new gang refused because its queue holds as many pending gangs as `spec.limits` allows:
    answered with code 429 (Too Many Requests), as the apiserver's own rate limits are."""

    code = 429


class NeverFits(AdmissionRejected):
    """A new gang refused because it can never run in its queue (`spec.neverFits: Reject`)."""


def json_patch(obj: Mapping[str, Any], merge: Mapping[str, Any], prefix: str = "") -> JsonPatch:
    """JSON patch ops that apply `merge` (a merge patch with no deletions) to `obj`.

    Walks only the keys in `merge`: a missing key is added whole, a mapping present on both
    sides is descended into, any other value is replaced unless it is already equal.
    """
    ops: JsonPatch = []
    for key, value in merge.items():
        path = prefix + _step(key)
        if key not in obj:
            ops.append({"op": "add", "path": path, "value": value})
        elif _is_mapping(value) and _is_mapping(current := obj[key]):
            ops.extend(json_patch(current, value, path))
        elif obj[key] != value:
            ops.append({"op": "replace", "path": path, "value": value})
    return ops


@lru_cache(maxsize=64)
def _step(key: str) -> str:
    # The merge patches' keys are the decision's own few (metadata, labels, muster.dev/queue...).
    return pointer(key)


def _is_mapping(value: object) -> bool:
    # A decoded review holds dicts; the ABC check (slow) is for other mappings only.
    return type(value) is dict or isinstance(value, Mapping)


def _response(
    review: Mapping[str, Any],
    *,
    allowed: bool,
    patch: JsonPatch | None = None,
    warnings: Collection[str] = (),
    message: str | None = None,
    code: int | None = None,
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "uid": (review.get("request") or {}).get("uid", ""),
        "allowed": allowed,
    }
    if warnings:
        payload["warnings"] = list(warnings)
    if patch:
        payload["patchType"] = "JSONPatch"
        payload["patch"] = base64.b64encode(orjson.dumps(patch)).decode("ascii")
    if message is not None:
        payload["status"] = {"message": message, "code": code or 400}
        if code == 429:
            # kubectl prints "Error from server (TooManyRequests)"; no details.retryAfterSeconds,
            # so the apiserver sends no Retry-After and clients do not retry by themselves.
            payload["status"]["reason"] = "TooManyRequests"
    return {
        "apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
        "kind": review.get("kind", "AdmissionReview"),
        "response": payload,
    }


def decide(
    path: str,
    obj: Mapping[str, Any],
    *,
    namespace: str,
    state: WebhookState,
    settings: WebhookSettings,
    stamp: Callable[[], str],
    dry_run: bool = False,
) -> Decision | None:
    """The decision for creating `obj` through the webhook at `/<path>`; None for no such path.

    Raises AdmissionRejected for bad input, QueueFull past the queue's `spec.limits`. Used by
    both servers (the lean endpoint and kopf's `@kopf.on.mutate` handlers). A `dry_run` create
    is checked against the limits but not counted: it is never stored.
    """
    common: dict[str, Any] = {
        "namespace": namespace,
        "namespace_labels": state.namespace_labels.get(namespace, {}),
        "known_queues": state.known_queues(),
        "settings": settings,
    }
    name = (obj.get("metadata") or {}).get("name") or ""
    kind: Kind
    if path == JOB_PATH:
        kind = JOB
        owner_stamp = None
        owned_by_minicluster = False
        for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("controller") and is_minicluster_ref(ref):
                owned_by_minicluster = True
                owner_stamp = state.minicluster_stamps.get((namespace, ref.get("name", "")))
        decision = decide_job(obj, **common, stamp=stamp(), owner_stamp=owner_stamp)
        # A MiniCluster's Job is not a new gang: its MiniCluster was checked and counted when
        # created.
        if owned_by_minicluster:
            return decision
    elif path == MINICLUSTER_PATH:
        kind = MINICLUSTER
        decision = decide_minicluster(obj, **common, stamp=stamp())
    else:
        return None
    if decision.managed and (queue := decision.queue) is not None:
        decision = _screen(
            state,
            decision,
            queue,
            partial(gang_at_create, kind, obj, namespace, decision.patch),
            kind.size_fields,
        )
        _admit_gang(state, kind.name, namespace, name, queue, dry_run)
    return decision


def _screen(
    state: WebhookState,
    decision: Decision,
    queue: str,
    gang_of: Callable[[], Gang],
    size_fields: str,
) -> Decision:
    """The planner's NeverFits screen at create: `decision` with a warning (`spec.neverFits:
    Warn`), or NeverFits raised (`Reject`). Checked before the queue's limits, so a refused
    gang is never counted as pending."""
    if not state.never_fits.screens(queue):
        return decision  # the verdict would be None: no need to read the gang
    try:
        gang = gang_of()
    except (ValueError, TypeError, KeyError):
        # What the rules above let through but the planner's reader cannot make a gang of:
        # the controller says why it waits; this check never refuses a create by itself.
        return decision
    found = state.never_fits.verdict(gang)
    if found is None:
        return decision
    reason, action = found
    state.never_fits.count(queue, action)
    # The quota rule's message names the queue; the node rule's, the cluster.
    if f"queue {queue} can get at most" in reason.message:
        change = (
            f"raise queue {queue}'s spec.nominal or spec.borrowingLimit, or lower {size_fields}"
        )
    else:
        change = f"lower {size_fields} or its pods' resources.requests"
    if action == "Reject":
        raise NeverFits(
            f"{reason.message}; refused, as queue {queue} has spec.neverFits: Reject: {change}"
        )
    return replace(
        decision,
        warnings=(
            *decision.warnings,
            f"{reason.message}; it stays suspended and is marked Failed (NeverFits): {change}",
        ),
    )


def _admit_gang(
    state: WebhookState,
    kind: KindName,
    namespace: str,
    name: str,
    queue: str,
    dry_run: bool,
) -> None:
    """Hold a new gang to its queue's `spec.limits`: raise QueueFull past them, else count it
    as pending at once (the next review sees it before the watch does). A queue without limits
    costs nothing here: nothing counts its gangs (`muster run` follows managed Jobs only while
    some Queue sets limits, and a LIST then counts what is stored)."""
    limits = state.limits.get(queue)
    if limits is None:
        return
    refusal = state.backlog.admit(kind, namespace, name, queue, limits, count=not dry_run)
    if refusal is not None:
        raise QueueFull(refusal.message)


def review_response(
    review: Mapping[str, Any],
    *,
    path: str,
    state: WebhookState,
    settings: WebhookSettings,
    stamp: Callable[[], str],
) -> dict[str, Any]:
    """Answer one AdmissionReview sent to `/<path>` (JOB_PATH or MINICLUSTER_PATH)."""
    request = review.get("request") or {}
    obj: Mapping[str, Any] = request.get("object") or {}
    namespace = request.get("namespace") or (obj.get("metadata") or {}).get("namespace") or ""
    if request.get("operation") != "CREATE":
        return _response(review, allowed=True)
    try:
        decision = decide(
            path,
            obj,
            namespace=namespace,
            state=state,
            settings=settings,
            stamp=stamp,
            dry_run=bool(request.get("dryRun")),
        )
    except AdmissionRejected as exc:
        return _response(review, allowed=False, message=str(exc), code=exc.code)
    if decision is None:
        return _response(
            review, allowed=False, message=f"muster has no webhook at /{path}", code=404
        )
    return _response(
        review,
        allowed=True,
        patch=json_patch(obj, decision.patch),
        warnings=decision.warnings,
    )
