"""Where admitted gangs hold room: their bound pods, plus the planned nodes while they start.

Node usage of an admitted gang is where its pods are bound; until all are bound, the planner's
placement stays as a reservation so the next cycle does not give the same room away again. A
reservation lives only in memory: after a restart, a gang whose pods are not bound yet holds
the pin on its Job (muster.dev/placement) instead, and otherwise only its bound pods until the
scheduler binds the rest (seconds).

`Reservations` is a dict of the planned placement (per pod set) by gang object key, and its only
writer. It reads the
records (`JobStore`), their pods (`PodLedger`) and the nodes (`NodeTable`) to say where every
admitted gang holds room (`admitted`, for the planner, every cycle: Kueue's admitted usage, kept
apart from the pending queues).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from admission.gangs import JobRecord
from admission.jobstore import JobStore
from admission.nodetable import NodeTable
from admission.podledger import PodLedger
from policies import AdmittedGang

RESERVATION_TTL = 60.0
"""Seconds after admission after which a gang's unbound reservation is dropped."""


@dataclass(slots=True)
class _AdmittedMemo:
    """What an admitted gang's `AdmittedGang` was made from at the last `admitted`."""

    record: JobRecord
    admission: tuple[float, int]
    running: bool
    pods: int
    reserved: dict[str, dict[str, int]] | None
    expired: bool | None
    """Whether the reservation's TTL had passed, when the placement depended on it (the gang
    not yet placed and ready: `Reservations._plan_hold`); None when it did not."""
    node_set: int
    entry: AdmittedGang


Placements = dict[str, dict[str, int]]
"""Pod set name -> node -> pods ('' names the pod set of a gang of one)."""


class Reservations(dict[str, Placements]):
    """The planned placement (pod set -> node -> pods) each young admitted gang holds, by gang
    object key."""

    # Slots: a dict subclass's own attributes are read as fast as a plain object's only so.
    __slots__ = ("_memo", "jobs", "nodes", "pods")

    def __init__(self, jobs: JobStore, pods: PodLedger, nodes: NodeTable) -> None:
        super().__init__()
        self.jobs, self.pods, self.nodes = jobs, pods, nodes
        self._memo: dict[str, _AdmittedMemo] = {}

    def hold(self, key: str, placements: Mapping[str, Mapping[str, int]]) -> None:
        """The controller admits gang `key` on `placements` (per pod set; see
        `Cache.assume_admitted`)."""
        if any(placements.values()):
            self[key] = {name: dict(placement) for name, placement in placements.items()}

    def release(self, now: float) -> None:
        """Drop the plans gangs no longer need held (`_plan_hold`)."""
        jobs = self.jobs
        for key in [k for k in self if k not in jobs or not self._plan_hold(jobs[k], now)[0]]:
            del self[key]

    def placement(self, record: JobRecord, now: float) -> dict[str, int]:
        """Where an admitted gang's main pod set holds room: bound pods, plus its planned
        nodes while young (`_placement`)."""
        return self._placement(record, now)[0]

    def _placement(
        self, record: JobRecord, now: float
    ) -> tuple[dict[str, int], bool | None, tuple[dict[str, int], ...]]:
        """Where an admitted gang holds room, its main pod set's and its other pod sets'
        (in `Gang.others` order), and what of `now` it depended on (`_plan_hold`).

        Bound pods, plus the planned nodes while young. The plan is this controller's
        reservation, or after a restart the pin on the object (muster.dev/placement): a
        restarted controller holds the same nodes. While young the planned nodes stay held even
        where a pod is bound (a pod may be counted twice): the pin fixes the nodes, not how many
        of the gang's pods each one gets, and that slack keeps room for the plan until the
        gang's minimum is ready. A gang whose minimum is ready holds just its bound pods (so a
        preemption frees what it really holds)."""
        gang = f"{record.namespace}/{record.gang_label}"
        others = record.gang.others
        if others:
            set_bound = self.pods.set_bound
            bound = dict(set_bound.get(f"{gang}/{record.gang.set_name}", {}))
            bound_others = tuple(
                dict(set_bound.get(f"{gang}/{other.name}", {})) for other in others
            )
        else:
            bound = dict(self.pods.gang_bound.get(gang, {}))
            bound_others = ()
        admission = record.admission
        reserved = self.get(record.key)
        if reserved is None and admission is not None and record.pinned:
            reserved = record.pinned
        if reserved is None:
            return bound, None, bound_others
        holds, expired = self._plan_hold(record, now)
        if holds:
            nodes = self.nodes
            names = (record.gang.set_name, *(other.name for other in others))
            for name, held in zip(names, (bound, *bound_others), strict=True):
                for node, pods in (reserved.get(name) or {}).items():
                    if node in nodes:
                        held[node] = max(held.get(node, 0), pods)
        return bound, expired, bound_others

    def _plan_hold(self, record: JobRecord, now: float) -> tuple[bool, bool | None]:
        """Whether an admitted gang holds its planned nodes, and what of `now` that depended
        on: None for nothing, else whether the reservation's TTL had passed (the answer can
        change with time alone when that changes; after it, only with its pods or its Job).

        It holds them until its minimum is ready and every pod it was admitted with is bound
        (its pods then show where it is: an elastic gang admitted above its minimum still has
        pods coming to the nodes it was pinned to), or RESERVATION_TTL after its admission
        unless its pods are still on their way (`PodLedger.gang_waits`: a busy Job controller
        or scheduler; the clog clock bounds that wait)."""
        admission = record.admission
        pods = self.pods
        gang = f"{record.namespace}/{record.gang_label}"
        size = admission[1] if admission is not None else record.gang.size
        succeeded = pods.succeeded_pods(record)
        placed = sum((pods.gang_bound.get(gang) or {}).values()) + succeeded >= size
        ready = record.reached_min or pods.ready_pods(record) + succeeded >= record.gang.min
        if ready and placed:
            return False, None
        expired = admission is not None and now - admission[0] > RESERVATION_TTL
        return not expired or pods.gang_waits(record), expired

    def admitted(self, now: float) -> list[AdmittedGang]:
        """Every admitted, unfinished gang as the planner holds it: its size and where it holds
        room (`placement`).

        Called every cycle, with thousands of gangs admitted: a gang whose record, pods and
        reservation are as at the last call, and whose reservation has not expired since (its
        placement depends on the time and on which nodes exist only through `_plan_hold`, and
        then on no node having come or gone), gets the same `AdmittedGang` object again (the
        planner skips it: `Planner.add_admitted`), without working out its placement."""
        memo = self._memo
        kept: dict[str, _AdmittedMemo] = {}
        out: list[AdmittedGang] = []
        seen, node_set, reserved_of = self.pods.seen, self.nodes.node_set, self.get
        for key, r in self.jobs.unfinished_items():
            if r.finished or (r.admitted_at is None and r.local_admit is None):
                continue  # most records, every cycle: `r.admission is None` without the property
            adm = r.admission
            assert adm is not None
            pods = seen.get(f"{r.namespace}/{r.gang_label}", 0)
            reserved = reserved_of(key)
            hit = memo.get(key)
            if (
                hit is None
                or (hit.expired is not None and (now - adm[0] > RESERVATION_TTL) != hit.expired)
                or hit.record is not r
                or hit.admission != adm
                or hit.running != r.reached_min
                or hit.pods != pods
                or hit.reserved is not reserved
                or (hit.expired is not None and hit.node_set != node_set)
            ):
                placement, expired, others = self._placement(r, now)
                entry = AdmittedGang(
                    gang=r.gang,
                    size=adm[1],
                    placement=placement,
                    admitted_at=adm[0],
                    running=r.reached_min,
                    other_placements=others,
                )
                hit = _AdmittedMemo(r, adm, r.reached_min, pods, reserved, expired, node_set, entry)
            kept[key] = hit
            out.append(hit.entry)
        self._memo = kept
        return out
