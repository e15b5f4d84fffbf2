"""`muster queues`, `muster status` and `muster explain` against the real control plane, read both
from the running controller's status service and from the API with only a kubeconfig; and the
documented cluster commands that no other test runs (`muster cluster env`, `muster bench admit`,
`muster bench pipeline`, `muster bench status`).

The two sources must agree: the CLI's API reading builds the controller's cache and runs its
planner, so for a waiting gang it must print the reason the controller itself recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kubeport.kubeapi import ApiError, KubeClient
from simulator.controlplane.build import Binaries
from tests import builders
from tests.conftest import REPO, MusterProcess
from tests.controller_helpers import (
    admitted,
    create_queue,
    delete_queue,
    http_json,
    jobs_path,
    pending_reason,
)
from tests.kube import wait_for

pytestmark = [pytest.mark.cluster]


def muster_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The `muster` command as users run it: a fresh process, its exit code and output."""
    full_env = {k: v for k, v in os.environ.items() if k != "MUSTER_STATUS_URL"}
    return subprocess.run(
        [sys.executable, "-m", "muster.cli", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**full_env, **(env or {})},
    )


@dataclass
class Scene:
    """Queue `queue` (4 cpu) is full with `holder`; `second` (2 pods) and `third` wait for it."""

    namespace: str
    queue: str
    status_url: str
    kubeconfig: Path

    def service(self, name: str) -> dict[str, Any]:
        return dict(http_json(f"{self.status_url}/v1/gangs/{self.namespace}/{name}"))


@pytest.fixture
def scene(
    kube: KubeClient, namespace: str, muster: MusterProcess, kubeconfig: Path
) -> Iterator[Scene]:
    q = f"{namespace}-q"
    create_queue(kube, q, {"nominal": {"cpu": "4"}})
    try:
        kube.create(jobs_path(namespace), builders.job("holder", q, pods=4, runtime="600s"))
        wait_for(
            lambda: admitted(kube.get(f"{jobs_path(namespace)}/holder")),
            timeout=60,
            what="the holder gang to be admitted",
        )
        kube.create(jobs_path(namespace), builders.job("second", q, pods=2, runtime="2s"))
        kube.create(jobs_path(namespace), builders.job("third", q, pods=1, runtime="2s"))
        found = Scene(namespace, q, muster.status_url, kubeconfig)
        for name in ("second", "third"):
            wait_for(
                lambda name=name: pending_reason(  # type: ignore[misc]
                    f"{muster.status_url}/v1/gangs/{namespace}/{name}"
                ),
                timeout=30,
                what=f"the controller's reason for {name}",
            )
        yield found
    finally:
        delete_queue(kube, q)


def test_explain_prints_the_planners_reason(scene: Scene) -> None:
    gang = f"{scene.namespace}/second"
    recorded = scene.service("second")["reason"]
    assert recorded["code"] == "QuotaExhausted", recorded

    # From a laptop: only the kubeconfig; the CLI plans as the controller does.
    done = muster_cli("explain", gang, "--kubeconfig", str(scene.kubeconfig))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"{gang} waits (position 1 in queue {scene.queue}): {recorded['message']}"
    assert "reason: QuotaExhausted" in lines
    assert any(f"held by {scene.namespace}/holder (4 cpu)" in line for line in lines)
    assert lines[-1].startswith("(source: the API, read with kubeconfig ")

    as_json = muster_cli(
        "explain",
        "second",
        "-n",
        scene.namespace,
        "--kubeconfig",
        str(scene.kubeconfig),
        "-o",
        "json",
    )
    assert as_json.returncode == 0, as_json.stderr
    body = json.loads(as_json.stdout)
    assert body["reason"] == recorded
    assert body["source"]["from"] == "api"

    # From the status service, named by the environment as a pod would.
    served = muster_cli("explain", gang, "-o", "json", env={"MUSTER_STATUS_URL": scene.status_url})
    assert served.returncode == 0, served.stderr
    body = json.loads(served.stdout)
    assert body["reason"] == recorded
    assert body["source"] == {"from": "statusService", "where": scene.status_url}


def test_status_shows_pending_and_position(scene: Scene) -> None:
    gang = f"{scene.namespace}/third"
    done = muster_cli("status", gang, "--kubeconfig", str(scene.kubeconfig), "-o", "json")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    service = scene.service("third")
    assert body["state"] == service["state"] == "Pending"
    assert body["position"] == service["position"] == 2
    assert body["reason"] == service["reason"]

    table = muster_cli("status", gang, "--status-url", scene.status_url)
    assert table.returncode == 0, table.stderr
    fields = dict(line.split(":", 1) for line in table.stdout.splitlines())
    assert fields["state"].strip() == "Pending"
    assert fields["position"].strip() == f"2 in queue {scene.queue}"

    holder = muster_cli(
        "status", f"{scene.namespace}/holder", "--kubeconfig", str(scene.kubeconfig)
    )
    assert holder.returncode == 0, holder.stderr
    assert "admitted:" in holder.stdout and "at 4 pods" in holder.stdout


def test_queues_shows_usage_of_an_admitted_gang(scene: Scene) -> None:
    rows = {}
    for source in (
        ("--kubeconfig", str(scene.kubeconfig)),
        ("--status-url", scene.status_url),
    ):
        done = muster_cli("queues", *source, "-o", "json")
        assert done.returncode == 0, done.stderr
        row = next(q for q in json.loads(done.stdout)["queues"] if q["name"] == scene.queue)
        rows[source[0]] = row
        assert row["usage"] == {"cpu": "4"} and row["nominal"] == {"cpu": "4"}
        assert (row["admitted"], row["pending"]) == (1, 2)
    assert rows["--kubeconfig"]["share"] == rows["--status-url"]["share"]

    table = muster_cli("queues", "--kubeconfig", str(scene.kubeconfig))
    assert table.returncode == 0, table.stderr
    line = next(x for x in table.stdout.splitlines() if x.startswith(scene.queue + " "))
    assert line.split()[1:4] == ["-", "2", "1"] and "cpu 4/4" in line


def test_missing_gangs_and_unmanaged_jobs_are_one_line_errors(
    kube: KubeClient, namespace: str, muster: MusterProcess, kubeconfig: Path
) -> None:
    done = muster_cli("explain", f"{namespace}/nothing", "--kubeconfig", str(kubeconfig))
    assert done.returncode == 1
    assert done.stderr == (
        f"muster explain: gang {namespace}/nothing not found: no Job nothing in namespace "
        f"{namespace}; list muster's gangs there with `kubectl get jobs -n {namespace} -l "
        "muster.dev/queue`\n"
    )
    # A Job without the queue label is not muster's: say so, and why.
    kube.create(jobs_path(namespace), builders.job("plain", pods=1, runtime="1s"))
    done = muster_cli("status", f"{namespace}/plain", "--kubeconfig", str(kubeconfig))
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "has no muster.dev/queue label" in done.stderr

    served = muster_cli("status", f"{namespace}/nothing", "--status-url", muster.status_url)
    assert served.returncode == 1
    assert served.stderr.startswith(f"muster status: gang {namespace}/nothing not found")


def test_read_access_is_enough_and_missing_access_is_named(
    kube: KubeClient, namespace: str, muster: MusterProcess, kubeconfig: Path, tmp_path: Path
) -> None:
    """The CLI only LISTs and GETs: a service account that may list and get what it reads can
    run it; one that may not list Queues gets a one-line error that says what is missing and
    which ClusterRole in manifests/ grants it, and the command it prints makes it work."""
    group = "rbac.authorization.k8s.io"
    rbac = f"/apis/{group}/v1"
    name = f"{namespace}-viewer"
    granted: str | None = None
    created_role = False
    rules = [
        {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list", "get"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list", "get"]},
        # Every gang kind muster admits is read; a JobSet API not served is skipped.
        {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["list", "get"]},
        {"apiGroups": ["muster.dev"], "resources": ["queues"], "verbs": ["list", "get"]},
        # Pod groups' records: what muster decided of each (a pod group's admission).
        {"apiGroups": ["muster.dev"], "resources": ["gangrecords"], "verbs": ["list", "get"]},
    ]
    kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}})
    kube.create(f"{rbac}/clusterroles", {"metadata": {"name": name}, "rules": rules})
    kube.create(
        f"{rbac}/clusterrolebindings",
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )
    try:
        token = kube.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )["status"]["token"]
        viewer = tmp_path / "viewer.kubeconfig"
        viewer.write_text(_with_token(kubeconfig, token))
        # RBAC reaches the authorizer through an informer: the new binding may lag a moment.
        done = wait_for(
            lambda: (
                d
                if (d := muster_cli("queues", "--kubeconfig", str(viewer), "-o", "json")).returncode
                == 0
                else None
            ),
            timeout=30,
            what="the viewer's ClusterRole to take effect",
        )

        kube.patch(f"{rbac}/clusterroles/{name}", {"rules": rules[:3]})
        done = wait_for(
            lambda: (
                d if (d := muster_cli("queues", "--kubeconfig", str(viewer))).returncode else None
            ),
            timeout=30,
            what="the narrowed role to take effect",
        )
        assert done.returncode == 1 and done.stderr.count("\n") == 1
        said = done.stderr.strip()
        assert said.startswith(
            f'muster queues: forbidden: user "system:serviceaccount:{namespace}:{name}" may not '
            "list queues.muster.dev cluster-wide (HTTP 403 on GET /apis/muster.dev/v1alpha1/queues"
        ), said
        assert (
            '); the ClusterRole "muster" in manifests/base/rbac.yaml grants it: kubectl create '
            "clusterrolebinding "
        ) in said

        # What it says to do works: bind the ClusterRole from manifests/, as told.
        if not _exists(kube, f"{rbac}/clusterroles/muster"):
            kube.create(f"{rbac}/clusterroles", _manifest_cluster_role())
            created_role = True
        command = said.rsplit(" grants it: ", 1)[1].split()
        assert command[:3] == ["kubectl", "create", "clusterrolebinding"]
        granted = command[3]
        bound = subprocess.run(
            [str(Binaries.at().kubectl), "--kubeconfig", str(kubeconfig), *command[1:]],
            capture_output=True,
            text=True,
            check=False,
        )
        assert bound.returncode == 0, bound.stderr
        wait_for(
            lambda: muster_cli("queues", "--kubeconfig", str(viewer)).returncode == 0,
            timeout=30,
            what="the binding muster queues suggested to take effect",
        )
    finally:
        kube.delete(f"{rbac}/clusterrolebindings/{name}")
        kube.delete(f"{rbac}/clusterroles/{name}")
        if granted:
            kube.delete(f"{rbac}/clusterrolebindings/{granted}")
        if created_role:
            kube.delete(f"{rbac}/clusterroles/muster")


def _exists(kube: KubeClient, path: str) -> bool:
    try:
        kube.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _manifest_cluster_role() -> dict[str, Any]:
    import yaml

    docs = yaml.safe_load_all((REPO / "manifests/base/rbac.yaml").read_text())
    return dict(next(d for d in docs if d["kind"] == "ClusterRole"))


def _with_token(kubeconfig: Path, token: str) -> str:
    """The kubeconfig's cluster and context, with a bearer token instead of its certificate."""
    import yaml

    doc = yaml.safe_load(kubeconfig.read_text())
    for entry in doc["users"]:
        entry["user"] = {"token": token}
    return str(yaml.safe_dump(doc))


def test_cluster_env_prints_the_kubeconfig(kubeconfig: Path) -> None:
    from simulator.controlplane.cluster import LocalCluster

    name = kubeconfig.parent.name
    if LocalCluster(name=name).kubeconfig != kubeconfig:
        pytest.skip("MUSTER_KUBECONFIG names a cluster `muster cluster up` did not start")
    done = muster_cli("cluster", "env", "--name", name)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"export KUBECONFIG={kubeconfig}\n"
    gone = muster_cli("cluster", "env", "--name", f"not-running-{os.getpid()}")
    assert gone.returncode == 1
    assert "is not running: start it with `muster cluster up`" in gone.stderr


def test_documented_bench_admit_runs_small(tmp_path: Path) -> None:
    # On a control plane of its own: `muster bench admit` runs `muster run --local`, which
    # registers (and on exit removes) the one webhook configuration the session's muster uses.
    done = muster_cli(
        "bench", "admit", "--jobs", "20", "--nodes", "4", "--patches", "100",
        "--concurrency", "4", "--submitters", "4", "--rss-pending", "5",
        "--name", f"cli-bench-{os.getpid()}", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["jobs"] == figures["admitted"] == 20
    assert figures["gangs_per_s"] > 0 and figures["raw_patch_per_s"] > 0
    # The controller's API calls per admitted gang, from its metrics: at least its admission.
    assert figures["api_per_gang"]["writes:admit"] >= 1
    assert figures["api_per_gang"]["requests"] >= figures["api_per_gang"]["writes"] >= 1
    # Step 6 (issue 17 item 6): RSS with the pending Jobs, in the burst's controller and in a
    # fresh one started over them.
    assert figures["pending"] == 5
    assert figures["controller_rss_mb_at_pending"] > 0
    assert figures["controller_rss_mb_at_pending_fresh"] > 0


def test_documented_bench_pipeline_runs_small() -> None:
    # On a control plane of its own, as bench admit: side (a) needs no webhook configuration,
    # and the session's muster has one registered.
    done = muster_cli(
        "bench", "pipeline", "--jobs", "20", "--nodes", "10", "--rounds", "2",
        "--runtime", "1-2", "--name", f"cli-pipeline-{os.getpid()}", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout[-2000:]
    figures = json.loads(lines[0])
    assert figures["jobs"] == 20 and 20 <= figures["pods"] <= 160
    assert [(r["round"], r["side"]) for r in figures["rounds"]] == [
        (1, "a"), (1, "b"), (2, "a"), (2, "b"),
    ]  # fmt: skip
    for r in figures["rounds"]:
        assert r["completed"] == 20, r
        assert r["create_to_running_p50_s"] <= r["create_to_running_p99_s"]
    for side in ("a", "b"):
        assert figures[side]["jobs_per_s"] > 0
        assert figures[side]["create_to_running_p99_s"] > 0
        assert figures[side]["cpu_s"]["kube-apiserver"] > 0
    # muster ran in (b) only, and admitted every Job there.
    assert "muster" in figures["b"]["cpu_s"] and "muster" not in figures["a"]["cpu_s"]
    assert all(r["create_to_admitted_p99_s"] > 0 for r in figures["rounds"] if r["side"] == "b")
    # ... with one admission per Job, and its other API calls counted per Job.
    assert figures["b"]["muster_api_per_job"]["writes:admit"] >= 1.0
    assert figures["b"]["muster_api_per_job"]["requests"] >= 1.0
    # The unmeasured warm-up pair (the burst's first Jobs: all 20 here) is reported apart.
    assert [(r["round"], r["side"], r["completed"]) for r in figures["warmup"]] == [
        (0, "a", 20), (0, "b", 20),
    ]  # fmt: skip
    for key in ("ratio", "p99_vs_a", "goal_met", "load_avg_1m_start"):
        assert key in figures, key


def test_documented_bench_status_runs_small() -> None:
    # On a control plane of its own: the bench runs a controller, which would admit the
    # session's Jobs too. With authentication, the larger path (tokens minted, sent, reviewed).
    done = muster_cli(
        "bench", "status", "--pollers", "5", "--gangs", "20", "--changes", "2",
        "--window", "3", "--ramp", "0.5", "--answers", "20", "--nodes", "2",
        "--status-auth", "kubernetes", "--tokens", "3",
        "--cluster-name", f"stat-cli-{os.getpid()}", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout[-2000:]
    figures = json.loads(lines[0])
    assert (figures["pollers"], figures["gangs"], figures["tokens"]) == (5, 20, 3)
    assert figures["status_auth"] == "kubernetes"
    for key in (
        "first_answer_p50_ms", "first_answer_p99_ms", "answer_p50_ms", "answer_p99_ms",
        "wakeup_p50_ms", "wakeup_p99_ms", "admit_wakeup_p50_ms", "admit_wakeup_p99_ms",
        "apiserver_requests_idle", "apiserver_requests_polling", "apiserver_requests_added",
        "controller_cpu_s", "load_avg_start", "load_avg_end",
    ):  # fmt: skip
        assert figures[key] is not None, key
    assert figures["answers"] == 20
    # Every change woke its poller: two admissions and two deletions.
    assert (figures["wakeups"], figures["admit_wakeups"], figures["wakeups_missed"]) == (2, 2, 0)
    assert figures["poll_errors"] == {}
    # The pollers' tokens not seen before the window were reviewed in it.
    assert figures["apiserver_requests_added_by"].get("POST tokenreviews", 0) >= 1


def test_documented_bench_apiserver_prints_patch_rates_per_concurrency(kubeconfig: Path) -> None:
    done = muster_cli(
        "bench", "apiserver", "--kubeconfig", str(kubeconfig),
        "--jobs", "8", "--patches", "60", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(figures["patch_per_s"]) == {"1", "8", "32"}
    assert all(rate > 0 for rate in figures["patch_per_s"].values())


def test_documented_bench_webhook_prints_latency_with_and_without(
    kube: KubeClient, kubeconfig: Path, muster: MusterProcess
) -> None:
    """The bench runs its own `muster run --local`, which takes the webhook configuration over
    and removes it at the end: the session's configuration is put back afterwards."""
    from webhook.configuration import NAME
    from webhook.startup import CONFIG_PATH, register_configuration

    saved = kube.get(f"{CONFIG_PATH}/{NAME}")
    try:
        done = muster_cli(
            "bench", "webhook", "--kubeconfig", str(kubeconfig),
            "--jobs", "40", "--concurrency", "4", "--rounds", "2", "--json",
        )  # fmt: skip
    finally:
        meta = {"name": NAME, "labels": saved["metadata"].get("labels") or {}}
        register_configuration(kube, {**saved, "metadata": meta})
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    for key in ("p50_ms_with", "p99_ms_with", "p50_ms_without", "p99_ms_without"):
        assert figures[key] > 0, key
    overhead = figures["p99_ms_with"] - figures["p99_ms_without"]
    assert figures["p99_overhead_ms"] == pytest.approx(overhead, abs=0.011)
    assert figures["jobs_per_side"] == 40
    # Every create of the rounds with the webhook was a review: the 40 measured, and probes.
    assert figures["reviews"] >= 40
    assert figures["webhook_cpu_ms_per_review"] == pytest.approx(
        figures["webhook_cpu_s_with"] * 1000 / figures["reviews"], rel=0.05, abs=0.01
    )
