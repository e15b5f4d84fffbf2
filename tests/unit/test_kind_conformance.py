"""Every registered kind through its whole life, one example object each (issue 27: adding a kind
is a module, its registration and its tests; this is the test every kind gets for free).

For each kind in `policies.kinds.KINDS`: the webhook's reading of a created object (queue, gang
size and fields), the hold patch, the gang object the controller will read once the patch is
stored (a MiniCluster's is its Job), that object's gang read by the controller's reader (the same
size, one pod set per pod template), and a release on a placement of every pod set, evicted and
restored to what the user wrote. A new kind adds its example to `EXAMPLES`; the test fails for a
registered kind without one.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from policies.kinds import KINDS, Kind, kind_named
from policies.kinds.members import PodGang, evict_writes, member_of
from policies.kinds.members import release_writes as member_release_writes
from policies.kinds.reading import read_gang
from policies.kinds.registry import made_by_operator, pod_gang
from policies.kinds.release import Release, release_writes
from policies.vocabulary import ADMITTED, GANG, PLACEMENT, QUEUE, RESTORE, SUBMITTED
from tests import builders
from tests.patches import apply_json_patch, pruned
from tests.unit.test_kind_adapters import _restored, jobset
from webhook.decision import WebhookSettings, decide_create

STAMP = builders.stamp(1, 0.0)


def _minicluster() -> dict[str, Any]:
    return {
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": "mc", "namespace": "ns", "uid": "mc-1", "labels": {QUEUE: "q"}},
        "spec": {
            "size": 4,
            "containers": [{"image": "x", "resources": {"requests": {"cpu": "2"}}}],
        },
    }


def _pod_group() -> dict[str, Any]:
    """One pod of a pod group of 4 (the gang object is assembled from the group's pods)."""
    return builders.group_pod("pg-0", "pg", size=4, queue="q", namespace="ns", cpu="2")


EXAMPLES: Mapping[str, Any] = {
    "Job": lambda: builders.job("j", "q", namespace="ns", pods=3, cpu="2", suspend=None),
    "MiniCluster": _minicluster,
    "JobSet": lambda: jobset(workers=2),
    "PodGroup": _pod_group,
}


def _merged(base: Any, patch: Any) -> Any:
    """A merge patch without deletions applied, as the apiserver stores it."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            out[key] = _merged(base.get(key), value)
        return out
    return copy.deepcopy(patch)


def _stored(kind: Kind, obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object as stored after the webhook's hold patch."""
    return _merged(dict(obj), kind.hold(obj, "q", STAMP))  # type: ignore[no-any-return]


def test_every_kind_has_an_example() -> None:
    assert sorted(EXAMPLES) == sorted(KINDS)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_kind_is_held_read_released_and_restored(name: str) -> None:
    kind = KINDS[name]
    created = EXAMPLES[name]()
    size, fields = kind.gang_fields(created)
    assert kind.queue(created) == "q" and fields.minimum <= size
    gang_object = kind.gang_object(_stored(kind, created))
    # The controller reads the gang object with its own kind's adapter (a MiniCluster's Job with
    # the Job's, naming the MiniCluster through muster.dev/gang-kind, as the webhook stamps it
    # when the operator creates it).
    object_kind = kind_named(gang_object["kind"])
    if made_by_operator(kind):
        gang_object["metadata"]["ownerReferences"] = [
            {
                "apiVersion": kind.api.api_version,
                "kind": kind.name,
                "name": created["metadata"]["name"],
                "controller": True,
            }
        ]
        decision = decide_create(
            object_kind,
            gang_object,
            namespace="ns",
            namespace_labels={},
            known_queues=None,
            settings=WebhookSettings(),
            stamp="unused",
            owner_stamp=STAMP,
        )
        gang_object = _merged(gang_object, decision.patch)
    meta = gang_object.setdefault("metadata", {})
    meta.setdefault("namespace", "ns")
    meta.setdefault("uid", "u-1")
    meta.setdefault("annotations", {})[SUBMITTED] = STAMP
    gang_object.setdefault("spec", {})["suspend"] = True
    reading = read_gang(
        object_kind,
        meta["namespace"],
        meta["name"],
        gang_object["spec"],
        meta.get("labels") or {},
        meta.get("annotations") or {},
    )
    assert reading.problem is None, reading.problem
    assert reading.kind.name == name and reading.gang.kind == name
    assert reading.gang.size == size and reading.gang.queue == "q"
    assert len(reading.gang.pod_sets) == len(reading.templates)
    for template in reading.templates:
        labels = (template.template.get("metadata") or {}).get("labels") or {}
        assert labels.get(GANG) in (meta["name"], created["metadata"]["name"]), labels
    # Released on a node per pod set, then suspended again and restored: the user's object.
    placements = {t.name: {f"n-{i}": t.count} for i, t in enumerate(reading.templates)}
    release = Release(0.0, size, placements, {n: n for p in placements.values() for n in p})
    gang = pod_gang(object_kind)
    if gang is not None:
        _pod_gang_released_and_evicted(gang, created, release)
        return
    writes = release_writes(
        object_kind,
        "u-1",
        gang_object["spec"],
        reading.marks.original,
        reading.templates,
        release,
    )
    released = gang_object
    for write in writes:
        if write.ops is not None:
            released = apply_json_patch(released, write.ops)
    annotations = released["metadata"]["annotations"]
    assert {ADMITTED, PLACEMENT, RESTORE} <= set(annotations)
    released["spec"]["suspend"] = True
    restored = released
    for write in _restored(object_kind, released):
        if write.ops is not None:
            restored = apply_json_patch(restored, write.ops)
    assert pruned(restored["spec"]) == pruned(gang_object["spec"])
    assert RESTORE not in restored["metadata"]["annotations"]


def _pod_gang_released_and_evicted(
    gang: PodGang, created: dict[str, Any], release: Release
) -> None:
    """A pod gang's release is recorded on its record (made at the first admission), which the
    virtual gang object then says; an eviction drops it from the record and deletes the released
    pods: nothing on the pods is to be restored (a pod cannot be gated again)."""
    group = gang.assemble("ns", "pg", [member_of(_stored(gang, created))], None)
    assert group is not None
    (write,) = member_release_writes(gang, "ns", "pg", group["spec"], release)
    assert write.create and write.body is not None
    record = {**write.body, "metadata": {**write.body["metadata"], "resourceVersion": "7"}}
    admitted = gang.assemble("ns", "pg", [member_of(_stored(gang, created))], record)
    assert admitted is not None
    assert {ADMITTED, PLACEMENT} <= set(admitted["metadata"]["annotations"])
    assert admitted["spec"]["suspend"] is False
    patch, delete = evict_writes(
        gang, "pg", evictions=1, requeue_at=0.0, reason="Clogged", failed=False
    )
    assert patch.record == write.record and delete.members == f"{gang.member_label}=pg"
