"""The webhook's side of gangs whose gang object is a set of pods (a pod group,
`policies.kinds.podgroup`): the decision for a created pod that opted in (it carries its kind's
member label, and only such pods are sent: `webhook.configuration`), and what the webhook knows
of each group's pods (`MemberBook`, fed by a lean stream of the pods that carry a member label,
and by the creates it allowed and has not seen yet), so a pod that disagrees with its group's
size, minimum or queue is refused at create, naming the field.

Pure but for the book's lock: the caller passes what it knows, as for `webhook.decision`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Final

from policies.kinds.fields import FieldError
from policies.kinds.members import Member, PodGang, in_order, member_of
from policies.kinds.registry import POD_GANGS, owner_of
from policies.vocabulary import GANG, QUEUE
from webhook.decision import AdmissionRejected, Decision, WebhookSettings

GroupKey = tuple[str, str, str]
"""(kind, namespace, group)."""

UNSEEN_FOR: Final = 30.0
"""Seconds a pod the webhook allowed counts in its group before the stream shows it."""


class MemberBook:
    """What one webhook replica knows of each pod gang's pods: the stream's, and the creates it
    allowed that the stream has not shown yet. Thread-safe (the stream's thread, the reviews')."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[GroupKey, dict[str, Member]] = {}
        self._allowed: dict[GroupKey, dict[str, tuple[Member, float]]] = {}

    @staticmethod
    def key_of(body: Mapping[str, Any]) -> GroupKey | None:
        meta = body.get("metadata") or {}
        labels = meta.get("labels") or {}
        for kind in POD_GANGS.values():
            group = labels.get(kind.member_label)
            if group:
                return kind.name, str(meta.get("namespace") or ""), str(group)
        return None

    def observe(self, event: str | None, body: Mapping[str, Any]) -> None:
        """A stream event of a pod that carries a member label."""
        key = self.key_of(body)
        if key is None:
            return
        name = str((body.get("metadata") or {}).get("name") or "")
        with self._lock:
            allowed = self._allowed.get(key)
            if allowed is not None:
                allowed.pop(name, None)
            if event == "DELETED" or (body.get("status") or {}).get("phase") in (
                "Succeeded",
                "Failed",
            ):
                seen = self._seen.get(key)
                if seen is not None:
                    seen.pop(name, None)
                    if not seen:
                        del self._seen[key]
                return
            self._seen.setdefault(key, {})[name] = member_of(body)

    def relist(self, items: Iterable[Mapping[str, Any]]) -> None:
        with self._lock:
            self._seen.clear()
        for item in items:
            self.observe("ADDED", item)

    def first(self, key: GroupKey) -> Member | None:
        """The group's first live pod in submission order, as this replica knows them (None: a
        group it knows no pod of)."""
        now = self._clock()
        with self._lock:
            known = list((self._seen.get(key) or {}).values())
            allowed = self._allowed.get(key) or {}
            for name, (_, expires) in list(allowed.items()):
                if expires <= now:
                    del allowed[name]
            known.extend(member for member, _ in allowed.values())
        return in_order(known)[0] if known else None

    def allow(self, key: GroupKey, member: Member) -> None:
        """A create allowed: its group counts it until the stream shows it."""
        with self._lock:
            token = member.name or f"{member.stamp}"
            allowed = self._allowed.setdefault(key, {})
            allowed[token] = (member, self._clock() + UNSEEN_FOR)


def _queue(
    kind: PodGang,
    pod: Mapping[str, Any],
    namespace: str,
    namespace_labels: Mapping[str, str],
    settings: WebhookSettings,
) -> str:
    named = kind.queue(pod) or namespace_labels.get(QUEUE) or ""
    if not named and settings.manage_jobs_without_queue_name:
        named = settings.default_queue
    if named:
        return named
    group = ((pod.get("metadata") or {}).get("labels") or {}).get(kind.member_label)
    raise AdmissionRejected(
        f"label {QUEUE}: missing; a pod of pod group {group} names no queue and namespace "
        f"{namespace} has no default queue: label every pod of the group {QUEUE}=<queue>, or "
        f"label the namespace {QUEUE}=<queue>"
    )


def decide_member_create(
    kind: PodGang,
    pod: Mapping[str, Any],
    *,
    namespace: str,
    namespace_labels: Mapping[str, str],
    known_queues: Collection[str] | None,
    settings: WebhookSettings,
    stamp: str,
    book: MemberBook,
) -> tuple[Decision, Member | None]:
    """Decide for a created pod carrying ``kind``'s member label: gated, stamped and labelled
    with its queue, gang and pod set (`Kind.hold`); refused, naming the field, when its group
    fields are missing or malformed, or disagree with its group's first pod. Returns the
    decision and the pod as it will be stored (for `MemberBook.allow`; None: not managed).

    A pod of a gang another kind holds (a managed Job's pod: it carries `muster.dev/gang`, and
    its owner is of a kind muster admits) belongs to that gang and is left alone."""
    meta = pod.get("metadata") or {}
    if namespace in settings.excluded_namespaces:
        return Decision(managed=False), None
    if owner_of(meta) is not None and GANG in (meta.get("labels") or {}):
        return Decision(managed=False), None
    queue = _queue(kind, pod, namespace, namespace_labels, settings)
    try:
        kind.gang_fields(pod)
        patch = kind.hold(pod, queue, stamp)
    except FieldError as exc:
        raise AdmissionRejected(str(exc)) from None
    stored = _stored(pod, patch, namespace)
    member = member_of(stored)
    group = str(patch["metadata"]["labels"][GANG])
    first = book.first((kind.name, namespace, group))
    if first is not None and (problem := kind.disagreement(group, first, member)):
        raise AdmissionRejected(problem)
    warnings: tuple[str, ...] = ()
    if known_queues is not None and queue not in known_queues:
        warnings = (
            f'queue "{queue}" does not exist yet; the pods of pod group {group} stay gated '
            "until it does",
        )
    return Decision(True, queue, patch, warnings), member


def _stored(pod: Mapping[str, Any], patch: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """The pod as stored after the webhook's patch (name: its generateName and '*' until the
    apiserver names it)."""
    meta = dict(pod.get("metadata") or {})
    meta.setdefault("namespace", namespace)
    meta["name"] = meta.get("name") or f"{meta.get('generateName') or ''}*"
    meta["labels"] = {**(meta.get("labels") or {}), **patch["metadata"]["labels"]}
    meta["annotations"] = {**(meta.get("annotations") or {}), **patch["metadata"]["annotations"]}
    return {**pod, "metadata": meta, "spec": {**(pod.get("spec") or {}), **patch["spec"]}}
