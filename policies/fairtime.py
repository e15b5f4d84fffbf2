"""Fairness over time: a queue's share counts what it used recently, not only what it holds now
(the Queue's ``spec.fairSharing.halfLife``; Kueue's admission fair sharing and KAI's time-based
fair share are the models).

With a half-life ``h`` a leaf queue's *usage* for its share (the order of queue heads, who may
preempt whom, above or below its fair share) is what it holds now, ``H``, plus a *memory* ``R``
of the gangs it held and released:

    R(t) = sum over released gangs g (held over [a_g, e_g]) of
           demand_g * (1 - 2^(-(e_g - a_g) / h)) * 2^(-(t - e_g) / h)

A gang leaves behind the part of its demand its holding time earned (about all of it when held
for several half-lives, little when held briefly), fading by half every half-life. So

- a queue that ran a lot recently goes after one that did not, until its memory fades;
- it is monotone: more demand, or held longer, never gives less usage;
- it is the instant usage with no half-life (a half-life of 0 is the instant share: no memory
  at all), and tends to it as the half-life shrinks;
- what a queue holds counts in full, as without the option: a burst of admissions raises its
  share at once, as before.

`Memory` keeps ``R`` per leaf incrementally: told of each release (what, held since when,
released when), it decays its sum lazily. Times may come in any order (each term is scaled to
the leaf's reference time), so a restarted controller loses only the memory of gangs released
before it started.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from policies.model import QueueTree

__all__ = ["Memory", "decay", "half_lives", "memory_of"]

Usage = Mapping[str, float]
"""An amount per resource name (the planner's units: millicores for cpu, bytes, counts)."""


def decay(elapsed: float, half_life: float) -> float:
    """The weight left after ``elapsed`` seconds: 2^(-elapsed/half_life) (elapsed may be
    negative: a weight above 1). With no half-life, nothing is left after any time."""
    if half_life <= 0:
        return 1.0 if elapsed <= 0 else 0.0
    return math.pow(2.0, -elapsed / half_life)


def earned(held_for: float, half_life: float) -> float:
    """The part of its demand a gang held for ``held_for`` seconds leaves behind at release."""
    if half_life <= 0:
        return 0.0
    return 1.0 - decay(max(held_for, 0.0), half_life)


def memory_of(
    released: Iterable[tuple[Usage, float, float]], now: float, half_life: float
) -> dict[str, float]:
    """``R`` at ``now`` from the released gangs (demand, held from, released at): the
    definition `Memory` keeps incrementally (see the module docstring). Releases after ``now``
    do not count yet."""
    total: dict[str, float] = {}
    for demand, start, end in released:
        if end > now:
            continue
        weight = earned(end - start, half_life) * decay(now - end, half_life)
        for name, amount in demand.items():
            total[name] = total.get(name, 0.0) + amount * weight
    return total


def half_lives(tree: QueueTree) -> dict[str, float]:
    """Each leaf queue's usage half-life in seconds: its own ``fairSharing.halfLife``, else its
    nearest cohort's above it. Leaves with none, or 0 (the instant share), are left out."""
    out: dict[str, float] = {}
    for leaf in tree.leaves:
        for name in tree.ancestors(leaf):
            half_life = tree.queues[name].usage_half_life
            if half_life is not None:
                if half_life > 0:
                    out[leaf] = half_life
                break
    return out


class Memory:
    """``R`` of every leaf queue with a half-life (see the module docstring)."""

    __slots__ = ("_at", "_half_lives", "_sums")

    def __init__(self, tree: QueueTree) -> None:
        self._half_lives = half_lives(tree)
        self._sums: dict[str, dict[str, float]] = {}  # leaf -> R at its reference time
        self._at: dict[str, float] = {}  # leaf -> its reference time

    @property
    def tracked(self) -> Mapping[str, float]:
        """The leaves with a memory, and their half-lives."""
        return self._half_lives

    def set_queues(self, tree: QueueTree) -> None:
        """New queues: a leaf whose half-life changed forgets its past."""
        old = self._half_lives
        self._half_lives = half_lives(tree)
        for leaf in list(self._sums):
            if self._half_lives.get(leaf) != old.get(leaf):
                del self._sums[leaf]
                del self._at[leaf]

    def release(self, leaf: str, demand: Usage, held_from: float, released_at: float) -> None:
        """``leaf`` let go at ``released_at`` of ``demand`` held since ``held_from``."""
        half_life = self._half_lives.get(leaf)
        if half_life is None:
            return
        weight = earned(released_at - held_from, half_life)
        if weight <= 0:
            return
        sums = self._sums.get(leaf)
        if sums is None:
            sums = self._sums[leaf] = {}
            self._at[leaf] = released_at
        at = self._at[leaf]
        if released_at > at:  # move the reference time forward: the old sum decays
            factor = decay(released_at - at, half_life)
            for name in sums:
                sums[name] *= factor
            self._at[leaf] = at = released_at
        weight *= decay(at - released_at, half_life)  # an earlier release, seen late
        for name, amount in demand.items():
            if amount:
                sums[name] = sums.get(name, 0.0) + amount * weight

    def at(self, now: float) -> dict[str, dict[str, float]]:
        """Each leaf's ``R`` at ``now`` (leaves with nothing left out)."""
        out: dict[str, dict[str, float]] = {}
        for leaf, sums in self._sums.items():
            factor = decay(now - self._at[leaf], self._half_lives[leaf])
            values = {name: amount * factor for name, amount in sums.items() if amount * factor}
            if values:
                out[leaf] = values
        return out
