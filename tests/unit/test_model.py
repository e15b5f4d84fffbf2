"""Validation of queues, the cohort tree and gangs; small model behaviour."""

from __future__ import annotations

import pytest

from policies import (
    Backoff,
    Gang,
    PolicyError,
    Queue,
    QueueTree,
    Resources,
    SizeRatio,
    SubmitStamp,
    Taint,
    Toleration,
)


def _error(queues: list[Queue]) -> str:
    with pytest.raises(PolicyError) as error:
        QueueTree.build(queues)
    return str(error.value)


def test_unknown_parent() -> None:
    assert _error([Queue("a", parent="nope"), Queue("b")]) == (
        'queue "a": spec.parent "nope" not found; create it or use one of: a, b'
    )


def test_cycle() -> None:
    message = _error([Queue("a", parent="c"), Queue("b", parent="a"), Queue("c", parent="b")])
    assert message.startswith('queue "a": spec.parent forms a cycle (')
    assert message.endswith("); a cohort tree must have a root")
    assert "a -> " in message and "b" in message and "c" in message


def test_own_parent() -> None:
    assert _error([Queue("a", parent="a")]) == (
        'queue "a": spec.parent names the queue itself; a queue cannot be its own cohort'
    )


def test_lending_above_nominal() -> None:
    queue = Queue("a", nominal=Resources(cpu=4000), lending_limit=Resources(cpu=6000))
    assert _error([queue]) == (
        'queue "a": spec.lendingLimit.cpu (6) exceeds spec.nominal.cpu (4); '
        "a queue can lend at most its nominal quota"
    )
    no_nominal = Queue("b", lending_limit=Resources(memory=1))
    assert _error([no_nominal]) == (
        'queue "b": spec.lendingLimit.memory (1) exceeds spec.nominal.memory (0); '
        "a queue can lend at most its nominal quota"
    )


@pytest.mark.parametrize("weight", [0, -1.0, float("nan"), float("inf")])
def test_weight_must_be_positive(weight: float) -> None:
    assert _error([Queue("a", weight=weight)]) == (
        f'queue "a": spec.weight must be a number > 0, got {weight!r}'
    )


def test_duplicate_name() -> None:
    assert _error([Queue("a"), Queue("a")]) == (
        'queue "a": duplicate name; queue names are cluster-wide unique'
    )


def test_other_queue_fields() -> None:
    assert _error([Queue("")]) == "queue with an empty name: set metadata.name"
    assert _error([Queue("a", size_ratio=SizeRatio(0))]) == (
        'queue "a": spec.sizeRatio.ratio must be in (0, 1], got 0'
    )
    assert _error([Queue("a", size_ratio=SizeRatio(0.1, "Drop"))]) == (  # type: ignore[arg-type]
        "queue \"a\": spec.sizeRatio.action must be Serialize or Reject, got 'Drop'"
    )
    assert _error([Queue("a", strategy="LIFO")]) == (  # type: ignore[arg-type]
        "queue \"a\": spec.strategy must be BestEffortFIFO or StrictFIFO, got 'LIFO'"
    )
    assert _error([Queue("a", clog_timeout=0)]) == (
        'queue "a": spec.clogTimeout must be a number of seconds > 0, got 0'
    )
    assert _error([Queue("a", backoff=Backoff(base=10, max=5))]) == (
        'queue "a": spec.backoff needs 0 < base <= max and limit >= 0, got base=10, max=5, limit=5'
    )
    assert _error([Queue("a", nominal=Resources(cpu=-1))]) == (
        'queue "a": spec.nominal.cpu is negative (-1m); use a non-negative quantity'
    )


def test_tree_shape() -> None:
    tree = QueueTree.build(
        [
            Queue("root"),
            Queue("team", parent="root"),
            Queue("a", parent="team"),
            Queue("b", parent="team"),
            Queue("solo"),
        ]
    )
    assert tree.leaves == ("a", "b", "solo")
    assert tree.children("team") == ("a", "b")
    assert tree.ancestors("a") == ["a", "team", "root"]
    assert tree.root("b") == "root"
    assert tree.is_leaf("a") and not tree.is_leaf("team") and not tree.is_leaf("nope")
    assert sorted(tree.graph.edges) == [("root", "team"), ("team", "a"), ("team", "b")]
    assert "solo" in tree and len(tree) == 5 and tree["a"].parent == "team"


def _gang(**overrides: object) -> Gang:
    fields: dict[str, object] = {
        "id": "ns/g",
        "queue": "a",
        "pod_requests": Resources(cpu=1000),
        "size": 4,
    }
    fields.update(overrides)
    return Gang(**fields)  # type: ignore[arg-type]


def test_gang_validation() -> None:
    with pytest.raises(PolicyError, match=r"^gang ns/g: size must be at least 1, got 0$"):
        _gang(size=0)
    with pytest.raises(PolicyError, match=r"^gang ns/g: minSize 5 must be between 1 and size 4$"):
        _gang(min_size=5)
    with pytest.raises(PolicyError, match=r"^gang ns/g: minSize 0 must be between 1 and size 4$"):
        _gang(min_size=0)
    with pytest.raises(PolicyError, match="elasticAfter must be a non-negative"):
        _gang(elastic_after=-1.0)


def test_gang_min_demand_and_order() -> None:
    gang = _gang(min_size=2, priority=3, submitted=SubmitStamp(5.0, 2, "g"))
    assert gang.min == 2 and gang.elastic
    assert _gang().min == 4 and not _gang().elastic
    assert gang.demand(3) == Resources(cpu=3000)
    assert gang.order_key == (-3, 5.0, 2, "g")
    assert hash(gang) == hash("ns/g")  # hashable despite its node_selector dict


def test_submit_stamps_are_totally_ordered() -> None:
    stamps = [SubmitStamp(1.0, 1, "b"), SubmitStamp(1.0, 0, "z"), SubmitStamp(1.0, 1, "a")]
    assert sorted(stamps) == [
        SubmitStamp(1.0, 0, "z"),
        SubmitStamp(1.0, 1, "a"),
        SubmitStamp(1.0, 1, "b"),
    ]


def test_tolerations() -> None:
    taint = Taint("gpu", "yes", "NoSchedule")
    assert Toleration("gpu", "Equal", "yes", "NoSchedule").tolerates(taint)
    assert Toleration("gpu", "Exists").tolerates(taint)
    assert Toleration(operator="Exists").tolerates(taint)
    assert not Toleration().tolerates(taint)  # empty key with Equal matches nothing
    assert not Toleration("gpu", "Equal", "no").tolerates(taint)
    assert not Toleration("gpu", "Exists", effect="NoExecute").tolerates(taint)


def test_backoff_delay() -> None:
    backoff = Backoff(base=10, max=60, limit=5)
    assert [backoff.delay(n) for n in range(5)] == [0.0, 10.0, 20.0, 40.0, 60.0]
    assert Backoff().delay(1000) == 600.0
