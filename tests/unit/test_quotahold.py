"""Quota holds (policies/quotahold.py): the big gang that has waited its starvation bound holds
its queue's nominal quota that other queues borrow; on 4 nodes of 8 cpu, two queues of a
cohort with 16 cpu of nominal quota each, big gangs above a quarter of the cluster."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from policies import AdmittedGang, Gang, Queue, QueueTree, Resources, SizeRatio, Snapshot, plan
from policies.reservation import STARVATION_AFTER
from tests.unit.test_planner import CPU, admitted_ids, cluster, gang, run, running

LATE = STARVATION_AFTER + 10  # the big gangs below, submitted at 0 or 1, have waited their bound


def _tree(b_weight: float = 1.0, names: str = "ab", ratio: float = 0.25) -> QueueTree:
    return QueueTree.build(
        [
            Queue("org", size_ratio=None),
            *(
                Queue(
                    name,
                    parent="org",
                    nominal=Resources(cpu=16 * CPU),
                    weight=b_weight if name == "b" else 1.0,
                    size_ratio=SizeRatio(ratio),
                )
                for name in names
            ),
        ]
    )


def _b_borrows() -> list[AdmittedGang]:
    # b holds three nodes: 24 cpu, 8 of them a's lent quota.
    return [running(gang(f"b{i}", 8, 1, queue="b"), {f"n{i}": 1}) for i in range(3)]


def test_an_aged_big_gang_holds_its_queues_lent_quota() -> None:
    # a holds nothing and waits with a 16-cpu gang: 8 free, not enough. b's next gang would
    # borrow again: it waits, and says for whom. Before the bound, b borrows as always.
    pending = [gang("mine", 8, 2, queue="a", t=1), gang("more", 4, 1, queue="b", t=2)]
    decisions = run(pending, _tree(), admitted=_b_borrows(), now=LATE)
    assert admitted_ids(decisions) == []
    held = decisions.pending["ns/more"]
    assert held.code == "QuotaExhausted"
    assert "held for big gang ns/mine" in held.message
    mine = decisions.pending["ns/mine"]
    assert mine.message.startswith("quota of queue a exhausted in cpu: needs 16, 8 available")
    assert "other queues borrow: they borrow no more of it until it fits" in mine.message
    early = run(pending, _tree(), admitted=_b_borrows(), now=STARVATION_AFTER - 10)
    assert admitted_ids(early) == ["ns/more"]


def test_another_queue_still_takes_its_own_nominal_quota() -> None:
    # Three queues of 16 cpu each on 6 nodes; c borrows 16 (it holds 32), a waits for its own
    # 16 with an aged big gang. b, within its own nominal quota, is not held back; c is.
    borrowed = [running(gang(f"c{i}", 8, 1, queue="c"), {f"n{i}": 1}) for i in range(4)]
    pending = [
        gang("mine", 8, 2, queue="a", t=1),
        gang("own", 2, 1, queue="b", t=2),
        gang("more", 1, 1, queue="c", t=3),
    ]
    decisions = run(pending, _tree(names="abc"), nodes=cluster(6), admitted=borrowed, now=LATE)
    assert admitted_ids(decisions) == ["ns/own"]
    assert "held for big gang ns/mine" in decisions.pending["ns/more"].message
    assert decisions.pending["ns/mine"].code == "QuotaExhausted"


def test_the_holder_is_admitted_before_borrowers_that_come_first_in_the_order() -> None:
    # 16 cpu free: exactly a's gang. b's borrowing gangs come first in DRF order (b weighs 4),
    # and without the hold would take the free quota before a's turn (seed 15 of the family).
    borrowed = [running(gang(f"b{i}", 8, 1, queue="b"), {f"n{i}": 1}) for i in range(2)]
    pending = [gang("mine", 8, 2, queue="a", t=1)]
    pending += [gang(f"more{i}", 2, 1, queue="b", t=2 + i) for i in range(8)]
    # Eight nodes: b's gangs fit beside the two nodes reserved for a's, so only the quota hold
    # keeps them from taking a's quota first (a's gang is big above a fifth of 64 cpu).
    tree = _tree(b_weight=4, ratio=0.2)
    decisions = run(pending, tree, nodes=cluster(8), admitted=borrowed, now=LATE)
    assert admitted_ids(decisions) == ["ns/mine"]


def test_no_hold_for_a_gang_that_would_borrow_itself() -> None:
    # a already holds 8 of its 16; its 16-cpu gang would take it to 24: not its own quota.
    admitted = [running(gang("a0", 8, 1, queue="a"), {"n0": 1}), *_b_borrows()[1:]]
    pending = [gang("mine", 8, 2, queue="a", t=1), gang("more", 4, 1, queue="b", t=2)]
    decisions = run(pending, _tree(), admitted=admitted, now=LATE)
    assert admitted_ids(decisions) == ["ns/more"]


@settings(max_examples=150, deadline=None)
@given(
    held_a=st.integers(0, 4),
    held_b=st.integers(0, 4),
    big=st.integers(3, 8),
    wants=st.lists(st.integers(1, 5), min_size=1, max_size=8),  # below a tenth of 64: not big
    policy=st.sampled_from(["drf", "fifo"]),
    b_weight=st.sampled_from([1.0, 4.0]),
)
def test_no_queue_borrows_what_an_aged_big_gang_waits_for_within_its_nominal(
    held_a: int, held_b: int, big: int, wants: list[int], policy: str, b_weight: float
) -> None:
    """Property: a's first gang is big, has waited its bound and stays within a's nominal
    quota: b's gangs admitted by the plan borrow no more than was free beyond what it needs."""
    admitted = [
        running(gang(f"{q}{i}", 4, 1, queue=q), {f"n{k}": 1})
        for k, (q, i) in enumerate(
            [("a", i) for i in range(held_a)] + [("b", i) for i in range(held_b)]
        )
    ]
    head = gang("head", big, 2, queue="a", t=0)  # 2 pods of 3-8 cpu: above a tenth of 64
    pending: list[Gang] = [head]
    pending += [gang(f"p{i}", cpu, 1, queue="b", t=1 + i) for i, cpu in enumerate(wants)]
    tree = _tree(b_weight, ratio=0.09)
    decisions = plan(Snapshot(cluster(8), tree, admitted, pending, LATE), policy)
    use = {"a": 4 * held_a, "b": 4 * held_b}
    got = {a.gang_id for a in decisions.admitted}
    need = 2 * big
    if head.id in got or use["a"] + need > 16:
        return
    taken = sum(g.pod_requests["cpu"] // CPU for g in pending[1:] if g.id in got)
    borrowed_now = max(0, use["b"] + taken - 16) - max(0, use["b"] - 16)
    free_before = 32 - use["a"] - use["b"]  # the cohort's quota: 16 + 16
    assert borrowed_now <= max(0, free_before - need)
