"""What a kind writes (`Kind.compose`, from a `policies.kinds.drafts.Draft`), it reads back:
its queue, its gang size and minimum, and (for a kind that holds itself) its pod sets with their
counts. The kwok engine creates every gang through `compose`, so a new kind is replayed without
a branch of its own in the simulator."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.kinds import Kind
from policies.kinds.drafts import Draft, DraftSet
from policies.kinds.registry import KINDS, pod_gang
from policies.vocabulary import GANG, QUEUE


def pod(cpu: str) -> dict[str, Any]:
    return {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "x", "resources": {"requests": {"cpu": cpu}}}],
        "tolerations": [],
    }


def draft(counts: list[int], minimum: int, queue: str | None = "q") -> Draft:
    names = [""] if len(counts) == 1 else [f"s{i}" for i in range(len(counts))]
    return Draft(
        name="g",
        namespace="ns",
        labels={QUEUE: queue} if queue else {},
        annotations={},
        sets=tuple(
            DraftSet(name, count, {"labels": {GANG: "g"}, "annotations": {}}, pod("1"))
            for name, count in zip(names, counts, strict=True)
        ),
        size=sum(counts),
        minimum=minimum,
        min_size=minimum,
        spread=False,
    )


def read_back(kind: Kind, objects: list[dict[str, Any]], minimum: int) -> tuple[str, int]:
    """(queue, size) as the kind's webhook reads the composed object (a pod group: its first
    pod), its minimum checked: the one written, or (a kind admitted whole, as a JobSet is) its
    size."""
    size, fields = kind.gang_fields(objects[0])
    assert fields.minimum in (minimum, size), (kind.name, fields.minimum, minimum, size)
    return kind.queue(objects[0]), size


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_gang_of_one_set_reads_back_as_written(name: str) -> None:
    kind = KINDS[name]
    objects = kind.compose(draft([4], 3))
    assert read_back(kind, objects, 3) == ("q", 4)
    assert len(objects) == (4 if pod_gang(kind) is not None else 1)
    assert objects[0]["kind"] == kind.api.kind


@pytest.mark.parametrize("name", sorted(n for n, k in KINDS.items() if not k.labels_pod_sets))
def test_a_kind_of_one_pod_set_refuses_several(name: str) -> None:
    with pytest.raises(ValueError, match="one pod set"):
        KINDS[name].compose(draft([2, 2], 4))


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=3),
    data=st.data(),
)
def test_kinds_that_name_their_sets_read_every_set_back(counts: list[int], data: Any) -> None:
    minimum = data.draw(st.integers(min_value=1, max_value=sum(counts)))
    for kind in KINDS.values():
        if not kind.labels_pod_sets:
            continue
        objects = kind.compose(draft(counts, minimum))
        assert read_back(kind, objects, minimum) == ("q", sum(counts))
        if kind.holds_itself:
            spec = objects[0]["spec"]
            templates = kind.templates(spec, kind.original(spec))
            assert [t.count for t in templates] == counts
        else:
            assert len(objects) == sum(counts)


def test_without_a_queue_a_pod_group_is_plain_pods() -> None:
    for kind in KINDS.values():
        if pod_gang(kind) is None:
            continue
        objects = kind.compose(draft([2], 2, queue=None))
        assert all(kind.queue(o) == "" for o in objects)
