"""`muster explain NS/NAME`: why a gang waits, in words, and what would change that.

The "why" is the planner's own reason (policies/reasons.py), exactly as the controller records
it: read from the status service, or computed from the API by the controller's cache and
planner (muster/view.py). The "what would change it" lines are this module's: one short list per
reason code, filled in with the gang's queue, its usage against quota and, when reading the API,
the gangs that hold that quota.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from muster.commands.queues import amounts, queue_rows, usage_cell
from muster.commands.status import add_gang_arguments, estimate_text, gang_label
from muster.view import (
    ApiView,
    ViewError,
    add_output_argument,
    add_source_arguments,
    close_view,
    dump,
    open_view,
    parse_gang,
)
from policies import format_quantity, gangstate
from policies.kinds.registry import POD_GANGS
from policies.vocabulary import GANG, MIN_MEMBERS, POD_GROUP, POD_GROUP_SIZE


def delete_command(kind: object, namespace: str, name: str) -> str:
    """How to delete a gang of ``kind`` (a pod gang: its pods, by its member label)."""
    gang = POD_GANGS.get(str(kind or ""))
    if gang is not None:
        return f"kubectl delete pods -n {namespace} -l {gang.member_label}={name}"
    return f"kubectl delete {str(kind or 'Job').lower()} -n {namespace} {name}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_gang_arguments(parser)
    add_output_argument(parser)
    add_source_arguments(parser, plans=True)
    parser.epilog = (
        "Without --status-url, explain LISTs Queues, Nodes, Pods, muster's Jobs (and\n"
        "JobSets, MiniClusters, pod groups' GangRecords where served) with your\n"
        "kubeconfig (read-only), builds the controller's cache and runs its planner once, so\n"
        "it gives the reason the controller would give. Reason codes: docs/policies.md.\n"
        "\nexamples:\n"
        "  muster explain team-a/train-64\n"
        "  muster explain train-64 -n team-a --status-url http://localhost:8081\n"
        "  muster explain team-a/train-64 -o json | jq -r .reason.message\n"
        "  kubectl muster explain team-a/train-64"
    )


def _holders_text(holders: Sequence[Mapping[str, Any]], limit: int = 5) -> str:
    parts = [
        f"{h['gang']} ({', '.join(f'{a} {r}' for r, a in h['holds'].items())})"
        for h in holders[:limit]
    ]
    more = f" and {len(holders) - limit} more" if len(holders) > limit else ""
    return ", ".join(parts) + more


def changes_for(
    body: Mapping[str, Any],
    queue: Mapping[str, Any] | None,
    parent: Mapping[str, Any] | None,
    holders: Sequence[Mapping[str, Any]] | None,
) -> list[str]:
    """What would let a waiting gang in, by its reason code (the planner's reason says why)."""
    reason = body.get("reason") or {}
    code, message = reason.get("code"), str(reason.get("message") or "")
    q = body.get("queue") or "?"
    namespace, _, name = str(body.get("gang")).partition("/")
    edit = f"kubectl edit queues.muster.dev {q}"
    if code == "QuotaExhausted":
        return _quota_changes(q, edit, queue, parent, holders, body.get("requests"))
    if code == "NoFit":
        return _no_fit_changes(message)
    if code == "NeverFits":
        return _never_fits_changes(
            message, q, edit, delete_command(body.get("kind"), namespace, name)
        )
    if code == "Preempted":
        return _preempted_changes(body, queue, parent, holders, q)
    return _changes_for_code(code, q, edit, namespace, name)


def _quota_changes(
    q: str,
    edit: str,
    queue: Mapping[str, Any] | None,
    parent: Mapping[str, Any] | None,
    holders: Sequence[Mapping[str, Any]] | None,
    requests: Mapping[str, Any] | None = None,
) -> list[str]:
    """QuotaExhausted: quota released, borrowed from the cohort, or raised."""
    held = f": it holds {usage_cell(queue)} (usage/quota)" if queue else ""
    out = [f"gangs admitted from queue {q} finish and release quota{held}"]
    if holders:
        out.append(f"queue {q}'s quota is held by {_holders_text(holders)}")
    if parent is not None:
        out.append(
            f"queues of cohort {parent['name']} leave unused quota it may borrow "
            f"(cohort {parent['name']}: {usage_cell(parent)})"
        )
    reclaim = _reclaim_while_borrowing(q, queue, parent, requests)
    if reclaim:
        out.append(reclaim)
    borrow = ", or spec.borrowingLimit" if parent is not None else ""
    out.append(f"or raise queue {q}'s quota: {edit} (spec.nominal{borrow})")
    return out


def _reclaim_while_borrowing(
    q: str,
    queue: Mapping[str, Any] | None,
    parent: Mapping[str, Any] | None,
    requests: Mapping[str, Any] | None,
) -> str:
    """For a gang of a queue of a cohort that reclaims but not while it borrows, and that would
    borrow past its queue's nominal quota: the rule that keeps it from preempting, and the field
    that changes it ('' if none applies). Without the gang's requests (a status service older
    than them), the rule is stated for any gang."""
    rules = (queue or {}).get("preemption") or {}
    reclaim = rules.get("reclaimWithinCohort", "Never")
    borrow = (rules.get("borrowWithinCohort") or {}).get("policy", "Never")
    if parent is None or reclaim == "Never" or borrow != "Never":
        return ""
    unless = (
        "unless spec.preemption.borrowWithinCohort: {policy: LowerPriority} lets it take "
        "lower-priority gangs of borrowing queues (docs/queue-reference.md, *Preemption*)"
    )
    if requests is None:
        return (
            f"queue {q} reclaims lent quota (reclaimWithinCohort: {reclaim}) only for a gang "
            f"that fits within its own nominal quota; a gang that would borrow past it preempts "
            f"no other queue's gangs and waits for them to end, {unless}"
        )
    past = _past_nominal(q, queue, amounts(requests, "gang requests"))
    if not past:
        return ""  # within its nominal quota: the reclaim rule acts for it
    return (
        f"this gang would borrow past queue {q}'s nominal quota ({past}), and reclaimWithinCohort: "
        f"{reclaim} acts only for a gang within it: it preempts no other queue's gangs and "
        f"waits for them to end, {unless}"
    )


def _past_nominal(q: str, queue: Mapping[str, Any] | None, requests: Mapping[str, int]) -> str:
    """Where a gang asking ``requests`` would take ``queue`` past its nominal quota (``cpu:
    needs 64, 40 of 48 used``), or '' if it stays within it in every resource the quota names
    (a queue with no quota of its own borrows whatever it uses)."""
    row = queue or {}
    if row.get("quota") is None:
        return "it has none of its own" if any(requests.values()) else ""
    quota = amounts(row.get("quota"), f"queue {q} quota")
    usage = amounts(row.get("usage"), f"queue {q} usage")
    over = [
        f"{r}: needs {format_quantity(r, requests[r])}, {format_quantity(r, usage.get(r, 0))} of "
        f"{format_quantity(r, quota[r])} used"
        for r in sorted(quota)
        if requests.get(r, 0) and usage.get(r, 0) + requests[r] > quota[r]
    ]
    return "; ".join(over)


def _no_fit_changes(message: str) -> list[str]:
    """NoFit: room on the nodes, a looser selector, or a smaller start."""
    out = [
        "running pods free enough room on the nodes (admitted gangs finishing, other pods "
        "ending), or nodes with that room are added"
    ]
    if "node selector" in message:
        out.append("or relax the gang's nodeSelector / tolerations")
    out.append(
        f"or let it start smaller: a Job annotated {MIN_MEMBERS} is admitted at the largest "
        "size that fits, at least that minimum"
    )
    return out


def _never_fits_changes(message: str, q: str, edit: str, delete: str) -> list[str]:
    """NeverFits: nothing finishing helps; a bigger queue or cluster, or a smaller gang."""
    if "queue" in message:
        fix = f"raise queue {q}'s quota ({edit}), or shrink the gang"
    else:
        fix = "add nodes with the resources it asks for, or shrink the gang or its requests"
    return [f"no gang finishing makes room for it: {fix}", f"to remove it: {delete}"]


def _preempted_changes(
    body: Mapping[str, Any],
    queue: Mapping[str, Any] | None,
    parent: Mapping[str, Any] | None,
    holders: Sequence[Mapping[str, Any]] | None,
    q: str,
) -> list[str]:
    """Preempted: what lets it in again (its current reason's list), and how to protect it."""
    # Waiting again after a preemption: the status service gives the planner's current
    # reason in waitingFor; what lets the gang in now is that reason's list.
    waiting = body.get("waitingFor")
    now = (
        changes_for({**body, "reason": waiting}, queue, parent, holders)
        if waiting and waiting.get("code") != "Preempted"
        else ["it fits again: it is planned at every cycle"]
    )
    count = body.get("preemptions")
    times = f" (preempted {count} times so far)" if count else ""
    return [
        "it went back to pending at its original submission time, with no backoff and no "
        f"count toward its backoff limit{times}; it is admitted again when:",
        *(f"  {line}" for line in now),
        f"after spec.preemption.protectAfter preemptions its queue {q} protects it for "
        "spec.preemption.protectFor after each admission",
        "to keep it from being preempted, give it a higher muster.dev/priority than the "
        "preemptor, or set preemption rules on the preemptor's queue to Never",
    ]


def _changes_for_writes_and_members(code: Any, name: str) -> list[str]:
    """What changes a gang waiting on the apiserver's answer to a write, or on its members."""
    if code == "PreemptionRefused":
        return [
            "the API server lets muster suspend the gang the reason names: an admission policy, "
            "a webhook or RBAC refuses that update now (its answer is in the reason, and in "
            "muster's log); muster tries again after a backoff that doubles up to 5 minutes",
            "or that gang finishes or is deleted, and its room frees without a preemption",
        ]
    if code == "Incomplete":
        return [
            f"the rest of its pods are created, each labelled {POD_GROUP}={name} with the same "
            f"{POD_GROUP_SIZE}: it is planned as soon as they all exist",
            f"or, if the group has fewer pods, create them again with that {POD_GROUP_SIZE}; "
            "past the time the reason gives, muster marks it Failed",
        ]
    return []


def _changes_for_code(code: Any, q: str, edit: str, namespace: str, name: str) -> list[str]:
    """The reason codes whose changes are fixed text about the gang and its queue."""
    written = _changes_for_writes_and_members(code, name)
    if written:
        return written
    if code == "SizeRatioSerialized":
        return [
            "the big gang it names reaches its minimum of ready pods (or is evicted); big gangs "
            f"(above queue {q}'s sizeRatio.ratio of the cluster) start one at a time so they "
            "cannot clog each other",
            f"or raise spec.sizeRatio.ratio of queue {q} ({edit})",
        ]
    if code == "SizeRatioRejected":
        return [
            f"no gang finishing makes room for it: queue {q} rejects gangs this big "
            "(sizeRatio.action: Reject)",
            f"split the job into smaller gangs, or change queue {q}'s spec.sizeRatio ({edit})",
        ]
    if code == "StrictFIFOBlocked":
        return [
            f"the head of queue {q} is admitted: the queue is StrictFIFO, nothing passes its head",
            f"or set spec.strategy: BestEffortFIFO on queue {q} ({edit}) to let gangs that fit "
            "pass a blocked head",
        ]
    if code == "ElasticWaiting":
        return ["its elastic wait ends (it then starts smaller), or room frees for its full size"]
    if code == "QueueNotFound":
        return [
            f"create queue {q} (kind: Queue, apiVersion: muster.dev/v1alpha1; see "
            "docs/queue-reference.md): the gang is planned as soon as it exists",
            "or delete the Job and create it again labelled muster.dev/queue=<a leaf queue>",
        ]
    if code == "QueueNotReady":
        return [
            f"queue {q} (or the queue above it that the reason names) is fixed as the reason "
            f"says ({edit}); `kubectl get queues` shows each queue's Ready condition and reason: "
            "the gang is planned as soon as its queue is Ready",
        ]
    if code == "NamespaceNotAllowed":
        return [
            f"label namespace {namespace} to match queue {q}'s spec.namespaceSelector "
            f"(kubectl label namespace {namespace} KEY=VALUE): the gang is planned at once",
            f"or change queue {q}'s namespaceSelector ({edit}), or use a queue that takes "
            f"gangs from {namespace}",
        ]
    if code == "Reserved":
        return [
            "the big gang it names is admitted: it comes before this gang in the policy's "
            "order (DRF: its queue holds a lower weighted share) or is older and has waited "
            "over 2 minutes, and the nodes it needs are kept for it so a stream of smaller "
            "gangs cannot starve it; gangs of queues below their fair share are never held "
            "back by it"
        ]
    if code == "HeldBehindPartial":
        return [
            "the gang it names gets room for all its pods, or the clog detector evicts it "
            "after its clog timeout; queues with nodeFit: true never hold like this"
        ]
    if code == gangstate.BACKING_OFF:
        return [
            "time: it is planned again at the requeue time; each eviction lengthens the wait "
            "(queue spec.backoff) and past backoff.limit evictions it is marked Failed",
            f"why it was evicted: kubectl get events -n {namespace} "
            f"--field-selector involvedObject.name={name}",
        ]
    if code == "Invalid":
        return [
            "fix the field the reason names (delete the Job and create it again); muster never "
            "admits it as it is"
        ]
    return ["see the reason codes in docs/policies.md"]


def explain(
    body: Mapping[str, Any],
    listing: Mapping[str, Mapping[str, Any]],
    holders: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The explanation of one gang: a one-line summary, the reason, and what would change it."""
    gang, state, queue = body.get("gang"), body.get("state"), body.get("queue")
    namespace, _, name = str(gang).partition("/")
    rows = {row["name"]: row for row in queue_rows(listing)}
    row = rows.get(str(queue))
    parent = rows.get(str(row["parent"])) if row and row.get("parent") else None
    reason = body.get("reason")
    out: dict[str, Any] = {"gang": gang, "state": state, "queue": queue}
    if body.get("position") is not None:
        out["position"] = body["position"]
    if reason:
        out["reason"] = dict(reason)
    where = f" (position {body['position']} in queue {queue})" if body.get("position") else ""
    pods = f"{body.get('ready', 0)} of at least {body.get('min')} pods ready"
    changes: list[str] = []
    if state in (gangstate.PENDING, gangstate.BACKING_OFF) and reason:
        summary = f"{gang} waits{where}: {reason.get('message')}"
        changes = changes_for(body, row, parent, holders)
    elif state == gangstate.PENDING and body.get("admitNow") is not None:
        summary = (
            f"{gang} waits{where}, but nothing holds it back: the planner admits it now at "
            f"{body['admitNow']} pods"
        )
        changes = [
            "nothing: the controller admits it at its next cycle (within seconds); if it stays "
            "Pending, check that muster's controller runs (kubectl -n muster-system get pods)"
        ]
    elif state == gangstate.PENDING:
        summary = f"{gang} waits{where}; the controller has not planned it yet"
        changes = ["nothing: the controller plans within seconds of a change; ask again"]
    elif state == gangstate.ADMITTED:
        summary = (
            f"{gang} is admitted ({body.get('admittedAt')}, {body.get('admittedSize')} pods) "
            f"and starting: {pods}, {body.get('podsWaiting', 0)} not scheduled yet"
        )
        changes = [
            "nothing on muster's side: kube-scheduler places its pods; see them with "
            f"kubectl get pods -n {namespace} -l {GANG}={name}",
            "if fewer than its minimum are ready after its clog timeout, muster evicts it "
            "and requeues it with backoff",
        ]
    elif state == gangstate.RUNNING:
        summary = f"{gang} is running: {pods}; nothing holds it back"
    elif state == gangstate.FINISHED:
        summary = f"{gang} has finished; it holds no quota"
    elif state == gangstate.FAILED:
        summary, changes = _failed(body, reason)
    else:
        summary = f"{gang} is {state}"
    out["summary"] = summary
    out["changes"] = changes
    expected = estimate_text(body) if state in (gangstate.PENDING, gangstate.BACKING_OFF) else None
    if expected is not None:
        out["expectedStart"] = expected
        out["estimate"] = dict(body["estimate"])
    if body.get("rejected"):
        out["rejected"] = True
    if row is not None:
        out["queueUsage"] = usage_cell(row)
    out["kind"] = gang_label(body)
    return out


def _failed(body: Mapping[str, Any], reason: Mapping[str, Any] | None) -> tuple[str, list[str]]:
    """A failed gang's summary and what to do: the reason muster gave up for (rejected, not
    whole in time), else its evictions past the backoff limit."""
    gang = body.get("gang")
    namespace, _, name = str(gang).partition("/")
    delete = delete_command(body.get("kind"), namespace, name)
    if reason:
        summary = (
            f"{gang} failed: {reason.get('code')}: {reason.get('message')}; muster does not "
            "admit it again"
        )
        return summary, [
            f"fix what the reason names, then delete it ({delete}) and submit it again"
        ]
    summary = (
        f"{gang} failed: evicted {body.get('evictions')} times, past its queue's backoff "
        "limit; muster does not admit it again"
    )
    return summary, [
        "find why its pods did not start: kubectl get events -n "
        f"{namespace} --field-selector involvedObject.name={name}",
        f"then delete it ({delete}) and submit it again",
    ]


def render(explanation: Mapping[str, Any], source: str) -> str:
    lines = [str(explanation["summary"])]
    reason = explanation.get("reason")
    if reason:
        lines.append(f"reason: {reason.get('code')}")
    if explanation.get("changes"):
        lines.append("what would change it:")
        lines.extend(f"  - {change}" for change in explanation["changes"])
    if explanation.get("expectedStart"):
        lines.append(f"expected start: {explanation['expectedStart']}")
    lines.append(f"gang: {explanation['kind']}, queue {explanation.get('queue')}")
    lines.append(f"(source: {source})")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        namespace, name = parse_gang(args.gang, args.namespace)
        view = open_view(args)
        try:
            body = view.gang(namespace, name)
            listing = view.queues()
            holders = (
                view.holders(str(body.get("queue")))
                if isinstance(view, ApiView) and (body.get("reason") or {}).get("code")
                else None
            )
        finally:
            close_view(view)
    except ViewError as exc:
        print(f"muster explain: {exc}", file=sys.stderr)
        return exc.exit_code
    explanation = explain(body, listing, holders)
    if args.output == "table":
        print(render(explanation, view.source.describe()))
    else:
        print(dump({**explanation, "source": view.source.as_dict()}, args.output))
    return 0
