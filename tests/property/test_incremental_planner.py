"""policies.Planner (incremental) decides exactly as policies.plan (from scratch).

Random worlds, then random sequences of changes as a controller or the simulator would report
them: gangs becoming pending and leaving, plans whose admissions are applied, gangs starting and
finishing, nodes' used capacity changing, nodes and queues replaced. After every change the
planner's decisions must equal ``plan`` on the same snapshot: exactly (dict order included) on
``planner.snapshot(now)``, and in content on a snapshot this test keeps by itself.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import (
    AdmittedGang,
    Decisions,
    Gang,
    Node,
    Planner,
    PolicyError,
    Queue,
    QueueTree,
    Resources,
    Snapshot,
    plan,
)
from policies.packing import DEFAULT_PACKING, Packing
from tests.strategies import PACKINGS, gangs, nodes, queue_trees

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_NOW = st.sampled_from((0.0, 10.0, 200.0))
# Weighted so that most sequences admit gangs, start some and finish some.
_OPS = st.one_of(
    *[st.tuples(st.just("add"), st.integers(0, 15))] * 3,
    *[st.tuples(st.just("apply"), _NOW)] * 3,
    *[st.tuples(st.just("run"), st.integers(0, 15))] * 2,
    *[st.tuples(st.just("finish"), st.integers(0, 15))] * 2,
    st.tuples(st.just("remove"), st.integers(0, 15)),
    st.tuples(st.just("used"), st.integers(0, 5), st.sampled_from((0, 500, 1_500))),
    st.tuples(st.just("reshape"), st.integers(0, 5)),
    st.tuples(st.just("queues"), st.booleans()),
)


def _ordered(decisions: Decisions) -> tuple[object, ...]:
    return (
        [(a.gang_id, a.queue, a.size, list(a.placement.items())) for a in decisions.admitted],
        list(decisions.pending.items()),
        list(decisions.rejected.items()),
        list(decisions.preempted.items()),
    )


def _content(decisions: Decisions) -> tuple[object, ...]:
    return (
        [(a.gang_id, a.queue, a.size, dict(a.placement)) for a in decisions.admitted],
        dict(decisions.pending),
        dict(decisions.rejected),
        dict(decisions.preempted),
    )


class _World:
    """The test's own record of what the planner was told."""

    def __init__(
        self, cluster: list[Node], tree: QueueTree, policy: str, packing: Packing = DEFAULT_PACKING
    ) -> None:
        self.nodes = cluster
        self.packing = packing
        self.tree = tree
        self.policy = policy
        self.pending: dict[str, Gang] = {}
        self.admitted: dict[str, AdmittedGang] = {}
        self.planner = Planner(cluster, tree, policy, packing=packing)

    def check(self, now: float) -> Decisions:
        planner = self.planner
        decisions = planner.plan(now)
        exact = plan(planner.snapshot(now), self.policy)
        assert _ordered(decisions) == _ordered(exact)
        mine = Snapshot(
            self.nodes,
            self.tree,
            list(self.admitted.values()),
            list(self.pending.values()),
            now,
            packing=self.packing,
        )
        assert _content(decisions) == _content(plan(mine, self.policy))
        # A plan leaves the planner as it was: the same plan again decides the same.
        assert _ordered(planner.plan(now)) == _ordered(decisions)
        return decisions


@SETTINGS
@given(
    nodes(),
    queue_trees(),
    st.data(),
    st.sampled_from(("drf", "fifo", "strict-fifo")),
    st.lists(_OPS, min_size=8, max_size=40),
)
def test_incremental_planner_matches_plan(
    cluster: list[Node],
    tree: QueueTree,
    data: st.DataObject,
    policy: str,
    ops: list[tuple[object, ...]],
) -> None:
    pool = data.draw(gangs(tree, "p", max_gangs=16)) + data.draw(gangs(tree, "q", max_gangs=8))
    # Every packing strategy: its node order is kept up to date between plans as well.
    world = _World(cluster, tree, policy, data.draw(PACKINGS))
    planner = world.planner
    now = 0.0
    for gang in pool[: data.draw(st.integers(0, len(pool)))]:
        planner.add_pending(gang)
        world.pending[gang.id] = gang
    world.check(now)
    for op in ops:
        kind = op[0]
        if kind == "add" and pool:
            gang = pool[int(op[1]) % len(pool)]  # type: ignore[call-overload]
            if gang.id not in world.pending and gang.id not in world.admitted:
                planner.add_pending(gang)
                world.pending[gang.id] = gang
        elif kind == "remove" and world.pending:
            gang_id = sorted(world.pending)[int(op[1]) % len(world.pending)]  # type: ignore[call-overload]
            assert planner.remove_pending(gang_id) is world.pending.pop(gang_id)
        elif kind == "apply":
            # Admit what a plan decides, as the simulator does; fail what it rejects.
            now = float(op[1])  # type: ignore[arg-type]
            decisions = world.check(now)
            for gang_id in decisions.preempted:  # back to pending, as the simulator does
                victim = planner.remove_admitted(gang_id)
                assert victim is world.admitted.pop(gang_id)
                again = dataclasses.replace(victim.gang, preemptions=victim.gang.preemptions + 1)
                planner.add_pending(again)
                world.pending[gang_id] = again
            for admission in decisions.admitted:
                gang = planner.remove_pending(admission.gang_id)
                del world.pending[gang.id]
                admitted = AdmittedGang(gang, admission.size, dict(admission.placement), now)
                planner.add_admitted(admitted)
                world.admitted[gang.id] = admitted
            for gang_id in decisions.rejected:
                planner.remove_pending(gang_id)
                del world.pending[gang_id]
        elif kind == "run" and world.admitted:
            gang_id = sorted(world.admitted)[int(op[1]) % len(world.admitted)]  # type: ignore[call-overload]
            running = dataclasses.replace(world.admitted[gang_id], running=True)
            planner.add_admitted(running)
            world.admitted[gang_id] = running
        elif kind == "finish" and world.admitted:
            gang_id = sorted(world.admitted)[int(op[1]) % len(world.admitted)]  # type: ignore[call-overload]
            assert planner.remove_admitted(gang_id) is world.admitted.pop(gang_id)
        elif kind == "used":
            k = int(op[1]) % len(world.nodes)  # type: ignore[call-overload]
            node = world.nodes[k]
            used = Resources({"cpu": int(op[2])}) if op[2] else Resources()  # type: ignore[call-overload]
            world.nodes = [
                *world.nodes[:k],
                dataclasses.replace(node, used=used),
                *world.nodes[k + 1 :],
            ]
            planner.set_nodes(world.nodes)
        elif kind == "reshape":
            # A node changes shape (the planner rebuilds) or, one time in two, is removed.
            k = int(op[1]) % len(world.nodes)  # type: ignore[call-overload]
            node = world.nodes[k]
            if k % 2 and len(world.nodes) > 1:
                world.nodes = world.nodes[:k] + world.nodes[k + 1 :]
            else:
                bigger = node.allocatable + {"cpu": 1_000}
                world.nodes = [
                    *world.nodes[:k],
                    dataclasses.replace(node, allocatable=bigger),
                    *world.nodes[k + 1 :],
                ]
            planner.set_nodes(world.nodes)
        elif kind == "queues":
            strict = bool(op[1])
            world.tree = QueueTree.build(
                dataclasses.replace(q, strategy="StrictFIFO" if strict else "BestEffortFIFO")
                for q in world.tree
            )
            planner.set_queues(world.tree)
        world.check(now)


def test_planner_rejects_inconsistent_changes() -> None:
    node = Node("n0", Resources({"cpu": 4_000}))
    planner = Planner([node], QueueTree.build([Queue("a")]))
    gang = Gang("ns/g", "a", Resources({"cpu": 1_000}), 2)
    planner.add_pending(gang)
    with pytest.raises(PolicyError, match="gang ns/g: already pending"):
        planner.add_pending(gang)
    with pytest.raises(PolicyError, match="gang ns/none: not pending"):
        planner.remove_pending("ns/none")
    with pytest.raises(PolicyError, match="gang ns/none: not admitted"):
        planner.remove_admitted("ns/none")
    with pytest.raises(PolicyError, match='node "n0": duplicate name'):
        Planner([node, node], QueueTree.build([Queue("a")]))
