"""Tenancy of the status service on the real control plane (issue #15): `muster run
--status-auth kubernetes` answers only bearer tokens the apiserver accepts (TokenReview), shows a
caller only gangs of namespaces where it may get Jobs (SubjectAccessReview), and never names
another namespace's objects, even when the caller's gang waits behind one.

Namespace A's gang `small` waits in a StrictFIFO queue behind namespace B's `big`, which waits
for quota held by B's `hog`: the planner's reason names B/big. A ServiceAccount of A that may get
Jobs in A only reads every endpoint, and no name from B appears in any answer."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubeport.kubeapi import ApiError, KubeClient
from tests import builders
from tests.cluster.test_cli import muster_cli
from tests.cluster.test_recovery import documented_client
from tests.conftest import MusterProcess, start_muster
from tests.controller_helpers import admitted, create_queue, delete_queue, jobs_path
from tests.kube import wait_for

pytestmark = [pytest.mark.cluster]

RBAC = "/apis/rbac.authorization.k8s.io/v1"


def get(url: str, token: str | None) -> tuple[int, Any, str]:
    """(HTTP status, decoded JSON or None, raw text) of a GET sent with `token`, if any."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
            text = r.read().decode()
            status = int(r.status)
    except urllib.error.HTTPError as exc:
        text, status = exc.read().decode(), exc.code
    try:
        return status, json.loads(text), text
    except ValueError:
        return status, None, text


def service_account(kube: KubeClient, namespace: str, name: str) -> str:
    """A ServiceAccount and a token of it."""
    kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}})
    return token(kube, namespace, name)


def token(kube: KubeClient, namespace: str, name: str) -> str:
    """A new token of a ServiceAccount (TokenRequest API)."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest"}
    answer = kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        {**request, "spec": {"expirationSeconds": 3600}},
    )
    return str(answer["status"]["token"])


def token_kubeconfig(admin: Path, token: str) -> str:
    """A kubeconfig for the admin's cluster whose user is `token`."""
    config = yaml.safe_load(admin.read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c for c in config["clusters"] if c["name"] == context["context"]["cluster"])
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [cluster],
            "users": [{"name": "reader", "user": {"token": token}}],
            "contexts": [
                {"name": "reader", "context": {"cluster": cluster["name"], "user": "reader"}}
            ],
            "current-context": "reader",
        }
    )


def subject(namespace: str, name: str) -> list[dict[str, str]]:
    return [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]


def role_ref(kind: str, name: str) -> dict[str, str]:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}


@pytest.fixture
def two_tenants(kube: KubeClient) -> Iterator[tuple[str, str]]:
    stamp = f"{os.getpid() % 10000}-{int(time.time()) % 100000}"
    a, b = f"t-auth-a-{stamp}", f"t-auth-b-{stamp}"
    for name in (a, b):
        kube.create("/api/v1/namespaces", {"metadata": {"name": name}})
    try:
        yield a, b
    finally:
        for name in (a, b):
            with contextlib.suppress(ApiError):
                kube.delete(f"/api/v1/namespaces/{name}")


@pytest.fixture
def secured(muster: MusterProcess, kubeconfig: Path) -> Iterator[MusterProcess]:
    """The session's muster replaced, for one test, by one with --status-auth kubernetes (one
    muster per cluster: they share the webhook configuration)."""
    muster.stop()
    running = start_muster(kubeconfig, "--status-auth", "kubernetes")
    try:
        yield running
    finally:
        running.stop()
        muster.restart(signal.SIGTERM)


def metric(text: str, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    )


def test_a_tenant_sees_only_its_own_namespace(
    kube: KubeClient,
    two_tenants: tuple[str, str],
    secured: MusterProcess,
    tmp_path: Path,
    kubeconfig: Path,
) -> None:
    a, b = two_tenants
    reader = service_account(kube, a, "reader")
    scraper = service_account(kube, a, "scraper")
    kube.create(
        f"{RBAC}/namespaces/{a}/roles",
        {
            "metadata": {"name": "job-reader"},
            "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]}],
        },
    )
    kube.create(
        f"{RBAC}/namespaces/{a}/rolebindings",
        {
            "metadata": {"name": "reader"},
            "roleRef": role_ref("Role", "job-reader"),
            "subjects": subject(a, "reader"),
        },
    )
    scrape = f"{a}-scrape"
    kube.create(
        f"{RBAC}/clusterroles",
        {
            "metadata": {"name": scrape},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        },
    )
    kube.create(
        f"{RBAC}/clusterrolebindings",
        {
            "metadata": {"name": scrape},
            "roleRef": role_ref("ClusterRole", scrape),
            "subjects": subject(a, "scraper"),
        },
    )
    fifo, quick = f"{a}-fifo", f"{a}-quick"
    create_queue(kube, fifo, {"nominal": {"cpu": "8"}, "strategy": "StrictFIFO"})
    create_queue(kube, quick, {"nominal": {"cpu": "4"}})
    try:
        # B's hog holds 4 of the 8 cpu; B's big (6 cpu) waits for quota at the head of the
        # StrictFIFO queue; A's small (1 cpu) would fit but waits behind big.
        kube.create(jobs_path(b), builders.job("hog", fifo, pods=2, cpu="2", runtime="600s"))
        wait_for(
            lambda: admitted(kube.get(f"{jobs_path(b)}/hog")), timeout=60, what="B's hog admitted"
        )
        kube.create(jobs_path(b), builders.job("big", fifo, pods=2, cpu="3", runtime="2s"))
        kube.create(jobs_path(b), builders.job("done-b", quick, pods=1, runtime="1s"))
        kube.create(jobs_path(a), builders.job("done-a", quick, pods=1, runtime="1s"))
        kube.create(jobs_path(a), builders.job("small", fifo, pods=1, runtime="2s"))
        status = secured.status_url

        def blocked() -> dict[str, Any] | None:
            code, body, _ = get(f"{status}/v1/gangs/{a}/small", reader)
            reason = (body or {}).get("reason") or {} if code == 200 else {}
            return body if reason.get("code") == "StrictFIFOBlocked" else None

        gang = wait_for(blocked, timeout=90, what="A's small blocked by the StrictFIFO head")
        assert gang is not None
        assert "another namespace" in gang["reason"]["message"], gang

        def history_has_a() -> bool:
            code, body, _ = get(f"{status}/v1/history", reader)
            return code == 200 and any(r["gang"] == f"{a}/done-a" for r in body["gangs"])

        wait_for(history_has_a, timeout=90, what="A's done-a in the history")
        wait_for(
            lambda: kube.get(f"{jobs_path(b)}/done-b").get("status", {}).get("succeeded"),
            timeout=90,
            what="B's done-b finished",
        )

        # Every answer A's reader gets: no name of B's objects anywhere.
        version = gang["version"]
        answers = {
            path: get(f"{status}{path}", reader)
            for path in (
                f"/v1/gangs/{a}/small",
                f"/v1/gangs/{a}/small?wait=2&since={version}",
                f"/v1/gangs/{a}/done-a",
                "/v1/gangs",
                f"/v1/gangs?namespace={a}",
                f"/v1/gangs?namespace={b}",
                "/v1/queues",
                "/v1/history",
                "/v1/history?since=3600",
            )
        }
        for path, (code, _, text) in answers.items():
            assert code == 200, (path, code, text)
            for secret in (b, "hog", "done-b"):
                assert secret not in text, (path, secret, text)
            assert not re.search(r"\bbig\b(?! gang)", text), (path, text)
        assert set(answers["/v1/gangs"][1]["gangs"]) >= {f"{a}/small"}
        assert answers[f"/v1/gangs?namespace={b}"][1]["gangs"] == {}
        assert [r["gang"] for r in answers["/v1/history"][1]["gangs"]] == [f"{a}/done-a"]
        assert answers["/v1/queues"][1]["queues"][fifo]["pending"] >= 2  # aggregates stay

        # B's gang: 403 (also for one that does not exist); no token or a bad one: 401.
        assert get(f"{status}/v1/gangs/{b}/big", reader)[0] == 403
        assert get(f"{status}/v1/gangs/{b}/nothing", reader)[0] == 403
        assert get(f"{status}/v1/gangs/{a}/small", None)[0] == 401
        assert get(f"{status}/v1/gangs/{a}/small", "not-a-token")[0] == 401
        assert get(f"{status}/v1/queues", None)[0] == 401
        assert get(f"{status}/healthz", None)[0] == 200  # the probes stay open

        # Metrics: only a caller that may get /metrics; the webhook's too.
        assert get(f"{secured.metrics_url}/metrics", None)[0] == 401
        assert get(f"{secured.metrics_url}/metrics", reader)[0] == 403
        assert get(f"{secured.metrics_url}/metrics", scraper)[0] == 200
        webhook_metrics = secured.webhook_metrics_url
        assert webhook_metrics is not None
        assert get(f"{webhook_metrics}/metrics", None)[0] == 401
        assert get(f"{webhook_metrics}/metrics", reader)[0] == 403
        assert get(f"{webhook_metrics}/metrics", scraper)[0] == 200

        # The documented stdlib client, with A's token in a file standing for the pod's mount.
        token_file = tmp_path / "token"
        token_file.write_text(reader)
        kube.create(jobs_path(a), builders.job("follow", quick, pods=1, runtime="2s"))
        done = subprocess.run(
            [sys.executable, "-c", documented_client()],
            env={**os.environ, "MUSTER_STATUS_URL": status, "TOKEN_FILE": str(token_file)}
            | {"NS": a, "JOB": "follow"},
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1].split()[0] in ("Running", "Finished"), done.stdout

        # The CLI sends the bearer token of its kubeconfig's user to --status-url.
        as_reader = tmp_path / "reader.kubeconfig"
        as_reader.write_text(token_kubeconfig(kubeconfig, reader))
        for command in (["status", f"{a}/small"], ["explain", f"{a}/small"], ["history"]):
            done = muster_cli(
                *command, "--status-url", status, "--kubeconfig", str(as_reader), "-o", "json"
            )
            assert done.returncode == 0, (command, done.stderr)
            assert b not in done.stdout and "hog" not in done.stdout, (command, done.stdout)
        refused = muster_cli(
            "status", f"{b}/big", "--status-url", status, "--kubeconfig", str(as_reader)
        )
        assert refused.returncode == 1 and "HTTP 403" in refused.stderr, refused.stderr

        # Polling is cached: 1,000 polls with a token muster has not seen yet cost the
        # apiserver one TokenReview and a SubjectAccessReview for A and one for B (the reason
        # names B's big before redaction): 3, or 6 if the TTL ran out meanwhile.
        fresh = token(kube, a, "reader")
        before = get(f"{secured.metrics_url}/metrics", scraper)[2]
        for _ in range(1000):
            assert get(f"{status}/v1/gangs/{a}/small", fresh)[0] == 200
        after = get(f"{secured.metrics_url}/metrics", scraper)[2]
        reviews = metric(after, "muster_status_auth_reviews_total") - metric(
            before, "muster_status_auth_reviews_total"
        )
        requests = metric(after, "muster_api_requests_total") - metric(
            before, "muster_api_requests_total"
        )
        print(
            json.dumps(
                {"polls": 1000, "auth_reviews": reviews, "controller_api_requests": requests}
            )
        )
        assert reviews <= 6, (reviews, requests)
    finally:
        for path in (f"{RBAC}/clusterrolebindings/{scrape}", f"{RBAC}/clusterroles/{scrape}"):
            with contextlib.suppress(ApiError):
                kube.delete(path)
        delete_queue(kube, fifo)
        delete_queue(kube, quick)
