"""Topology domains: the levels, the gang's request read and refused like every gang field, and
the planner's placement (required within one domain, preferred in the fewest, the tightest
domain first, the reason naming the level)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import pytest

from policies import (
    AdmittedGang,
    Gang,
    Node,
    PodSet,
    Preemption,
    Queue,
    QueueTree,
    Resources,
    Snapshot,
    SubmitStamp,
    plan,
)
from policies.planner import Planner
from policies.topology import (
    NO_TOPOLOGY,
    Topology,
    TopologyError,
    TopologyRequest,
    placement_note,
)
from tests.unit.test_webhook_decision import decide, job
from webhook.decision import AdmissionRejected

CPU = 1000
LEVELS = Topology.parse(["block", "rack"])


def racks(per_rack: int = 4, count: int = 2, blocks: int = 1) -> list[Node]:
    """``blocks`` x ``count`` racks of ``per_rack`` nodes of 8 cores each."""
    nodes = []
    for b in range(blocks):
        for r in range(count):
            for i in range(per_rack):
                labels = {"block": f"b{b}", "rack": f"r{r}"}
                nodes.append(Node(f"b{b}-r{r}-n{i}", Resources(cpu=8 * CPU), labels=labels))
    return nodes


def gang(
    name: str,
    size: int,
    topology: TopologyRequest | None = None,
    seq: int = 0,
    others: tuple[PodSet, ...] = (),
) -> Gang:
    return Gang(
        id=f"ns/{name}",
        queue="q",
        pod_requests=Resources(cpu=8 * CPU),
        size=size,
        submitted=SubmitStamp(float(seq), seq, name),
        topology=topology,
        others=others,
    )


def decide_plan(
    nodes: Sequence[Node],
    pending: Sequence[Gang],
    topology: Topology = LEVELS,
    admitted: Sequence[AdmittedGang] = (),
) -> tuple[dict[str, Mapping[str, int]], dict[str, str]]:
    tree = QueueTree.build([Queue("q", size_ratio=None)])
    decisions = plan(Snapshot(nodes, tree, list(admitted), list(pending), 0.0, topology))
    placed = {a.gang_id: a.placement for a in decisions.admitted}
    waiting = {gang_id: reason.message for gang_id, reason in decisions.pending.items()}
    return placed, waiting


def racks_of(placement: Mapping[str, int]) -> set[str]:
    return {node.rsplit("-", 1)[0] for node in placement}


def test_levels_are_label_keys_with_distinct_names() -> None:
    assert Topology.parse(["example.com/block", "rack"]).depth("block") == 1
    assert LEVELS.depth("rack") == 2 and LEVELS.depth("row") == 0
    with pytest.raises(TopologyError, match="same name 'rack'"):
        Topology.parse(["a.io/rack", "b.io/rack"])
    with pytest.raises(TopologyError, match=r"levels\[0\]: 'bad key!' is not a node label key"):
        Topology.parse(["bad key!"])


def test_required_gang_goes_within_one_rack() -> None:
    placed, _ = decide_plan(racks(), [gang("a", 3, TopologyRequest("rack", True))])
    assert len(racks_of(placed["ns/a"])) == 1 and sum(placed["ns/a"].values()) == 3


def test_required_gang_waits_and_says_which_level() -> None:
    placed, waiting = decide_plan(racks(), [gang("a", 5, TopologyRequest("rack", True))])
    assert not placed
    assert waiting["ns/a"] == (
        "topology rack required: needs one rack with room for 5 pods of 8 cpu; the largest "
        "free has 4"
    )


def test_preferred_gang_falls_back_to_the_fewest_racks() -> None:
    placed, _ = decide_plan(racks(), [gang("a", 6, TopologyRequest("rack", False))])
    assert len(racks_of(placed["ns/a"])) == 2 and sum(placed["ns/a"].values()) == 6


def test_the_tightest_rack_is_taken_and_whole_racks_stay_free() -> None:
    nodes = racks(count=3)
    busy = gang("busy", 2)
    admitted = [AdmittedGang(busy, 2, {"b0-r1-n0": 1, "b0-r1-n1": 1}, 0.0, running=True)]
    placed, _ = decide_plan(nodes, [gang("a", 2, TopologyRequest("rack", True))], admitted=admitted)
    assert racks_of(placed["ns/a"]) == {"b0-r1"}


def test_unknown_level_waits_when_required_and_is_ignored_when_preferred() -> None:
    placed, waiting = decide_plan(
        racks(),
        [gang("a", 2, TopologyRequest("row", True)), gang("b", 2, TopologyRequest("row", False))],
    )
    assert "ns/b" in placed
    assert 'topology level "row" required' in waiting["ns/a"]


def test_without_levels_requests_are_not_looked_at() -> None:
    pending = [gang("a", 6, TopologyRequest("rack", True))]
    placed, _ = decide_plan(racks(), pending, topology=NO_TOPOLOGY)
    assert sum(placed["ns/a"].values()) == 6


def test_racks_are_domains_of_their_block() -> None:
    # Rack r0 of block b0 and rack r0 of block b1 are different domains.
    placed, waiting = decide_plan(
        racks(blocks=2, count=1), [gang("a", 5, TopologyRequest("rack", True))]
    )
    assert not placed and "the largest free has 4" in waiting["ns/a"]
    placed, _ = decide_plan(
        racks(blocks=2, count=2), [gang("b", 8, TopologyRequest("block", True))]
    )
    assert len({node.split("-")[0] for node in placed["ns/b"]}) == 1


def test_gang_of_several_pod_sets_stays_in_one_rack() -> None:
    launcher = PodSet("launcher", 1, Resources(cpu=8 * CPU))
    nodes = racks(count=2)
    admitted = [AdmittedGang(gang("busy", 1), 1, {"b0-r0-n0": 1}, 0.0, running=True)]
    placed, _ = decide_plan(
        nodes, [gang("a", 4, TopologyRequest("rack", True), others=(launcher,))], admitted=admitted
    )
    assert placed["ns/a"]
    tree = QueueTree.build([Queue("q", size_ratio=None)])
    snapshot = Snapshot(
        nodes,
        tree,
        admitted,
        [gang("a", 4, TopologyRequest("rack", True), others=(launcher,))],
        0.0,
        LEVELS,
    )
    (admission,) = plan(snapshot).admitted
    everything = {**admission.placement, **admission.other_placements[0]}
    assert racks_of(everything) == {"b0-r1"}


def test_planner_and_plan_agree_with_topology() -> None:
    tree = QueueTree.build([Queue("q", size_ratio=None)])
    planner = Planner(racks(count=3), tree, topology=LEVELS)
    pending = [gang(f"g{i}", 3, TopologyRequest("rack", i % 2 == 0), seq=i) for i in range(5)]
    for one in pending:
        planner.add_pending(one)
    assert planner.plan(0.0).admitted == plan(planner.snapshot(0.0)).admitted


def test_both_requests_at_once_are_refused_by_the_webhook() -> None:
    both = {"muster.dev/topology-required": "rack", "muster.dev/topology-preferred": "block"}
    with pytest.raises(AdmissionRejected, match=r"annotation muster\.dev/topology-required and"):
        decide(job(annotations=both))
    with pytest.raises(AdmissionRejected, match=r"muster\.dev/topology-required: 'a b'"):
        decide(job(annotations={"muster.dev/topology-required": "a b"}))


def test_preemption_frees_one_rack_for_a_required_gang() -> None:
    # Each rack has one node free and one held by a low-priority gang: the required gang of
    # two pods preempts, and lands in the rack whose victim it evicts, never on both racks.
    nodes = racks(per_rack=2, count=2)
    tree = QueueTree.build(
        [Queue("q", size_ratio=None, preemption=Preemption(within_queue="LowerPriority"))]
    )
    low = [dataclasses.replace(gang(f"low{i}", 1, seq=i), priority=0) for i in range(2)]
    admitted = [
        AdmittedGang(low[0], 1, {"b0-r0-n0": 1}, 0.0, running=True),
        AdmittedGang(low[1], 1, {"b0-r1-n0": 1}, 0.0, running=True),
    ]
    high = dataclasses.replace(gang("high", 2, TopologyRequest("rack", True), seq=5), priority=5)
    decisions = plan(Snapshot(nodes, tree, admitted, [high], 10.0, LEVELS))
    (admission,) = decisions.admitted
    assert len(racks_of(admission.placement)) == 1
    assert len(decisions.preempted) == 1


def test_muster_run_reads_the_levels_once_for_the_cluster() -> None:
    from muster.cli import build_parser
    from muster.commands.run import process_settings

    args = build_parser(["run"]).parse_args(
        ["run", "--topology-levels", "block,rack,kubernetes.io/hostname"]
    )
    controller = process_settings(args).controller
    assert controller is not None
    assert controller.topology.levels == ("block", "rack", "kubernetes.io/hostname")
    default = process_settings(build_parser(["run"]).parse_args(["run"])).controller
    assert default is not None and default.topology == NO_TOPOLOGY
    with pytest.raises(SystemExit):
        build_parser(["run"]).parse_args(["run", "--topology-levels", "rack,a.io/rack"])


def test_an_admission_says_where_its_pods_went_among_the_domains() -> None:
    """The Admitted event's note (`placement_note`): within one rack, or across several for a
    preferred gang that no rack could hold, saying so; nothing without a request or levels."""
    topology = Topology.parse(["example.com/block", "example.com/rack"])
    labels = {
        "a": {"example.com/block": "b0", "example.com/rack": "r0"},
        "b": {"example.com/block": "b0", "example.com/rack": "r0"},
        "c": {"example.com/block": "b1", "example.com/rack": "r0"},
    }
    preferred = TopologyRequest("rack", required=False)
    assert placement_note(topology, preferred, ["a", "b"], labels.get) == " within rack b0/r0"
    assert placement_note(topology, preferred, ["a", "c"], labels.get) == (
        " across 2 racks (preferred one rack: none had room for all of its pods)"
    )
    assert placement_note(topology, None, ["a", "c"], labels.get) == ""
    assert placement_note(NO_TOPOLOGY, preferred, ["a", "c"], labels.get) == ""
    assert placement_note(topology, preferred, ["gone"], labels.get) == ""


def test_a_preferred_gang_the_racks_cannot_hold_takes_no_node_twice() -> None:
    """A preferred gang of 3 pods, one per node, that request nothing: the one rack (2 nodes)
    holds 2, a node in no rack the third. The fallback must not put a second pod on a rack's
    node (a Hypothesis case found it: nothing in the free capacity tells the node is taken)."""
    nodes = [
        *racks(per_rack=2, count=1),
        Node("loose", Resources(cpu=8 * CPU), labels={"block": "b0"}),
    ]
    spread = dataclasses.replace(
        gang("a", 3, TopologyRequest("rack", False)),
        pod_requests=Resources(),
        one_pod_per_node=True,
    )
    placed, waiting = decide_plan(nodes, [spread])
    assert placed["ns/a"] == {"b0-r0-n0": 1, "b0-r0-n1": 1, "loose": 1}, (placed, waiting)
