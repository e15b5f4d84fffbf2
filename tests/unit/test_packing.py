"""Packing strategies (issue 31, `policies.packing`): how each orders the same nodes, and every
place a strategy is read (`muster run --packing`, `muster sim --packing`, a trace's
`cluster.packing`) refusing a bad value with the field's name."""

from __future__ import annotations

from typing import Any

import pytest

from muster import cli
from policies import Gang, Node, Queue, QueueTree, Resources, Snapshot, plan
from policies.packing import Packing, PackingError
from simulator.trace import TraceError, from_dict

GPU = "nvidia.com/gpu"


def _placement(packing: Packing) -> dict[str, int]:
    # n0..n3: 4 cpus each, n1 and n3 with 4 GPUs; n_i has i cpus in use.
    nodes = [
        Node(
            f"n{i}",
            Resources({"cpu": 4_000, "memory": 8 << 30, **({GPU: 4} if i % 2 else {})}),
            used=Resources({"cpu": 1_000 * i}),
        )
        for i in range(4)
    ]
    tree = QueueTree.build([Queue("q", size_ratio=None)])
    gang = Gang("g", "q", Resources({"cpu": 1_000}), 3)
    decisions = plan(Snapshot(nodes, tree, [], [gang], 0.0, packing=packing))
    return dict(decisions.admitted[0].placement)


def test_each_strategy_orders_the_same_nodes_its_own_way() -> None:
    # Today's order: least free cpu first, whatever else the node has free.
    assert _placement(Packing()) == {"n3": 1, "n2": 2}
    # Best fit: the lowest score of free cpu, memory and GPUs: n2 (no GPU), then n0.
    assert _placement(Packing("best-fit")) == {"n2": 2, "n0": 1}
    # Worst fit: the emptiest node by that score (free cpu and free GPUs).
    assert _placement(Packing("worst-fit")) == {"n1": 3}
    assert _placement(Packing("weighted", 16)) == {"n2": 2, "n0": 1}


@pytest.mark.parametrize(
    ("strategy", "weight", "words"),
    [
        ("first-fit", None, "'first-fit' is not a packing strategy"),
        (3, None, "3 is not a packing strategy"),
        ("weighted", "heavy", "'heavy' is not a number"),
        ("weighted", 0, "0 must be a positive number"),
        ("weighted", float("nan"), "must be a positive number"),
        ("weighted", True, "True is not a number"),
    ],
)
def test_bad_values_name_the_field(strategy: object, weight: object, words: str) -> None:
    with pytest.raises(PackingError, match=r"^spec\.packing") as caught:
        Packing.parse(strategy, weight, "spec.packing")
    assert words in str(caught.value)


def _trace(packing: Any) -> dict[str, Any]:
    return {
        "name": "t",
        "cluster": {"nodes": [{"count": 2, "allocatable": {"cpu": "8"}}], "packing": packing},
        "queues": [{"name": "q"}],
        "jobs": [
            {"name": "j", "queue": "q", "size": 2, "podRequests": {"cpu": "1"}, "runtime": "1m"}
        ],
    }


def test_a_trace_sets_the_packing() -> None:
    assert from_dict(_trace("worst-fit")).packing == Packing("worst-fit")
    weighted = from_dict(_trace({"strategy": "weighted", "gpuWeight": 8}))
    assert weighted.packing == Packing("weighted", 8.0)
    assert from_dict(_trace(None)).packing == Packing()


@pytest.mark.parametrize(
    ("packing", "words"),
    [
        ("tight", "cluster.packing: 'tight' is not a packing strategy"),
        ({"strategy": "weighted", "gpuWeight": -1}, "cluster.packing.gpuWeight: -1 must be"),
        ({"strategy": "best-fit", "gpuWeight": 2}, "cluster.packing.gpuWeight: only with"),
        ({"strategy": "best-fit", "weight": 2}, "weight"),
    ],
)
def test_a_trace_with_a_bad_packing_names_the_field(packing: Any, words: str) -> None:
    with pytest.raises(TraceError, match=words):
        from_dict(_trace(packing))


def test_muster_sim_refuses_a_gpu_weight_without_weighted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(["sim", "two-queues", "--packing", "best-fit", "--packing-gpu-weight", "2"])
    assert code == 2
    assert "--packing-gpu-weight: only with --packing weighted" in capsys.readouterr().err


def test_muster_run_refuses_an_unknown_strategy(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["run", "--packing", "tight"])
    assert "--packing: invalid choice: 'tight'" in capsys.readouterr().err
