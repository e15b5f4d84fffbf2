"""The webhook on the real control plane: what is stored, what is refused, what is left alone.

Every test runs twice: against the session's `muster run` (muster's lean endpoint) and against
a webhook-only `muster run --webhook-server kopf` (kopf's `@kopf.on.mutate` handlers), which
takes the MutatingWebhookConfiguration over for its tests and gives it back afterwards.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubeport.kubeapi import ApiError, KubeClient
from policies.submitted import parse_stamp
from simulator.controlplane.build import Binaries
from simulator.controlplane.minicluster import (
    MINICLUSTERS,
    job_maker,
    minicluster_crd,
)
from tests import builders
from tests.kube import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("webhook_server")]


def jobs_path(namespace: str) -> str:
    return f"/apis/batch/v1/namespaces/{namespace}/jobs"


@pytest.fixture(scope="module")
def queue(kube: KubeClient) -> str:
    # A queue with no room: the controller (running in the same `muster run`) never admits
    # these Jobs, so what the webhook stored stays visible.
    body = {
        "apiVersion": "muster.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": "gpu"},
        "spec": {"nominal": {"cpu": "1m"}},
    }
    try:
        kube.create("/apis/muster.dev/v1alpha1/queues", body)
    except ApiError as exc:
        if exc.status != 409:
            raise
    # The webhook learns queues from its watch; give it a moment to see this one.
    time.sleep(1.0)
    return "gpu"


def test_labelled_job_is_stored_suspended_with_stamps(
    kube: KubeClient, namespace: str, queue: str
) -> None:
    stored = kube.create(jobs_path(namespace), builders.job("train", queue, pods=4))
    assert stored["spec"]["suspend"] is True
    annotations = stored["metadata"]["annotations"]
    assert annotations["muster.dev/queue"] == queue
    parse_stamp(annotations["muster.dev/submitted"])  # in muster's format
    assert stored["spec"]["template"]["metadata"]["labels"]["muster.dev/gang"] == "train"
    time.sleep(1.0)
    pods = kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    assert pods == []


def test_unlabelled_job_in_unmanaged_namespace_is_untouched(
    kube: KubeClient, namespace: str
) -> None:
    stored = kube.create(jobs_path(namespace), builders.job("plain", pods=2))
    assert stored["spec"]["suspend"] is False
    assert "muster.dev/submitted" not in (stored["metadata"].get("annotations") or {})


def test_job_in_kube_system_is_untouched(kube: KubeClient, queue: str) -> None:
    name = f"muster-test-{int(time.time() * 1000)}"
    stored = kube.create(jobs_path("kube-system"), builders.job(name, queue, pods=4, runtime=None))
    try:
        assert stored["spec"]["suspend"] is False
        assert "muster.dev/submitted" not in (stored["metadata"].get("annotations") or {})
    finally:
        kube.request("DELETE", f"{jobs_path('kube-system')}/{name}")


def test_namespace_default_queue_manages_unlabelled_jobs(kube: KubeClient, queue: str) -> None:
    ns = f"t-default-queue-{int(time.time() * 1000)}"
    kube.create(
        "/api/v1/namespaces", {"metadata": {"name": ns, "labels": {"muster.dev/queue": queue}}}
    )
    try:
        body = builders.job("plain", pods=2)
        # The webhook learns the namespace's label from its watch: ask with dry runs (the
        # webhook has no side effects, so the apiserver calls it for them) until it has.
        wait_for(
            lambda: kube.request("POST", jobs_path(ns), body, params={"dryRun": "All"})["spec"][
                "suspend"
            ],
            timeout=30,
            what="the webhook to see the namespace's default queue",
        )
        stored = kube.create(jobs_path(ns), body)
        assert stored["spec"]["suspend"] is True
        assert stored["metadata"]["labels"]["muster.dev/queue"] == queue
    finally:
        kube.delete(f"/api/v1/namespaces/{ns}")


@pytest.mark.parametrize(
    ("annotations", "parallelism", "message"),
    [
        ({"muster.dev/min-members": "many"}, 4, "muster.dev/min-members: 'many' is not an integer"),
        ({"muster.dev/min-members": "0"}, 4, "0 is out of range; the gang has 4 members"),
        ({"muster.dev/min-members": "5"}, 4, "5 is out of range"),
        (
            {"muster.dev/clog-timeout": "soon"},
            4,
            "muster.dev/clog-timeout: 'soon' is not a duration",
        ),
        ({}, 0, "spec.parallelism: 0 gives the gang no members"),
        ({"muster.dev/priority": "urgent"}, 4, "muster.dev/priority: 'urgent' is not an integer"),
        ({"muster.dev/elastic-after": "later"}, 4, "muster.dev/elastic-after: 'later' is not"),
    ],
)
def test_bad_input_is_rejected_and_nothing_is_stored(
    kube: KubeClient,
    namespace: str,
    queue: str,
    annotations: dict[str, str],
    parallelism: int,
    message: str,
) -> None:
    body = builders.job("bad", queue, pods=parallelism)
    body["metadata"]["annotations"] = annotations
    with pytest.raises(ApiError) as error:
        kube.create(jobs_path(namespace), body)
    assert error.value.status == 400
    assert message in error.value.message
    assert kube.get(jobs_path(namespace))["items"] == []


def test_queue_limit_refuses_a_new_gang_with_429(kube: KubeClient, namespace: str) -> None:
    """Both servers refuse past `spec.limits` (the rest is in test_queue_limits.py)."""
    name = f"limited-{namespace}"[:63].rstrip("-")
    body = {
        "apiVersion": "muster.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"nominal": {"cpu": "0"}, "limits": {"maxPending": 1}},
    }
    kube.create("/apis/muster.dev/v1alpha1/queues", body)
    try:
        time.sleep(1.0)  # the webhook learns the queue and its limits from its watch
        kube.create(jobs_path(namespace), builders.job("first", name, pods=4))
        with pytest.raises(ApiError) as refused:
            kube.create(jobs_path(namespace), builders.job("second", name, pods=4))
        assert refused.value.status == 429
        assert f"queue {name} holds 1 pending gang, its limit" in refused.value.message
        assert [j["metadata"]["name"] for j in kube.get(jobs_path(namespace))["items"]] == ["first"]
    finally:
        kube.delete(f"/apis/muster.dev/v1alpha1/queues/{name}")


def test_unknown_queue_is_accepted_with_a_kubectl_warning(
    kubeconfig: Path, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    import yaml

    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(builders.job("lost", "no-such-queue", pods=4)))
    proc = subprocess.run(
        [str(Binaries.at().kubectl), "--kubeconfig", str(kubeconfig), "-n", namespace]
        + ["create", "-f", str(manifest)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert 'queue "no-such-queue" does not exist yet; the job stays suspended until it does' in (
        proc.stderr
    )
    assert kube.get(f"{jobs_path(namespace)}/lost")["spec"]["suspend"] is True


def missing(sent: Any, stored: Any, path: str) -> Iterator[str]:
    """What of `sent` is not in `stored` (extra fields in `stored`, such as defaults, are fine)."""
    if isinstance(sent, dict) and isinstance(stored, dict):
        for key, value in sent.items():
            if key not in stored:
                yield f"{path}.{key}"
            else:
                yield from missing(value, stored[key], f"{path}.{key}")
    elif isinstance(sent, list) and isinstance(stored, list) and len(sent) == len(stored):
        for i, (a, b) in enumerate(zip(sent, stored, strict=True)):
            yield from missing(a, b, f"{path}[{i}]")
    elif sent != stored:
        yield f"{path}: {sent!r} stored as {stored!r}"


def test_minicluster_job_is_created_suspended_with_gang_labels(
    kube: KubeClient, namespace: str, queue: str, flux_operator: bool
) -> None:
    minicluster: dict[str, Any] = {
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {
            "name": "lammps",
            "labels": {"muster.dev/queue": queue},
            "annotations": {"muster.dev/clog-timeout": "90s"},
        },
        "spec": {
            "size": 8,
            "minSize": 6,
            "maxSize": 10,
            "deadlineSeconds": 3600,
            "containers": [{"image": "lammps", "resources": {"requests": {"cpu": "1"}}}],
            "pod": {
                "labels": {"team": "physics"},
                "annotations": {"note": "lammps"},
                "nodeSelector": {"pool": "cpu"},
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
    }
    path = f"/apis/flux-framework.org/v1alpha2/namespaces/{namespace}/miniclusters"
    stored_mc = kube.create(path, minicluster)
    assert stored_mc["spec"]["jobLabels"] == {
        "muster.dev/queue": queue,
        "muster.dev/min-members": "6",
        "muster.dev/clog-timeout": "90s",
    }
    # Every field sent is kept (the installed CRD, the Flux Operator's where ../shared/ has it,
    # prunes what its schema lacks and adds its defaults).
    assert list(missing(minicluster["spec"], stored_mc["spec"], "spec")) == []
    if not minicluster_crd().stand_in:
        # The Flux Operator's schema was applied: its defaults are in.
        assert stored_mc["spec"]["containers"][0]["pullAlways"] is False
        assert stored_mc["spec"]["tasks"] == 1
    mc_stamp = stored_mc["metadata"]["annotations"]["muster.dev/submitted"]
    reconciler = job_maker(kube, namespace, real=flux_operator).start()
    try:
        job = wait_for(
            lambda: next(iter(kube.get(jobs_path(namespace))["items"]), None),
            timeout=30,
            what="the MiniCluster's Job",
        )
    finally:
        reconciler.stop()
    assert job["metadata"]["name"] == "lammps"
    assert job["spec"]["suspend"] is True
    assert job["spec"]["parallelism"] == 8 and job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["activeDeadlineSeconds"] == 3600
    template = job["spec"]["template"]
    assert template["metadata"]["labels"]["team"] == "physics"
    assert template["metadata"]["annotations"]["note"] == "lammps"
    assert template["spec"]["nodeSelector"] == {"pool": "cpu"}
    assert template["spec"]["tolerations"] == minicluster["spec"]["pod"]["tolerations"]
    assert job["metadata"]["labels"]["muster.dev/min-members"] == "6"
    # The Job is where the controller reads gang fields, the MiniCluster's clog timeout too.
    assert job["metadata"]["labels"]["muster.dev/clog-timeout"] == "90s"
    assert job["metadata"]["annotations"]["muster.dev/gang-kind"] == "MiniCluster"
    assert job["spec"]["template"]["metadata"]["labels"]["muster.dev/gang"] == "lammps"
    # The gang keeps the MiniCluster's place in line when the webhook had indexed it already.
    assert job["metadata"]["annotations"]["muster.dev/submitted"] >= mc_stamp
    assert kube.get(MINICLUSTERS)["items"]


def test_bad_minicluster_is_rejected(kube: KubeClient, namespace: str, queue: str) -> None:
    body = {
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": "bad", "labels": {"muster.dev/queue": queue}},
        "spec": {"size": 4, "minSize": 9, "containers": [{"image": "lammps"}]},
    }
    path = f"/apis/flux-framework.org/v1alpha2/namespaces/{namespace}/miniclusters"
    with pytest.raises(ApiError) as error:
        kube.create(path, body)
    assert error.value.status == 400
    assert "spec.minSize: 9 is out of range" in error.value.message
    assert kube.get(path)["items"] == []


def test_concurrent_creates_get_unique_stamps_in_arrival_order(
    kube: KubeClient, namespace: str, queue: str
) -> None:
    """>= 200 creates from 8 threads: stamps are unique and respect real-time order."""
    threads, per_thread = 8, 25
    records: list[tuple[float, float, str]] = []
    lock = threading.Lock()

    def submit(t: int) -> None:
        for i in range(per_thread):
            start = time.monotonic()
            stored = kube.create(jobs_path(namespace), builders.job(f"c-{t}-{i}", queue, pods=4))
            end = time.monotonic()
            with lock:
                records.append(
                    (start, end, stored["metadata"]["annotations"]["muster.dev/submitted"])
                )

    workers = [threading.Thread(target=submit, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stamps = [r[2] for r in records]
    assert len(records) == threads * per_thread
    assert len(set(stamps)) == len(stamps)
    # A create that finished before another started reached the webhook first: its stamp is
    # smaller. (Overlapping creates may be stamped in either order.)
    by_end = sorted(records, key=lambda r: r[1])
    for start, _, stamp in records:
        earlier = [r for r in by_end if r[1] < start]
        if earlier:
            assert max(r[2] for r in earlier) < stamp
    parsed = sorted(parse_stamp(s) for s in stamps)
    assert len({(p.time, p.seq) for p in parsed}) == len(parsed)
