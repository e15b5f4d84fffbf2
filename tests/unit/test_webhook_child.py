"""`muster run`'s webhook child is started again when it dies, with a backoff, and not after a
usage error or once muster is stopping (real child processes; no cluster)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from admission.supervisor import WebhookChild

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def quick(argv: list[str]) -> WebhookChild:
    child = WebhookChild(argv)
    child.FIRST_BACKOFF = 0.05
    return child


async def _until(predicate: object, timeout: float = 20) -> None:
    assert callable(predicate)
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def test_a_killed_child_is_started_again_with_the_same_command() -> None:
    child = quick(SLEEPER)
    first = child.proc.pid

    async def scenario() -> None:
        stopping = asyncio.Event()
        supervisor = asyncio.create_task(child.supervise(stopping))
        os.kill(first, signal.SIGKILL)
        await _until(lambda: child.restarts == 1 and child.proc.poll() is None)
        second = child.proc.pid
        os.kill(second, signal.SIGKILL)
        await _until(lambda: child.restarts == 2 and child.proc.poll() is None)
        stopping.set()
        await asyncio.wait_for(supervisor, 5)

    try:
        asyncio.run(scenario())
        assert child.proc.pid != first and child.proc.args == SLEEPER
    finally:
        child.stop()
    assert child.proc.returncode == -signal.SIGTERM


def test_a_usage_error_is_not_retried() -> None:
    child = quick([sys.executable, "-c", "raise SystemExit(2)"])

    async def scenario() -> None:
        await asyncio.wait_for(child.supervise(asyncio.Event()), 20)

    asyncio.run(scenario())
    assert child.restarts == 0 and child.proc.returncode == 2


def test_nothing_is_started_once_stopping() -> None:
    child = quick([sys.executable, "-c", "pass"])
    child.FIRST_BACKOFF = 0.5

    async def scenario() -> None:
        stopping = asyncio.Event()
        supervisor = asyncio.create_task(child.supervise(stopping))
        await _until(lambda: child.proc.poll() is not None)
        await asyncio.sleep(0.1)  # the child's exit is seen; its restart waits out the backoff
        stopping.set()
        await asyncio.wait_for(supervisor, 5)

    asyncio.run(scenario())
    assert child.restarts == 0
