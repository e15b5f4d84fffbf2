"""Whether each Queue can take gangs: its `Ready` condition, decided from all the Queues at once.

A Queue is Ready (reason `Active`) when its spec is valid and its `spec.parent` chain reaches a
root through Ready queues. Otherwise it is not Ready, with one reason:

- `InvalidSpec`: its own spec cannot be used (the message says which field and why);
- `ParentNotFound`: `spec.parent` names no Queue;
- `ParentCycle`: it sits on a `spec.parent` cycle (the message names every member);
- `ParentNotReady`: an ancestor is not Ready (the message names it and its reason).

The controller plans with the Ready queues only, writes the condition to each Queue's
`status.conditions`, and tells a gang of a queue that is not Ready why (`QueueNotReady`)
instead of "not found". Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from policies.decisions import Reason
from policies.model import PolicyError, Queue, validate_queue

ACTIVE: Final = "Active"


@dataclass(frozen=True, slots=True)
class Readiness:
    """A Queue's `Ready` condition: status True/False, a CamelCase reason, a message."""

    ready: bool
    reason: str
    message: str

    def gang_reason(self, queue: str) -> Reason:
        """Why a gang of this (not Ready) queue waits."""
        return Reason(
            "QueueNotReady", f'queue "{queue}" is not ready ({self.reason}): {self.message}'
        )


def queue_readiness(
    queues: Mapping[str, Queue | None], errors: Mapping[str, str] | None = None
) -> dict[str, Readiness]:
    """The `Ready` condition of every queue in `queues` (name -> parsed spec, or None when it
    could not be parsed: `errors[name]` then says why)."""
    errors = errors or {}
    out: dict[str, Readiness] = {}
    for name, queue in queues.items():
        if queue is None:
            out[name] = Readiness(False, "InvalidSpec", errors.get(name) or "the spec is invalid")
            continue
        try:
            validate_queue(queue)
        except PolicyError as exc:
            out[name] = Readiness(False, "InvalidSpec", str(exc))
            continue
        if queue.parent is not None and queue.parent not in queues:
            known = ", ".join(sorted(n for n in queues if n != name)) or "none"
            out[name] = Readiness(
                False,
                "ParentNotFound",
                f'spec.parent "{queue.parent}" names no Queue; create it, or set spec.parent to '
                f"one of: {known} (or remove it to make this queue a root)",
            )
    for cycle in _cycles(queues, out):
        path = " -> ".join([*cycle, cycle[0]])
        for name in cycle:
            out[name] = Readiness(
                False,
                "ParentCycle",
                f"spec.parent forms a cycle ({path}); remove spec.parent from one of "
                f"{', '.join(sorted(cycle))} to make it the root",
            )
    for name in queues:
        _resolve(name, queues, out)
    return out


_ACTIVE: Final = Readiness(True, ACTIVE, "the queue admits gangs")


def _cycles(
    queues: Mapping[str, Queue | None], decided: Mapping[str, Readiness]
) -> list[list[str]]:
    """The `spec.parent` cycles among queues not decided yet (each queue has one parent, so
    cycles are disjoint), each from its smallest name, in parent order."""
    state: dict[str, int] = {}  # 1: on the current walk, 2: done
    cycles: list[list[str]] = []
    for start in queues:
        walk: list[str] = []
        name: str | None = start
        while name is not None and name not in decided and state.get(name) is None:
            state[name] = 1
            walk.append(name)
            queue = queues[name]
            name = queue.parent if queue is not None else None
        if name is not None and state.get(name) == 1:
            cycle = walk[walk.index(name) :]
            first = cycle.index(min(cycle))
            cycles.append(cycle[first:] + cycle[:first])
        for member in walk:
            state[member] = 2
    return cycles


def _resolve(name: str, queues: Mapping[str, Queue | None], out: dict[str, Readiness]) -> None:
    """Decide `name` and its undecided ancestors from the nearest decided one (or a root);
    cycles and bad specs are decided before."""
    chain: list[str] = []
    current: str | None = name
    while current is not None and current not in out:
        chain.append(current)
        queue = queues[current]
        assert queue is not None  # undecided queues parsed, validated, and are on no cycle
        current = queue.parent
    above = out[current] if current is not None else None
    if above is not None and not above.ready and above.reason != "ParentNotReady":
        # Every queue below names the one that is the cause, with its reason.
        above = Readiness(
            False,
            "ParentNotReady",
            f'queue "{current}" above it is not ready ({above.reason}): {above.message}',
        )
    for member in reversed(chain):
        out[member] = above if above is not None and not above.ready else _ACTIVE
