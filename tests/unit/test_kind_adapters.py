"""The kind adapters both ways (issue 27): what each kind reads as its gang and pod sets, the
patch that holds it at create, and the writes that release, evict and restore it
(`policies.kinds`). Pure: plain dicts in, as the API stores them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from policies.kinds import JOB, JOBSET, MINICLUSTER, FieldError, kind_named
from policies.kinds.pinning import (
    PLACEMENT_GATE,
    Original,
    PinError,
    TemplateOriginal,
    decode_placement,
    encode_placement,
)
from policies.kinds.reading import read_gang
from policies.kinds.release import (
    Release,
    evict_writes,
    preempt_writes,
    release_writes,
    restore_writes,
)
from policies.resources import Resources
from policies.vocabulary import (
    ADMITTED,
    GANG,
    PLACEMENT,
    POD_SET,
    QUEUE,
    RESIZED_FROM,
    RESTORE,
    SUBMITTED,
)
from tests import builders
from tests.builders import job
from tests.patches import apply_json_patch, pruned


def jobset(
    name: str = "train",
    *,
    workers: int = 4,
    launcher: bool = True,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A JobSet: a one-pod launcher (1 cpu, login nodes) and `workers` Jobs of 2 pods (4 cpu)."""

    def rjob(rname: str, replicas: int, parallelism: int, cpu: str, **pod: Any) -> dict[str, Any]:
        return {
            "name": rname,
            "replicas": replicas,
            "template": {
                "spec": {
                    "parallelism": parallelism,
                    "completions": parallelism,
                    "template": {
                        "metadata": {"labels": {"app": rname}},
                        "spec": {
                            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
                            **pod,
                        },
                    },
                }
            },
        }

    replicated = [rjob("worker", workers, 2, "4")]
    if launcher:
        replicated.insert(0, rjob("launcher", 1, 1, "1", nodeSelector={"pool": "login"}))
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": "u-1",
            "labels": {QUEUE: "q", **(labels or {})},
            "annotations": {SUBMITTED: builders.stamp(1, 0.0), **(annotations or {})},
        },
        "spec": {"suspend": True, "replicatedJobs": replicated},
    }


def read(kind: Any, body: dict[str, Any]) -> Any:
    meta = body["metadata"]
    return read_gang(
        kind,
        meta["namespace"],
        meta["name"],
        body["spec"],
        meta.get("labels") or {},
        meta.get("annotations") or {},
    )


# --- reading ------------------------------------------------------------------------------


def test_a_jobset_is_one_gang_with_a_pod_set_per_replicated_job() -> None:
    reading = read(JOBSET, jobset(workers=4))
    gang = reading.gang
    assert reading.problem is None
    assert gang.size == 9 and gang.min == 9  # 1 launcher + 4 x 2 workers, admitted whole
    assert gang.set_name == "worker" and gang.pod_requests == Resources.parse(
        {"cpu": "4"}, field="cpu"
    )
    (launcher,) = gang.others
    assert (launcher.name, launcher.count, launcher.node_selector) == (
        "launcher",
        1,
        {"pool": "login"},
    )
    assert gang.kind == "JobSet" and gang.queue == "q"
    pointers = [t.pointer for t in reading.templates]
    assert pointers == [
        "/spec/replicatedJobs/0/template/spec/template",
        "/spec/replicatedJobs/1/template/spec/template",
    ]


def test_a_job_is_one_pod_set_named_nothing() -> None:
    reading = read(JOB, job("j", "q", namespace="ns", pods=3, cpu="2"))
    assert reading.gang.others == () and reading.gang.set_name == ""
    assert reading.gang.size == 3
    assert [t.pointer for t in reading.templates] == ["/spec/template"]


def test_a_minicluster_job_reads_as_the_minicluster() -> None:
    body = job(
        "mc", "q", namespace="ns", pods=2, annotations={"muster.dev/gang-kind": "MiniCluster"}
    )
    reading = read(JOB, body)
    assert reading.gang.kind == "MiniCluster" and reading.kind is MINICLUSTER
    assert kind_named("JobSet") is JOBSET and kind_named(None) is JOB


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda s: s.update(replicatedJobs=[]), "spec.replicatedJobs"),
        (lambda s: s["replicatedJobs"][0].update(replicas=0), "spec.replicatedJobs[0].replicas"),
        (lambda s: s["replicatedJobs"][1].update(name="launcher"), "spec.replicatedJobs[1].name"),
        (
            lambda s: s["replicatedJobs"][1]["template"]["spec"].update(parallelism="x"),
            "spec.replicatedJobs[1].template.spec.parallelism",
        ),
    ],
)
def test_a_jobset_that_makes_no_gang_is_refused_naming_the_field(change: Any, field: str) -> None:
    body = jobset()
    change(body["spec"])
    with pytest.raises(FieldError, match=field.replace("[", r"\[").replace("]", r"\]")):
        JOBSET.gang_fields(body)


def test_a_jobset_is_never_admitted_smaller() -> None:
    body = jobset(annotations={"muster.dev/min-members": "3"})
    with pytest.raises(FieldError, match="admitted whole"):
        JOBSET.gang_fields(body)
    assert JOBSET.resize(JOBSET.original(body["spec"]), body["spec"], 3) == {}


# --- holding at create --------------------------------------------------------------------


def test_holding_a_jobset_suspends_it_and_labels_each_template() -> None:
    body = jobset()
    body["spec"]["suspend"] = False
    patch = JOBSET.hold(body, "q", "stamp")
    assert patch["spec"]["suspend"] is True
    assert patch["metadata"]["annotations"] == {QUEUE: "q", SUBMITTED: "stamp"}
    labels = [
        rjob["template"]["spec"]["template"]["metadata"]["labels"]
        for rjob in patch["spec"]["replicatedJobs"]
    ]
    assert labels == [
        {"app": "launcher", GANG: "train", POD_SET: "launcher"},
        {"app": "worker", GANG: "train", POD_SET: "worker"},
    ]
    assert body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"][
        "labels"
    ] == {"app": "launcher"}  # the object itself is not changed


def test_holding_a_job_is_what_the_webhook_always_wrote() -> None:
    patch = JOB.hold(job("j"), "q", "stamp")
    assert patch == {
        "metadata": {"annotations": {QUEUE: "q", SUBMITTED: "stamp"}, "labels": {QUEUE: "q"}},
        "spec": {"suspend": True, "template": {"metadata": {"labels": {GANG: "j"}}}},
    }


# --- releasing, evicting, restoring -------------------------------------------------------


def _ops(writes: list[Any]) -> list[dict[str, Any]]:
    (write,) = [w for w in writes if w.ops is not None]
    return list(write.ops)


def test_releasing_a_jobset_gates_each_template_and_pins_no_affinity() -> None:
    body = jobset(workers=2)
    reading = read(JOBSET, body)
    release = Release(
        when=0.0,
        size=5,
        placements={"launcher": {"login-0": 1}, "worker": {"n1": 2, "n2": 2}},
        hostnames={"login-0": "login-0", "n1": "n1", "n2": "n2"},
    )
    writes = release_writes(
        JOBSET, "u-1", body["spec"], reading.marks.original, reading.templates, release
    )
    ops = _ops(writes)
    paths = [op["path"] for op in ops]
    assert "/spec/suspend" in paths
    assert not any(path.endswith("/affinity") for path in paths)
    gates = [op for op in ops if op["path"].endswith("/schedulingGates")]
    assert [op["path"] for op in gates] == [
        "/spec/replicatedJobs/0/template/spec/template/spec/schedulingGates",
        "/spec/replicatedJobs/1/template/spec/template/spec/schedulingGates",
    ]
    assert all(op["value"] == [{"name": PLACEMENT_GATE}] for op in gates)
    placement = next(op for op in ops if op["path"].endswith("placement"))["value"]
    assert decode_placement(placement, "p") == release.placements
    # Evicted, then restored from the object as the apiserver would hold it: the gates go.
    released = apply_json_patch(body, ops)
    released["spec"]["suspend"] = True
    restore = _ops(_restored(JOBSET, released))
    restored = apply_json_patch(released, restore)
    assert pruned(restored["spec"]) == body["spec"]
    assert RESTORE not in restored["metadata"]["annotations"]
    assert PLACEMENT not in restored["metadata"]["annotations"]


def test_releasing_a_job_pins_and_resizes_and_restore_undoes_it() -> None:
    body = job("j", "q", namespace="ns", pods=4, indexed=True, suspend=True)
    body["metadata"]["uid"] = "u-2"
    reading = read(JOB, body)
    release = Release(0.0, 2, {"": {"n1": 1, "n2": 1}}, {"n1": "h1", "n2": None}, started=True)
    writes = release_writes(
        JOB, "u-2", body["spec"], reading.marks.original, reading.templates, release
    )
    assert [w.what for w in writes] == ["clear-start", "admit"]
    assert writes[0].subresource == "status"
    ops = _ops(writes)
    values = {op["path"]: op.get("value") for op in ops}
    assert values["/spec/parallelism"] == 2 and values["/spec/completions"] == 2
    assert values["/metadata/annotations/muster.dev~1placement"] == "n1=1,n2=1"
    assert ops[:2] == [
        {"op": "test", "path": "/metadata/uid", "value": "u-2"},
        {"op": "test", "path": "/spec/suspend", "value": True},
    ]
    released = apply_json_patch(body, ops)
    assert ADMITTED in released["metadata"]["annotations"]
    released["spec"]["suspend"] = True
    restored = apply_json_patch(released, _ops(_restored(JOB, released)))
    assert pruned(restored["spec"]) == body["spec"]


def test_a_full_size_admission_puts_back_a_size_whose_restore_has_not_landed() -> None:
    """Admitted at 2 of 4, evicted, admitted again at 4 before the restore (which waits for the
    pods to be gone) ran: the release writes the Job's own size back, or it would run 2 pods
    while muster (and a PodGroup of 4) count 4."""
    body = job("j", "q", namespace="ns", pods=4, indexed=True, suspend=True)
    body["metadata"]["uid"] = "u"
    reading = read(JOB, body)
    first = Release(0.0, 2, {"": {"n1": 2}}, {"n1": "n1"})
    released = apply_json_patch(
        body,
        _ops(
            release_writes(JOB, "u", body["spec"], reading.marks.original, reading.templates, first)
        ),
    )
    released["spec"]["suspend"] = True  # evicted; its restore still waits
    again = read(JOB, released)
    writes = release_writes(
        JOB, "u", released["spec"], again.marks.original, again.templates, Release(0.0, 4)
    )
    values = {op["path"]: op.get("value") for op in _ops(writes)}
    assert values["/spec/parallelism"] == 4 and values["/spec/completions"] == 4
    unpinned = release_writes(
        JOB, "u", body["spec"], reading.marks.original, reading.templates, Release(0.0, 4)
    )
    assert "/spec/parallelism" not in {op["path"] for op in _ops(unpinned)}


def test_an_unpinned_release_only_unsuspends() -> None:
    body = job("j", "q", namespace="ns", pods=2)
    reading = read(JOB, body)
    writes = release_writes(
        JOB, "u", body["spec"], reading.marks.original, reading.templates, Release(0.0, 2)
    )
    assert [op["op"] for op in _ops(writes)] == ["test", "test", "replace", "add"]


def test_evict_and_preempt_suspend_and_say_why() -> None:
    (evict,) = evict_writes("u", evictions=2, requeue_at=0.0, reason="Clogged", failed=False)
    assert evict.body is not None and evict.body["spec"] == {"suspend": True}
    (preempt,) = preempt_writes("u", preemptions=1, message="by x")
    assert preempt.ops is not None and preempt.ops[1] == {
        "op": "test",
        "path": "/spec/suspend",
        "value": False,
    }


# --- what is saved on the object ----------------------------------------------------------


def test_a_job_s_saved_original_reads_as_muster_always_wrote_it() -> None:
    saved = json.dumps(
        {"affinity": None, "completions": 4, "parallelism": 4, "schedulingGates": None},
        sort_keys=True,
        separators=(",", ":"),
    )
    original = Original.decode(saved, "r")
    assert original.fields == {"completions": 4, "parallelism": 4}
    assert original.encode() == saved
    several = Original({}, {"a": TemplateOriginal(), "b": TemplateOriginal(gates=[{"name": "x"}])})
    assert Original.decode(several.encode(), "r") == several
    with pytest.raises(PinError, match="integers"):
        Original.decode('{"parallelism": "many"}', "r")


def test_placements_of_several_pod_sets_round_trip() -> None:
    one = {"": {"n2": 3, "n1": 1}}
    assert encode_placement(one) == "n1=1,n2=3"
    assert decode_placement("n1=1,n2=3", "p") == {"": {"n1": 1, "n2": 3}}
    several = {"launcher": {"l": 1}, "worker": {"n1": 2}}
    assert decode_placement(encode_placement(several), "p") == several
    with pytest.raises(PinError):
        decode_placement("w:n1=0", "p")


def _restored(kind: Any, body: dict[str, Any]) -> list[Any]:
    """`restore_writes`, for an object whose pods are gone (it says None while they are not)."""
    writes = restore_writes(kind, body)
    assert writes is not None
    return writes


def test_an_elastic_minicluster_is_resized_through_the_minicluster_and_back() -> None:
    """The Flux Operator keeps its Job at the MiniCluster's spec.size: admitted at 2 of 4, the
    MiniCluster is resized first (to the owner), and a restore puts it back at 4."""
    body = job("mc", "q", namespace="ns", pods=4, indexed=True, suspend=True)
    body["metadata"]["uid"] = "u-3"
    body["metadata"]["annotations"] = {"muster.dev/gang-kind": "MiniCluster"}
    reading = read(JOB, body)
    original = reading.marks.original
    release = Release(0.0, 2, {"": {"n1": 2}}, {"n1": "n1"})
    writes = release_writes(
        JOB, "u-3", body["spec"], original, reading.templates, release, MINICLUSTER
    )
    assert writes[0].owner and writes[0].body == {
        "metadata": {"annotations": {RESIZED_FROM: "4"}},
        "spec": {"size": 2},
    }
    released = apply_json_patch(body, _ops(writes))
    assert released["spec"]["parallelism"] == 2
    released["spec"]["suspend"] = True
    restore = _restored(JOB, released)
    assert restore[0].owner and restore[0].body == {
        "metadata": {"annotations": {RESIZED_FROM: None}},
        "spec": {"size": 4},
    }
    # Admitted at its full size, neither the release nor the restore touches the MiniCluster.
    whole = release_writes(
        JOB, "u-3", body["spec"], original, reading.templates, Release(0.0, 4), MINICLUSTER
    )
    assert not any(write.owner for write in whole)


def test_a_restore_waits_until_the_jobs_pods_are_gone() -> None:
    """Kubernetes 1.36 and later let a suspended Job's template change only once no pod of it
    is active: the restore waits (None) and is made once they are gone."""
    body = job("j", "q", namespace="ns", pods=2, suspend=True)
    body["metadata"]["uid"] = "u-4"
    reading = read(JOB, body)
    release = Release(0.0, 2, {"": {"n1": 1, "n2": 1}}, {"n1": "n1", "n2": "n2"})
    writes = release_writes(
        JOB, "u-4", body["spec"], reading.marks.original, reading.templates, release
    )
    released = apply_json_patch(body, _ops(writes))
    released["spec"]["suspend"] = True
    released["status"] = {"active": 2}
    assert restore_writes(JOB, released) is None
    released["status"] = {"active": 0}
    assert _restored(JOB, released)
