"""The webhook's review of updates (issue 28), against random Jobs, admissions and user updates:

- muster's own writes pass it: a release (pinned or not, elastic or whole), then an eviction
  or a preemption or a requeue, then the restore;
- whatever update of an admitted, running Job it lets through leaves the Job asking for no more
  than its admission (no more pods, the same queue, priority, minimum and pod requests), or
  suspends it;
- every refusal names a field.
"""

from __future__ import annotations

import re
from typing import Any

from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from policies.kinds import JOB, FieldError
from policies.kinds.reading import read_gang
from policies.kinds.release import (
    Release,
    Write,
    evict_writes,
    preempt_writes,
    release_writes,
    requeue_writes,
    restore_writes,
)
from policies.vocabulary import CLOG_TIMEOUT, MIN_MEMBERS, PRIORITY, QUEUE, SUBMITTED
from tests import builders
from tests.patches import apply_json_patch, apply_merge_patch
from webhook.decision import AdmissionRejected, WebhookSettings, decide_update

STAMP = "2026-11-22T03:05:07.000000001Z/000000000001"
FIELD = re.compile(
    r"^(spec\.[A-Za-z.\[\]0-9]+|label muster\.dev/[a-z-]+|annotation muster\.dev/[a-z-]+): "
)
"""How every refusal starts: the field it refuses, as the object names it."""


@st.composite
def admitted_jobs(draw: st.DrawFn) -> tuple[dict[str, Any], int]:
    """A Job as the webhook stored it, released by muster: (the admitted Job, its size)."""
    pods = draw(st.integers(1, 6))
    indexed = draw(st.booleans())
    completions = draw(st.sampled_from([builders.PODS, None, pods + 1]))
    annotations = {QUEUE: "gpu", SUBMITTED: STAMP}
    if draw(st.booleans()):
        annotations[MIN_MEMBERS] = str(draw(st.integers(1, pods)))
    body = builders.job(
        "train",
        "gpu",
        namespace="team-a",
        pods=pods,
        completions=completions,
        indexed=indexed,
        suspend=True,
        gang_label=True,
        annotations=annotations,
        resource_version=1,
    )
    try:
        JOB.gang_fields(body)
    except FieldError:
        assume(False)
    reading = _read(body)
    gang = reading.gang
    size = draw(st.integers(gang.min, gang.size))
    pinned = draw(st.booleans())
    placements = {"": {"n1": size}} if pinned else {}
    writes = release_writes(
        JOB,
        "uid-train",
        body["spec"],
        reading.marks.original,
        reading.templates,
        Release(1.0, size, placements, {"n1": "n1"}),
    )
    released = _through(body, writes)
    return released, size


def _read(body: dict[str, Any]) -> Any:
    meta = body["metadata"]
    return read_gang(
        JOB, "team-a", "train", body["spec"], meta.get("labels") or {}, meta["annotations"]
    )


def _review(old: dict[str, Any], new: dict[str, Any]) -> None:
    decide_update(
        JOB, old, new, namespace="team-a", namespace_labels={}, settings=WebhookSettings()
    )


def _through(body: dict[str, Any], writes: list[Write]) -> dict[str, Any]:
    """``body`` after muster's ``writes`` to it (the status ones aside), each one reviewed as
    the apiserver would have the webhook review it (refused: AdmissionRejected)."""
    for write in writes:
        if write.subresource:
            continue
        if write.ops is not None:
            after = apply_json_patch(body, write.ops)
        else:
            after = apply_merge_patch(body, write.body or {})
        _review(body, after)
        body = after
    return body


@settings(max_examples=300, deadline=None)
@given(admitted=admitted_jobs(), how=st.sampled_from(["evict", "preempt", "user", "failed"]))
def test_musters_own_writes_pass_the_review(admitted: tuple[dict[str, Any], int], how: str) -> None:
    running, _ = admitted
    if how == "preempt":
        suspended = _through(running, preempt_writes("uid-train", preemptions=1, message="x"))
    elif how == "user":
        held = apply_merge_patch(running, {"spec": {"suspend": True}})
        _review(running, held)
        suspended = _through(held, requeue_writes("uid-train", reason="Suspended", restore=None))
    else:
        suspended = _through(
            running,
            evict_writes(
                "uid-train", evictions=1, requeue_at=2.0, reason="Clogged", failed=how == "failed"
            ),
        )
    restore = restore_writes(JOB, suspended)
    assert restore is not None, "no pod of it is active: its restore is made now"
    restored = _through(suspended, restore)
    assert _read(restored).gang.size == _read(running).gang.size


def _user_updates() -> st.SearchStrategy[dict[str, Any]]:
    count = st.integers(0, 12)
    spec = st.fixed_dictionaries(
        {},
        optional={
            "parallelism": count,
            "completions": count,
            "suspend": st.booleans(),
            "template": st.fixed_dictionaries(
                {},
                optional={
                    "spec": st.fixed_dictionaries(
                        {},
                        optional={
                            "nodeSelector": st.sampled_from([None, {"pool": "big"}]),
                            "containers": st.sampled_from(
                                [
                                    [{"name": "main", "resources": {"requests": {"cpu": "1"}}}],
                                    [{"name": "main", "resources": {"requests": {"cpu": "8"}}}],
                                ]
                            ),
                        },
                    )
                },
            ),
        },
    )
    labels = st.fixed_dictionaries(
        {}, optional={QUEUE: st.sampled_from([None, "gpu", "other"]), "team": st.just("x")}
    )
    annotations = st.fixed_dictionaries(
        {},
        optional={
            PRIORITY: st.sampled_from(["0", "7", "nine"]),
            MIN_MEMBERS: st.sampled_from(["1", "2", "0"]),
            CLOG_TIMEOUT: st.sampled_from(["1m", "9" * 90 + "h"]),
        },
    )
    return st.fixed_dictionaries(
        {},
        optional={
            "spec": spec,
            "metadata": st.fixed_dictionaries(
                {}, optional={"labels": labels, "annotations": annotations}
            ),
        },
    )


@settings(max_examples=400, deadline=None)
@given(admitted=admitted_jobs(), patch=_user_updates())
def test_an_allowed_update_never_runs_a_gang_past_its_admission(
    admitted: tuple[dict[str, Any], int], patch: dict[str, Any]
) -> None:
    running, size = admitted
    updated = apply_merge_patch(running, patch)
    try:
        _review(running, updated)
    except AdmissionRejected as exc:
        assert FIELD.match(str(exc)), f"the refusal names no field: {exc}"
        event("refused")
        return
    if updated["spec"].get("suspend"):
        event("allowed, suspended")
        return  # suspended: the controller requeues it at what it asks for now
    event("allowed, running")
    before, after = _read(running), _read(updated)
    assert after.live_size <= size
    assert after.gang.queue == before.gang.queue == "gpu"
    assert after.gang.priority == before.gang.priority
    assert after.gang.min == before.gang.min
    assert after.gang.pod_requests == before.gang.pod_requests
    assert after.gang.node_selector == before.gang.node_selector
