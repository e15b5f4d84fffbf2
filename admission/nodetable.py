"""The controller's nodes: each node as the Node watch reports it.

The table is a dict of `policies.Node` by name and the only writer of the nodes: the Node
watch (`apply`). What bound pods use of each node is the pod ledger's (`PodLedger.used`), and
so is the planner's view of a node (`PodLedger.node_view`: its allocatable, and as used what
pods muster does not manage hold).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from policies import Node, Resources
from policies.objects import node_from


class NodeTable(dict[str, Node]):
    """Nodes by name, which of them exist (`node_set`), and their summed capacity."""

    # Slots: a dict subclass's own attributes are read as fast as a plain object's only so.
    __slots__ = ("_bare", "_capacity", "_devices", "node_set")

    def __init__(self) -> None:
        super().__init__()
        self.node_set = 0
        """Bumped when a node comes or goes (a held plan names only nodes the table holds)."""
        self._capacity: Resources | None = None
        self._devices: dict[str, tuple[Resources, Resources]] = {}
        """Node name -> its DRA devices as resources (`admission.devicebook`) and what claims
        muster's gangs do not account for hold of them, kept for nodes not seen yet too."""
        self._bare: dict[str, Node] = {}
        """The nodes as their Node objects say, without their devices (only those with some)."""

    def apply(self, event: str | None, name: str, body: Mapping[str, Any]) -> bool:
        """Apply a Node event; True if the node changed (the planner must look again)."""
        node = None if event == "DELETED" else node_from(body)
        if self._devices or self._bare:
            node = self._with_devices(name, node)
        return self._put(name, node)

    def set_devices(self, name: str, capacity: Resources, held: Resources) -> bool:
        """Node `name`'s devices offer `capacity`, of which claims muster's gangs do not
        account for hold `held` (what other pods use of it); True if the node changed."""
        if capacity or held:
            self._devices[name] = (capacity, held)
        elif self._devices.pop(name, None) is None:
            return False
        if name not in self:
            return False
        return self._put(name, self._with_devices(name, self._bare.get(name, self[name])))

    def _with_devices(self, name: str, node: Node | None) -> Node | None:
        if node is None:
            self._bare.pop(name, None)
            return None
        devices = self._devices.get(name)
        if devices is None:
            self._bare.pop(name, None)
            return node
        self._bare[name] = node
        capacity, held = devices
        return replace(node, allocatable=node.allocatable + capacity, used=node.used + held)

    def _put(self, name: str, node: Node | None) -> bool:
        old = self.pop(name, None)
        if node is not None:
            self[name] = node
        if (old is None) != (node is None):
            self.node_set += 1
        if old == node:
            return False
        self._capacity = None
        return True

    def capacity(self) -> Resources:
        """Every node's allocatable, summed (the same object until a node changes)."""
        if self._capacity is None:
            total = Resources()
            for node in self.values():
                total = total + node.allocatable
            self._capacity = total
        return self._capacity
