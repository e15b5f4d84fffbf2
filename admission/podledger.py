"""The controller's pods: each live pod as the Pod watch reports it, counted per gang and node.

The ledger is a dict of `policies.objects.PodRecord` by uid and the only writer of the counts
read from them: per gang ("namespace/gang label") its pods bound per node, not bound yet,
ready, waiting on the control plane, succeeded, sent to a node, and held at muster's scheduling
gate (`gated`, with `gated_arrived` to wake the placer); per node what bound pods use of it
(`used`, `used_by_others`), and so the planner's view of a node (`node_view`). It answers how
far an admitted gang has come (`ready_pods`, `succeeded_pods`, `gang_waits`, `start_measure`)
for the clog clock and the reservations.

`apply` is the hottest path of the controller (every pod changes five times or more): it
does its bookkeeping inline and leaves what concerns the gang's Job to the cache.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from admission.gangs import JobRecord
from admission.nodetable import NodeTable
from policies import Node, Resources
from policies.objects import PodRecord, pod_record
from policies.vocabulary import GANG

PodChange = tuple[str | None, bool] | None
"""What `PodLedger.apply` changed: None for nothing held; else (the gang whose live pods
changed, if a gang's pod; whether room on a node was freed)."""


class PodLedger(dict[str, PodRecord]):
    """Live pods by uid; per gang what its pods are doing, per node what they use."""

    # Slots: a dict subclass's own attributes are read as fast as a plain object's only so.
    __slots__ = (
        "_views",
        "ended",
        "events",
        "gang_bound",
        "gang_live",
        "gang_ready",
        "gang_released",
        "gang_sent",
        "gang_succeeded",
        "gang_unbound",
        "gang_waiting",
        "gated",
        "gated_arrived",
        "nodes",
        "seen",
        "set_bound",
        "set_released",
        "used",
        "used_by_others",
    )

    def __init__(self, nodes: NodeTable) -> None:
        super().__init__()
        self.nodes = nodes
        self.gang_bound: dict[str, dict[str, int]] = defaultdict(dict)
        """Per gang: its live pods bound, per node."""
        self.gang_unbound: dict[str, int] = defaultdict(int)
        """Per gang: its live pods not bound yet."""
        self.gang_ready: dict[str, int] = defaultdict(int)
        """Per gang: its live pods that are ready."""
        self.gang_live: dict[str, int] = defaultdict(int)
        """Per gang: its live pods not being deleted (bound or not, gated or not): what it runs
        or is about to run."""
        self.gang_released: dict[str, Counter[tuple[str, str, str]]] = {}
        """Per gang: its live pods not being deleted that muster's placement gate no longer
        holds (released, or never gated), by the member each runs (`PodRecord.member`): what it
        runs or may run now, against its admitted size (`released_members`)."""
        self.gang_waiting: dict[str, int] = defaultdict(int)
        """Per gang: its live pods waiting on the control plane (`policies.objects.pod_waits`)."""
        self.gang_succeeded: dict[str, set[str]] = {}
        """Per gang: the uids of its succeeded pods (the records drop them: they hold nothing)."""
        self.gang_sent: dict[str, Counter[str]] = {}
        """Per gang (per pod set of a gang of several: `PodRecord.set_key`): its live pods that
        are not gated, by the node they were sent to (their nodeSelector's hostname, else the
        node they are bound to): what placing counts as used."""
        self.set_bound: dict[str, dict[str, int]] = defaultdict(dict)
        """Per pod set of a gang of several (`PodRecord.set_key`): its live pods bound, per
        node (what each set holds; `gang_bound` counts the gang's pods of every set)."""
        self.set_released: dict[str | None, int] = defaultdict(int)
        """Per gang (per pod set: `PodRecord.set_key`): its live pods not held at muster's gate
        (what an admission without a placement counts as released)."""
        self.gated: dict[str, PodRecord] = {}
        """Pods (by uid) held by muster's scheduling gate: each waits for muster to name its
        node (a pod group's pods too, before their group is admitted and beyond its count)."""
        self.gated_arrived = asyncio.Event()
        """Set when a gated pod appears: the controller places it without waiting for a plan."""
        self.seen: dict[str, int] = {}
        """Per gang: the number of its last pod event (of `events`), so `Reservations.admitted`
        knows whose pods changed since the last cycle."""
        self.events = 0
        self.ended: dict[str, float] = {}
        """Per gang whose Job the cache holds: when its last live pod ended or went (its room
        was free then; the Job's Complete condition follows later), for the history."""
        self.used: dict[str, Resources] = defaultdict(Resources)
        """Per node: the requests of every pod bound to it."""
        self.used_by_others: dict[str, Resources] = defaultdict(Resources)
        """Per node: the requests of the pods bound to it that muster does not manage."""
        self._views: dict[str, Node] = {}

    def apply(
        self, event: str | None, uid: str, meta: Mapping[str, Any], body: Mapping[str, Any]
    ) -> PodChange:
        """Apply a Pod event (its `metadata` is `meta`); return what changed."""
        label = (meta.get("labels") or {}).get(GANG)
        gang = f"{meta.get('namespace')}/{label}" if label else None
        if gang is not None:
            self.events += 1
            self.seen[gang] = self.events
            self._note_succeeded(event, uid, gang, body)
        old = self.pop(uid, None)
        new = None if event == "DELETED" else pod_record(body)
        if new is not None and new.gated and new.gang is not None:
            if uid not in self.gated:
                self.gated_arrived.set()  # a pod to place
            self.gated[uid] = new
        else:
            self.gated.pop(uid, None)
        if old == new:
            if new is not None:
                self[uid] = new
            return None
        if old is not None:
            self._account(old, -1)
        if new is not None:
            self[uid] = new
            self._account(new, +1)
        changed = new if new is not None else old
        # Freed room matters to the planner; a newly bound pod only moves room around.
        freed = old is not None and bool(old.node) and (new is None or new.node != old.node)
        return (changed.gang if changed is not None else None), freed

    def _note_succeeded(
        self, event: str | None, uid: str, gang: str, body: Mapping[str, Any]
    ) -> None:
        """Keep each gang's succeeded pods (the pod records drop them: they hold nothing)."""
        done = event != "DELETED" and (body.get("status") or {}).get("phase") == "Succeeded"
        if done:
            self.gang_succeeded.setdefault(gang, set()).add(uid)
        elif uid in self.gang_succeeded.get(gang, ()):
            self.gang_succeeded[gang].discard(uid)
            if not self.gang_succeeded[gang]:
                del self.gang_succeeded[gang]

    def _account(self, pod: PodRecord, sign: int) -> None:
        """Count `pod` in (`sign` +1) or out (-1) of its gang's figures and its node's usage.
        A candidate (a pod group's pod still gated) is not one of its gang's pods yet, and is
        bound nowhere."""
        if pod.candidate:
            return
        if pod.gang is not None and not pod.gated:
            released = self.set_released
            released[pod.set_key] += sign
            if not released[pod.set_key]:
                del released[pod.set_key]
        if pod.gang is not None and not pod.gated and (pod.target or pod.node):
            key = pod.set_key
            assert key is not None
            sent = self.gang_sent.get(key)
            if sent is None:
                sent = self.gang_sent[key] = Counter()
            where = pod.target or pod.node
            sent[where] += sign
            if sent[where] <= 0:
                del sent[where]
                if not sent:
                    del self.gang_sent[key]
        if pod.gang is not None:
            if pod.node:
                bound = self.gang_bound[pod.gang]
                bound[pod.node] = bound.get(pod.node, 0) + sign
                if not bound[pod.node]:
                    del bound[pod.node]
                if not bound:
                    del self.gang_bound[pod.gang]
                if pod.pod_set:
                    key = f"{pod.gang}/{pod.pod_set}"
                    bound = self.set_bound[key]
                    bound[pod.node] = bound.get(pod.node, 0) + sign
                    if not bound[pod.node]:
                        del bound[pod.node]
                    if not bound:
                        del self.set_bound[key]
            else:
                self.gang_unbound[pod.gang] += sign
                if not self.gang_unbound[pod.gang]:
                    del self.gang_unbound[pod.gang]
            if not pod.terminating:
                self.gang_live[pod.gang] += sign
                if not self.gang_live[pod.gang]:
                    del self.gang_live[pod.gang]
                if not pod.gated:
                    members = self.gang_released.get(pod.gang)
                    if members is None:
                        members = self.gang_released[pod.gang] = Counter()
                    member = pod.member
                    members[member] += sign
                    if members[member] <= 0:
                        del members[member]
                        if not members:
                            del self.gang_released[pod.gang]
            if pod.ready:
                self.gang_ready[pod.gang] += sign
                if not self.gang_ready[pod.gang]:
                    del self.gang_ready[pod.gang]
            if pod.waiting:
                self.gang_waiting[pod.gang] += sign
                if not self.gang_waiting[pod.gang]:
                    del self.gang_waiting[pod.gang]
        if not pod.node:
            return
        add = pod.requests if sign > 0 else None
        if add is not None:
            self.used[pod.node] = self.used[pod.node] + add
            if pod.gang is None:
                self.used_by_others[pod.node] = self.used_by_others[pod.node] + add
        else:
            self.used[pod.node] = self.used[pod.node] - pod.requests
            if pod.gang is None:
                self.used_by_others[pod.node] = self.used_by_others[pod.node] - pod.requests
        if pod.gang is None:
            self._views.pop(pod.node, None)

    def node_view(self, name: str) -> Node:
        """Node `name` (of the node table) as the planner sees it: as used, what pods muster
        does not manage hold there (gangs' pods are the planner's own business)."""
        node = self._views.get(name)
        if node is None:
            base = self.nodes[name]
            others = self.used_by_others.get(name)
            # A node's own `used`: what DRA claims of other pods hold of its devices.
            node = replace(base, used=base.used + others if others else base.used)
            self._views[name] = node
        return node

    def forget_view(self, name: str) -> None:
        """Node `name` changed (or went): its view is made again when next asked for."""
        self._views.pop(name, None)

    def note_ended(self, gang: str, when: float) -> None:
        """The last live pod of `gang`, whose Job the cache holds, ended or went at `when`."""
        self.ended[gang] = when

    def forget_gang(self, gang: str) -> None:
        """The gang's Job left the cache: drop what was kept for it beyond its pods."""
        self.ended.pop(gang, None)
        self.seen.pop(gang, None)

    # -- how far a gang has come ------------------------------------------------------------

    def ready_pods(self, record: JobRecord) -> int:
        """An admitted gang's ready pods: its Job's status.ready, or more if the pods say so
        (the Job controller, busy, may update the Job's status long after its pods are ready;
        a gang must not be evicted for that)."""
        return max(record.ready, self.gang_ready.get(f"{record.namespace}/{record.gang_label}", 0))

    def succeeded_pods(self, record: JobRecord) -> int:
        """An admitted gang's succeeded pods: its Job's status.succeeded, or more if the pods
        say so (the Job controller counts a finished pod only after removing its finalizer;
        busy, it took over 30 s, and the gang looked below its minimum meanwhile)."""
        gang = f"{record.namespace}/{record.gang_label}"
        return max(record.succeeded, len(self.gang_succeeded.get(gang, ())))

    def gang_waits(self, record: JobRecord) -> bool:
        """Whether an admitted gang waits on the control plane: its Job not started since the
        admission (status.startTime, to the second) and no pod of it yet, or a pod of it
        waiting (`policies.objects.pod_waits`)."""
        gang = f"{record.namespace}/{record.gang_label}"
        if self.gang_waiting.get(gang, 0) > 0:
            return True
        start, admitted = record.start_time, record.admitted_at
        has_pods = (
            gang in self.gang_bound or gang in self.gang_unbound or gang in self.gang_succeeded
        )
        started = start is not None and admitted is not None and start >= admitted - 1
        return not (started or has_pods)

    def start_measure(self, record: JobRecord) -> int:
        """How far an admitted gang's pods have come towards running, for the clog clock
        (`policies.lifecycle.check_clog`'s `advanced`): each live pod counts once, once more
        when bound, once more when ready; each succeeded pod three times."""
        gang = f"{record.namespace}/{record.gang_label}"
        bound = sum((self.gang_bound.get(gang) or {}).values())
        unbound = self.gang_unbound.get(gang, 0)
        return unbound + 2 * bound + self.gang_ready.get(gang, 0) + 3 * self.succeeded_pods(record)

    def released_members(self, record: JobRecord, size: int) -> int:
        """How many members an admitted gang (at `size` pods) runs or may run now: its live
        pods past muster's gate, where two pods of one completion index of one Job are one
        member, and the pods the gang's object itself controls without an index count up to
        `size`. Its kind's controller keeps to the object's spec (which `admission.guard`
        compares with the admission) and may run a member twice by its own rules ("the same
        program may sometimes be started twice", Kubernetes' Job documentation; a Job
        controller whose view of its pods lagged a kube-apiserver restart did in
        tests/cluster/test_faults.py): that is not the gang outgrowing its admission. Pods
        another controller made (a child Job whose spec someone grew) or none (made by hand
        with the gang's label) each count."""
        members = self.gang_released.get(f"{record.namespace}/{record.gang_label}")
        if not members:
            return 0
        own = record.uid
        own_plain = sum(1 for owner, index, _ in members if own and owner == own and not index)
        return len(members) - own_plain + min(own_plain, size)

    def describe(self, record: JobRecord) -> str:
        """What the ledger holds of a gang's pods, for an eviction's message."""
        gang = f"{record.namespace}/{record.gang_label}"
        bound = sum((self.gang_bound.get(gang) or {}).values())
        return (
            f"pods: {bound + self.gang_unbound.get(gang, 0)} live, {bound} bound, "
            f"{self.gang_ready.get(gang, 0)} ready, {self.gang_waiting.get(gang, 0)} waiting on "
            f"the control plane"
        )
