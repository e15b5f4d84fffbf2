"""Preemption (policies/preemption.py): who may evict whom, the fewest victims, simulate first,
protection against thrashing; on small worlds of 4 nodes of 8 cpu."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from hypothesis import event, given, settings
from hypothesis import strategies as st

from policies import AdmittedGang, Gang, Queue, QueueTree, Resources, SizeRatio, Snapshot, plan
from policies.model import BorrowWithinCohort, Preemption
from policies.reservation import STARVATION_AFTER
from tests.unit.test_planner import CPU, admitted_ids, cluster, gang, run


def held(g: Gang, nodes: Mapping[str, int], at: float = 0.0) -> AdmittedGang:
    return AdmittedGang(g, sum(nodes.values()), nodes, admitted_at=at, running=True)


def cohort(b: Preemption, a: Preemption | None = None) -> QueueTree:
    """Queues a and b share the cluster (no nominal quota: all they use is borrowed); b
    weighs 2."""
    return QueueTree.build(
        [
            Queue("org", size_ratio=None),
            Queue("a", parent="org", size_ratio=None, preemption=a or Preemption()),
            Queue("b", parent="org", weight=2, size_ratio=None, preemption=b),
        ]
    )


def queue_a_holds_everything() -> list[AdmittedGang]:
    # Four one-node gangs of queue a fill the four nodes, submitted at t = 0, 1, 2, 3.
    return [held(gang(f"a{i}", 8, 1, queue="a", t=i), {f"n{i}": 1}) for i in range(4)]


def test_reclaim_within_cohort_preempts_the_fewest_youngest_gangs() -> None:
    tree = cohort(Preemption(reclaim_within_cohort="Any"))
    decisions = run(
        [gang("wants", 8, 2, queue="b", t=10)], tree, admitted=queue_a_holds_everything()
    )
    assert admitted_ids(decisions) == ["ns/wants"]
    assert sorted(decisions.preempted) == ["ns/a2", "ns/a3"]  # the two youngest, no more
    reason = decisions.preempted["ns/a3"]
    assert reason.code == "Preempted"
    assert "preempted by ns/wants (reclaimWithinCohort: Any, queue a borrows)" in reason.message
    placement = decisions.admitted[0].placement
    assert placement == {"n2": 1, "n3": 1}  # on what the victims free
    assert "ns/wants" not in decisions.pending


def test_no_preemption_unless_the_queue_asks_for_it() -> None:
    decisions = run(
        [gang("wants", 8, 2, queue="b", t=10)],
        cohort(Preemption()),
        admitted=queue_a_holds_everything(),
    )
    assert decisions.admitted == []
    assert decisions.preempted == {}
    assert decisions.pending["ns/wants"].code == "NoFit"


def test_nothing_is_preempted_when_the_preemptor_would_still_not_fit() -> None:
    tree = cohort(Preemption(reclaim_within_cohort="Any"))
    # Needs 5 nodes; even with all of queue a gone only 4 exist.
    decisions = run(
        [gang("huge", 8, 5, queue="b", t=10)], tree, admitted=queue_a_holds_everything()
    )
    assert decisions.preempted == {}
    assert decisions.admitted == []


def test_never_in_favour_of_a_queue_with_a_higher_share() -> None:
    # Queue b already holds three nodes (share 0.75 / weight 2 = 0.375; with the preemptor
    # 0.5); queue a holds one (0.25): a's gang is not preempted for b.
    tree = cohort(Preemption(reclaim_within_cohort="Any"))
    admitted = [held(gang("a0", 8, 1, queue="a"), {"n0": 1})]
    admitted += [held(gang(f"b{i}", 8, 1, queue="b", t=i), {f"n{i}": 1}) for i in (1, 2, 3)]
    decisions = run([gang("wants", 8, 1, queue="b", t=10)], tree, admitted=admitted)
    assert decisions.preempted == {}


def test_lower_priority_only_preempts_lower_priority() -> None:
    tree = cohort(Preemption(reclaim_within_cohort="LowerPriority"))
    admitted = queue_a_holds_everything()
    same = run([gang("same", 8, 1, queue="b", t=10)], tree, admitted=admitted)
    assert same.preempted == {}
    higher = run([gang("high", 8, 1, queue="b", t=10, priority=5)], tree, admitted=admitted)
    assert list(higher.preempted) == ["ns/a3"]
    assert admitted_ids(higher) == ["ns/high"]


def test_within_queue_lower_priority() -> None:
    tree = QueueTree.build(
        [Queue("a", size_ratio=None, preemption=Preemption(within_queue="LowerPriority"))]
    )
    admitted = [held(gang(f"low{i}", 8, 1, t=i), {f"n{i}": 1}) for i in range(4)]
    decisions = run([gang("urgent", 8, 1, t=10, priority=1)], tree, admitted=admitted)
    assert list(decisions.preempted) == ["ns/low3"]
    assert "withinQueue: LowerPriority" in decisions.preempted["ns/low3"].message
    peer = run([gang("peer", 8, 1, t=10)], tree, admitted=admitted)
    assert peer.preempted == {}


def test_lowest_priority_goes_first_then_youngest() -> None:
    tree = cohort(Preemption(reclaim_within_cohort="Any"))
    admitted = queue_a_holds_everything()
    admitted[3] = held(gang("a3", 8, 1, queue="a", t=3, priority=7), {"n3": 1})
    decisions = run([gang("wants", 8, 1, queue="b", t=10)], tree, admitted=admitted)
    # a3 is youngest but has priority 7; of the priority-0 gangs a2 is the youngest.
    assert list(decisions.preempted) == ["ns/a2"]


def test_a_gang_preempted_too_often_is_protected_for_a_while() -> None:
    tree = cohort(
        Preemption(reclaim_within_cohort="Any"),
        a=Preemption(protect_after=2, protect_for=600),
    )
    tired = [
        held(dataclasses.replace(g.gang, preemptions=2), g.placement, at=100)
        for g in queue_a_holds_everything()
    ]
    wants = [gang("wants", 8, 1, queue="b", t=10)]
    assert run(wants, tree, admitted=tired, now=200).preempted == {}
    assert list(run(wants, tree, admitted=tired, now=800).preempted) == ["ns/a3"]


def test_fair_share_reclaim() -> None:
    # Queue a (weight 1) holds all 4 nodes; b (weight 2) waits: fair shares 1/3 and 2/3.
    tree = cohort(Preemption(fair_share="Reclaim"))
    decisions = run(
        [gang("wants", 8, 2, queue="b", t=10)], tree, admitted=queue_a_holds_everything()
    )
    assert sorted(decisions.preempted) == ["ns/a2", "ns/a3"]
    assert "fairShare: Reclaim" in decisions.preempted["ns/a2"].message


def test_fair_share_reclaim_stops_at_the_fair_share() -> None:
    # Queue a holds one node of four (0.25 < its fair share 1/3): nothing to reclaim.
    tree = cohort(Preemption(fair_share="Reclaim"))
    admitted = [held(gang("a0", 8, 1, queue="a"), {"n0": 1})]
    busy = [held(gang(f"c{i}", 8, 1, queue="b", t=i), {f"n{i}": 1}) for i in (1, 2, 3)]
    decisions = run([gang("wants", 8, 1, queue="b", t=10)], tree, admitted=[*admitted, *busy])
    assert decisions.preempted == {}


def test_the_same_snapshot_gives_the_same_preemptions() -> None:
    tree = cohort(Preemption(reclaim_within_cohort="Any"))
    snapshot = Snapshot(
        cluster(), tree, queue_a_holds_everything(), [gang("wants", 8, 2, queue="b", t=10)], 20.0
    )
    first = plan(snapshot)
    assert plan(snapshot).preempted == first.preempted


def test_a_node_blind_preemptor_is_admitted_whole() -> None:
    """A queue without node fit admits on quota alone: a preemptor there gets its whole size
    and no placement (it was once recorded with size 0, the sum of an empty placement). (b
    reclaims within its own nominal quota: a queue that borrows reclaims nothing.)"""
    tree = QueueTree.build(
        [
            Queue("org", nominal=Resources(cpu=16 * CPU), size_ratio=None),
            Queue("a", parent="org", size_ratio=None),
            Queue(
                "b",
                parent="org",
                weight=2,
                nominal=Resources(cpu=16 * CPU),
                size_ratio=None,
                preemption=Preemption(reclaim_within_cohort="Any"),
                node_fit=False,
            ),
        ]
    )
    decisions = run(
        [gang("wants", 8, 2, queue="b", t=10)], tree, admitted=queue_a_holds_everything()
    )
    assert admitted_ids(decisions) == ["ns/wants"]
    (admission,) = decisions.admitted
    assert (admission.size, admission.placement) == (2, {})
    assert sorted(decisions.preempted) == ["ns/a2", "ns/a3"]


def test_a_later_preemptor_sees_the_shares_earlier_preemptors_left() -> None:
    """Preemptors of one plan preempt one after the other: queue a loses a gang to b's
    preemptor, and is then below b, so a's own preemptor may take a gang of b in the same plan.
    (The property test once counted a's preempted gang as still held: a at 7/8 with its
    preemptor, not below b's 7/16.)"""
    reclaim = Preemption(fair_share="Reclaim")
    tree = cohort(reclaim, a=reclaim)  # a weighs 1, b weighs 2: fair shares 1/3 and 2/3
    # One node of 8 cpu, full: a holds 1 + 5 cpu (share 6/8), b holds 2 (2/8 / 2).
    admitted = [
        held(gang("a0", 1, 1, queue="a", t=0), {"n0": 1}),
        held(gang("a1", 5, 1, queue="a", t=1), {"n0": 1}),
        held(gang("b0", 2, 1, queue="b", t=2), {"n0": 1}),
    ]
    pending = [gang("wide", 5, 1, queue="b", t=10), gang("one", 1, 1, queue="a", t=11)]
    decisions = run(pending, tree, nodes=cluster(1), admitted=admitted)
    # b first (share with wide 7/16 < a's 7/8 with one): a1 makes room for wide. Then a holds
    # 1/8 (2/8 with one), b 7/16: a's preemptor takes b0.
    assert admitted_ids(decisions) == ["ns/wide", "ns/one"]
    assert sorted(decisions.preempted) == ["ns/a1", "ns/b0"]
    assert "preempted by ns/wide " in decisions.preempted["ns/a1"].message
    assert "preempted by ns/one " in decisions.preempted["ns/b0"].message


def _linear(ground, gang, fit, queue, candidates):  # type: ignore[no-untyped-def]
    """The scan the bisection replaced: one try per run of candidates, shortest first."""
    from policies.preemption import _fits

    chosen = []
    for victim in candidates:
        chosen.append(victim)
        fitted = _fits(ground, gang, fit, queue, chosen)
        if fitted is not None:
            return chosen, fitted
    return [], None


@settings(max_examples=60, deadline=None)
@given(
    victims=st.lists(
        st.tuples(st.integers(0, 5), st.sampled_from([1, 2, 4]), st.integers(1, 3)),
        min_size=1,
        max_size=14,
    ),
    wants=st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(1, 6)),
)
def test_the_bisection_picks_the_victims_the_linear_scan_picks(
    victims: list[tuple[int, int, int]], wants: tuple[int, int]
) -> None:
    import policies.preemption as preemption

    nodes = cluster(6, cpu=8)
    room = {f"n{i}": 8 for i in range(6)}
    admitted = []
    for k, (node, cpu, pods) in enumerate(victims):
        name = f"n{node}"
        pods = min(pods, room[name] // cpu)
        if pods:
            room[name] -= cpu * pods
            admitted.append(held(gang(f"v{k}", cpu, pods, queue="a", t=k), {name: pods}))
    tree = cohort(Preemption(reclaim_within_cohort="Any"))
    pending = [gang("wants", wants[0], wants[1], queue="b", t=100)]
    fast = run(pending, tree, nodes=nodes, admitted=admitted)
    original = preemption._fewest_first
    preemption._fewest_first = _linear
    try:
        slow = run(pending, tree, nodes=nodes, admitted=admitted)
    finally:
        preemption._fewest_first = original
    event(f"preempted: {len(fast.preempted)}")
    assert fast.preempted == slow.preempted
    assert admitted_ids(fast) == admitted_ids(slow)
    assert [a.placement for a in fast.admitted] == [a.placement for a in slow.admitted]


def test_a_second_preemptor_sees_the_shares_the_first_preemption_left() -> None:
    # Queue a holds all 32 cpu (share 1.0). b's head (16 cpu: share 0.5 with it) preempts two
    # of a's gangs, which leaves a at 0.5; c's head then asks the same 16 cpu: a's share is no
    # longer above c's (0.5 with the gang), so c preempts nothing. (Shares read before the
    # first preemption and kept would let c preempt a's last two gangs.)
    rules = Preemption(reclaim_within_cohort="Any")
    tree = QueueTree.build(
        [
            Queue("org", size_ratio=None),
            Queue("a", parent="org", size_ratio=None),
            Queue("b", parent="org", size_ratio=None, preemption=rules),
            Queue("c", parent="org", size_ratio=None, preemption=rules),
        ]
    )
    pending = [gang("b-wants", 8, 2, queue="b", t=10), gang("c-wants", 8, 2, queue="c", t=11)]
    decisions = run(pending, tree, admitted=queue_a_holds_everything())
    assert admitted_ids(decisions) == ["ns/b-wants"]
    assert sorted(decisions.preempted) == ["ns/a2", "ns/a3"]
    assert "ns/c-wants" in decisions.pending


def test_fair_share_reclaim_never_leaves_the_victims_queue_below_the_preemptors() -> None:
    # a holds three nodes with one gang (share 0.75), b one node (0.25 / weight 2 = 0.125) and
    # waits with a one-node gang. Taking a's gang would leave a at 0, below b's 0.125: a would
    # be the queue furthest below its share, readmitted, and preempted again (seed 3 of the
    # trace family). Three one-node gangs of a: one of them goes, a keeps 0.5.
    tree = cohort(Preemption(fair_share="Reclaim"))
    b0 = held(gang("b0", 8, 1, queue="b", t=0), {"n3": 1})
    whole = [held(gang("big", 8, 3, queue="a", t=1), {"n0": 1, "n1": 1, "n2": 1}), b0]
    wants = [gang("wants", 8, 1, queue="b", t=10)]
    decisions = run(wants, tree, admitted=whole)
    assert decisions.preempted == {}
    assert admitted_ids(decisions) == []
    split = [held(gang(f"a{i}", 8, 1, queue="a", t=1 + i), {f"n{i}": 1}) for i in range(3)]
    decisions = run(wants, tree, admitted=[*split, b0])
    assert list(decisions.preempted) == ["ns/a2"]
    assert admitted_ids(decisions) == ["ns/wants"]


def test_a_preemptor_held_back_by_the_reservation_lands_off_the_reserved_nodes() -> None:
    # a's big gang (3 nodes) has waited its bound and holds the reservation: the most free
    # nodes n2, n3 and n1. b's urgent gang is held back (b holds more than a); preempting the
    # youngest low gang (on n1, reserved) would put it there: it preempts the one on n0.
    tree = QueueTree.build(
        [
            Queue("org", size_ratio=None),
            Queue("a", parent="org", size_ratio=SizeRatio(0.3)),
            Queue(
                "b",
                parent="org",
                size_ratio=SizeRatio(0.3),
                preemption=Preemption(within_queue="LowerPriority"),
            ),
        ]
    )
    admitted = [
        held(gang("low0", 8, 1, queue="b", t=1), {"n0": 1}),
        held(gang("low1", 4, 1, queue="b", t=2), {"n1": 1}),
    ]
    pending = [
        gang("big", 8, 3, queue="a", t=0),
        gang("urgent", 8, 1, queue="b", t=5, priority=10),
    ]
    decisions = run(pending, tree, admitted=admitted, now=STARVATION_AFTER + 10)
    assert list(decisions.preempted) == ["ns/low0"]
    assert decisions.admitted[0].gang_id == "ns/urgent"
    assert decisions.admitted[0].placement == {"n0": 1}


def lending_world(nominal_b: int, rules: Preemption) -> QueueTree:
    """A cohort of 24 cpu: a has no nominal quota (all it holds is borrowed), b has
    ``nominal_b`` cpu and the preemption ``rules``."""
    return QueueTree.build(
        [
            Queue("org", nominal=Resources(cpu=24 * CPU), size_ratio=None),
            Queue("a", parent="org", size_ratio=None),
            Queue(
                "b",
                parent="org",
                nominal=Resources(cpu=nominal_b * CPU),
                size_ratio=None,
                preemption=rules,
            ),
        ]
    )


def test_a_queue_that_borrows_with_its_preemptor_reclaims_nothing() -> None:
    # a holds the four nodes, all borrowed (it has no nominal quota). b's gang needs 16 cpu:
    # with 8 cpu of nominal quota it would borrow too, and a keeps its gangs (as Kueue: no
    # reclaim while borrowing, or two borrowing queues would reclaim from each other in
    # turn). With 16, b reclaims what it needs.
    def world(wants: int) -> QueueTree:
        return lending_world(wants, Preemption(reclaim_within_cohort="Any"))

    pending = [gang("wants", 8, 2, queue="b", t=10)]
    decisions = run(pending, world(8), admitted=queue_a_holds_everything())
    assert decisions.preempted == {}
    decisions = run(pending, world(16), admitted=queue_a_holds_everything())
    assert sorted(decisions.preempted) == ["ns/a2", "ns/a3"]


def test_borrow_within_cohort_lets_a_borrowing_preemptor_take_lower_priority_gangs() -> None:
    # The world above with 8 cpu of nominal quota for b: its 16-cpu gang would borrow, so
    # reclaimWithinCohort alone takes nothing. borrowWithinCohort: LowerPriority lets it take
    # a's gangs of lower priority than its own (all a's are 0), and with a threshold only
    # those of priority at most it.
    def world(borrow: BorrowWithinCohort) -> QueueTree:
        return lending_world(
            8, Preemption(reclaim_within_cohort="Any", borrow_within_cohort=borrow)
        )

    lower = BorrowWithinCohort(policy="LowerPriority")
    urgent = [gang("wants", 8, 2, queue="b", t=10, priority=5)]
    held_by_a = queue_a_holds_everything()
    assert run(urgent, world(BorrowWithinCohort()), admitted=held_by_a).preempted == {}
    decisions = run(urgent, world(lower), admitted=held_by_a)
    assert sorted(decisions.preempted) == ["ns/a2", "ns/a3"]
    assert admitted_ids(decisions) == ["ns/wants"]
    assert (
        "(reclaimWithinCohort: Any with borrowWithinCohort: LowerPriority, queue a borrows)"
        in decisions.preempted["ns/a3"].message
    )
    # Same priority: not lower, nothing taken (two borrowing queues never trade gangs).
    same = [gang("wants", 8, 2, queue="b", t=10)]
    assert run(same, world(lower), admitted=held_by_a).preempted == {}
    # A threshold below the victims' priority: nothing; at it: taken.
    capped = dataclasses.replace(lower, max_priority_threshold=-1)
    assert run(urgent, world(capped), admitted=held_by_a).preempted == {}
    at = dataclasses.replace(lower, max_priority_threshold=0)
    assert sorted(run(urgent, world(at), admitted=held_by_a).preempted) == ["ns/a2", "ns/a3"]
