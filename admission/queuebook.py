"""The controller's Queues: each Queue's spec (or why it cannot be used), the tree of the Ready
ones, each Queue's Ready condition, and the namespaces their selectors read.

The book is a dict of `QueueView` by name and the only writer of the queues' state: the Queue
and Namespace watches (`apply`, `apply_namespace`). The planner plans with `tree`; gangs whose
Queue is not Ready, or does not take gangs from their namespace, are kept out of the plan
(`refusals`, read from the records the caller passes).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from admission.gangs import JobRecord
from policies import PolicyError, Queue, QueueTree, Reason
from policies.kinds.reading import format_time
from policies.objects import namespace_selector_from, queue_from
from policies.phase import NO_LIMITS, QueueLimits, parse_queue_limits
from policies.readiness import Readiness, queue_readiness
from policies.reasons import namespace_not_allowed
from policies.selectors import LabelSelector

log = logging.getLogger("muster.cache")


@dataclass
class QueueView:
    """A Queue as the status service shows it: its spec (parsed) or why it cannot be used."""

    name: str
    queue: Queue | None
    error: str | None = None
    namespace_selector: LabelSelector | None = None
    """Namespaces whose gangs may use the queue; None or empty: all."""
    limits: QueueLimits = NO_LIMITS
    """`spec.limits`, which the webhook enforces; shown by the status service only."""


def _limits(name: str, body: Mapping[str, Any]) -> QueueLimits:
    """A Queue's `spec.limits`; one muster cannot read is logged and shown as none (the
    planner does not use them, so it does not make the queue unusable)."""
    try:
        return parse_queue_limits(
            (body.get("spec") or {}).get("limits"), f'queue "{name}": spec.limits'
        )
    except PolicyError as exc:
        log.warning("%s", exc)
        return NO_LIMITS


class QueueBook(dict[str, QueueView]):
    """Queues by name, the tree of the Ready ones, and namespaces' labels."""

    # Slots: a dict subclass's own attributes are read as fast as a plain object's only so.
    __slots__ = ("_ready_since", "_specs", "namespaces", "namespaces_known", "readiness", "tree")

    def __init__(self) -> None:
        super().__init__()
        self.tree: QueueTree | None = None
        """The Ready queues (rebuilt, a new object, on every Queue event)."""
        self.readiness: dict[str, Readiness] = {}
        """Each Queue's Ready condition (policies.readiness); the tree holds the Ready ones."""
        self.namespaces: dict[str, dict[str, str]] = {}
        """Namespace name -> its labels."""
        self.namespaces_known = False
        """A namespace was ever seen (else selectors are not checked)."""
        self._ready_since: dict[str, tuple[bool, str, str]] = {}
        """Per Queue: (ready, reason, lastTransitionTime) of its condition as last written or
        read from the object, so the transition time changes only with the condition."""
        self._specs: dict[str, str] = {}
        """Per Queue: its spec as last applied (canonical JSON), to tell a status-only event."""

    def apply(self, event: str | None, name: str, body: Mapping[str, Any]) -> bool:
        """Apply a Queue event; True if it changed what the planner reads (the tree is then
        rebuilt, a new object, and the planner looks again).

        Most Queue events are muster's own status writes coming back through the watch: the
        spec (all a `QueueView` is read from, with the name) is then unchanged and the event is
        dropped here. Rebuilding the tree for each was 84.5% of the controller's CPU at 1,000
        queues (docs/benchmarks.md, the Kueue large-scale run)."""
        if event == "DELETED":
            self.pop(name, None)
            self._ready_since.pop(name, None)
            self._specs.pop(name, None)
        else:
            spec = json.dumps(body.get("spec") or {}, sort_keys=True, default=str)
            if name in self and self._specs.get(name) == spec:
                return False
            self._specs[name] = spec
            self._seed_ready_since(name, body)
            try:
                selector = namespace_selector_from(body)
                self[name] = QueueView(
                    name,
                    queue_from(body),
                    namespace_selector=selector if selector.requirements else None,
                    limits=_limits(name, body),
                )
            except ValueError as exc:
                log.warning("queue %s ignored: %s", name, exc)
                self[name] = QueueView(name, None, str(exc))
        self._rebuild_tree()
        return True

    def apply_namespace(self, event: str | None, name: str, body: Mapping[str, Any]) -> bool:
        """Apply a Namespace event; True if it may change what the plan holds (its labels
        changed and some queue selects namespaces)."""
        self.namespaces_known = True
        meta = body.get("metadata") or {}
        labels = None if event == "DELETED" else dict(meta.get("labels") or {})
        if labels is None:
            self.namespaces.pop(name, None)
        elif self.namespaces.get(name) != labels:
            self.namespaces[name] = labels
        else:
            return False
        return any(view.namespace_selector for view in self.values())

    def _rebuild_tree(self) -> None:
        """Plan with the Ready queues (a valid spec, a parent chain that reaches a root)."""
        readiness = queue_readiness(
            {name: view.queue for name, view in self.items()},
            {name: view.error for name, view in self.items() if view.error},
        )
        for name, ready in readiness.items():
            if not ready.ready and self.readiness.get(name) != ready:
                log.warning("queue %s not ready (%s): %s", name, ready.reason, ready.message)
        self.readiness = readiness
        queues = [
            view.queue
            for name, view in self.items()
            if view.queue is not None and readiness[name].ready
        ]
        try:
            self.tree = QueueTree.build(queues)
        except PolicyError as exc:  # pragma: no cover - readiness checks what build does
            log.warning("queue tree invalid: %s", exc)
            self.tree = _largest_valid_tree(queues)

    # -- gangs kept out of the plan ---------------------------------------------------------

    def refusals(self, records: Collection[JobRecord]) -> dict[str, Reason]:
        """Waiting gangs of `records` the controller keeps out of the plan, and why: their
        Queue is not Ready, or does not take gangs from their namespace."""
        return {**self.namespace_refusals(records), **self.queue_refusals(records)}

    def namespace_refusals(self, records: Collection[JobRecord]) -> dict[str, Reason]:
        """Waiting gangs whose queue does not take gangs from their namespace, and why."""
        selective = {
            name: view.namespace_selector
            for name, view in self.items()
            if view.namespace_selector is not None and view.namespace_selector.requirements
        }
        if not selective or not self.namespaces_known:
            return {}
        out: dict[str, Reason] = {}
        for r in records:
            selector = selective.get(r.queue)
            if (
                selector is not None
                and r.admission is None
                and not r.finished
                and not selector.matches(self.namespaces.get(r.namespace, {}))
            ):
                out[r.key] = namespace_not_allowed(r.queue, r.namespace, selector.describe())
        return out

    def queue_refusals(self, records: Collection[JobRecord]) -> dict[str, Reason]:
        """Waiting gangs whose Queue exists but is not Ready, and why (not "not found")."""
        broken = {name: r for name, r in self.readiness.items() if not r.ready}
        if not broken:
            return {}
        return {
            r.key: broken[r.queue].gang_reason(r.queue)
            for r in records
            if r.queue in broken and r.admission is None and not r.finished and not r.failed_state
        }

    # -- the Ready condition ----------------------------------------------------------------

    def ready_condition(self, name: str) -> dict[str, str] | None:
        """The Queue's `Ready` condition as `status.conditions` holds it (None: unknown)."""
        ready = self.readiness.get(name)
        if ready is None:
            return None
        since = self._ready_since.get(name)
        if since is None or since[:2] != (ready.ready, ready.reason):
            since = (ready.ready, ready.reason, format_time(time.time()))
            self._ready_since[name] = since
        return {
            "type": "Ready",
            "status": "True" if ready.ready else "False",
            "reason": ready.reason,
            "message": ready.message,
            "lastTransitionTime": since[2],
        }

    def _seed_ready_since(self, name: str, body: Mapping[str, Any]) -> None:
        """A restarted controller keeps the transition time the object already shows."""
        if name in self._ready_since:
            return
        for condition in (body.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "Ready" and condition.get("lastTransitionTime"):
                self._ready_since[name] = (
                    condition.get("status") == "True",
                    str(condition.get("reason") or ""),
                    str(condition["lastTransitionTime"]),
                )


def _largest_valid_tree(queues: Iterable[Queue]) -> QueueTree:
    """Drop queues one at a time (offenders first) until the rest validate."""
    remaining = list(queues)
    while remaining:
        try:
            return QueueTree.build(remaining)
        except PolicyError as exc:
            text = str(exc)
            offender = next((q for q in remaining if f'"{q.name}"' in text), remaining[-1])
            remaining.remove(offender)
    return QueueTree.build([])
