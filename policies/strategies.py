"""The admission-policy plug-in interface and the built-ins ``drf``, ``fifo``, ``strict-fifo``.

The planner keeps, per leaf queue, its waiting gangs in order (priority, then submission) and
a heap of queue heads. A policy decides two things only:

- ``head_key``: the order in which queue heads are tried (lowest key first). After a head is
  admitted or passed over, its queue's next gang becomes the head and gets a new key.
- ``blocking``: what a head that cannot be admitted blocks: nothing (``"skip"``, try the
  queue's next gang), its queue (``"queue"``) or every queue (``"all"``).

Everything else (quota, node fit, size ratio, elastic sizing, reasons) is the planner's, so a
custom policy cannot overcommit a queue or a node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol, runtime_checkable

from policies.model import Gang, PolicyError, Queue

__all__ = [
    "AdmissionPolicy",
    "Blocking",
    "DRFPolicy",
    "FIFOPolicy",
    "HeadKey",
    "StrictFIFOPolicy",
    "get_policy",
    "register_policy",
]

HeadKey = tuple[float | int | str, ...]
Blocking = Literal["skip", "queue", "all"]


@runtime_checkable
class AdmissionPolicy(Protocol):
    """Orders queue heads and says what a head that does not fit blocks."""

    name: str

    def head_key(self, gang: Gang, queue: Queue, share: float) -> HeadKey:
        """Sort key for ``gang``, the head of ``queue``; lowest is tried first.

        ``share`` is the queue's weighted dominant share *including* ``gang``: the largest
        fraction of any cluster resource the queue would hold after admitting it, divided by
        ``queue.weight``. Ties are broken by queue name.
        """
        ...

    def blocking(self, queue: Queue) -> Blocking:
        """What a head of ``queue`` that cannot be admitted blocks."""
        ...


def _strategy_blocking(queue: Queue) -> Blocking:
    return "queue" if queue.strategy == "StrictFIFO" else "skip"


class DRFPolicy:
    """Dominant resource fairness by progressive filling: the queue whose weighted dominant
    share, including its head, is lowest goes first; then priority, then submission."""

    name = "drf"

    def head_key(self, gang: Gang, queue: Queue, share: float) -> HeadKey:
        return (share, *gang.order_key)

    def blocking(self, queue: Queue) -> Blocking:
        return _strategy_blocking(queue)


class FIFOPolicy:
    """One global order by priority, then submission, across queues. A head that does not fit
    is skipped unless its queue is StrictFIFO."""

    name = "fifo"

    def head_key(self, gang: Gang, queue: Queue, share: float) -> HeadKey:
        return gang.order_key

    def blocking(self, queue: Queue) -> Blocking:
        return _strategy_blocking(queue)


class StrictFIFOPolicy(FIFOPolicy):
    """Global strict FIFO: the first gang (by priority, then submission) that cannot be
    admitted blocks every gang behind it, in every queue. The baseline that never clogs and
    idles the most."""

    name = "strict-fifo"

    def blocking(self, queue: Queue) -> Blocking:
        return "all"


_POLICIES: dict[str, Callable[[], AdmissionPolicy]] = {
    "drf": DRFPolicy,
    "fifo": FIFOPolicy,
    "strict-fifo": StrictFIFOPolicy,
}


def register_policy(name: str, factory: Callable[[], AdmissionPolicy]) -> None:
    """Make a policy selectable by name (``plan(snapshot, name)``, ``--policy name``)."""
    _POLICIES[name] = factory


def get_policy(name: str) -> AdmissionPolicy:
    """A fresh instance of the policy registered as ``name``."""
    try:
        factory = _POLICIES[name]
    except KeyError:
        known = ", ".join(sorted(_POLICIES))
        raise PolicyError(f'admission policy "{name}" not found; use one of: {known}') from None
    return factory()
