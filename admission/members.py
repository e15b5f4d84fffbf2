"""The controller's gangs whose gang object is a set of pods (a pod group): their member pods by
gang, and their records, as the watches report them; each change makes the gang's virtual gang
object again (`policies.kinds.members.PodGang.assemble`), which the cache applies like any gang
object's event (`Cache.apply_gang`), so everything downstream (records, plans, the lifecycle,
the status) treats a pod group as the gang it is.

Fed by the cache: each pod event of a pod carrying a kind's member label (`apply_pod`: pods
are already watched, so a pod group costs no watch of its own) and each event of a
GangRecord (`apply_record`, the lean watch of `admission.listing`). Only the event loop's thread
calls it (the cache's only writer).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.kinds.kind import Kind
from policies.kinds.members import Member, PodGang, member_of, record_key
from policies.kinds.registry import POD_GANGS

GangKey = tuple[str, str, str]
"""(kind, namespace, gang name)."""
Change = tuple[Kind, str, dict[str, Any]]
"""(kind, event, virtual gang object) for `Cache.apply_gang`."""

_LABELS = tuple((kind.member_label, kind) for kind in POD_GANGS.values())


class MemberGangs:
    """Member pods and records of every pod gang; owns the virtual gang objects' making."""

    __slots__ = ("_of_pod", "members", "records")

    def __init__(self) -> None:
        self.members: dict[GangKey, dict[str, Member]] = {}
        """Per gang: its member pods by uid."""
        self.records: dict[str, dict[str, Any]] = {}
        """GangRecords by "namespace/name" (the cache's key of a record)."""
        self._of_pod: dict[str, GangKey] = {}

    def apply_pod(
        self, event: str | None, uid: str, meta: Mapping[str, Any], body: Mapping[str, Any]
    ) -> Change | None:
        """A pod event: the gang whose virtual object changed, if the pod is (or was) a
        member of one."""
        labels = meta.get("labels") or {}
        key: GangKey | None = None
        for label, kind in _LABELS:
            gang = labels.get(label)
            if gang:
                key = (kind.name, str(meta.get("namespace") or ""), str(gang))
                break
        before = self._of_pod.get(uid)
        if key is None and before is None:
            return None  # the hot path: a pod of no pod gang
        if before is not None and before != key:
            self._drop(before, uid)
            if key is None or event == "DELETED":
                return self._change(before)
        if key is None:
            return None
        if event == "DELETED":
            self._drop(key, uid)
            return self._change(key)
        member = member_of(body)
        held = self.members.setdefault(key, {})
        if held.get(uid) == member:
            return None  # nothing the gang reads changed
        held[uid] = member
        self._of_pod[uid] = key
        return self._change(key)

    def _drop(self, key: GangKey, uid: str) -> None:
        self._of_pod.pop(uid, None)
        held = self.members.get(key)
        if held is not None:
            held.pop(uid, None)
            if not held:
                del self.members[key]

    def apply_record(self, event: str | None, body: Mapping[str, Any]) -> Change | None:
        """A GangRecord event: the gang whose virtual object changed, if it has members."""
        meta = body.get("metadata") or {}
        name = f"{meta.get('namespace')}/{meta.get('name')}"
        before = self.records.get(name)
        if event == "DELETED":
            self.records.pop(name, None)
            key = record_key(before or body)
        else:
            self.records[name] = dict(body)
            key = record_key(body)
        return self._change(key) if key is not None else None

    def record_of(self, key: GangKey) -> dict[str, Any] | None:
        kind = POD_GANGS.get(key[0])
        if kind is None:
            return None
        return self.records.get(f"{key[1]}/{kind.record_name(key[2])}")

    def _change(self, key: GangKey) -> Change | None:
        kind: PodGang | None = POD_GANGS.get(key[0])
        if kind is None:
            return None
        _, namespace, gang = key
        members = list((self.members.get(key) or {}).values())
        virtual = kind.assemble(namespace, gang, members, self.record_of(key))
        if virtual is None:
            return kind, "DELETED", {"metadata": {"namespace": namespace, "name": gang}}
        return kind, "MODIFIED", virtual
