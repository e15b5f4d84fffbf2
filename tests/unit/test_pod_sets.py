"""Gangs of several pod sets in the planner (issue 27): a launcher and its workers with different
requests and node selectors are admitted whole, fitted set by set, counted in quota together,
and given back when part of them does not fit."""

from __future__ import annotations

from policies import (
    AdmittedGang,
    Gang,
    Node,
    Planner,
    PodSet,
    Preemption,
    Queue,
    QueueTree,
    Resources,
    Snapshot,
    SubmitStamp,
    plan,
)
from policies.planner import NeverFitsScreen

CPU = 1000
GIB = 2**30


def nodes(count: int = 4, cpu: int = 8, pool: str = "workers") -> list[Node]:
    return [
        Node(f"{pool}-{i}", Resources(cpu=cpu * CPU, memory=32 * GIB), labels={"pool": pool})
        for i in range(count)
    ]


def launcher(cpu: float = 1, pool: str = "login", count: int = 1) -> PodSet:
    return PodSet("launcher", count, Resources(cpu=int(cpu * CPU)), node_selector={"pool": pool})


def mpi(
    name: str, workers: int, cpu: float = 2, t: float = 0.0, queue: str = "a", **fields: object
) -> Gang:
    """An MPI job: one launcher on a login node, ``workers`` worker pods."""
    others = fields.pop("others", (launcher(),))
    assert isinstance(others, tuple)
    fixed = sum(other.count for other in others)
    return Gang(
        f"ns/{name}",
        queue,
        Resources(cpu=int(cpu * CPU)),
        fixed + workers,
        submitted=SubmitStamp(t, 0, name),
        others=others,
        set_name="worker",
        **fields,  # type: ignore[arg-type]
    )


def tree(**fields: object) -> QueueTree:
    return QueueTree.build([Queue("a", size_ratio=None, **fields)])  # type: ignore[arg-type]


WORLD = [*nodes(1, cpu=2, pool="login"), *nodes(4)]


def test_each_pod_set_goes_where_its_template_may_go() -> None:
    decisions = plan(Snapshot(WORLD, tree(), [], [mpi("job", workers=4)], 0.0))
    (admission,) = decisions.admitted
    assert admission.size == 5  # every pod of the gang
    assert admission.other_placements == ({"login-0": 1},)
    assert sum(admission.placement.values()) == 4
    assert set(admission.placement) <= {f"workers-{i}" for i in range(4)}


def test_the_quota_counts_every_pod_set() -> None:
    # 1 cpu for the launcher + 4 x 2 cpu for the workers = 9 cpu: a quota of 8 never holds it.
    never = plan(Snapshot(WORLD, tree(nominal=Resources(cpu=8 * CPU)), [], [mpi("j", 4)], 0.0))
    reason = never.rejected["ns/j"]
    assert reason.code == "NeverFits" and "needs 9" in reason.message, reason
    # A quota of 10 holds it, but not beside a gang that holds 2 cpu of it already.
    quota = tree(nominal=Resources(cpu=10 * CPU))
    holder = mpi("holder", workers=1, cpu=1, others=(launcher(),))
    held = AdmittedGang(holder, 2, {"workers-0": 1}, 0.0, True, ({"login-0": 1},))
    short = plan(Snapshot(WORLD, quota, [held], [mpi("j", 4, t=1.0)], 1.0))
    reason = short.pending["ns/j"]
    assert reason.code == "QuotaExhausted" and "needs 9" in reason.message, reason
    enough = plan(Snapshot(WORLD, quota, [], [mpi("j", 4)], 0.0))
    assert [a.gang_id for a in enough.admitted] == ["ns/j"]


def test_a_pod_set_that_never_fits_is_named() -> None:
    gang = mpi("j", 2, others=(launcher(pool="nowhere"),))
    decisions = plan(Snapshot(WORLD, tree(), [], [gang], 0.0))
    reason = decisions.rejected["ns/j"]
    assert reason.code == "NeverFits"
    assert reason.message.startswith("pod set launcher: "), reason
    # The webhook's screen says the same, at create.
    assert NeverFitsScreen(tree(), WORLD).verdict(gang) == reason


def test_what_was_placed_is_given_back_when_the_rest_does_not_fit() -> None:
    # One worker node is taken; the launcher fits the one login node, the 4 workers of 8 cpu do
    # not fit the 3 left: the gang waits, naming its worker set, and the login node it tried
    # stays free for the next gang.
    taken = Gang("ns/taken", "a", Resources(cpu=8 * CPU), 1)
    held = AdmittedGang(taken, 1, {"workers-3": 1}, 0.0, True)
    big = mpi("big", workers=4, cpu=8, t=0.0)
    small = mpi("small", workers=1, cpu=8, t=1.0, others=(launcher(cpu=2),))
    decisions = plan(Snapshot(WORLD, tree(), [held], [big, small], 0.0))
    assert decisions.pending["ns/big"].code == "NoFit"
    assert decisions.pending["ns/big"].message.startswith("pod set worker: "), decisions.pending
    (admission,) = decisions.admitted
    assert admission.gang_id == "ns/small"
    assert admission.other_placements == ({"login-0": 1},)


def test_an_elastic_gang_shrinks_its_main_set_only() -> None:
    # 8 workers asked, 4 nodes of 8 cpu hold 4: at least 1 launcher + 3 workers, after 10 s.
    gang = mpi("j", workers=8, cpu=8, min_size=4, elastic_after=10.0)
    early = plan(Snapshot(WORLD, tree(), [], [gang], 5.0))
    assert early.pending["ns/j"].code == "ElasticWaiting", early.pending
    late = plan(Snapshot(WORLD, tree(), [], [gang], 10.0))
    (admission,) = late.admitted
    assert admission.size == 5 and admission.other_placements == ({"login-0": 1},)
    assert sum(admission.placement.values()) == 4


def test_an_admitted_gang_holds_every_pod_sets_nodes() -> None:
    planner = Planner(WORLD, tree())
    first = mpi("first", workers=1, cpu=8, others=(launcher(cpu=2),))
    planner.add_pending(first)
    (admission,) = planner.plan(0.0).admitted
    planner.remove_pending(first.id)
    planner.add_admitted(
        AdmittedGang(
            first,
            admission.size,
            admission.placement,
            0.0,
            other_placements=admission.other_placements,
        )
    )
    # The login node is full now: the next launcher waits, naming its set.
    second = mpi("second", workers=1, cpu=1, t=1.0)
    planner.add_pending(second)
    decisions = planner.plan(1.0)
    assert not decisions.admitted
    assert decisions.pending["ns/second"].message.startswith("pod set launcher: ")
    assert planner.plan(1.0) == plan(planner.snapshot(1.0))


def test_a_preempted_gang_of_several_pod_sets_frees_them_all() -> None:
    low = mpi("low", workers=4, cpu=8, priority=0, others=(launcher(cpu=2),))
    first = plan(Snapshot(WORLD, tree(), [], [low], 0.0))
    (admission,) = first.admitted
    held = AdmittedGang(
        low, admission.size, admission.placement, 0.0, True, admission.other_placements
    )
    high = mpi("high", workers=4, cpu=8, t=1.0, priority=5, others=(launcher(cpu=2),))
    rules = Preemption(within_queue="LowerPriority")
    decisions = plan(Snapshot(WORLD, tree(preemption=rules), [held], [high], 10.0))
    assert set(decisions.preempted) == {"ns/low"}
    (taken,) = decisions.admitted
    assert taken.gang_id == "ns/high" and taken.other_placements == ({"login-0": 1},)


def test_a_changed_placement_of_another_pod_set_moves_what_the_planner_counts() -> None:
    # The launcher of an admitted gang was seen on another login node than planned: the
    # incremental planner counts it there, as a planner built afresh does.
    login = [Node(f"login-{i}", Resources(cpu=CPU), labels={"pool": "login"}) for i in range(2)]
    work = [Node("work-0", Resources(cpu=8 * CPU), labels={"pool": "work"})]
    one = PodSet("launcher", 1, Resources(cpu=CPU), node_selector={"pool": "login"})

    def make(name: str) -> Gang:
        return Gang(
            name,
            "a",
            Resources(cpu=CPU),
            2,
            others=(one,),
            set_name="worker",
            node_selector={"pool": "work"},
        )

    planner = Planner([*login, *work], tree())
    held = make("ns/held")
    planner.add_admitted(AdmittedGang(held, 2, {"work-0": 1}, 0.0, False, ({"login-0": 1},)))
    planner.plan(0.0)
    planner.add_admitted(AdmittedGang(held, 2, {"work-0": 1}, 0.0, False, ({"login-1": 1},)))
    planner.add_pending(make("ns/next"))
    decisions = planner.plan(1.0)
    assert decisions == plan(planner.snapshot(1.0))
    (admission,) = decisions.admitted
    assert admission.other_placements == ({"login-0": 1},)


def test_pod_sets_that_fit_alone_but_never_together_are_rejected_at_once() -> None:
    # The launcher (4 cpu) fits only compute-0 (login-0 is tainted and too small anyway); the
    # main set (500m, no toleration) fits only compute-0 too, which then has no room left.
    from policies import Taint, Toleration

    login = Node(
        "login-0", Resources(cpu=2 * CPU), taints=(Taint("dedicated", "login", "NoSchedule"),)
    )
    compute = Node("compute-0", Resources(cpu=4 * CPU))
    big_launcher = PodSet(
        "launcher",
        1,
        Resources(cpu=4 * CPU),
        tolerations=(Toleration("dedicated", "Equal", "login", "NoSchedule"),),
    )
    gang = Gang("ns/j", "a", Resources(cpu=500), 2, others=(big_launcher,), set_name="main")
    decisions = plan(Snapshot([login, compute], tree(), [], [gang], 0.0))
    reason = decisions.rejected["ns/j"]
    assert reason.code == "NeverFits" and "do not fit the nodes together" in reason.message
    assert NeverFitsScreen(tree(), [login, compute]).verdict(gang) == reason
