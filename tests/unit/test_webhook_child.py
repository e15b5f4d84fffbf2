"""`muster run`'s webhook child is started again when it dies, with a backoff, and not after a
usage error or once muster is stopping; one alive but refusing connections on its port is
killed and started again; it dies with its parent (real child processes; no cluster)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from admission.supervisor import PARENT_ENV, WebhookChild
from kubeport.listenports import listen_port

ROOT = Path(__file__).resolve().parents[2]

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def quick(argv: list[str], port: int | None = None) -> WebhookChild:
    child = WebhookChild(argv, ("127.0.0.1", port) if port is not None else None)
    child.FIRST_BACKOFF = 0.05
    return child


async def _until(predicate: object, timeout: float = 20) -> None:
    assert callable(predicate)
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def supervised(child: WebhookChild, meanwhile: Callable[[], Awaitable[None]]) -> None:
    """Run `meanwhile` while `child` is supervised; then stop supervising, and the child."""

    async def scenario() -> None:
        stopping = asyncio.Event()
        supervisor = asyncio.create_task(child.supervise(stopping))
        await meanwhile()
        stopping.set()
        await asyncio.wait_for(supervisor, 5)

    try:
        asyncio.run(scenario())
    finally:
        child.stop()


def test_a_killed_child_is_started_again_with_the_same_command() -> None:
    child = quick(SLEEPER)
    first = child.proc.pid

    async def meanwhile() -> None:
        os.kill(first, signal.SIGKILL)
        await _until(lambda: child.restarts == 1 and child.proc.poll() is None)
        second = child.proc.pid
        os.kill(second, signal.SIGKILL)
        await _until(lambda: child.restarts == 2 and child.proc.poll() is None)

    supervised(child, meanwhile)
    assert child.proc.pid != first and child.proc.args == SLEEPER
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

    async def meanwhile() -> None:
        await _until(lambda: child.proc.poll() is not None)
        await asyncio.sleep(0.1)  # the child's exit is seen; its restart waits out the backoff

    supervised(child, meanwhile)
    assert child.restarts == 0


def _listener(port: int, listen_for: float) -> list[str]:
    """A child that listens on `port` for `listen_for` seconds, then stays alive, not
    listening (as a webhook whose server is gone)."""
    script = (
        "import socket, time\n"
        f"s = socket.create_server(('127.0.0.1', {port}))\n"
        f"time.sleep({listen_for})\n"
        "s.close()\n"
        "time.sleep(60)\n"
    )
    return [sys.executable, "-c", script]


def test_a_child_that_never_listens_is_killed_after_its_startup_and_started_again() -> None:
    port = listen_port()
    child = quick(SLEEPER, port)
    child.STARTUP, child.PROBE_EVERY = 1.0, 0.1
    first = child.proc.pid

    async def meanwhile() -> None:
        await _until(lambda: child.restarts == 1 and child.proc.poll() is None)

    supervised(child, meanwhile)
    assert child.unresponsive_kills == 1 and child.proc.pid != first


def test_a_child_that_stops_listening_is_killed_and_one_that_listens_is_left_alone() -> None:
    port = listen_port()
    child = quick(_listener(port, 1.5), port)
    child.STARTUP, child.PROBE_EVERY, child.REFUSING = 60.0, 0.1, 0.5
    first = child.proc.pid

    async def meanwhile() -> None:
        await asyncio.sleep(1.0)
        assert child.restarts == 0, "a listening child was started again"
        await _until(lambda: child.restarts == 1)

    supervised(child, meanwhile)
    assert child.unresponsive_kills == 1 and child.proc.pid != first


def test_a_stopped_child_that_still_holds_its_port_is_left_alone() -> None:
    """SIGSTOP (a debugger, or a test keeping the webhook down): the kernel still accepts
    connections on its port, so the child is not taken for gone."""
    port = listen_port()
    child = quick(_listener(port, 60), port)
    child.STARTUP, child.PROBE_EVERY, child.REFUSING = 0.5, 0.1, 0.3

    async def meanwhile() -> None:
        await _until(lambda: _serves(port))
        os.kill(child.proc.pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(2.0)
        finally:
            os.kill(child.proc.pid, signal.SIGCONT)

    supervised(child, meanwhile)
    assert child.restarts == 0 and child.unresponsive_kills == 0


def _serves(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_the_child_dies_with_its_parent_even_by_kill_9(tmp_path: Path) -> None:
    """The parent (here a process of its own holding a WebhookChild) is killed with -9: the
    child, which asked for it itself (`die_with_parent`), is killed by the kernel."""
    pidfile = tmp_path / "child.pid"
    child_script = (
        "import os, time\n"
        "from admission.supervisor import die_with_parent\n"
        "die_with_parent()\n"
        f"open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(60)\n"
    )
    parent_script = (
        "import sys, time\n"
        "from admission.supervisor import WebhookChild\n"
        f"WebhookChild([sys.executable, '-c', {child_script!r}])\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_script], cwd=ROOT)
    try:
        deadline = time.monotonic() + 20
        while not pidfile.exists() or not pidfile.read_text():
            assert time.monotonic() < deadline and parent.poll() is None, "no child started"
            time.sleep(0.05)
        grandchild = int(pidfile.read_text())
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while Path(f"/proc/{grandchild}").exists() and not _zombie(grandchild):
            assert time.monotonic() < deadline, "the child outlived its parent's kill -9"
            time.sleep(0.05)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_child_whose_parent_is_already_gone_exits() -> None:
    """The parent died between starting the child and the child's request: it exits at once."""
    script = "from admission.supervisor import die_with_parent\ndie_with_parent()\nprint('on')\n"
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, PARENT_ENV: "1"},
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )
    assert done.returncode == 1 and "on" not in done.stdout
    assert "the webhook's parent process is gone" in done.stderr
