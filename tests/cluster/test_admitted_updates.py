"""Admitted means admitted (issue 28), on the real control plane: what an update may change of a
gang muster admitted, for every kind, through the real apiserver, webhook and controller.

- An admitted Job grown the three ways the issue tried, and a waiting Job unsuspended by hand,
  are refused through both webhook servers: tests/cluster/test_admitted_updates_servers.py.
  Suspended with the change, a Job is requeued and admitted again at its new size.
- A running Job joins a queue only suspended; the queue label leaves a waiting Job, not an
  admitted one.
- A MiniCluster's size and its Job's size keep their admission (an elastic one admitted smaller
  through muster's own resize, with the real Flux Operator where the cluster runs it); a
  JobSet's replicated Jobs too, run by the real JobSet controller.
- With the webhook stopped (SIGSTOP: updates pass after its 3 s timeout, failurePolicy
  Ignore), the same growth, an unsuspend and a label removal are caught by the controller.
- A Hypothesis sweep of updates against admitted Jobs, and one against admitted JobSets run by
  the real JobSet controller (derandomized, bounded).

Throughout, a watch of the test's own (`Watchman`) lists the Jobs and their pods several times a
second and checks, at every sample, that no Job has more pods running than its admission says
and that no queue holds more than its quota: the pods the test observes, not muster's counters.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, event, example, given, settings
from hypothesis import strategies as st

from admission.launcher import is_ready
from kubeport.kubeapi import MERGE_PATCH, ApiError, KubeClient
from policies.kinds.reading import parse_admitted
from policies.vocabulary import (
    ADMITTED,
    CLOG_TIMEOUT,
    EVICTED_REASON,
    EVICTIONS,
    GANG,
    MIN_MEMBERS,
    PRIORITY,
    QUEUE,
    RESIZED_FROM,
    SUBMITTED,
)
from simulator.controlplane.minicluster import job_maker
from tests import builders
from tests.cluster.test_faults import webhook_pid
from tests.conftest import MusterProcess
from tests.controller_helpers import (
    admitted,
    create_queue,
    delete_queue,
    event_reasons,
    finished,
    jobs_path,
)
from tests.kube import create_through_webhook, wait_for

pytestmark = [pytest.mark.cluster]

QUOTA_CPU = 16
FIELD = re.compile(
    r"(spec\.[A-Za-z.\[\]0-9]+|label muster\.dev/[a-z-]+|annotation muster\.dev/[a-z-]+)"
)
"""A field as a refusal names it: muster's (`spec.parallelism: 2 -> 40: ...`) or the
apiserver's own validation (`spec.template: Invalid value: ...: field is immutable`)."""


# --- what the test observes -------------------------------------------------------------


def admitted_size(job: Mapping[str, Any]) -> int | None:
    stamp = admitted(job)
    return None if stamp is None else parse_admitted(stamp)[1]


def cpu_of(job: Mapping[str, Any]) -> int:
    """Millicores of one pod of a Job (every test Job asks cpu of its one container)."""
    requests = job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    text = str(requests["cpu"])
    return int(text[:-1]) if text.endswith("m") else int(float(text) * 1000)


class Watchman:
    """Lists a namespace's Jobs, then its pods, then its Jobs again, in a loop; a Job admitted
    the same way in both lists must not have more pods running (not being deleted) than its
    admitted size, and the admitted Jobs of each queue must fit its quota."""

    def __init__(self, kube: KubeClient, namespace: str, quotas: Mapping[str, int]) -> None:
        self.kube, self.namespace, self.quotas = kube, namespace, quotas
        self.violations: list[str] = []
        self.excess: dict[str, list[tuple[float, int, int]]] = defaultdict(list)
        """Per Job: (when, pods running, admitted size) of each sample with more running."""
        self.most_running: dict[str, int] = defaultdict(int)
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watchman")

    def __enter__(self) -> Watchman:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with KubeClient(self.kube.credentials) as own:
            while not self._stop.wait(0.2):
                try:
                    self._sample(own)
                except (ApiError, OSError):
                    continue  # a slow LIST on a loaded apiserver: sample again

    def _sample(self, kube: KubeClient) -> None:
        before = {j["metadata"]["name"]: j for j in kube.get(jobs_path(self.namespace))["items"]}
        pods = kube.get(f"/api/v1/namespaces/{self.namespace}/pods")["items"]
        after = {j["metadata"]["name"]: j for j in kube.get(jobs_path(self.namespace))["items"]}
        running: dict[str, int] = defaultdict(int)
        for pod in pods:
            meta = pod["metadata"]
            if pod.get("status", {}).get("phase") == "Running" and not meta.get(
                "deletionTimestamp"
            ):
                running[(meta.get("labels") or {}).get(GANG, "")] += 1
        self.samples += 1
        held: dict[str, int] = defaultdict(int)
        for name, job in after.items():
            gang = (job["spec"]["template"].get("metadata") or {}).get("labels", {}).get(GANG)
            self.most_running[name] = max(self.most_running[name], running.get(gang or name, 0))
            size = admitted_size(job)
            if size is None or finished(job):
                continue
            held[job["metadata"]["labels"].get(QUEUE, "")] += size * cpu_of(job)
            old = before.get(name)
            if old is not None and admitted(old) == admitted(job):
                count = running.get(gang or name, 0)
                if count > size:
                    self.excess[name].append((time.monotonic(), count, size))
        for queue, amount in held.items():
            quota = self.quotas.get(queue)
            if quota is not None and amount > quota:
                self.violations.append(f"queue {queue}: {amount}m cpu admitted > {quota}m")

    def check(self, allowed: Collection[str] = ()) -> None:
        """Every sample within quota, and no Job ran more pods than admitted (but the
        ``allowed`` ones: see `excess`)."""
        assert self.samples > 0, "the watchman took no sample to check"
        assert not self.violations, self.violations[:10]
        over = {
            name: [f"{count} pods running, admitted {size}" for _, count, size in seen[:5]]
            for name, seen in self.excess.items()
            if name not in allowed
        }
        assert not over, over


@contextmanager
def queues(kube: KubeClient, *specs: tuple[str, str]) -> Iterator[None]:
    """Queues (name, nominal cpu), deleted afterwards."""
    for name, cpu in specs:
        create_queue(kube, name, {"nominal": {"cpu": cpu}})
    try:
        yield
    finally:
        for name, _ in specs:
            delete_queue(kube, name)


def webhook_killed(muster: MusterProcess) -> None:
    """Kill -9 the webhook process, as tests/cluster/test_faults.py does, and return once it is
    gone: the apiserver's calls to it fail at once (refused connections) until `muster run`
    has started it again and it registered itself (seconds): creates are refused
    (failurePolicy Fail), updates pass (Ignore)."""
    pid = webhook_pid(muster)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), timeout=30, what="the webhook gone")


def wait_webhook_back(muster: MusterProcess) -> None:
    url = muster.webhook_metrics_url
    assert url is not None
    wait_for(lambda: is_ready(url, True), timeout=120, interval=0.5, what="the webhook back")


def job(name: str, queue: str | None, pods: int = 2, **kwargs: Any) -> dict[str, Any]:
    """A Job whose pods run until deleted (1 cpu each)."""
    kwargs.setdefault("indexed", True)
    return builders.job(name, queue, pods=pods, runtime=None, **kwargs)


def get(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    return kube.get(f"{jobs_path(namespace)}/{name}")


def wait_running(
    kube: KubeClient, namespace: str, name: str, pods: int, timeout: float = 90
) -> dict[str, Any]:
    """The Job admitted at `pods` and that many of its pods Running."""

    def probe() -> dict[str, Any] | None:
        try:
            current = get(kube, namespace, name)
        except ApiError as exc:
            if exc.status == 404:  # not made yet (a MiniCluster's Job)
                return None
            raise
        if admitted_size(current) != pods:
            return None
        listed = kube.get(
            f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": f"{GANG}={name}"}
        )["items"]
        up = [p for p in listed if p.get("status", {}).get("phase") == "Running"]
        return current if len(up) >= pods else None

    return wait_for(probe, timeout=timeout, what=f"{name} admitted and {pods} pods running")


def refused(kube: KubeClient, path: str, patch: Mapping[str, Any]) -> str:
    """Send `patch`; return the refusal's message (the test fails if it was stored)."""
    with pytest.raises(ApiError) as caught:
        kube.patch(path, patch)
    assert 400 <= caught.value.status < 500, caught.value
    return caught.value.message


def _has_event(kube: KubeClient, namespace: str, name: str, reason: str) -> bool:
    return reason in event_reasons(kube, namespace, name)


def event_messages(kube: KubeClient, namespace: str, name: str, reason: str) -> list[str]:
    return [
        e["message"]
        for e in kube.get(
            f"/api/v1/namespaces/{namespace}/events",
            {"fieldSelector": f"involvedObject.name={name},reason={reason}"},
        )["items"]
    ]


# --- Jobs -----------------------------------------------------------------------------------


def test_suspended_with_the_change_it_is_requeued_and_admitted_at_its_new_size(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    q = f"{namespace}-q"
    path = jobs_path(namespace)
    with queues(kube, (q, str(QUOTA_CPU))), Watchman(kube, namespace, {q: QUOTA_CPU * 1000}) as w:
        create_through_webhook(kube, path, job("grow", q))
        first = wait_running(kube, namespace, "grow", 2)
        kube.patch(f"{path}/grow", {"spec": {"suspend": True, "parallelism": 4, "completions": 4}})
        again = wait_running(kube, namespace, "grow", 4)
        assert admitted(again) != admitted(first)
        annotations = again["metadata"]["annotations"]
        assert annotations[EVICTED_REASON] == "Suspended"
        assert EVICTIONS not in annotations, "a suspension by its user is not an eviction"
        assert annotations[SUBMITTED] == first["metadata"]["annotations"][SUBMITTED]
        (message,) = wait_for(
            lambda: event_messages(kube, namespace, "grow", "Requeued"),
            timeout=30,
            what="a Requeued Event",
        )
        assert "suspended while admitted (at 2 pods)" in message
    w.check()


def test_the_queue_label_joins_a_suspended_job_and_leaves_a_waiting_one(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    q, full = f"{namespace}-q", f"{namespace}-full"
    path = jobs_path(namespace)
    with (
        queues(kube, (q, str(QUOTA_CPU)), (full, "1m")),
        Watchman(kube, namespace, {q: QUOTA_CPU * 1000}) as w,
    ):
        # A running Job outside muster joins only suspended, and one that ran cannot join.
        kube.create(path, job("outside", None, pods=1))
        wait_for(
            lambda: (get(kube, namespace, "outside").get("status") or {}).get("active"),
            timeout=60,
            what="the unmanaged Job running",
        )
        message = refused(kube, f"{path}/outside", {"metadata": {"labels": {QUEUE: q}}})
        assert f"label {QUEUE}: (unset) -> {q}: Job {namespace}/outside runs outside" in message
        message = refused(
            kube,
            f"{path}/outside",
            {"metadata": {"labels": {QUEUE: q}}, "spec": {"suspend": True}},
        )
        assert "has run (its status.startTime is set)" in message, message
        # A suspended Job that never ran joins as a new gang: stamped, held, admitted.
        kube.create(path, job("later", None, suspend=True))
        kube.patch(f"{path}/later", {"metadata": {"labels": {QUEUE: q}}})
        joined = get(kube, namespace, "later")
        assert SUBMITTED in joined["metadata"]["annotations"]
        assert joined["spec"]["template"]["metadata"]["labels"][GANG] == "later"
        wait_running(kube, namespace, "later", 2)
        # The label leaves a waiting Job (muster forgets it: it holds nothing), not a running one.
        create_through_webhook(kube, path, job("waiting", full))
        wait_for(
            lambda: (kube.get(f"/apis/muster.dev/v1alpha1/queues/{full}").get("status") or {}).get(
                "pending"
            ),
            timeout=30,
            what="the waiting Job counted pending",
        )
        kube.patch(f"{path}/waiting", {"metadata": {"labels": {QUEUE: None}}})
        wait_for(
            lambda: (
                (kube.get(f"/apis/muster.dev/v1alpha1/queues/{full}").get("status") or {}).get(
                    "pending"
                )
                == 0
            ),
            timeout=30,
            what="the Job that left no longer counted pending",
        )
        assert get(kube, namespace, "waiting")["spec"]["suspend"] is True
        message = refused(kube, f"{path}/later", {"metadata": {"labels": {QUEUE: None}}})
        assert f"label {QUEUE}: '{q}' -> (unset): Job {namespace}/later is admitted" in message
        # Where the namespace sends its unlabelled Jobs to a queue, none leaves muster.
        create_through_webhook(kube, path, job("kept", full))
        kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {QUEUE: full}}})
        message = wait_for(
            lambda: _refusal_or_none(kube, f"{path}/kept", {"metadata": {"labels": {QUEUE: None}}}),
            timeout=30,
            what="the webhook to see the namespace's default queue",
        )
        assert f"namespace {namespace} sends its unlabelled jobs to queue {full}" in message
    w.check()


def _refusal_or_none(kube: KubeClient, path: str, patch: Mapping[str, Any]) -> str | None:
    """The refusal of a dry run of `patch`, or None if it would be stored."""
    try:
        kube.request("PATCH", path, patch, content_type=MERGE_PATCH, params={"dryRun": "All"})
    except ApiError as exc:
        return exc.message
    return None


# --- other kinds ----------------------------------------------------------------------------


def test_a_miniclusters_size_and_its_jobs_size_keep_their_admission(
    kube: KubeClient, namespace: str, muster: MusterProcess, flux_operator: bool
) -> None:
    """An elastic MiniCluster (4, minSize 2) admitted at 2 into a queue of 2 cpus: muster's own
    resize of the MiniCluster passes the review (the real Flux Operator keeps its Job at
    spec.size), and neither the MiniCluster nor its Job can be grown back by hand while it runs;
    the pods the test sees running never exceed 2."""
    q = f"{namespace}-small"
    mc_path = f"/apis/flux-framework.org/v1alpha2/namespaces/{namespace}/miniclusters"
    minicluster = {
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": "flux", "labels": {QUEUE: q}},
        "spec": {
            "size": 4,
            "minSize": 2,
            "containers": [{"image": "lammps", "resources": {"requests": {"cpu": "1"}}}],
            "pod": {"tolerations": [builders.KWOK_TOLERATION]},
        },
    }
    maker = job_maker(kube, namespace, real=flux_operator).start()
    try:
        with queues(kube, (q, "2")), Watchman(kube, namespace, {q: 2000}) as w:
            time.sleep(1.0)  # the webhook learns queues from its watch
            create_through_webhook(kube, mc_path, minicluster)
            wait_running(kube, namespace, "flux", 2)
            resized = kube.get(f"{mc_path}/flux")
            if flux_operator:  # muster resized it (the stand-in never resizes the Job)
                assert resized["spec"]["size"] == 2
                assert resized["metadata"]["annotations"][RESIZED_FROM] == "4"
            size = resized["spec"]["size"]
            for grow in (
                {"spec": {"size": 8}},
                {"spec": {"size": 4}} if flux_operator else {"spec": {"size": 5}},
                {"spec": {"minSize": 1}},
            ):
                message = refused(kube, f"{mc_path}/flux", grow)
                assert message.startswith("admission webhook"), message
                assert FIELD.search(message.split(": ", 1)[1]), message
                assert "delete the MiniCluster and create it again" in message, message
            message = refused(kube, f"{mc_path}/flux", {"spec": {"size": 8}})
            assert f"spec.size: {size} -> 8" in message, message
            # What the operator would write when the size changed: refused at the Job too.
            message = refused(
                kube,
                f"{jobs_path(namespace)}/flux",
                {"spec": {"parallelism": 4, "completions": 4}},
            )
            assert "spec.parallelism: 2 -> 4" in message, message
            time.sleep(3)
            job_spec = get(kube, namespace, "flux")["spec"]
            assert (job_spec["parallelism"], job_spec["completions"]) == (2, 2)
        w.check()
        assert w.most_running["flux"] == 2, w.most_running
    finally:
        maker.stop()
    assert not maker.errors, maker.errors[:3]


JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{}/jobsets"


def running_gang_pods(kube: KubeClient, namespace: str, gang: str) -> int:
    listed = kube.get(f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": f"{GANG}={gang}"})[
        "items"
    ]
    return sum(
        1
        for p in listed
        if p.get("status", {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    )


@pytest.mark.usefixtures("jobset_controller")
def test_a_jobsets_replicated_jobs_keep_their_admission(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """A JobSet admitted by muster and run by the real JobSet controller: growing a replicated
    Job, removing its queue label and unsuspending a waiting one are refused naming the field,
    and the pods the test sees running never exceed its admission; suspended with the change,
    it is requeued and admitted again at its new size."""
    q = f"{namespace}-q"
    full = f"{namespace}-full"
    path = JOBSETS.format(namespace)

    def jobset(name: str, queue: str, replicas: int = 2) -> dict[str, Any]:
        template = builders.job("x", None, pods=2, runtime=None)["spec"]
        template.pop("suspend", None)
        return {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": name, "labels": {QUEUE: queue}},
            "spec": {
                "replicatedJobs": [
                    {"name": "w", "replicas": replicas, "template": {"spec": template}}
                ]
            },
        }

    with queues(kube, (q, str(QUOTA_CPU)), (full, "1m")):
        time.sleep(1.0)  # the webhook learns queues from its watch
        stored = create_through_webhook(kube, path, jobset("train", q))
        assert stored["spec"]["suspend"] is True and SUBMITTED in stored["metadata"]["annotations"]
        first = wait_for(
            lambda: j if admitted(j := kube.get(f"{path}/train")) else None,
            timeout=60,
            what="the JobSet admitted",
        )
        assert admitted_size(first) == 4
        wait_for(
            lambda: running_gang_pods(kube, namespace, "train") == 4,
            timeout=90,
            what="the JobSet's 4 pods running",
        )
        grown = {
            "spec": {"replicatedJobs": jobset("train", q, replicas=5)["spec"]["replicatedJobs"]}
        }
        message = refused(kube, f"{path}/train", grown)
        assert "spec.replicatedJobs[0].replicas: 2 -> 5" in message, message
        assert "JobSet " in message and "is admitted" in message
        message = refused(kube, f"{path}/train", {"metadata": {"labels": {QUEUE: None}}})
        assert f"label {QUEUE}: '{q}' -> (unset)" in message
        create_through_webhook(kube, path, jobset("waits", full))
        message = refused(kube, f"{path}/waits", {"spec": {"suspend": False}})
        assert f"spec.suspend: true -> false: JobSet {namespace}/waits waits in queue" in message
        most = 0
        for _ in range(10):
            most = max(most, running_gang_pods(kube, namespace, "train"))
            assert running_gang_pods(kube, namespace, "waits") == 0
            time.sleep(0.3)
        assert most == 4, most
        # Suspended with the change, it is the controller's to requeue, at its new size. The
        # JobSet controller lets a suspended JobSet's replicas change only through its own
        # webhook's rules: whichever answers, the admission muster holds never runs wider.
        try:
            kube.patch(f"{path}/train", {"spec": {"suspend": True, **grown["spec"]}})
        except ApiError as exc:
            assert exc.status in (400, 422) and "replicatedJobs" in exc.message, exc.message
            kube.patch(f"{path}/train", {"spec": {"suspend": True}})
            wanted = 4
        else:
            wanted = 10
        again = wait_for(
            lambda: (
                j
                if admitted(j := kube.get(f"{path}/train")) not in (None, admitted(first))
                else None
            ),
            timeout=90,
            what="the JobSet requeued and admitted again",
        )
        assert admitted_size(again) == wanted
        assert again["metadata"]["annotations"][EVICTED_REASON] == "Suspended"


# --- the webhook down -----------------------------------------------------------------------


def test_with_the_webhook_down_the_controller_catches_what_gets_past(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """Updates pass a webhook that is down (its process killed; failurePolicy Ignore): a
    growth of an admitted Job, an unsuspend of a waiting one, a queue label removed from an
    admitted one. The controller alone catches each: the grown Job is evicted as Outgrown and
    admitted again at its new size; the unsuspended one is suspended again; the one that left
    is suspended and put back as it was before its admission. The grown Job's pods beyond its
    admission are counted while they run (printed as one `GUARD {...}` line): that window is
    the price of the webhook being down."""
    q, full = f"{namespace}-q", f"{namespace}-full"
    path = jobs_path(namespace)
    with (
        queues(kube, (q, str(QUOTA_CPU)), (full, "1m")),
        Watchman(kube, namespace, {q: QUOTA_CPU * 1000}) as w,
    ):
        create_through_webhook(kube, path, job("grow", q))
        create_through_webhook(kube, path, job("leaver", q, pods=1))
        create_through_webhook(kube, path, job("sneaky", full))
        wait_running(kube, namespace, "grow", 2)
        wait_running(kube, namespace, "leaver", 1)
        webhook_killed(muster)
        killed = time.monotonic()
        try:
            kube.patch(f"{path}/grow", {"spec": {"parallelism": 6, "completions": 6}})
            kube.patch(f"{path}/sneaky", {"spec": {"suspend": False}})
            kube.patch(f"{path}/leaver", {"metadata": {"labels": {QUEUE: None}}})
        except ApiError as exc:
            pytest.fail(f"an update was reviewed: the webhook came back too soon: {exc}")
        sent = time.monotonic() - killed
        evicted = wait_for(
            lambda: j if (j := get(kube, namespace, "grow"))["spec"]["suspend"] else None,
            timeout=60,
            what="the grown Job suspended by the controller",
        )
        suspended_after = time.monotonic() - killed
        assert evicted["metadata"]["annotations"][EVICTED_REASON] == "Outgrown"
        assert evicted["spec"]["parallelism"] == 6, "requeued at its new size"
        wait_for(
            lambda: get(kube, namespace, "sneaky")["spec"]["suspend"],
            timeout=60,
            what="the unsuspended Job suspended again",
        )
        left = wait_for(
            lambda: (
                j
                if (j := get(kube, namespace, "leaver"))["spec"]["suspend"]
                and ADMITTED not in j["metadata"].get("annotations", {})
                and not j["spec"]["template"]["spec"].get("schedulingGates")
                else None
            ),
            timeout=60,
            what="the Job that left suspended and put back",
        )
        assert left["metadata"]["annotations"][EVICTED_REASON] == "LeftQueue"
        (message,) = wait_for(
            lambda: event_messages(kube, namespace, "grow", "Evicted"),
            timeout=30,
            what="the grown Job's Evicted Event",
        )
        assert "outgrew its admission: admitted at 2 pods, it asks for 6 pods now" in message
        for name, reason in (("sneaky", "NotAdmitted"), ("leaver", "LeftQueue")):
            wait_for(partial(_has_event, kube, namespace, name, reason), timeout=30, what=reason)
        # Planned again honestly: at its new size, after its eviction's backoff.
        wait_running(kube, namespace, "grow", 6, timeout=120)
        wait_webhook_back(muster)
    w.check(allowed={"grow"})
    seen = w.excess.get("grow", [])
    print(
        "GUARD "
        + json.dumps(
            {
                "updates_sent_s": round(sent, 2),
                "grown_job_suspended_s": round(suspended_after, 2),
                "samples_over_admission": len(seen),
                "most_pods_over_admission": max((c - size for _, c, size in seen), default=0),
                "seconds_over_admission": round(seen[-1][0] - seen[0][0], 2) if seen else 0.0,
                "watchman_samples": w.samples,
            }
        )
    )


@pytest.mark.usefixtures("jobset_controller")
def test_with_the_webhook_down_the_controller_catches_other_kinds_too(
    kube: KubeClient, namespace: str, muster: MusterProcess, flux_operator: bool
) -> None:
    """With the webhook killed: a running MiniCluster grown 2 -> 4 (within its spec.maxSize, the
    real Flux Operator then grows its Job; with the stand-in, the Job is grown as the operator
    would) is evicted as
    Outgrown and admitted again at 4; a waiting JobSet unsuspended by hand is suspended again;
    an admitted JobSet whose queue label is removed is suspended and leaves. (A running
    JobSet's replicated Jobs cannot grow at all: the JobSet controller's own webhook refuses
    it.)"""
    q, full = f"{namespace}-q", f"{namespace}-full"
    mc_path = f"/apis/flux-framework.org/v1alpha2/namespaces/{namespace}/miniclusters"
    js_path = JOBSETS.format(namespace)
    minicluster = {
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": "flux", "labels": {QUEUE: q}},
        "spec": {
            "size": 2,
            "maxSize": 4,  # the operator grows its Job up to this, and no further
            "containers": [{"image": "lammps", "resources": {"requests": {"cpu": "1"}}}],
            "pod": {"tolerations": [builders.KWOK_TOLERATION]},
        },
    }

    def a_jobset(name: str, queue: str) -> dict[str, Any]:
        template = builders.job("x", None, pods=1, runtime=None)["spec"]
        template.pop("suspend", None)
        return {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": name, "labels": {QUEUE: queue}},
            "spec": {
                "replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": template}}]
            },
        }

    maker = job_maker(kube, namespace, real=flux_operator).start()
    most_sneaky = 0
    try:
        with (
            queues(kube, (q, str(QUOTA_CPU)), (full, "1m")),
            Watchman(kube, namespace, {q: QUOTA_CPU * 1000}) as w,
        ):
            time.sleep(1.0)  # the webhook learns queues from its watch
            create_through_webhook(kube, mc_path, minicluster)
            create_through_webhook(kube, js_path, a_jobset("leaver", q))
            create_through_webhook(kube, js_path, a_jobset("sneaky", full))
            wait_running(kube, namespace, "flux", 2)
            wait_for(
                lambda: running_gang_pods(kube, namespace, "leaver") == 2,
                timeout=90,
                what="the admitted JobSet's pods running",
            )
            webhook_killed(muster)
            try:
                if flux_operator:
                    kube.patch(f"{mc_path}/flux", {"spec": {"size": 4}})
                else:
                    kube.patch(
                        f"{jobs_path(namespace)}/flux",
                        {"spec": {"parallelism": 4, "completions": 4}},
                    )
                kube.patch(f"{js_path}/sneaky", {"spec": {"suspend": False}})
                kube.patch(f"{js_path}/leaver", {"metadata": {"labels": {QUEUE: None}}})
            except ApiError as exc:
                pytest.fail(f"an update was reviewed: the webhook came back too soon: {exc}")
            evicted = wait_for(
                lambda: j if (j := get(kube, namespace, "flux"))["spec"]["suspend"] else None,
                timeout=60,
                what="the grown MiniCluster's Job suspended by the controller",
            )
            assert evicted["metadata"]["annotations"][EVICTED_REASON] == "Outgrown"

            def sneaky_suspended() -> bool:
                nonlocal most_sneaky
                most_sneaky = max(most_sneaky, running_gang_pods(kube, namespace, "sneaky"))
                return bool(kube.get(f"{js_path}/sneaky")["spec"].get("suspend"))

            wait_for(sneaky_suspended, timeout=60, what="the unsuspended JobSet suspended again")
            left = wait_for(
                lambda: (
                    j
                    if (j := kube.get(f"{js_path}/leaver"))["spec"].get("suspend")
                    and ADMITTED not in j["metadata"].get("annotations", {})
                    else None
                ),
                timeout=60,
                what="the JobSet that left suspended",
            )
            assert left["metadata"]["annotations"][EVICTED_REASON] == "LeftQueue"
            wait_for(
                lambda: (
                    running_gang_pods(kube, namespace, "leaver") == 0
                    and running_gang_pods(kube, namespace, "sneaky") == 0
                ),
                timeout=60,
                what="the JobSets' pods gone",
            )
            wait_running(kube, namespace, "flux", 4, timeout=120)
            wait_webhook_back(muster)
        w.check(allowed={"flux"})
    finally:
        maker.stop()
    assert not maker.errors, maker.errors[:3]
    print(
        "GUARD-KINDS "
        + json.dumps(
            {
                "minicluster_samples_over_admission": len(w.excess.get("flux", [])),
                "waiting_jobset_most_running": most_sneaky,
            }
        )
    )


# --- the sweep ----------------------------------------------------------------------------


def _updates() -> st.SearchStrategy[dict[str, Any]]:
    """Merge patches a user may send to an admitted Job: its size, its suspension, its queue,
    its gang fields, its pods' requests and node selector, in any mix."""
    container = st.sampled_from(["1", "4"]).map(
        lambda cpu: [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]
    )
    pod = st.fixed_dictionaries(
        {}, optional={"containers": container, "nodeSelector": st.just({"pool": "none"})}
    )
    spec = st.fixed_dictionaries(
        {},
        optional={
            "parallelism": st.integers(1, 5),
            "completions": st.integers(1, 5),
            "suspend": st.booleans(),
            "template": st.fixed_dictionaries({"spec": pod}),
        },
    )
    labels = st.fixed_dictionaries({}, optional={QUEUE: st.sampled_from([None, "other"])})
    annotations = st.fixed_dictionaries(
        {},
        optional={
            PRIORITY: st.sampled_from(["5", "x"]),
            MIN_MEMBERS: st.sampled_from(["1", "0"]),
            CLOG_TIMEOUT: st.sampled_from(["10m", "9" * 90 + "h"]),
        },
    )
    meta = st.fixed_dictionaries({}, optional={"labels": labels, "annotations": annotations})
    return st.fixed_dictionaries({}, optional={"spec": spec, "metadata": meta}).filter(bool)


@pytest.fixture(scope="module")
def sweep_state() -> dict[str, int]:
    return {"examples": 0, "refused": 0, "allowed": 0}


@settings(
    max_examples=24,
    derandomize=True,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking on a cluster: each try is seconds
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(patch=_updates())
@example(patch={"spec": {"suspend": True, "parallelism": 3, "completions": 3}})
@example(patch={"spec": {"suspend": True}, "metadata": {"labels": {QUEUE: "other"}}})
@example(patch={"spec": {"suspend": True}, "metadata": {"annotations": {PRIORITY: "5"}}})
@example(patch={"metadata": {"annotations": {CLOG_TIMEOUT: "10m"}}})
@example(patch={"spec": {"parallelism": 5, "completions": 5}})
def test_a_sweep_of_updates_never_runs_a_gang_past_its_admission(
    kube: KubeClient,
    namespace: str,
    muster: MusterProcess,
    sweep_state: dict[str, int],
    patch: dict[str, Any],
) -> None:
    """Each example: a fresh Job of 2 pods admitted in queue q (4 cpu), then one update. It is
    refused naming a field, or stored; either way, at every sample, no Job runs more pods than
    its admission and the queues hold no more than their quota; an update stored on a running
    Job leaves it as admitted, and the controller requeues one stored suspended."""
    sweep_state["examples"] += 1
    n = sweep_state["examples"]
    q, other = f"{namespace}-q", "other"
    path = jobs_path(namespace)
    if isinstance(patch.get("metadata", {}).get("labels", {}).get(QUEUE), str):
        patch["metadata"]["labels"][QUEUE] = f"{namespace}-other"
    quotas = {q: 4000, f"{namespace}-{other}": 4000}
    name = f"j{n}"
    with (
        queues(kube, (q, "4"), (f"{namespace}-{other}", "4")),
        Watchman(kube, namespace, quotas) as w,
    ):
        create_through_webhook(kube, path, job(name, q))
        wait_running(kube, namespace, name, 2)
        try:
            kube.patch(f"{path}/{name}", patch)
        except ApiError as exc:
            assert 400 <= exc.status < 500, exc
            assert FIELD.search(exc.message), f"the refusal names no field: {exc.message}"
            event("refused by muster" if "muster.dev" in exc.message else "refused by Kubernetes")
            sweep_state["refused"] += 1
            stored = get(kube, namespace, name)
            assert admitted_size(stored) == 2 and stored["spec"]["parallelism"] == 2
        else:
            event("stored, suspended" if patch.get("spec", {}).get("suspend") else "stored")
            sweep_state["allowed"] += 1
            # Settled: admitted as it asks (running), or waiting (requeued, or not fitting).
            wait_for(
                lambda: _settled(get(kube, namespace, name)),
                timeout=60,
                what=f"{name} settled after {patch}",
            )
        kube.request("DELETE", f"{path}/{name}", {"propagationPolicy": "Background"})
    w.check()


def _settled(job: Mapping[str, Any]) -> bool:
    size = admitted_size(job)
    if size is None:
        return bool(job["spec"].get("suspend"))
    parallelism = int(job["spec"].get("parallelism") or 1)
    completions = job["spec"].get("completions")
    asks = min(parallelism, int(completions)) if completions is not None else parallelism
    return not job["spec"].get("suspend") and asks <= size


class JobSetWatch(Watchman):
    """`Watchman` for a namespace's JobSets: a JobSet admitted the same way in both of its LISTs
    must not have more pods running than its admitted size, nor its queue more than its quota
    (every pod of these JobSets asks 1 cpu)."""

    def _sample(self, kube: KubeClient) -> None:
        path = JOBSETS.format(self.namespace)
        before = {j["metadata"]["name"]: j for j in kube.get(path)["items"]}
        pods = kube.get(f"/api/v1/namespaces/{self.namespace}/pods")["items"]
        after = {j["metadata"]["name"]: j for j in kube.get(path)["items"]}
        running: dict[str, int] = defaultdict(int)
        for pod in pods:
            meta = pod["metadata"]
            if pod.get("status", {}).get("phase") == "Running" and not meta.get(
                "deletionTimestamp"
            ):
                running[(meta.get("labels") or {}).get(GANG, "")] += 1
        self.samples += 1
        held: dict[str, int] = defaultdict(int)
        for name, js in after.items():
            self.most_running[name] = max(self.most_running[name], running.get(name, 0))
            size = admitted_size(js)
            if size is None:
                continue
            held[js["metadata"]["labels"].get(QUEUE, "")] += size * 1000
            old = before.get(name)
            same = old is not None and admitted(old) == admitted(js)
            if same and running.get(name, 0) > size:
                self.excess[name].append((time.monotonic(), running[name], size))
        for queue, amount in held.items():
            quota = self.quotas.get(queue)
            if quota is not None and amount > quota:
                self.violations.append(f"queue {queue}: {amount}m cpu admitted > {quota}m")


def _jobset_updates() -> st.SearchStrategy[dict[str, Any]]:
    """Merge patches a user may send to an admitted JobSet of one replicated Job (2 replicas of
    1 pod): its replicas and pods, suspension, queue, gang fields, requests, in any mix."""
    template = st.fixed_dictionaries(
        {},
        optional={
            "parallelism": st.integers(1, 3),
            "completions": st.integers(1, 3),
            "cpu": st.sampled_from(["1", "3"]),
        },
    )
    replicated = st.fixed_dictionaries({"replicas": st.integers(1, 4), "template": template})
    spec = st.fixed_dictionaries(
        {}, optional={"replicatedJobs": replicated, "suspend": st.booleans()}
    )
    labels = st.fixed_dictionaries({}, optional={QUEUE: st.sampled_from([None, "other"])})
    annotations = st.fixed_dictionaries(
        {},
        optional={
            PRIORITY: st.sampled_from(["5", "9" * 30]),
            CLOG_TIMEOUT: st.sampled_from(["10m", "9" * 90 + "h"]),
        },
    )
    meta = st.fixed_dictionaries({}, optional={"labels": labels, "annotations": annotations})
    return st.fixed_dictionaries({}, optional={"spec": spec, "metadata": meta}).filter(bool)


def _a_jobset(name: str, queue: str, replicas: int = 2, pods: int = 1, cpu: str = "1") -> Any:
    template = builders.job("x", None, pods=pods, runtime=None, cpu=cpu)["spec"]
    template.pop("suspend", None)
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": {QUEUE: queue}},
        "spec": {
            "replicatedJobs": [{"name": "w", "replicas": replicas, "template": {"spec": template}}]
        },
    }


@pytest.mark.usefixtures("jobset_controller")
@settings(
    max_examples=10,
    derandomize=True,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(patch=_jobset_updates())
@example(patch={"spec": {"replicatedJobs": {"replicas": 4, "template": {}}}})
@example(patch={"spec": {"suspend": True, "replicatedJobs": {"replicas": 3, "template": {}}}})
def test_a_sweep_of_jobset_updates_never_runs_a_gang_past_its_admission(
    kube: KubeClient,
    namespace: str,
    muster: MusterProcess,
    sweep_state: dict[str, int],
    patch: dict[str, Any],
) -> None:
    """Each example: a fresh JobSet of 2 pods admitted in queue q (4 cpu) and run by the real
    JobSet controller, then one update (the replicated Job spelled out as the JobSet holds
    it). It is refused naming a field (by muster, or by the JobSet controller's own webhook),
    or stored; at every sample no JobSet runs more pods than admitted and no queue holds more
    than its quota; a stored update settles admitted as it asks, or suspended."""
    sweep_state["examples"] += 1
    n = sweep_state["examples"]
    q = f"{namespace}-q"
    path = JOBSETS.format(namespace)
    body = dict(patch)
    if isinstance(patch.get("metadata", {}).get("labels", {}).get(QUEUE), str):
        body["metadata"]["labels"][QUEUE] = f"{namespace}-other"
    if "replicatedJobs" in patch.get("spec", {}):
        wanted = patch["spec"]["replicatedJobs"]
        t = wanted["template"]
        pods = t.get("parallelism", 1)
        spelled = _a_jobset("x", q, wanted["replicas"], pods, t.get("cpu", "1"))
        job_spec = spelled["spec"]["replicatedJobs"][0]["template"]["spec"]
        job_spec["completions"] = t.get("completions", pods)
        body["spec"] = {**patch["spec"], "replicatedJobs": spelled["spec"]["replicatedJobs"]}
    name = f"js{n}"
    quotas = {q: 4000, f"{namespace}-other": 4000}
    with (
        queues(kube, (q, "4"), (f"{namespace}-other", "4")),
        JobSetWatch(kube, namespace, quotas) as w,
    ):
        time.sleep(0.5)  # the webhook learns queues from its watch
        create_through_webhook(kube, path, _a_jobset(name, q))
        wait_for(
            lambda: (
                admitted(kube.get(f"{path}/{name}"))
                and running_gang_pods(kube, namespace, name) == 2
            ),
            timeout=90,
            what=f"{name} admitted and running",
        )
        try:
            kube.patch(f"{path}/{name}", body)
        except ApiError as exc:
            assert 400 <= exc.status < 500, exc
            assert FIELD.search(exc.message), f"the refusal names no field: {exc.message}"
            event("refused by muster" if "muster.dev" in exc.message else "refused by JobSet")
            sweep_state["refused"] += 1
            assert admitted_size(kube.get(f"{path}/{name}")) == 2
        else:
            event("stored")
            sweep_state["allowed"] += 1

            def settled() -> bool:
                js = kube.get(f"{path}/{name}")
                size = admitted_size(js)
                if size is None or js["spec"].get("suspend"):
                    return bool(js["spec"].get("suspend"))
                asks = sum(
                    r["replicas"]
                    * min(
                        r["template"]["spec"].get("parallelism", 1),
                        r["template"]["spec"].get("completions") or 10**6,
                    )
                    for r in js["spec"]["replicatedJobs"]
                )
                return bool(asks <= size)

            wait_for(settled, timeout=60, what=f"{name} settled after {body}")
        kube.request("DELETE", f"{path}/{name}", {"propagationPolicy": "Background"})
    w.check()
