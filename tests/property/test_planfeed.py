"""The controller's incremental planner decides what a full plan of the cache's snapshot decides.

Random sequences of what the watches deliver (nodes, queues, Jobs created, admitted by the
controller's own optimistic admission or by the object, pods bound, Jobs finished or deleted,
queues changed) are applied to a `Cache`; after each step `PlanFeed.plan` must return the same
decisions as `plan(cache.snapshot(now))`, which is what the controller ran before.
"""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from admission.cache import Cache
from admission.planfeed import PlanFeed
from policies import AdmittedGang, Decisions, plan
from policies.kinds.pinning import encode_placement
from policies.kinds.reading import format_admitted
from policies.vocabulary import MIN_MEMBERS, SUBMITTED
from tests import builders

STAMP = "2026-01-02T03:04:05.{:09d}Z/{:012d}"


def node(name: str, cpu: int, rv: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": str(rv), "labels": {"zone": name[-1]}},
        "status": {"allocatable": {"cpu": str(cpu), "pods": "20"}},
    }


def queue(name: str, parent: str | None, cpu: int | None, rv: int) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if parent:
        spec["parent"] = parent
    if cpu is not None:
        spec["nominal"] = {"cpu": str(cpu)}
    return {"metadata": {"name": name, "resourceVersion": str(rv)}, "spec": spec}


def job(
    name: str, q: str, size: int, cpu: int, seq: int, rv: int, minimum: int | None
) -> dict[str, Any]:
    """A stored Indexed gang of `size` pods of `cpu` cpus, suspended, stamped `seq`."""
    annotations = {SUBMITTED: STAMP.format(seq, seq)}
    if minimum is not None:
        annotations[MIN_MEMBERS] = str(minimum)
    return builders.job(
        name,
        q,
        namespace="ns",
        pods=size,
        indexed=True,
        suspend=True,
        cpu=str(cpu),
        runtime=None,
        tolerations=(),
        annotations=annotations,
        gang_label=True,
        resource_version=rv,
    )


def gang_pod(
    name: str, gang: str, node_name: str, rv: int, phase: str = "Running", ready: bool = False
) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True"}] if ready else []
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": name,
            "resourceVersion": str(rv),
            "labels": {"muster.dev/gang": gang},
        },
        "spec": {
            "nodeName": node_name,
            "containers": [{"resources": {"requests": {"cpu": "1"}}}],
        },
        "status": {"phase": phase, "conditions": conditions},
    }


def admitted_from_scratch(cache: Cache, now: float) -> dict[str, AdmittedGang]:
    """`Reservations.admitted` without its memo: every placement worked out again."""
    return {
        r.gang.id: AdmittedGang(
            r.gang, adm[1], cache.reservations.placement(r, now), adm[0], r.reached_min
        )
        for r in cache.jobs.values()
        if not r.finished and (adm := r.admission) is not None
    }


def same(a: Decisions, b: Decisions) -> None:
    assert [(x.gang_id, x.size, dict(x.placement)) for x in a.admitted] == [
        (x.gang_id, x.size, dict(x.placement)) for x in b.admitted
    ]
    assert a.pending == b.pending
    assert a.rejected == b.rejected
    assert a.preempted == b.preempted


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["node", "queue", "create", "create", "create", "plan-admit", "bind", "finish"]
            + ["delete", "ready", "object-admit", "other-pod", "priority"]
            + ["pod-ready", "pod-succeeded", "wait", "node-gone"]
        ),
        st.integers(0, 7),
        st.integers(1, 4),
        st.integers(1, 8),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(ops=OPS, policy=st.sampled_from(["drf", "strict-fifo", "fifo"]))
# A pinned gang, one of its two pods bound, past the reservation's TTL: its pin is no longer held.
@example(
    ops=[("create", 1, 2, 1), ("object-admit", 0, 2, 1), ("bind", 0, 1, 1), ("wait", 0, 4, 1)],
    policy="drf",
)
# A node the pin names goes: the pin is held on the nodes that remain.
@example(ops=[("create", 1, 2, 1), ("object-admit", 0, 2, 1), ("node-gone", 1, 1, 1)], policy="drf")
def test_the_fed_planner_decides_as_a_full_plan(
    ops: list[tuple[str, int, int, int]], policy: str
) -> None:
    cache = Cache()
    feed = PlanFeed(policy)
    rv = 1
    for name in ("n0", "n1", "n2"):
        cache.apply_node("ADDED", node(name, 8, rv))
    cache.apply_queue("ADDED", queue("org", None, None, rv))
    cache.apply_queue("ADDED", queue("a", "org", 16, rv))
    cache.apply_queue("ADDED", queue("b", "org", 8, rv))
    seq = 0
    pods = 0
    now = 100.0
    for op, i, size, cpu in ops:
        rv += 1
        now += 1.0
        names = sorted(cache.jobs)
        pick = cache.jobs[names[i % len(names)]] if names else None
        if op == "node":
            cache.apply_node("MODIFIED", node(f"n{i % 4}", 4 * size, rv))
        elif op == "queue":
            cache.apply_queue("MODIFIED", queue("ab"[i % 2], "org", 4 * cpu, rv))
        elif op == "create":
            seq += 1
            minimum = max(1, size // 2) if i % 3 == 0 else None
            body = job(f"j{seq}", "ab"[i % 2], size, 1 + cpu % 4, seq, rv, minimum)
            cache.apply_job("ADDED", body)
        elif op == "plan-admit":
            # What the loop does with a plan: optimistic local admission and a reservation.
            for admission in feed.plan(cache, now).admitted[: 1 + i % 3]:
                record = cache.jobs[admission.gang_id]
                placements = record.gang.placements(admission.placement, admission.other_placements)
                cache.assume_admitted(record, now, admission.size, placements)
        elif op == "object-admit" and pick is not None and pick.admission is None:
            body = job(pick.name, pick.queue, pick.gang.size, 1, pick.gang.submitted.seq, rv, None)
            body["metadata"]["annotations"]["muster.dev/admitted"] = format_admitted(now, size)
            if cpu % 2:
                # Pinned (as after a restart): the planned nodes are held from the object.
                pin = {f"n{(i + k) % 3}": 1 for k in range(size)}
                placement = encode_placement({"": pin})
                body["metadata"]["annotations"]["muster.dev/placement"] = placement
            body["spec"]["suspend"] = False
            body["spec"]["parallelism"] = body["spec"]["completions"] = pick.gang.size
            cache.apply_job("MODIFIED", body)
        elif op == "priority" and pick is not None and pick.admission is None:
            # The user changes a waiting Job's priority: a new gang, same id.
            body = job(pick.name, pick.queue, pick.gang.size, 1, pick.gang.submitted.seq, rv, None)
            body["metadata"]["annotations"]["muster.dev/priority"] = str(cpu)
            cache.apply_job("MODIFIED", body)
        elif op == "bind" and pick is not None and pick.admission is not None:
            pods += 1
            cache.apply_pod("ADDED", gang_pod(f"p{pods}", pick.gang_label, f"n{i % 3}", rv))
        elif op in ("pod-ready", "pod-succeeded") and pods:
            # A pod of some gang (the p<k> of an earlier bind) becomes ready, or succeeds.
            k = 1 + i % pods
            pod = cache.pods.get(f"p{k}")
            if pod is not None and pod.gang is not None:
                gang = pod.gang.split("/", 1)[1]
                phase = "Succeeded" if op == "pod-succeeded" else "Running"
                body = gang_pod(f"p{k}", gang, pod.node, rv, phase, ready=op == "pod-ready")
                cache.apply_pod("MODIFIED", body)
        elif op == "wait":
            now += 20.0 * size  # reservations age past their TTL
        elif op == "node-gone":
            cache.apply_node("DELETED", node(f"n{i % 4}", 8, rv))
        elif op == "other-pod":
            pods += 1
            cache.apply_pod(
                "ADDED",
                {
                    "metadata": {
                        "name": f"o{pods}",
                        "namespace": "x",
                        "uid": f"o{pods}",
                        "resourceVersion": str(rv),
                    },
                    "spec": {
                        "nodeName": f"n{i % 3}",
                        "containers": [{"resources": {"requests": {"cpu": str(cpu % 3)}}}],
                    },
                    "status": {"phase": "Running"},
                },
            )
        elif op == "ready" and pick is not None and pick.admission is not None:
            pick.reached_min = True
        elif op == "finish" and pick is not None:
            pick.finished = True
            cache.changed.set()
        elif op == "delete" and pick is not None:
            cache.apply_job("DELETED", {"metadata": {"name": pick.name, "namespace": "ns"}})
        cache.reservations.release(now)  # as each cycle starts
        memoized = {a.gang.id: a for a in cache.reservations.admitted(now)}
        assert memoized == admitted_from_scratch(cache, now)
        same(feed.plan(cache, now), plan(cache.snapshot(now), policy))
        # And the planner holds what the snapshot holds.
        assert feed.planner is not None
        held, full = feed.planner.snapshot(now), cache.snapshot(now)
        assert {
            a.gang.id: (a.gang, a.size, dict(a.placement), a.running) for a in held.admitted
        } == {a.gang.id: (a.gang, a.size, dict(a.placement), a.running) for a in full.admitted}
        held_pending = {g.id: g for g in held.pending}
        full_pending = {g.id: g for g in full.pending}
        assert held_pending.keys() == full_pending.keys()
        assert all(held_pending[g] is full_pending[g] for g in held_pending)
        assert [(n.name, n.used) for n in held.nodes] == [(n.name, n.used) for n in full.nodes]
