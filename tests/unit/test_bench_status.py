"""`muster bench status`'s parts that need no cluster: its arguments, its Jobs, reading the
apiserver's request counter, and the pollers' process against the controller's own status
server on a cache filled through the watches' `apply_*` (the cluster test runs the command)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from admission.cache import Cache
from admission.status import StatusServer
from muster.bench import status as bench_status
from muster.bench.status import PollerProcess, parse_requests_total, stamped_job
from policies.phase import is_managed
from policies.submitted import parse_stamp
from policies.vocabulary import SUBMITTED


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--pollers", "10", "--gangs", "10"], "needs --gangs 11"),
        (["--pollers", "4", "--gangs", "20", "--changes", "3"], "half of --pollers"),
        (["--pollers", "0"], "--pollers must be >= 1"),
        (["--window", "5", "--ramp", "5"], "--ramp between 0 and --window"),
        (["--answers", "0"], "--answers"),
    ],
)
def test_bad_arguments_exit_2_and_say_why(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench_status.main(argv) == 2
    assert says in capsys.readouterr().err


def test_the_jobs_are_managed_suspended_and_stamped_in_name_order() -> None:
    bodies = [stamped_job(bench_status.gang_name(i), "q", i, 10**18) for i in range(3)]
    assert all(is_managed(b) and b["spec"]["suspend"] for b in bodies)
    stamps = [parse_stamp(b["metadata"]["annotations"][SUBMITTED]) for b in bodies]
    assert stamps == sorted(stamps)
    assert [b["metadata"]["name"] for b in bodies] == ["g-00000", "g-00001", "g-00002"]
    # No runtime: on kwok the admitted gang's pod runs until deleted.
    assert "annotations" not in bodies[0]["spec"]["template"].get("metadata", {})


def test_request_counter_is_summed_per_verb_and_resource() -> None:
    text = "\n".join(
        [
            "# HELP apiserver_request_total Counter of apiserver requests",
            'apiserver_request_total{code="200",component="apiserver",dry_run="",group="batch",'
            'resource="jobs",scope="resource",subresource="",verb="GET",version="v1"} 3',
            'apiserver_request_total{code="404",component="apiserver",dry_run="",group="batch",'
            'resource="jobs",scope="resource",subresource="",verb="GET",version="v1"} 2',
            'apiserver_request_total{code="200",component="apiserver",dry_run="",group="batch",'
            'resource="jobs",scope="resource",subresource="status",verb="PUT",version="v1"} 4',
            'apiserver_request_total{code="200",component="",dry_run="",group="",resource="",'
            'scope="",subresource="/metrics",verb="GET",version=""} 1',
            'apiserver_request_duration_seconds_count{verb="GET"} 99',
        ]
    )
    assert parse_requests_total(text) == {
        ("GET", "jobs"): 5,
        ("PUT", "jobs/status"): 4,
        ("GET", "(non-resource)//metrics"): 1,
    }


def _job(name: str, seq: int) -> dict[str, Any]:
    # The bench's own Job (what it creates, under test here) as stored, not tests/builders.py's.
    body = stamped_job(name, "q", seq, 10**18)
    metadata = body["metadata"]
    metadata.update(namespace="ns", uid=f"uid-{name}", resourceVersion=str(seq + 1))
    return body


@pytest.fixture
def served() -> Iterator[tuple[Cache, asyncio.AbstractEventLoop, str]]:
    """Ten waiting gangs in a cache, served by the controller's status server on a loop of its
    own thread."""
    cache = Cache()
    for i in range(10):
        cache.apply_job("ADDED", _job(bench_status.gang_name(i), i))
    cache.synced = True
    loop = asyncio.new_event_loop()
    server = StatusServer(cache, dict, None)
    port = loop.run_until_complete(server.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield cache, loop, f"http://127.0.0.1:{port}"
    asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def test_pollers_hold_answer_probes_and_wake_on_a_change_and_a_deletion(
    served: tuple[Cache, asyncio.AbstractEventLoop, str],
) -> None:
    cache, loop, url = served
    gangs = [f"ns/{bench_status.gang_name(i)}" for i in range(1, 5)]
    pollers = PollerProcess.start(
        {"url": url, "gangs": gangs, "wait": 30, "ramp": 0.2, "probe_gangs": gangs}
    )
    try:
        assert pollers.expect("holding", 30)["pollers"] == 4
        pollers.send({"cmd": "probe", "count": 5, "over": 0.1})
        assert len(pollers.expect("probed", 30)["latencies"]) == 5
        # A change of the gang's version wakes its poller, which then holds again.
        loop.call_soon_threadsafe(cache.status.touch, gangs[0])
        wake = pollers.wakes.get(timeout=10)
        assert (wake["gang"], wake["status"], wake["state"]) == (gangs[0], 200, "Pending")
        # A deleted Job answers 404, and that poller is done.
        deleted = _job(bench_status.gang_name(2), 2)
        deleted["metadata"]["resourceVersion"] = "99"
        loop.call_soon_threadsafe(cache.apply_job, "DELETED", deleted)
        wake = pollers.wakes.get(timeout=10)
        assert (wake["gang"], wake["status"]) == (gangs[1], 404)
        time.sleep(0.2)
        assert pollers.wakes.empty()
        pollers.send({"cmd": "stop"})
        done = pollers.expect("done", 30)
        assert len(done["first_answers"]) == 4
        assert (done["finished"], done["timeouts"], done["errors"]) == (1, 0, {})
    finally:
        pollers.stop()
