"""policies.Planner's changes on a small world, and the lazily built wait reasons.

tests/property/test_incremental_planner.py checks Planner against plan() on random sequences;
these tests pin the behaviour a caller (the simulator, a controller) relies on.
"""

from __future__ import annotations

import dataclasses

from policies import (
    AdmittedGang,
    Decisions,
    Gang,
    Node,
    PendingReasons,
    Planner,
    Queue,
    QueueTree,
    Reason,
    Resources,
    SubmitStamp,
    plan,
)

CPU = 1000


def _nodes(count: int = 2) -> list[Node]:
    return [Node(f"n{i}", Resources({"cpu": 4 * CPU})) for i in range(count)]


def _tree() -> QueueTree:
    return QueueTree.build([Queue("a", size_ratio=None)])


def _gang(name: str, size: int, t: float = 0.0, **requests: int) -> Gang:
    return Gang(
        f"ns/{name}",
        "a",
        Resources(requests or {"cpu": 4 * CPU}),
        size,
        submitted=SubmitStamp(t, 0, name),
    )


def test_pending_reasons_are_built_once_when_read() -> None:
    calls: list[int] = []

    def part(out: dict[str, Reason]) -> None:
        calls.append(1)
        out["ns/a"] = Reason("NoFit", "a")
        out["ns/b"] = Reason("QuotaExhausted", "b")

    reasons = PendingReasons([part], 2)
    assert len(reasons) == 2 and not calls  # the count costs nothing
    assert reasons == {"ns/a": Reason("NoFit", "a"), "ns/b": Reason("QuotaExhausted", "b")}
    assert list(reasons.items()) == list(dict(reasons).items())
    assert list(reasons.keys()) == ["ns/a", "ns/b"] and "ns/b" in reasons
    assert reasons.get("ns/c") is None and reasons["ns/a"].code == "NoFit"
    assert len(calls) == 1
    decisions = Decisions([], reasons, {"ns/r": Reason("NeverFits", "r")})
    assert decisions.reason("ns/b") == Reason("QuotaExhausted", "b")
    assert decisions.reason("ns/r") == Reason("NeverFits", "r")


def test_planner_lifecycle_admit_start_finish() -> None:
    planner = Planner(_nodes(2), _tree())
    first, second, third = _gang("x", 2), _gang("y", 1, t=1.0), _gang("z", 1, t=2.0)
    for gang in (first, second, third):
        planner.add_pending(gang)
    decisions = planner.plan(0.0)
    assert [a.gang_id for a in decisions.admitted] == ["ns/x"]
    assert decisions.pending["ns/y"].code == "NoFit"
    # Planning changed nothing: asked again, the planner decides the same.
    assert planner.plan(0.0) == decisions

    admission = decisions.admitted[0]
    admitted = AdmittedGang(
        planner.remove_pending(admission.gang_id), admission.size, admission.placement, 0.0
    )
    planner.add_admitted(admitted)
    assert planner.plan(1.0).admitted == []  # both nodes are taken
    planner.add_admitted(dataclasses.replace(admitted, running=True))  # started: same holdings
    assert planner.plan(1.0).admitted == []
    planner.remove_admitted("ns/x")  # finished: its nodes are free again
    after = planner.plan(2.0)
    assert [a.gang_id for a in after.admitted] == ["ns/y", "ns/z"]
    assert after == plan(planner.snapshot(2.0))


def test_planner_follows_node_changes_and_new_resources() -> None:
    nodes = _nodes(2)
    planner = Planner(nodes, _tree())
    planner.add_pending(_gang("x", 2))
    # Pods muster does not manage take a node's cpu: only one pod of 4 cpu fits.
    busy = [dataclasses.replace(nodes[0], used=Resources({"cpu": CPU})), nodes[1]]
    planner.set_nodes(busy)
    assert planner.plan(0.0).pending["ns/x"].code == "NoFit"
    planner.set_nodes(nodes)
    assert [a.gang_id for a in planner.plan(0.0).admitted] == ["ns/x"]
    # A gang asking for a resource no node offers: the planner's vectors grow a dimension.
    planner.add_pending(_gang("gpu", 1, t=1.0, cpu=CPU, **{"nvidia.com/gpu": 1}))
    decisions = planner.plan(0.0)
    assert decisions.rejected["ns/gpu"].code == "NeverFits"
    assert decisions == plan(planner.snapshot(0.0))
    planner.remove_pending("ns/gpu")
    assert planner.plan(0.0) == plan(planner.snapshot(0.0))


def test_plans_leave_the_garbage_collector_as_they_found_it() -> None:
    # Plans pause CPython's cyclic collector while they run (docs/benchmarks.md, *Planner*):
    # on again after a plan, off still when the caller had turned it off.
    import gc

    planner = Planner(_nodes(), _tree())
    planner.add_pending(_gang("a", 1))
    snapshot = planner.snapshot(0.0)
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            assert plan(snapshot).admitted and planner.plan(0.0).admitted
            assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
