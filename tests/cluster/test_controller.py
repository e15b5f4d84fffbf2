"""The queue controller on the real control plane: whole-gang admission under quota, DRF order,
re-suspension of unadmitted Jobs, deadlock breaking, and the status service."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import defaultdict
from typing import Any
from urllib.parse import urlsplit

import pytest

from kubeport.kubeapi import ApiError, KubeClient
from policies import Resources
from policies.kinds.reading import parse_admitted
from policies.phase import parse_time
from policies.submitted import parse_stamp
from policies.vocabulary import CLOG_TIMEOUT, EVICTED_REASON, SUBMITTED
from simulator.controlplane.minicluster import job_maker
from simulator.controlplane.nodes import FAKE_NODE_TAINT, NODE_GROUP_LABEL
from tests import builders
from tests.conftest import MusterProcess
from tests.controller_helpers import (
    QUEUES,
    admitted,
    all_jobs,
    create_nodes,
    create_queue,
    delete_nodes,
    delete_queue,
    event_reasons,
    evictions,
    finished,
    http_json,
    job_cpu,
    jobs_path,
    metric,
    pending_reason,
    sampling,
    wait_all_finished,
)
from tests.kube import create_through_webhook, job_condition, wait_for

pytestmark = [pytest.mark.cluster]


def test_burst_in_two_queues_is_admitted_whole_in_order_within_quota(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    quota_m = 16_000  # 16 cpu each: 4 gangs of 4 pods x 1 cpu at a time
    queues = [f"{namespace}-a", f"{namespace}-b"]
    for q in queues:
        create_queue(kube, q, {"nominal": {"cpu": "16"}})
    per_queue = 16
    try:
        with sampling(kube, namespace) as samples:
            statuses: list[dict[str, Any]] = []
            names = [(q, f"{q[-1]}-{i:02d}") for i in range(per_queue) for q in queues]

            def submit(part: list[tuple[str, str]]) -> None:
                with KubeClient(kube.credentials) as own:
                    for q, name in part:
                        create_through_webhook(
                            own, jobs_path(namespace), builders.job(name, q, pods=4, runtime="2s")
                        )

            threads = [threading.Thread(target=submit, args=(names[i::4],)) for i in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                statuses.append(
                    {q: kube.get(f"/apis/muster.dev/v1alpha1/queues/{q}") for q in queues}
                )
                jobs = all_jobs(kube, namespace)
                if len(jobs) == len(names) and all(finished(j) for j in jobs):
                    break
                time.sleep(0.5)
        wait_all_finished(kube, namespace, len(names), 30)
        jobs = all_jobs(kube, namespace)
    finally:
        for q in queues:
            delete_queue(kube, q)

    # Whole: every gang admitted once at its full size, every pod succeeded, no kopf marks.
    for job in jobs:
        _, size = parse_admitted(str(admitted(job)))
        assert size == 4, job["metadata"]["name"]
        assert job["status"].get("succeeded") == 4
        assert not [k for k in job["metadata"].get("annotations", {}) if "kopf" in k]
        assert not job["metadata"].get("finalizers")
    # Never above quota, in any sample of the API's own state.
    peak: dict[str, int] = defaultdict(int)
    for sample in samples:
        held: dict[str, int] = defaultdict(int)
        for job in sample:
            if admitted(job) and not finished(job):
                held[job["metadata"]["labels"]["muster.dev/queue"]] += job_cpu(job)
        for q, amount in held.items():
            assert amount <= quota_m, f"queue {q} held {amount}m cpu > {quota_m}m"
            peak[q] = max(peak[q], amount)
    # DRF between equal queues: both reached their quota; FIFO within each queue.
    assert all(peak[q] == quota_m for q in queues), dict(peak)
    for q in queues:
        mine = [j for j in jobs if j["metadata"]["labels"]["muster.dev/queue"] == q]
        mine.sort(key=lambda j: parse_stamp(j["metadata"]["annotations"][SUBMITTED]))
        times = [parse_admitted(str(admitted(j)))[0] for j in mine]
        assert times == sorted(times), f"queue {q} admitted out of submission order"
    # Queue status showed usage while gangs ran.
    summaries = {s[q].get("status", {}).get("usageSummary") for s in statuses for q in queues}
    assert "cpu: 16" in summaries, summaries


def test_unadmitted_unsuspend_is_refused(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """The webhook refuses it (an unsuspend that gets past a webhook that is down, the
    controller suspends again: tests/cluster/test_admitted_updates.py)."""
    q = f"{namespace}-full"
    create_queue(kube, q, {"nominal": {"cpu": "1m"}})
    try:
        kube.create(jobs_path(namespace), builders.job("sneaky", q, pods=2, runtime="2s"))
        with pytest.raises(ApiError) as refused:
            kube.patch(f"{jobs_path(namespace)}/sneaky", {"spec": {"suspend": False}})
        assert "spec.suspend: true -> false" in refused.value.message
        job = kube.get(f"{jobs_path(namespace)}/sneaky")
        assert job["spec"]["suspend"] is True and admitted(job) is None
    finally:
        delete_queue(kube, q)


def test_two_gang_deadlock_is_broken_before_the_clog_timeout(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """A holds a1+s1 and needs s2; B holds b1+s2 and needs s1: a wait-for cycle.

    The order is forced with a taint on s2 that only B tolerates, lifted once both are placed.
    Pods run 60s, far longer than the detector needs (grace 3s) even on a loaded machine, so
    neither gang's pods finish and free a node before the cycle is seen.
    """
    group = f"dl-{namespace}"[:60]
    nodes = {
        f"{group}-{n}": labels
        for n, labels in (
            ("a1", {"dl-a": "1"}),
            ("s1", {"dl-a": "1", "dl-b": "1"}),
            ("s2", {"dl-a": "1", "dl-b": "1"}),
            ("b1", {"dl-b": "1"}),
        )
    }
    hold = {"key": "dl-hold", "value": "b", "effect": "NoSchedule"}
    create_nodes(kube, group, nodes, taints={f"{group}-s2": [hold]})
    q = f"{namespace}-dl"
    create_queue(
        kube,
        q,
        {"nodeFit": False, "clogTimeout": "10m", "backoff": {"base": "1s", "max": "2s"}},
    )
    pods_path = f"/api/v1/namespaces/{namespace}/pods"

    def bound(gang: str) -> int:
        pods = kube.get(pods_path, {"labelSelector": f"muster.dev/gang={gang}"})["items"]
        return sum(1 for p in pods if p["spec"].get("nodeName"))

    try:
        select = {NODE_GROUP_LABEL: group}
        kube.create(
            jobs_path(namespace),
            builders.job(
                "a", q, pods=3, cpu="6", runtime="60s", node_selector={**select, "dl-a": "1"}
            ),
        )
        wait_for(lambda: bound("a") == 2, timeout=60, what="2 pods of gang a bound")
        kube.create(
            jobs_path(namespace),
            builders.job(
                "b",
                q,
                pods=3,
                cpu="6",
                runtime="60s",
                node_selector={**select, "dl-b": "1"},
                tolerations=[
                    builders.KWOK_TOLERATION,
                    {"key": "dl-hold", "operator": "Exists", "effect": "NoSchedule"},
                ],
            ),
        )
        wait_for(lambda: bound("b") == 2, timeout=60, what="2 pods of gang b bound")
        kube.patch(f"/api/v1/nodes/{group}-s2", {"spec": {"taints": [FAKE_NODE_TAINT]}})
        started = time.monotonic()
        job_b: dict[str, Any] = wait_for(
            lambda: j if evictions(j := kube.get(f"{jobs_path(namespace)}/b")) else None,
            timeout=120,
            what="gang b evicted",
        )
        assert time.monotonic() - started < 600  # the clog timeout: not what evicted it
        assert job_b["metadata"]["annotations"][EVICTED_REASON] == "Deadlock"
        assert evictions(kube.get(f"{jobs_path(namespace)}/a")) == 0
        wait_all_finished(kube, namespace, 2, 240)
        assert evictions(kube.get(f"{jobs_path(namespace)}/a")) == 0
        assert metric(muster.metrics_url, "muster_deadlocks_broken_total") >= 1
    finally:
        delete_queue(kube, q)
        delete_nodes(kube, group)


async def _long_polls(url: str, count: int) -> list[dict[str, Any]]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    target = f"{parts.path}?{parts.query}"

    async def one() -> dict[str, Any]:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(f"GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            await writer.drain()
            data = await reader.read()
        finally:
            writer.close()
            await writer.wait_closed()
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        result: dict[str, Any] = json.loads(body)
        return result

    return list(await asyncio.gather(*(one() for _ in range(count))))


def test_status_service_serves_long_polls_from_the_cache(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    q = f"{namespace}-st"
    create_queue(kube, q, {"nominal": {"cpu": "1m"}})
    try:
        kube.create(jobs_path(namespace), builders.job("waiting", q, pods=2, runtime="2s"))
        url = f"{muster.status_url}/v1/gangs/{namespace}/waiting"
        status = wait_for(
            lambda: pending_reason(url, "NeverFits", "QuotaExhausted"),
            timeout=60,
            what="a pending reason",
        )
        assert status["state"] == "Pending" and status["queue"] == q
        assert status["position"] == 1
        assert status["reason"]["code"] in ("NeverFits", "QuotaExhausted")
        time.sleep(3)  # let queue status writes for the new gang settle
        before = metric(muster.metrics_url, "muster_api_requests_total")
        polls = asyncio.run(_long_polls(f"{url}?wait=3&since={status['version']}", 1000))
        after = metric(muster.metrics_url, "muster_api_requests_total")
        assert len(polls) == 1000 and all(p["state"] == "Pending" for p in polls)
        # Served from the cache: 1000 polls that each touched the API would add >= 1000. The
        # session's controller may make a few unrelated requests meanwhile (a watch reconnect,
        # a Queue status write for another test's leftovers), hence the small allowance.
        assert after - before <= 5, f"status queries made {after - before} API requests"

        # A long-poll returns as soon as the gang changes: give the queue room.
        results: list[list[dict[str, Any]]] = []
        version = http_json(url)["version"]
        waiter = threading.Thread(
            target=lambda: results.append(
                asyncio.run(_long_polls(f"{url}?wait=120&since={version}", 20))
            )
        )
        waiter.start()
        time.sleep(1)
        kube.patch(f"/apis/muster.dev/v1alpha1/queues/{q}", {"spec": {"nominal": {"cpu": "8"}}})
        waiter.join(timeout=60)
        assert results and all(
            p["state"] in ("Admitted", "Running", "Finished") for p in results[0]
        )
        queues = http_json(f"{muster.status_url}/v1/queues")["queues"]
        assert q in queues
    finally:
        delete_queue(kube, q)


def test_namespace_selector_keeps_other_namespaces_waiting(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    q = f"{namespace}-ns"
    create_queue(kube, q, {"namespaceSelector": {"matchLabels": {"muster-test/team": "a"}}})
    try:
        kube.create(jobs_path(namespace), builders.job("outsider", q, pods=1, runtime="1s"))
        url = f"{muster.status_url}/v1/gangs/{namespace}/outsider"
        status = wait_for(
            lambda: pending_reason(url, "NamespaceNotAllowed"),
            timeout=60,
            what="the NamespaceNotAllowed reason",
        )
        assert status["state"] == "Pending"
        assert status["reason"]["code"] == "NamespaceNotAllowed", status
        assert "muster-test/team=a" in status["reason"]["message"]
        events = wait_for(
            lambda: [
                e
                for e in kube.get(f"/api/v1/namespaces/{namespace}/events")["items"]
                if e.get("reason") == "NamespaceNotAllowed"
            ],
            timeout=30,
            what="a NamespaceNotAllowed Event",
        )
        assert events[0]["involvedObject"]["name"] == "outsider"
        assert not admitted(kube.get(f"{jobs_path(namespace)}/outsider"))
        # Label the namespace: the queue takes the gang now.
        kube.patch(
            f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {"muster-test/team": "a"}}}
        )
        wait_for(
            lambda: admitted(kube.get(f"{jobs_path(namespace)}/outsider")),
            timeout=60,
            what="admission once the namespace matches",
        )
    finally:
        delete_queue(kube, q)


def test_competing_queues_share_a_cohort_by_weighted_drf(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """Queues a (weight 2) and b (weight 1) borrow from cohort org, which has room for 8 of the
    20 waiting gangs. All of a's gangs are older than b's, so FIFO would admit 8 of a; plain DRF
    4 and 4; weighted DRF gives a about twice b's share: 5 or 6 of a (ties go to the older)."""
    org, a, b = f"{namespace}-org", f"{namespace}-a", f"{namespace}-b"
    create_queue(kube, org, {"nominal": {"cpu": "1m"}})  # closed while the gangs arrive
    create_queue(kube, a, {"parent": org, "weight": 2})
    create_queue(kube, b, {"parent": org})
    try:
        for q in (a, b):
            for i in range(10):
                body = builders.job(f"{q[-1]}-{i:02d}", q, pods=4, runtime="600s")
                create_through_webhook(kube, jobs_path(namespace), body)
        wait_for(
            lambda: all(
                (http_json(f"{muster.status_url}/v1/queues")["queues"].get(q) or {}).get("pending")
                == 10
                for q in (a, b)
            ),
            timeout=60,
            what="all 20 gangs waiting in the controller",
        )
        kube.patch(f"{QUEUES}/{org}", {"spec": {"nominal": {"cpu": "32"}}})

        def admitted_by_queue() -> dict[str, int]:
            counts = {a: 0, b: 0}
            for job in kube.get(jobs_path(namespace))["items"]:
                if admitted(job):
                    counts[job["metadata"]["labels"]["muster.dev/queue"]] += 1
            return counts

        wait_for(
            lambda: sum(admitted_by_queue().values()) >= 8, timeout=60, what="8 gangs admitted"
        )
        time.sleep(3)  # more cycles: nothing else may be admitted
        counts = admitted_by_queue()
        assert sum(counts.values()) == 8, counts  # the cohort's 32 cpu, never more
        assert counts[a] in (5, 6) and counts[b] in (2, 3), counts
    finally:
        for q in (a, b, org):
            delete_queue(kube, q)


def test_a_higher_priority_gang_goes_first_in_its_queue(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """Three older gangs at priority 0 and a younger one at priority 10 wait in a closed queue;
    opened for one gang, the queue admits the younger, higher-priority one."""
    q = f"{namespace}-prio"
    create_queue(kube, q, {"nominal": {"cpu": "1m"}})
    try:
        for name, priority in (("old-0", None), ("old-1", None), ("old-2", None), ("urgent", 10)):
            body = builders.job(name, q, pods=4, runtime="600s")
            if priority is not None:
                body["metadata"]["annotations"] = {"muster.dev/priority": str(priority)}
            create_through_webhook(kube, jobs_path(namespace), body)
        url = f"{muster.status_url}/v1/gangs/{namespace}"
        status = wait_for(
            lambda: pending_reason(f"{url}/urgent", "NeverFits", "QuotaExhausted"),
            timeout=60,
            what="the urgent gang waiting",
        )
        assert status["position"] == 1  # ahead of the three older gangs
        kube.patch(f"{QUEUES}/{q}", {"spec": {"nominal": {"cpu": "4"}}})
        wait_for(
            lambda: admitted(kube.get(f"{jobs_path(namespace)}/urgent")),
            timeout=60,
            what="the urgent gang admitted",
        )
        time.sleep(2)
        assert not any(admitted(kube.get(f"{jobs_path(namespace)}/old-{i}")) for i in range(3)), (
            "an older, lower-priority gang was admitted too"
        )
    finally:
        delete_queue(kube, q)


def test_a_miniclusters_own_clog_timeout_evicts_it_before_the_queues(
    kube: KubeClient, namespace: str, muster: MusterProcess, flux_operator: bool
) -> None:
    """A MiniCluster with `muster.dev/clog-timeout: 4s` in a node-blind queue whose clogTimeout
    is 10m: its pods select no node, so its gang never becomes ready, and the controller evicts
    it as Clogged after the MiniCluster's 4 s, not the queue's 10 minutes. The value reaches the
    controller only through the Job the operator makes (spec.jobLabels)."""
    q = f"{namespace}-clog"
    # A long backoff: the evicted gang is not admitted again while the test looks at it.
    create_queue(
        kube, q, {"nodeFit": False, "clogTimeout": "10m", "backoff": {"base": "5m", "max": "5m"}}
    )
    minicluster = {
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {
            "name": "stuck",
            "labels": {"muster.dev/queue": q},
            "annotations": {CLOG_TIMEOUT: "4s"},
        },
        "spec": {
            "size": 2,
            "containers": [{"image": "lammps", "resources": {"requests": {"cpu": "1"}}}],
            # No node has this label: the pods stay unscheduled, the gang never gets ready.
            "pod": {"nodeSelector": {"muster.dev/test-no-such-node": "true"}},
        },
    }
    path = f"/apis/flux-framework.org/v1alpha2/namespaces/{namespace}/miniclusters"
    reconciler = job_maker(kube, namespace, real=flux_operator).start()
    job_path = f"{jobs_path(namespace)}/stuck"

    def current_job() -> dict[str, Any]:
        try:
            return kube.get(job_path)
        except ApiError as exc:
            if exc.status == 404:  # the reconciler has not made it yet
                return {}
            raise

    try:
        stored = create_through_webhook(kube, path, minicluster)
        admitted_job: dict[str, Any] = wait_for(
            lambda: j if admitted(j := current_job()) else None,
            timeout=60,
            what="the MiniCluster's Job admitted",
        )
        admitted_at, _ = parse_admitted(str(admitted(admitted_job)))
        evicted: dict[str, Any] = wait_for(
            lambda: j if evictions(j := current_job()) else None,
            timeout=90,
            what="the MiniCluster's Job evicted after its own 4 s clog timeout",
        )
        assert evicted["metadata"]["annotations"][EVICTED_REASON] == "Clogged"
        assert evicted["spec"]["suspend"] is True
        # Evicted after 4 s, give or take the controller's and the test's polling.
        assert time.time() - admitted_at < 90
        message = wait_for(
            lambda: next(
                (
                    e["message"]
                    for e in kube.get(
                        f"/api/v1/namespaces/{namespace}/events",
                        {"fieldSelector": "involvedObject.name=stuck,reason=Evicted"},
                    )["items"]
                ),
                None,
            ),
            timeout=30,
            what="the Evicted Event",
        )
        assert "(clog timeout 4s)" in message, message
        # The way it went: the webhook's spec.jobLabels, copied onto the Job by the operator.
        assert stored["spec"]["jobLabels"][CLOG_TIMEOUT] == "4s"
        assert admitted_job["metadata"]["labels"][CLOG_TIMEOUT] == "4s"
    finally:
        reconciler.stop()
        delete_queue(kube, q)
    assert not reconciler.errors, reconciler.errors[:3]


def test_a_job_with_active_deadline_seconds_backfills_onto_reserved_capacity(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """A Job with activeDeadlineSeconds backfills onto capacity reserved for a big gang and
    the big gang still starts on time.

    Four 8-cpu nodes of their own. "hog" runs on two of them for 40 s (limit 90 s). "big"
    needs all four and holds the reservation. "quick" (4 cpu, 3 s, limit 30 s) is certain to
    end before big could start (hog's limit), so it runs at once on a reserved node; "slow",
    the same without a limit, waits with reason Reserved until big has run. Big is admitted
    as soon as hog has finished: quick did not delay it.
    """
    group = f"bf-{namespace}"[:60]
    create_nodes(kube, group, {f"{group}-{n}": {} for n in range(4)}, cpu="8")
    q = f"{namespace}-bf"
    # Only big (32 cpu) is big beside the whole cluster, whatever its size; hog has 16 cpu.
    total = sum(
        Resources.parse(node["status"]["allocatable"], field="allocatable")["cpu"]
        for node in kube.get("/api/v1/nodes")["items"]
    )
    create_queue(kube, q, {"sizeRatio": {"ratio": round(24_000 / total, 6)}})
    select = {NODE_GROUP_LABEL: group}
    jobs = jobs_path(namespace)
    url = f"{muster.status_url}/v1/gangs/{namespace}"

    def job(name: str, pods: int, cpu: str, runtime: str, deadline: int | None) -> dict[str, Any]:
        return builders.job(
            name, q, pods=pods, cpu=cpu, runtime=runtime, node_selector=select, deadline=deadline
        )

    def admitted_at(name: str) -> float | None:
        value = admitted(kube.get(f"{jobs}/{name}"))
        return parse_admitted(value)[0] if value else None

    try:
        create_through_webhook(kube, jobs, job("hog", 2, "8", "40s", 90))
        wait_for(lambda: admitted_at("hog"), timeout=60, what="hog admitted")
        create_through_webhook(kube, jobs, job("big", 4, "8", "3s", None))
        wait_for(
            lambda: pending_reason(f"{url}/big", "NoFit"), timeout=60, what="big holding nodes"
        )
        create_through_webhook(kube, jobs, job("slow", 1, "4", "3s", None))
        create_through_webhook(kube, jobs, job("quick", 1, "4", "3s", 30))
        quick_at = wait_for(lambda: admitted_at("quick"), timeout=30, what="quick backfilled")
        slow = wait_for(
            lambda: pending_reason(f"{url}/slow", "Reserved"), timeout=30, what="slow Reserved"
        )
        assert f"big gang {namespace}/big" in slow["reason"]["message"]
        assert admitted_at("big") is None and admitted_at("slow") is None
        wait_for(lambda: finished(kube.get(f"{jobs}/quick")), timeout=60, what="quick finished")
        quick_job = kube.get(f"{jobs}/quick")
        assert not job_condition(quick_job, "Failed"), "quick was ended by its deadline"
        # Big starts when hog ends, as it would have without quick.
        big_at = wait_for(lambda: admitted_at("big"), timeout=120, what="big admitted")
        hog_done = wait_for(
            lambda: _completion_time(kube.get(f"{jobs}/hog")), timeout=30, what="hog completed"
        )
        assert quick_at < big_at
        assert big_at - hog_done < 15, f"big admitted {big_at - hog_done:.1f}s after hog ended"
        slow_at = wait_for(lambda: admitted_at("slow"), timeout=120, what="slow admitted")
        assert slow_at >= big_at
        wait_all_finished(kube, namespace, 4, 120)
    finally:
        delete_queue(kube, q)
        delete_nodes(kube, group)


def _completion_time(job: dict[str, Any]) -> float | None:
    """When the Job's Complete condition became true, in epoch seconds."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Complete" and condition.get("status") == "True":
            return parse_time(condition["lastTransitionTime"])
    return None


def test_a_gang_that_can_never_be_admitted_is_marked_failed_with_its_reason(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """Rejected (8 cpu asked of a queue that can get at most 4) for the session's
    --fail-rejected-after (60 s): Failed, with the reason on the Job, in the status service and
    in an Event; it stays suspended and leaves the queue's pending count. A gang that fits in
    the same queue is admitted meanwhile."""
    q = f"{namespace}-never"
    create_queue(kube, q, {"nominal": {"cpu": "4"}})
    try:
        kube.create(jobs_path(namespace), builders.job("huge", q, pods=8, runtime="600s"))
        kube.create(jobs_path(namespace), builders.job("fits", q, pods=2, runtime="600s"))
        url = f"{muster.status_url}/v1/gangs/{namespace}/huge"
        waiting = wait_for(
            lambda: pending_reason(url, "NeverFits"), timeout=60, what="the huge gang rejected"
        )
        assert waiting["state"] == "Pending" and waiting.get("rejected") is True
        wait_for(
            lambda: admitted(kube.get(f"{jobs_path(namespace)}/fits")),
            timeout=60,
            what="the gang that fits admitted",
        )
        failed = wait_for(
            lambda: (s := http_json(url))["state"] == "Failed" and s,
            timeout=150,
            what="the huge gang marked Failed",
        )
        assert failed["reason"]["code"] == "NeverFits"
        assert "needs 8 cpu, queue" in failed["reason"]["message"], failed
        # The status service answers from the cache, which takes the failure before its write.
        job = wait_for(
            lambda: (
                (j := kube.get(f"{jobs_path(namespace)}/huge"))["metadata"]["annotations"].get(
                    "muster.dev/state"
                )
                == "Failed"
                and j
            ),
            timeout=30,
            what="muster.dev/state: Failed on the huge Job",
        )
        annotations = job["metadata"]["annotations"]
        assert annotations["muster.dev/failed-reason"].startswith("NeverFits: never fits: needs 8")
        assert job["spec"]["suspend"] is True and not admitted(job)
        wait_for(
            lambda: "Failed" in event_reasons(kube, namespace, "huge"),
            timeout=30,
            what="a Failed Event on the huge gang",
        )
        row = http_json(f"{muster.status_url}/v1/queues")["queues"][q]
        assert row["pending"] == 0 and row["admitted"] == 1, row
    finally:
        delete_queue(kube, q)
