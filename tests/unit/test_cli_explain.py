"""`muster explain`: the planner's reason in words, and what would change it, per reason code."""

from __future__ import annotations

import json
from typing import Any

import pytest

from admission.status import gang_status, queue_listing, queue_status
from muster import cli
from muster.commands.explain import changes_for, explain, render
from muster.view import plan_listing
from policies import REASON_CODES, format_quantity, reasons
from policies.vocabulary import EVICTED_REASON, PREEMPTED_BY, PREEMPTIONS
from tests.unit.test_cli_view import NOW, listing, served


def _status(name: str) -> dict[str, Any]:
    cache = plan_listing(listing(), now=NOW).cache
    body = gang_status(cache, f"ns/{name}", NOW)
    assert body is not None
    return body


def _explain(name: str, holders: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    cache = plan_listing(listing(), now=NOW).cache
    body = gang_status(cache, f"ns/{name}", NOW)
    assert body is not None
    return explain(body, queue_listing(cache, queue_status(cache)), holders)


def test_quota_wait_names_the_reason_usage_and_the_fix() -> None:
    out = _explain("second", [{"gang": "ns/first", "holds": {"cpu": "16"}}])
    reason = reasons.quota_exhausted("a", "cpu", 2000, 0)
    assert out["reason"] == {"code": "QuotaExhausted", "message": reason.message}
    assert out["summary"] == f"ns/second waits (position 1 in queue a): {reason.message}"
    changes = "\n".join(out["changes"])
    assert "it holds cpu 16/16 (usage/quota)" in changes
    assert "held by ns/first (16 cpu)" in changes
    assert "kubectl edit queues.muster.dev a" in changes


def test_never_fits_says_waiting_will_not_help() -> None:
    out = _explain("huge")
    assert out["rejected"] is True
    assert out["changes"][0].startswith("no gang finishing makes room for it")
    assert "raise queue a's quota" in out["changes"][0]
    assert out["changes"][1] == "to remove it: kubectl delete job -n ns huge"
    as_jobset = changes_for({**_status("huge"), "kind": "JobSet"}, None, None, None)
    assert as_jobset[1] == "to remove it: kubectl delete jobset -n ns huge"


def test_queue_not_found_says_how_to_create_it() -> None:
    out = _explain("lost")
    assert out["reason"]["message"].startswith('queue "nope" not found')
    assert out["changes"][0].startswith("create queue nope")


def test_a_gang_the_plan_admits_now_is_not_held_back() -> None:
    cache = plan_listing(listing(), now=NOW).cache
    body = gang_status(cache, "ns/ok", NOW)
    assert body is not None
    out = explain({**body, "admitNow": 1}, {}, None)
    assert "nothing holds it back: the planner admits it now at 1 pods" in out["summary"]


def test_a_running_gang_has_nothing_to_change() -> None:
    out = _explain("first")
    assert out["state"] == "Running" and out["changes"] == []
    assert (
        out["summary"] == "ns/first is running: 4 of at least 4 pods ready; nothing holds it back"
    )


@pytest.mark.parametrize("code", [*REASON_CODES, "BackingOff", "Invalid"])
def test_every_reason_code_has_its_own_advice(code: str) -> None:
    body = {"gang": "ns/x", "queue": "q", "state": "Pending", "reason": {"code": code}}
    changes = changes_for(body, None, None, None)
    assert changes and changes != ["see the reason codes in docs/policies.md"]


def test_cohort_members_hear_about_borrowing() -> None:
    body = {"gang": "ns/x", "queue": "b", "reason": {"code": "QuotaExhausted", "message": "m"}}
    queue = {"name": "b", "usage": {"cpu": "2"}, "quota": None, "parent": "org"}
    parent = {"name": "org", "usage": {"cpu": "10"}, "quota": {"cpu": "10"}}
    changes = changes_for(body, queue, parent, None)
    assert any("cohort org: cpu 10/10" in c for c in changes)
    assert any("spec.borrowingLimit" in c for c in changes)


def test_a_queue_that_reclaims_hears_that_it_does_not_while_it_borrows() -> None:
    body = {"gang": "ns/x", "queue": "b", "reason": {"code": "QuotaExhausted", "message": "m"}}
    parent = {"name": "org", "usage": {"cpu": "10"}, "quota": {"cpu": "10"}}

    def advice(preemption: dict[str, Any] | None) -> str:
        queue = {"name": "b", "usage": {"cpu": "2"}, "quota": None, "preemption": preemption}
        return "\n".join(changes_for(body, queue, parent, None))

    said = "reclaims lent quota (reclaimWithinCohort: Any) only for a gang that fits within"
    assert said in advice({"reclaimWithinCohort": "Any"})
    assert "borrowWithinCohort: {policy: LowerPriority}" in advice({"reclaimWithinCohort": "Any"})
    # Not where it does not apply: no reclaim, or borrowWithinCohort already set.
    assert "reclaims lent quota" not in advice(None)
    assert "reclaims lent quota" not in advice({"reclaimWithinCohort": "Never"})
    borrows = {"reclaimWithinCohort": "Any", "borrowWithinCohort": {"policy": "LowerPriority"}}
    assert "reclaims lent quota" not in advice(borrows)


def test_the_reclaim_advice_is_for_the_gang_that_would_borrow() -> None:
    parent = {"name": "org", "usage": {"cpu": "10"}, "quota": {"cpu": "10"}}
    rules = {"reclaimWithinCohort": "LowerPriority"}

    def advice(requests: dict[str, str], quota: dict[str, str] | None) -> str:
        body = {
            "gang": "ns/x",
            "queue": "b",
            "requests": requests,
            "reason": {"code": "QuotaExhausted", "message": "m"},
        }
        queue = {"name": "b", "usage": {"cpu": "2"}, "quota": quota, "preemption": rules}
        return "\n".join(changes_for(body, queue, parent, None))

    # 2 used of 4: a gang of 3 cpu would borrow, one of 2 stays within (the rule acts for it).
    past = advice({"cpu": "3", "memory": "1Gi"}, {"cpu": "4", "nvidia.com/gpu": "0"})
    assert (
        "this gang would borrow past queue b's nominal quota (cpu: needs 3, 2 of 4 used), and "
        "reclaimWithinCohort: LowerPriority acts only for a gang within it"
    ) in past
    assert "borrowWithinCohort: {policy: LowerPriority}" in past
    within = advice({"cpu": "2", "memory": "1Gi"}, {"cpu": "4", "nvidia.com/gpu": "0"})
    assert "reclaimWithinCohort" not in within and "borrow past" not in within
    # No nominal quota of its own: whatever it takes, it borrows.
    assert "nominal quota (it has none of its own)" in advice({"cpu": "1"}, None)


def test_the_status_body_gives_what_the_gang_asks_for() -> None:
    cache = plan_listing(listing(), now=NOW).cache
    body = gang_status(cache, "ns/second", NOW)
    assert body is not None
    record = cache.jobs["ns/second"]
    whole = record.gang.demand(record.gang.size)
    assert body["requests"] == {r: format_quantity(r, a) for r, a in sorted(whole.items())}
    assert any(whole.values())


def test_render_prints_summary_reason_and_source() -> None:
    text = render(_explain("third"), "the moon")
    lines = text.splitlines()
    assert lines[0].startswith("ns/third waits (position 2 in queue a): quota of queue a")
    assert lines[1] == "reason: QuotaExhausted"
    assert lines[2] == "what would change it:"
    assert lines[-1] == "(source: the moon)"


def test_explain_command_over_the_status_service(capsys: pytest.CaptureFixture[str]) -> None:
    with served(plan_listing(listing(), now=NOW).cache) as url:
        assert cli.main(["explain", "ns/second", "--status-url", url]) == 0
        text = capsys.readouterr().out
        assert cli.main(["explain", "second", "-n", "ns", "--status-url", url, "-o", "json"]) == 0
        body = json.loads(capsys.readouterr().out)
    reason = reasons.quota_exhausted("a", "cpu", 2000, 0)
    assert reason.message in text.splitlines()[0]
    assert body["reason"]["message"] == reason.message
    assert body["source"]["from"] == "statusService"


def test_a_gang_waiting_again_after_a_preemption_says_so_and_what_it_waits_for() -> None:
    data = listing()
    jobs = next(objects for kind, objects, _ in data if kind == "job")
    second = next(j for j in jobs if j["metadata"]["name"] == "second")
    preempted = reasons.preempted("ns/urgent", "reclaimWithinCohort: Any, queue a borrows")
    second["metadata"]["annotations"].update(
        {PREEMPTIONS: "2", EVICTED_REASON: "Preempted", PREEMPTED_BY: preempted.message}
    )
    cache = plan_listing(data, now=NOW).cache
    body = gang_status(cache, "ns/second", NOW)
    assert body is not None and body["state"] == "Pending" and body["preemptions"] == 2
    waiting = reasons.quota_exhausted("a", "cpu", 2000, 0)
    assert body["reason"] == {
        "code": "Preempted",
        "message": f"{preempted.message}; waits now: {waiting.message}",
    }
    assert body["waitingFor"] == {"code": "QuotaExhausted", "message": waiting.message}
    out = explain(body, queue_listing(cache, queue_status(cache)), None)
    assert out["reason"]["code"] == "Preempted"
    assert "preempted by ns/urgent" in out["summary"]
    changes = "\n".join(out["changes"])
    assert "preempted 2 times so far" in changes
    assert "gangs admitted from queue a finish and release quota" in changes  # QuotaExhausted's
    assert "spec.preemption.protectAfter" in changes
    # The same gang never preempted waits for the planner's reason alone.
    plain = _explain("second")
    assert plain["reason"]["code"] == "QuotaExhausted" and "waitingFor" not in plain
