"""What one caller of the status service may see (admission/tenancy.py), and the pieces of
kubeport/statusauth.py that need no apiserver: the bearer header, the TTL cache, open access."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from admission.cache import Cache
from admission.status import StatusServer, queue_status
from admission.tenancy import namespaces_named, readable_rows, redact, redact_text
from kubeport.statusauth import ANONYMOUS, Caller, OpenAccess, TtlCache, bearer_token
from muster.view import ServiceView, ViewError, plan_listing
from policies import reasons
from tests.unit.test_cli_view import NOW, listing

KNOWN = {"team-a", "team-b"}


def test_a_reservation_for_another_namespace_does_not_name_it() -> None:
    message = reasons.reserved_for("team-b/train-64", waited=120).message
    assert "team-b" in message
    hidden = redact_text(message, {"team-b"})
    assert "team-b" not in hidden and "train-64" not in hidden
    assert hidden.startswith("capacity reserved for big gang in another namespace, older")


def test_each_reason_that_names_a_gang_reads_well_redacted() -> None:
    cases = {
        reasons.strict_fifo_blocked("team-b/big").message: "blocked by StrictFIFO head in "
        "another namespace",
        reasons.preempted("team-b/x", "priority").message: "preempted by a gang in another "
        "namespace (priority)",
        reasons.size_ratio_serialized("big gang team-b/x,").message: "size ratio: serialized "
        "behind big gang in another namespace,",
        reasons.held_behind_partial("team-b/x").message: "node-blind queues (nodeFit: false) "
        "admit nothing while a gang in another namespace waits",
    }
    for message, start in cases.items():
        assert redact_text(message, {"team-b"}).startswith(start), message


def test_a_readable_namespace_and_resource_names_are_left_alone() -> None:
    text = "needs 4 nvidia.com/gpu; label muster.dev/queue; behind team-a/x and team-b/y"
    assert redact_text(text, {"team-b"}) == (
        "needs 4 nvidia.com/gpu; label muster.dev/queue; behind team-a/x and a gang in another "
        "namespace"
    )
    assert namespaces_named(text, KNOWN) == {"team-a", "team-b"}
    assert namespaces_named(text, {"team-a"}) == {"team-a"}  # only namespaces that exist
    assert namespaces_named("4/8 pods", {"4"}) == {"4"}
    assert namespaces_named("nvidia.com/gpu", {"com"}) == set()


def test_every_string_of_a_body_is_redacted_and_lists_keep_one_of_each() -> None:
    body: dict[str, Any] = {
        "gang": "team-a/small",
        "reason": {"code": "Preempted", "message": "preempted by team-b/big (priority)"},
        "waitingFor": {"code": "Reserved", "message": "capacity reserved for big gang team-b/z"},
        "estimate": {"waitsFor": ["team-b/x", "team-b/y", "team-a/w"]},
        "position": 3,
        "team-b/key": True,
    }
    assert namespaces_named(body, KNOWN) == {"team-a", "team-b"}
    out = redact(body, {"team-b"})
    assert "team-b" not in repr(out)
    assert out["gang"] == "team-a/small" and out["position"] == 3
    assert out["estimate"]["waitsFor"] == ["a gang in another namespace", "team-a/w"]
    assert redact(body, set()) is body


def test_rows_of_unreadable_namespaces_are_dropped() -> None:
    rows = [{"gang": "team-a/x"}, {"gang": "team-b/y"}, {"gang": "team-a/z"}]
    assert readable_rows(rows, {"team-a"}.__contains__) == [rows[0], rows[2]]


def test_bearer_tokens_are_read_from_the_header() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    assert bearer_token("Basic abc") is None
    assert bearer_token("Bearer ") is None
    assert bearer_token(None) is None


def test_the_cache_expires_entries_and_stays_bounded() -> None:
    now = [0.0]
    cache: TtlCache[str, int] = TtlCache(60, 2, clock=lambda: now[0])
    cache.put("a", 1)
    cache.put("b", 2, ttl=10)
    assert cache.get("a") == (True, 1)
    now[0] = 11
    assert cache.get("b") == (False, None)
    cache.put("c", 3)
    cache.put("d", 4)  # over the bound: the least recently used ("a") goes
    assert cache.get("a") == (False, None)
    assert len(cache) == 2
    now[0] = 100
    assert cache.get("c") == (False, None)


def test_open_access_lets_everyone_read_everything() -> None:
    access = OpenAccess()

    async def ask() -> tuple[object, bool, bool]:
        caller = await access.caller(None)
        assert caller is not None
        return caller, await access.may_read(caller, "x"), await access.may_scrape(caller, "/m")

    assert asyncio.run(ask()) == (ANONYMOUS, True, True)


class TokenAccess:
    """An Access that knows one token, whose user may read the namespace `ns` only."""

    enabled = True
    reviews = 0

    async def caller(self, authorization: str | None) -> Caller | None:
        return Caller("alice") if bearer_token(authorization) == "good" else None

    async def may_read(self, caller: Caller, namespace: str) -> bool:
        return namespace == "ns"

    async def may_scrape(self, caller: Caller, path: str) -> bool:
        return False


@contextmanager
def served(cache: Cache) -> Iterator[str]:
    loop = asyncio.new_event_loop()
    server = StatusServer(
        cache, lambda: queue_status(cache), lambda: b"", port=0, access=TokenAccess()
    )
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


def test_the_service_answers_a_caller_only_about_what_it_may_read() -> None:
    cache = plan_listing(listing(), now=NOW).cache
    cache.queues.namespaces.setdefault("team-b", {})
    cache.status.reasons["ns/second"] = reasons.reserved_for("team-b/big")
    with served(cache) as url:
        view = ServiceView(url, timeout=5, authorization="Bearer good")
        second = view.gang("ns", "second")
        assert second["reason"]["message"].startswith(
            "capacity reserved for big gang in another namespace"
        )
        assert "team-b" not in json.dumps(view.queues())
        with pytest.raises(ViewError, match="HTTP 401"):
            ServiceView(url, timeout=5).gang("ns", "second")
        with pytest.raises(ViewError, match="HTTP 403"):
            ServiceView(url, timeout=5, authorization="Bearer good").gang("team-b", "big")
        request = urllib.request.Request(f"{url}/metrics", headers={"Authorization": "Bearer good"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 403
        refused.value.close()
        with urllib.request.urlopen(f"{url}/healthz", timeout=5) as response:
            assert json.load(response) == {"synced": cache.synced}
