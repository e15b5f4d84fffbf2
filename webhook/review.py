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

from policies.kinds import Kind, KindName
from policies.kinds.fields import pointer
from policies.kinds.members import PodGang
from policies.kinds.registry import owner_of, pod_gang
from policies.model import Gang
from policies.phase import QueueLimits
from policies.vocabulary import GANG
from webhook.backlog import Backlog
from webhook.configuration import PATHS, UPDATE_PATHS, path_of
from webhook.decision import (
    AdmissionRejected,
    Decision,
    MergePatch,
    WebhookSettings,
    decide_create,
    decide_update,
)
from webhook.devices import DevicesRefused, WebhookDevices
from webhook.members import MemberBook, decide_member_create
from webhook.neverfits import NeverFitsCheck, gang_at_create

JsonPatch = list[dict[str, Any]]


@dataclass
class WebhookState:
    """What the webhook knows of the cluster, kept current by watches: no API call per review."""

    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    queues: set[str] | None = None
    """Names of existing Queues; None when the Queue CRD is not installed (nothing to check)."""
    owner_stamps: dict[tuple[str, str, str], str] = field(default_factory=dict)
    """(kind, namespace, name) -> `muster.dev/submitted` of the objects of kinds whose operator
    makes their gang object (a MiniCluster's Job gets its MiniCluster's stamp)."""
    limits: dict[str, QueueLimits] = field(default_factory=dict)
    """Each Queue's `spec.limits`, for the queues that set one."""
    backlog: Backlog = field(default_factory=lambda: Backlog(time.monotonic))
    """Pending gangs per queue and namespace, fed by the Job and MiniCluster watches."""
    never_fits: NeverFitsCheck = field(default_factory=NeverFitsCheck)
    """The Queues' specs and the Nodes, to tell a gang that can never run (issue #15)."""
    members: MemberBook = field(default_factory=MemberBook)
    """The pods of each pod group, so a pod that disagrees with its group is refused."""
    devices: WebhookDevices | None = None
    """The DRA objects, when a DeviceClass is mapped (`webhook.devices`): gangs' claims."""
    native_gangs: bool = False
    """The cluster serves PodGroups (discovery at start): new gangs are linked to theirs."""
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
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    kind = PATHS.get(path)
    if kind is None:
        return None
    gang = pod_gang(kind)
    if gang is not None:
        return _decide_member(gang, obj, common, state, stamp(), dry_run)
    owner = owner_of(meta)
    owner_stamp = None
    if owner is not None:
        owner_stamp = state.owner_stamps.get((owner[0].name, namespace, owner[1]))
    decision = decide_create(
        kind, obj, **common, stamp=stamp(), owner_stamp=owner_stamp, native=state.native_gangs
    )
    # An object made by a kind muster admits is not a new gang: its owner was checked and
    # counted when created.
    if owner is not None:
        return decision
    if decision.managed and (queue := decision.queue) is not None:
        decision, read = _claims(state, decision, kind, obj, namespace)
        decision = _screen(state, decision, queue, read, kind.size_fields)
        _admit_gang(state, kind.name, namespace, name, queue, dry_run)
    return decision


def _decide_member(
    kind: PodGang,
    pod: Mapping[str, Any],
    common: Mapping[str, Any],
    state: WebhookState,
    stamp: str,
    dry_run: bool,
) -> Decision:
    """A created pod of a pod gang (`webhook.members`): its group's first pod is screened like
    any new gang (never fits), the next ones are checked against it. A pod group is not
    counted against a Queue's `spec.limits` (a pod's create is not a gang's)."""
    decision, member = decide_member_create(kind, pod, **common, stamp=stamp, book=state.members)
    if member is None or (queue := decision.queue) is None:
        return decision
    key = (kind.name, str(common["namespace"]), str(decision.patch["metadata"]["labels"][GANG]))
    if state.members.first(key) is None:
        decision, read = _claims(state, decision, kind, pod, str(common["namespace"]))
        decision = _screen(state, decision, queue, read, kind.size_fields)
    if not dry_run:
        state.members.allow(key, member)
    return decision


def _claims(
    state: WebhookState,
    decision: Decision,
    kind: Kind,
    obj: Mapping[str, Any],
    namespace: str,
) -> tuple[Decision, Callable[[], Gang]]:
    """The created gang's DRA claims (`webhook.devices`): `DevicesRefused` for one muster
    cannot count, a warning for one whose object is not there yet; and how the never-fits
    screen reads the gang (with its devices)."""
    read = partial(gang_at_create, kind, obj, namespace, decision.patch)
    devices = state.devices
    if devices is None:
        return decision, read
    try:
        gang, warning = devices.gang_at_create(kind, obj, namespace, decision.patch)
    except DevicesRefused:
        raise
    except (ValueError, TypeError, KeyError):
        return decision, read  # the controller says why it waits (see `_screen`)
    if warning is not None:
        decision = replace(decision, warnings=(*decision.warnings, warning))
    return decision, lambda: gang


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


def decide_change(
    path: str,
    old: Mapping[str, Any],
    obj: Mapping[str, Any],
    *,
    namespace: str,
    state: WebhookState,
    settings: WebhookSettings,
    stamp: Callable[[], str],
    dry_run: bool = False,
) -> tuple[MergePatch, tuple[str, ...]] | None:
    """The merge patch and warnings for updating `old` to `obj` through the webhook at
    `/<path>` (a kind's update path); None for no such path. Raises AdmissionRejected (and
    QueueFull, for an object that joins a full queue). Used by both servers."""
    kind = UPDATE_PATHS.get(path)
    if kind is None:
        return None
    decision = decide_update(
        kind,
        old,
        obj,
        namespace=namespace,
        namespace_labels=state.namespace_labels.get(namespace, {}),
        settings=settings,
    )
    if not decision.join:
        return decision.patch, ()
    # Joining a queue is submitting a new gang: held, stamped, screened and counted as a create.
    created = decide(
        path_of(kind),
        obj,
        namespace=namespace,
        state=state,
        settings=settings,
        stamp=stamp,
        dry_run=dry_run,
    )
    assert created is not None, path
    return created.patch, created.warnings


def review_response(
    review: Mapping[str, Any],
    *,
    path: str,
    state: WebhookState,
    settings: WebhookSettings,
    stamp: Callable[[], str],
) -> dict[str, Any]:
    """Answer one AdmissionReview sent to `/<path>`: a create to a kind's path
    (`configuration.PATHS`), an update to its update path (`configuration.UPDATE_PATHS`);
    anything else is allowed as it is."""
    request = review.get("request") or {}
    obj: Mapping[str, Any] = request.get("object") or {}
    namespace = request.get("namespace") or (obj.get("metadata") or {}).get("namespace") or ""
    operation = request.get("operation")
    dry_run = bool(request.get("dryRun"))
    answer: tuple[MergePatch, Collection[str]] | None
    try:
        if operation == "UPDATE" and path in UPDATE_PATHS:
            answer = decide_change(
                path,
                request.get("oldObject") or {},
                obj,
                namespace=namespace,
                state=state,
                settings=settings,
                stamp=stamp,
                dry_run=dry_run,
            )
        elif operation == "CREATE":
            decision = decide(
                path,
                obj,
                namespace=namespace,
                state=state,
                settings=settings,
                stamp=stamp,
                dry_run=dry_run,
            )
            answer = None if decision is None else (decision.patch, decision.warnings)
        else:
            return _response(review, allowed=True)
    except AdmissionRejected as exc:
        return _response(review, allowed=False, message=str(exc), code=exc.code)
    if answer is None:
        return _response(
            review, allowed=False, message=f"muster has no webhook at /{path}", code=404
        )
    patch, warnings = answer
    return _response(review, allowed=True, patch=json_patch(obj, patch), warnings=warnings)
