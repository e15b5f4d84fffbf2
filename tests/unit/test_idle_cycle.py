"""What a controller cycle skips when nothing changed, and what it must not skip.

At 10,000 waiting gangs a cycle on the event loop held the status service's answers back for
tens of milliseconds every 2 s even when nothing had changed. The cycle now recomputes queue
positions and publishes queue status only when a gang's visible state (`StatusView.version`),
the queues or the nodes moved. These cases pin that a change still shows at once, that a status
write held back by `status_interval` still goes out, and that the clog detector passes at
most once a second. The writer is a recorder: nothing here talks to a cluster (the real
controller against a real apiserver is tests/cluster/)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from admission.cache import Cache
from admission.detectors import CLOG_CHECK_EVERY
from admission.loop import Controller
from admission.metrics import ControllerMetrics
from admission.settings import ControllerSettings
from admission.writes import Writer
from policies.vocabulary import PRIORITY, SUBMITTED
from tests import builders

NOW = 1_800_000_000.0


def job(name: str, seq: int, cpu: str = "1") -> dict[str, Any]:
    """A stored one-pod gang of queue q, suspended, stamped `seq` at NOW."""
    return builders.job(
        name,
        "q",
        namespace="ns",
        suspend=True,
        cpu=cpu,
        runtime=None,
        tolerations=(),
        annotations={SUBMITTED: builders.stamp(seq, NOW)},
        resource_version=100 + seq,
    )


class Recorder:
    """The `Writer` calls a cycle makes, recorded; every write succeeds."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    async def call(self, fn: Callable[..., Any], *args: Any) -> str:
        name = getattr(fn, "__name__", "lambda")
        self.calls.append((name, args))
        return "ok"

    def patch_queue_status(self, name: str, status: dict[str, object]) -> None: ...

    def admit(self, *args: Any, **kwargs: Any) -> None: ...

    def event(self, *args: Any) -> None:
        self.calls.append(("event", args))

    def status_writes(self) -> list[tuple[Any, ...]]:
        return [args for name, args in self.calls if name == "patch_queue_status"]


def controller(cpu: str = "1", **settings: Any) -> tuple[Cache, Controller, Recorder]:
    cache = Cache()
    cache.apply_queue(
        "ADDED",
        {"metadata": {"name": "q", "resourceVersion": "1"}, "spec": {"nominal": {"cpu": cpu}}},
    )
    cache.apply_node(
        "ADDED",
        {
            "metadata": {"name": "n1", "resourceVersion": "2"},
            "status": {"allocatable": {"cpu": "64", "pods": "110"}},
        },
    )
    cache.synced = True
    recorder = Recorder()
    writer: Writer = recorder  # type: ignore[assignment]
    made = Controller(
        cache, writer, ControllerSettings(estimate_interval=0, **settings), ControllerMetrics()
    )
    return cache, made, recorder


async def settle(made: Controller) -> None:
    while made.inflight:
        await asyncio.gather(*list(made.inflight))


def test_positions_follow_changes_and_idle_cycles_leave_them() -> None:
    async def run() -> None:
        cache, made, _ = controller()
        for seq, name in enumerate(("a", "b", "c")):
            cache.apply_job("ADDED", job(name, seq))
        await made.cycle()
        await settle(made)
        # "a" fits the 1-cpu quota and is admitted; b and c wait, in submission order.
        assert cache.status.positions == {"ns/b": 1, "ns/c": 2}
        held = cache.status.positions
        made.reasons._positions_at = 0.0  # as if long ago: only the unchanged state holds them now
        await made.cycle()
        assert cache.status.positions is held
        # A new waiting gang has a place in the very next cycle.
        cache.apply_job("ADDED", job("d", 3))
        await made.cycle()
        assert cache.status.positions == {"ns/b": 1, "ns/c": 2, "ns/d": 3}
        # A visible change that keeps the waiting set (c's priority) moves the places once a
        # second has passed since they were last worked out.
        urgent = job("c", 2)
        urgent["metadata"]["resourceVersion"] = "200"
        urgent["metadata"]["annotations"][PRIORITY] = "10"
        cache.apply_job("MODIFIED", urgent)
        made.reasons._positions_at = 0.0
        await made.cycle()
        assert cache.status.positions == {"ns/c": 1, "ns/b": 2, "ns/d": 3}

    asyncio.run(run())


def test_a_status_held_back_by_the_interval_is_written_though_nothing_changes() -> None:
    async def run() -> None:
        cache, made, recorder = controller(status_interval=60.0)
        cache.apply_job("ADDED", job("a", 0))
        await made.cycle()
        await settle(made)
        assert len(recorder.status_writes()) == 1  # the first status goes out at once
        cache.apply_job("ADDED", job("b", 1))
        made.publisher._published_at = 0.0  # a second later
        await made.cycle()
        await settle(made)
        # b waits: the queue's status changed, but within the 60 s interval: held back.
        assert len(recorder.status_writes()) == 1
        made.publisher._published_at = 0.0
        made.publisher._status_written["q"] = (
            0.0,
            made.publisher._status_written["q"][1],
        )  # the interval passed
        await made.cycle()  # nothing changed in the cache since the last cycle
        await settle(made)
        writes = recorder.status_writes()
        assert len(writes) == 2 and writes[-1][1]["pending"] == 1
        made.publisher._published_at = 0.0
        await made.cycle()  # written, nothing changed: nothing more to write
        await settle(made)
        assert len(recorder.status_writes()) == 2

    asyncio.run(run())


def test_the_clog_detector_passes_at_most_once_a_second() -> None:
    async def run() -> None:
        cache, made, _ = controller()
        cache.apply_job("ADDED", job("a", 0))
        await made.cycle()
        await settle(made)
        record = cache.jobs["ns/a"]
        assert record.admitted_at is not None and not record.reached_min
        first = made.clogs.checked_at + CLOG_CHECK_EVERY
        made.clogs.detect(first)
        assert record.advanced_at == first  # not started: the clock notes the check
        made.clogs.detect(first + CLOG_CHECK_EVERY / 2)
        assert record.advanced_at == first and made.clogs.checked_at == first
        made.clogs.detect(first + CLOG_CHECK_EVERY)
        assert record.advanced_at == first + CLOG_CHECK_EVERY
        made.clogs.detect(first - 5.0)  # the wall clock stepped back: look again at once
        assert made.clogs.checked_at == first - 5.0 and record.advanced_at == first - 5.0

    asyncio.run(run())


def test_queue_status_writes_keep_to_their_budget_the_longest_unwritten_first() -> None:
    async def run() -> None:
        cache, made, recorder = controller(status_writes_per_second=2.0)
        for k in range(10):
            cache.apply_queue(
                "ADDED",
                {
                    "metadata": {"name": f"q{k}", "resourceVersion": str(10 + k)},
                    "spec": {"nominal": {"cpu": "1"}},
                },
            )
        await made.cycle()
        await settle(made)
        first = [args[0] for args in recorder.status_writes()]
        assert len(first) == 4  # two seconds' worth of the budget, not the 11 queues
        published = made.publisher._published_at
        made.publisher._published_at = published - 1.0  # a second later: 2 more
        cache.status.touch("ns/x")  # something moved, so the publish is not skipped
        await made.cycle()
        await settle(made)
        second = [args[0] for args in recorder.status_writes()][4:]
        assert len(second) == 2
        assert not set(first) & set(second)  # the never-written queues went first
        for _ in range(10):  # the rest follow, though nothing changes any more
            made.publisher._published_at -= 1.0
            await made.cycle()
            await settle(made)
        assert sorted({args[0] for args in recorder.status_writes()}) == sorted(
            ["q", *(f"q{k}" for k in range(10))]
        )

    asyncio.run(run())
