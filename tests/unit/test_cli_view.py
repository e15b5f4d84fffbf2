"""The read-only view behind `muster queues|status|explain`: the controller's cache and planner
run on a listing, the real status service serving that cache, and the CLI reading either one.

The listing below is what `admission.listing.list_everything` returns, as plain API objects;
other test_cli_* modules import it so every formatter is tested on a real plan's output.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from admission.cache import Cache
from admission.status import StatusServer, gang_status, queue_status
from muster import cli
from muster.view import (
    STATUS_URL_ENV,
    ApiView,
    Listing,
    ServiceView,
    ViewError,
    open_view,
    parse_gang,
    plan_listing,
)
from policies import reasons
from policies.kinds.reading import format_admitted
from policies.vocabulary import ADMITTED, QUEUE, SUBMITTED
from tests import builders

NOW = 1_800_000_000.0


def node(name: str, cpu: str = "8") -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": "32Gi", "pods": "110"}
    return {
        "metadata": {"name": name, "resourceVersion": "1", "labels": {}},
        "spec": {},
        "status": {"allocatable": allocatable, "capacity": allocatable},
    }


def queue(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "1"}, "spec": spec}


def job(
    name: str,
    queue_name: str,
    *,
    pods: int,
    cpu: str = "1",
    seq: int,
    admitted: int | None = None,
    ready: int = 0,
    namespace: str = "ns",
) -> dict[str, Any]:
    annotations = {QUEUE: queue_name, SUBMITTED: builders.stamp(seq, NOW - 600)}
    if admitted is not None:
        annotations[ADMITTED] = format_admitted(NOW - 300, admitted)
    return builders.job(
        name,
        queue_name,
        namespace=namespace,
        pods=pods,
        cpu=cpu,
        suspend=admitted is None,
        runtime=None,
        annotations=annotations,
        gang_label=True,
        resource_version=10 + seq,
        status={"ready": ready},
    )


def pod(name: str, gang: str, node_name: str, cpu: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"pod-{name}",
            "resourceVersion": "5",
            "labels": {"muster.dev/gang": gang},
        },
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "m", "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def listing() -> Listing:
    """4 nodes of 8 cpu. Queue a (16 cpu) is full with ns/first; ns/second and ns/third wait
    for its quota; ns/huge can never fit it; ns/lost names no queue; cohort org has queues
    b (no quota of its own) and c (8 cpu), where ns/ok fits now."""
    nodes = [node(f"n{i}") for i in range(4)]
    queues = [
        queue("a", nominal={"cpu": "16"}, limits={"maxPending": 500}),
        queue("org"),
        queue("b", parent="org"),
        queue("c", parent="org", nominal={"cpu": "8"}, weight=2),
    ]
    jobs = [
        job("first", "a", pods=4, cpu="4", seq=1, admitted=4, ready=4),
        job("second", "a", pods=2, seq=2),
        job("third", "a", pods=1, seq=3),
        job("huge", "a", pods=20, seq=4),
        job("lost", "nope", pods=1, seq=5),
        job("ok", "c", pods=1, seq=6),
    ]
    pods = [pod(f"first-{i}", "first", f"n{i}", "4") for i in range(4)]
    return [("queue", queues, 100), ("node", nodes, 100), ("pod", pods, 100), ("job", jobs, 100)]


def test_the_plan_gives_the_planners_own_reasons() -> None:
    planned = plan_listing(listing(), now=NOW)
    cache = planned.cache
    assert cache.status.reasons["ns/second"] == reasons.quota_exhausted("a", "cpu", 2000, 0)
    assert cache.status.reasons["ns/third"] == reasons.quota_exhausted("a", "cpu", 1000, 0)
    assert cache.status.reasons["ns/huge"] == reasons.never_fits_quota("a", "cpu", 20_000, 16_000)
    assert cache.status.reasons["ns/lost"] == reasons.queue_not_found(
        "nope", ("a", "b", "c"), False
    )
    assert "ns/huge" in cache.status.rejected
    assert planned.admit_now == {"ns/ok": 1}
    assert "ns/ok" not in cache.status.reasons


def test_positions_follow_submission_within_each_queue() -> None:
    cache = plan_listing(listing(), now=NOW).cache
    assert [cache.status.positions[f"ns/{n}"] for n in ("second", "third", "huge")] == [1, 2, 3]
    assert cache.status.positions["ns/ok"] == 1
    assert "ns/first" not in cache.status.positions  # admitted gangs have no place in line


def test_an_admitted_gang_with_its_minimum_ready_counts_as_running() -> None:
    cache = plan_listing(listing(), now=NOW).cache
    body = gang_status(cache, "ns/first", NOW)
    assert body is not None and body["state"] == "Running" and body["admittedSize"] == 4
    assert cache.jobs["ns/first"].reached_min


def test_unknown_policy_is_a_usage_error() -> None:
    with pytest.raises(ViewError, match="admission policy") as info:
        plan_listing(listing(), policy="nope", now=NOW)
    assert info.value.exit_code == 2


@contextmanager
def served(cache: Cache) -> Iterator[str]:
    """The real status service over `cache`, on a free loopback port, in its own thread."""
    loop = asyncio.new_event_loop()
    server = StatusServer(cache, lambda: queue_status(cache), None, port=0)
    loop.run_until_complete(server.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_the_status_service_and_the_computed_view_agree() -> None:
    planned = plan_listing(listing(), now=NOW)
    with served(planned.cache) as url:
        service = ServiceView(url, timeout=5)
        for name in ("first", "second", "huge", "lost"):
            assert service.gang("ns", name) == gang_status(planned.cache, f"ns/{name}", NOW)
        queues = service.queues()
    assert queues["a"]["usage"] == {"cpu": "16"}
    assert queues["a"]["spec"]["nominal"] == {"cpu": "16"}
    assert queues["c"]["spec"]["parent"] == "org"
    assert queues["a"]["spec"]["limits"] == {"maxPending": 500, "maxPendingPerNamespace": None}
    assert queues["c"]["spec"]["limits"] is None


def test_the_status_service_answers_304_to_a_matching_etag() -> None:
    planned = plan_listing(listing(), now=NOW)
    with served(planned.cache) as url:
        for path in ("/v1/gangs/ns/second", "/v1/queues"):
            with urllib.request.urlopen(url + path, timeout=5) as first:
                etag = first.headers["ETag"]
                body = first.read()
            assert etag and json.loads(body)
            ask = urllib.request.Request(url + path, headers={"If-None-Match": etag})
            with pytest.raises(urllib.error.HTTPError) as unchanged:
                urllib.request.urlopen(ask, timeout=5)
            assert unchanged.value.code == 304
            assert unchanged.value.read() == b""
            unchanged.value.close()
            other = urllib.request.Request(url + path, headers={"If-None-Match": '"stale"'})
            with urllib.request.urlopen(other, timeout=5) as changed:
                assert changed.status == 200 and changed.read() == body


def test_an_unsynced_status_service_answers_503_never_a_partial_view() -> None:
    """A replica still loading, or a standby whose watches are paused, holds no current view."""
    cache = plan_listing(listing(), now=NOW).cache
    cache.synced = False
    with served(cache) as url:
        for path in ("/v1/gangs/ns/second", "/v1/queues"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(url + path, timeout=5)
            assert refused.value.code == 503
            assert refused.value.headers["Retry-After"] == "1"
            body = json.load(refused.value)
            refused.value.close()
            assert body["synced"] is False and "standby" in body["error"]
        with urllib.request.urlopen(url + "/healthz", timeout=5) as health:
            assert json.load(health) == {"synced": False}  # liveness still answers
        with pytest.raises(ViewError, match=r"does not serve status now.*drop --status-url"):
            ServiceView(url).gang("ns", "second")


def test_a_gang_the_service_does_not_hold_is_not_found() -> None:
    with served(plan_listing(listing(), now=NOW).cache) as url, pytest.raises(ViewError) as info:
        ServiceView(url).gang("ns", "nothing")
    message = str(info.value)
    assert message.startswith("gang ns/nothing not found")
    assert "kubectl get jobs -n ns -l muster.dev/queue" in message


def test_an_unreachable_status_service_says_so() -> None:
    with served(Cache()) as url:
        pass  # stopped again: nothing listens on that port now
    with pytest.raises(ViewError, match=r"status service at .* unreachable"):
        ServiceView(url, timeout=2).queues()


def test_status_url_must_be_http() -> None:
    with pytest.raises(ViewError, match="expected an http"):
        ServiceView("localhost:8081")


def test_status_command_reads_the_service(capsys: pytest.CaptureFixture[str]) -> None:
    planned = plan_listing(listing(), now=NOW)
    with served(planned.cache) as url:
        assert cli.main(["status", "ns/second", "--status-url", url, "-o", "json"]) == 0
        body = json.loads(capsys.readouterr().out)
        assert cli.main(["status", "nothing", "-n", "ns", "--status-url", url]) == 1
        err = capsys.readouterr().err
    assert body["state"] == "Pending" and body["position"] == 1
    assert body["reason"]["message"] == reasons.quota_exhausted("a", "cpu", 2000, 0).message
    assert body["source"] == {"from": "statusService", "where": url}
    assert err.startswith("muster status: gang ns/nothing not found")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("text", "namespace", "expected"),
    [
        ("team-a/train-64", None, ("team-a", "train-64")),
        ("train-64", "team-a", ("team-a", "train-64")),
        ("train-64", None, ("default", "train-64")),
        ("team-a/train.v2", "team-a", ("team-a", "train.v2")),
    ],
)
def test_parse_gang(text: str, namespace: str | None, expected: tuple[str, str]) -> None:
    assert parse_gang(text, namespace) == expected


@pytest.mark.parametrize(
    ("text", "namespace", "wrong"),
    [
        ("Team/x", None, "is not a namespace name"),
        ("a/b/c", None, "is not a Job name"),
        ("a/", None, "is not a Job name"),
        ("a/x", "b", "differs from -n"),
    ],
)
def test_parse_gang_rejects(text: str, namespace: str | None, wrong: str) -> None:
    with pytest.raises(ViewError, match=wrong) as info:
        parse_gang(text, namespace)
    assert info.value.exit_code == 2


def _args(**given: Any) -> Any:
    import argparse

    defaults = {"status_url": None, "kubeconfig": None, "context": None, "timeout": 5.0}
    return argparse.Namespace(**{**defaults, **given})


def test_explicit_flags_beat_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(STATUS_URL_ENV, "http://from-env:8081")
    view = open_view(_args())
    assert isinstance(view, ServiceView) and view.url == "http://from-env:8081"
    view = open_view(_args(status_url="http://flag:1"))
    assert isinstance(view, ServiceView) and view.url == "http://flag:1"
    # An explicit --kubeconfig means: read the API, whatever the environment says.
    with pytest.raises(ViewError, match="cannot read kubeconfig"):
        open_view(_args(kubeconfig=str(tmp_path / "missing")))


def test_no_kubeconfig_anywhere_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(STATUS_URL_ENV, raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ViewError, match=r"^no kubeconfig: pass --kubeconfig"):
        ApiView.open(None, None)
