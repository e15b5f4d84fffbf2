"""Wait-time estimates in the controller: runtimes learned from finished Jobs, the status
service's `estimate` field, and how `muster status` / `explain` print it."""

from __future__ import annotations

import asyncio
import copy
import sys
from typing import Any

from admission.cache import Cache
from admission.estimates import EstimateRefresher, estimate_body, refresh_now
from admission.status import gang_status
from admission.statusview import DEMAND_WINDOW
from muster.commands.explain import explain, render
from muster.commands.status import estimate_text, status_lines
from muster.view import Listing, plan_listing
from policies.kinds.reading import format_time
from tests.unit.test_cli_view import NOW, job, listing


def _with_deadline(body: dict[str, Any], seconds: int) -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["spec"]["activeDeadlineSeconds"] = seconds
    return body


def _deadline_listing() -> Listing:
    """ns/first (admitted 300 s ago) has a deadline of 900 s: ns/second, waiting for queue a's
    quota, starts when it ends at the latest, 600 s from now."""
    out = []
    for kind, items, version in listing():
        if kind == "job":
            items = [
                _with_deadline(item, 900) if item["metadata"]["name"] == "first" else item
                for item in items
            ]
        out.append((kind, items, version))
    return out


def _finished(name: str, started: float, ended: float) -> dict[str, Any]:
    body = job(name, "a", pods=4, cpu="4", seq=9, admitted=4)
    body["status"] = {
        "startTime": format_time(started),
        "completionTime": format_time(ended),
        "succeeded": 4,
        "conditions": [{"type": "Complete", "status": "True"}],
    }
    return body


def test_a_finished_job_teaches_its_runtime_once() -> None:
    cache = Cache()
    body = _finished("done", NOW - 500, NOW - 200)
    cache.apply_job("ADDED", body)
    cache.apply_job("MODIFIED", {**body, "metadata": {**body["metadata"], "resourceVersion": "99"}})
    assert cache.runtimes.samples("a", 4) == (300.0,)


def test_a_failed_job_without_completion_time_ends_at_its_condition() -> None:
    cache = Cache()
    body = _finished("late", NOW - 500, NOW - 200)
    del body["status"]["completionTime"]
    body["status"]["conditions"] = [
        {"type": "Failed", "status": "True", "lastTransitionTime": format_time(NOW - 100)}
    ]
    cache.apply_job("ADDED", body)
    assert cache.runtimes.samples("a", 4) == (400.0,)


def test_a_gang_behind_a_deadline_gets_an_estimate() -> None:
    cache = plan_listing(_deadline_listing(), now=NOW).cache
    body = gang_status(cache, "ns/second", NOW)
    assert body is not None
    found = body["estimate"]
    assert found["startsInSeconds"] == 600.0
    assert found["earliestInSeconds"] == 0.0 and found["latestInSeconds"] == 600.0
    text = estimate_text(body)
    assert text is not None and text.startswith("in ~10m (")
    assert text.endswith("(between now and ~10m)")
    assert ("expected start", text) in status_lines(body, "here")


def test_without_a_deadline_or_history_the_estimate_is_unknown_and_says_why() -> None:
    cache = plan_listing(listing(), now=NOW).cache
    body = gang_status(cache, "ns/second", NOW)
    assert body is not None
    assert body["estimate"]["waitsFor"] == ["ns/first"]
    text = estimate_text(body)
    assert text is not None
    assert text.startswith("unknown \u2014 running gang ns/first has no deadline")
    out = explain(body, {}, None)
    assert f"expected start: {text}" in render(out, "here").splitlines()


def test_history_gives_an_estimate_without_a_deadline() -> None:
    items = listing()
    items = [
        (kind, [*jobs, _finished("done", NOW - 2000, NOW - 1000)] if kind == "job" else jobs, v)
        for kind, jobs, v in items
    ]
    cache = plan_listing(items, now=NOW).cache
    body = gang_status(cache, "ns/second", NOW)
    assert body is not None
    # ns/first ran 300 s of a learned 1000 s.
    assert body["estimate"]["startsInSeconds"] == 700.0


def test_a_gang_the_plan_admits_now_is_estimated_now() -> None:
    cache = plan_listing(listing(), now=NOW).cache
    body = gang_status(cache, "ns/ok", NOW)
    assert body is not None
    assert body["estimate"]["startsInSeconds"] == 0.0
    assert estimate_text(body) == "now: the planner admits it at the controller's next cycle"


def test_not_estimated_yet_says_so() -> None:
    cache = plan_listing(listing(), now=NOW).cache
    cache.status.estimates = {}
    assert estimate_body(cache, "ns/second", NOW)["unknown"].startswith("not estimated yet")


def test_the_refresher_fills_the_cache_in_the_background() -> None:
    cache = plan_listing(_deadline_listing(), now=NOW).cache
    cache.status.estimates, cache.status.estimated_at = {}, None

    switch = sys.getswitchinterval()

    async def go() -> None:
        refresher = EstimateRefresher(
            cache, "drf", interval=0.0, clock=lambda: NOW, on_demand=False
        )
        refresher.poke()
        assert sys.getswitchinterval() <= 0.001  # the event loop gets the interpreter sooner
        refresher.poke()  # one at a time: a second poke while it runs starts nothing
        assert refresher._task is not None
        await refresher._task
        assert refresher.runs == 1
        await refresher.stop()

    asyncio.run(go())
    assert sys.getswitchinterval() == switch  # restored
    assert cache.status.estimated_at is not None
    assert cache.status.estimates["ns/second"].start == NOW + 600


async def poked(refresher: EstimateRefresher) -> bool:
    """Poke the refresher and wait for the refresh it starts; True if one ran."""
    before = refresher.runs
    refresher.poke()
    if refresher._task is not None:
        await refresher._task
    return refresher.runs > before


def test_an_unchanged_cache_is_estimated_again_only_after_unchanged_every() -> None:
    cache = plan_listing(_deadline_listing(), now=NOW).cache

    async def go() -> None:
        refresher = EstimateRefresher(
            cache,
            "drf",
            interval=0.0,
            pace=0.0,
            unchanged_every=60.0,
            clock=lambda: NOW,
            on_demand=False,
        )

        assert await poked(refresher)
        assert not await poked(refresher)  # nothing changed: the estimates stand
        cache.status.touch("ns/second")  # a gang's visible state changed
        assert await poked(refresher)
        assert not await poked(refresher)
        refresher._last -= 60.0  # a minute later, still nothing changed: time passing counts
        assert await poked(refresher)
        await refresher.stop()

    asyncio.run(go())


def test_refresh_now_without_waiting_gangs_is_empty() -> None:
    cache = Cache()
    refresh_now(cache, NOW, "drf")
    assert cache.status.estimates == {} and cache.status.estimated_at == NOW


def test_estimates_are_computed_while_someone_asks_for_them() -> None:
    cache = plan_listing(_deadline_listing(), now=NOW).cache
    cache.status.estimates, cache.status.estimated_at = {}, None
    first_asks: list[float] = []
    cache.status.on_first_ask = lambda: first_asks.append(NOW)

    async def go() -> None:
        refresher = EstimateRefresher(cache, "drf", interval=0.0, pace=0.0, clock=lambda: NOW)

        assert not await poked(refresher)  # nobody asked: nothing computed
        body = estimate_body(cache, "ns/second", NOW)
        assert body["unknown"].startswith("not estimated yet")
        assert first_asks == [NOW]  # the first ask wakes the controller
        assert await poked(refresher)
        assert estimate_body(cache, "ns/second", NOW)["startsInSeconds"] == 600.0
        assert first_asks == [NOW]  # only the first ask of a quiet spell does
        asked = cache.status.estimates_asked_at
        assert asked is not None
        cache.status.estimates_asked_at = asked - DEMAND_WINDOW - 1  # nobody asked since
        cache.status.touch("ns/second")  # a change the estimates read
        refresher._last -= 60.0
        assert not await poked(refresher)
        await refresher.stop()

    asyncio.run(go())
