"""Whether a gang being created could ever run: the planner's NeverFits screen, asked at create.

The controller rejects a gang larger than its queue could ever get (nominal plus what it may
borrow through its cohort tree) or than every node together (NeverFits), and marks it Failed
after `--fail-rejected-after`. The webhook says so at create instead, with the same numbers:
`NeverFitsCheck` keeps what the controller plans with (the Ready queues' specs, the nodes as
`policies.objects.node_from` reads them) and asks the planner's own screen
(`policies.planner.NeverFitsScreen`) about the gang `admission.gangs.job_record` reads from
the object as stored (`gang_at_create`), as the controller will. A queue's `spec.neverFits`
says what to do: `Warn` (allow, with a warning kubectl prints) or `Reject` (refuse the create).

Until the webhook has listed the nodes (`relist_nodes`), the node rule is skipped: a gang is
never called too big for a cluster the webhook has not seen. Queues with `nodeFit: false` skip
it too, as the planner does. Thread-safe: the watches and kopf's handler threads share it.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from policies.decisions import Reason
from policies.kinds import Kind
from policies.kinds.reading import gang_of
from policies.kinds.registry import kind_named
from policies.model import Gang, NeverFitsAction, Node, PolicyError, Queue, QueueTree
from policies.objects import node_from
from policies.planner import NeverFitsScreen
from policies.readiness import queue_readiness
from policies.resources import Resources


class NeverFitsCheck:
    """The Queues and Nodes the webhook has seen, and the planner's NeverFits screen over them
    (rebuilt on the first question after either changed)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[str, Queue | None] = {}
        self._errors: dict[str, str] = {}
        self._nodes: dict[str, Node] | None = None
        self._devices: dict[str, Resources] = {}
        self._screen: NeverFitsScreen | None = None
        self._tree: QueueTree | None = None
        self._warnings: Counter[str] = Counter()
        self._refusals: Counter[str] = Counter()

    # -- what the watches feed -------------------------------------------------------------

    def set_queue(self, name: str, queue: Queue | None, error: str = "") -> None:
        """A Queue's parsed spec, or None with the reason it could not be read.

        The controller writes each Queue's status (usage, conditions) as it admits; such an
        event leaves the spec as it was and keeps the screen (rebuilding it walks every node)."""
        with self._lock:
            unchanged = name in self._queues and self._queues[name] == queue
            if unchanged and (queue is not None or self._errors.get(name) == error):
                return
            self._queues[name] = queue
            if queue is None:
                self._errors[name] = error
            else:
                self._errors.pop(name, None)
            self._screen = None

    def drop_queue(self, name: str) -> None:
        with self._lock:
            self._queues.pop(name, None)
            self._errors.pop(name, None)
            self._screen = None

    def apply_node(self, event: str, body: Mapping[str, Any]) -> None:
        """A Node watch event; ignored before the first `relist_nodes`."""
        name = (body.get("metadata") or {}).get("name") or ""
        node = None if event == "DELETED" else node_from(body)
        with self._lock:
            nodes = self._nodes
            if nodes is None:
                return
            old = nodes.pop(name, None)
            if node is not None:
                nodes[name] = node
            # Heartbeats change a Node's status, rarely what the planner reads of it.
            if old != node:
                self._screen = None

    def relist_nodes(self, items: Iterable[Mapping[str, Any]]) -> None:
        """Every Node (a LIST): from now on the node rule applies."""
        nodes: dict[str, Node] = {}
        for body in items:
            node = node_from(body)
            if node is not None:
                nodes[node.name] = node
        with self._lock:
            self._nodes = nodes
            self._screen = None

    def set_devices(self, capacities: Mapping[str, Resources]) -> None:
        """Each node's DRA devices as resources (`webhook.devices`): part of what it offers."""
        with self._lock:
            if capacities != self._devices:
                self._devices = dict(capacities)
                self._screen = None

    @property
    def nodes_synced(self) -> bool:
        return self._nodes is not None

    # -- the question ----------------------------------------------------------------------

    def screens(self, queue: str) -> bool:
        """Whether `verdict` can say anything of a gang in `queue`: False for a queue unknown,
        not Ready or with children (the verdict is then None whatever the gang), so the caller
        need not read the gang at all."""
        with self._lock:
            return self._current().tree.is_leaf(queue)

    def verdict(self, gang: Gang) -> tuple[Reason, NeverFitsAction] | None:
        """The planner's NeverFits reason for `gang` and its queue's `spec.neverFits`, or None
        when it could fit (or its queue is unknown or not Ready: other messages say so)."""
        with self._lock:
            screen = self._current()
            reason = screen.verdict(gang)
            if reason is None:
                return None
            return reason, screen.tree.queues[gang.queue].never_fits

    def _current(self) -> NeverFitsScreen:
        """The screen over what was last fed (built again after a change); under the lock."""
        screen = self._screen
        if screen is None:
            screen = self._screen = NeverFitsScreen(
                self._tree_of_ready(),
                None if self._nodes is None else self._with_devices(self._nodes.values()),
            )
        return screen

    def _with_devices(self, nodes: Iterable[Node]) -> list[Node]:
        devices = self._devices
        if not devices:
            return list(nodes)
        return [
            replace(n, allocatable=n.allocatable + devices[n.name]) if n.name in devices else n
            for n in nodes
        ]

    def _tree_of_ready(self) -> QueueTree:
        """The Ready queues, as the controller plans with them (`admission.cache`)."""
        readiness = queue_readiness(self._queues, self._errors)
        ready = [q for name, q in self._queues.items() if q is not None and readiness[name].ready]
        try:
            return QueueTree.build(ready)
        except PolicyError:  # pragma: no cover - readiness checks what build does
            return QueueTree.build([])

    def count(self, queue: str, action: NeverFitsAction) -> None:
        """One create warned (Warn) or refused (Reject), for the metrics."""
        with self._lock:
            (self._warnings if action == "Warn" else self._refusals)[queue] += 1

    def warnings(self) -> dict[str, int]:
        """Creates allowed with a never-fits warning so far, per queue."""
        with self._lock:
            return dict(self._warnings)

    def refusals(self) -> dict[str, int]:
        """Creates refused as never fitting so far, per queue."""
        with self._lock:
            return dict(self._refusals)


def gang_at_create(
    kind: Kind, obj: Mapping[str, Any], namespace: str, patch: Mapping[str, Any]
) -> Gang:
    """The gang the controller will read once `obj` is stored with the webhook's merge `patch`:
    the gang of the object's gang object (`Kind.gang_object`: the object itself, a
    MiniCluster's through the Job its operator makes from `spec.jobLabels`), read by the
    controller's own reader (`policies.kinds.reading.gang_of`, the gang alone)."""
    meta = dict(obj.get("metadata") or {})
    meta.setdefault("namespace", namespace)
    gang_object = kind.gang_object(merged({**obj, "metadata": meta}, patch))
    return gang_of(kind_named(str(gang_object.get("kind") or "")), gang_object)


def merged(obj: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """`patch` (a merge patch without deletions) applied to `obj`, copying only the mappings
    along its paths (the rest is shared with `obj`, which stays as it was)."""
    out = dict(obj)
    for key, value in patch.items():
        current = out.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            out[key] = merged(current, value)
        else:
            out[key] = value
    return out
