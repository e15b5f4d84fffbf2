"""The supervisor of a split `muster run`: the webhook's child process, started again when it dies.

By default `muster run` serves the webhook in a child process and runs the controller in its
own: each gets its own interpreter and GIL, so a plan cycle never delays an admission review
(whose latency every `kubectl create` pays), and a burst of reviews never delays a cycle. The
child dies with its parent (SIGKILL from the kernel when the parent dies abnormally); a child
that dies on its own is started again (`WebhookChild`), so the controller, its watches and its
cache live on through a webhook crash, and a child that is alive but does not accept
connections on its port (stuck) is killed and started again. `watch_child` stops the parent
when the child cannot be started again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from typing import Final

from admission.launcher import stop_process

PARENT_ENV: Final = "MUSTER_WEBHOOK_PARENT"
"""Set in the child's environment to the parent's pid: the child asks to die with it."""


def die_with_parent() -> None:
    """In a webhook child (`PARENT_ENV` set): ask Linux to kill this process when its parent
    dies, also by kill -9; exit at once if the parent is already gone.

    The child does this itself, first thing, rather than in a `preexec_fn` between fork and
    exec: Python code there is not safe in a parent with threads (the controller has several
    by the time a child is started again), and a child stuck there would never serve.

    SIGKILL, not SIGTERM: a parent that died abnormally must leave the webhook configuration in
    place (failurePolicy Fail keeps managed Jobs from being created unsuspended until a new
    muster serves again); a graceful stop removes it through the parent's SIGTERM instead.
    """
    wanted = os.environ.pop(PARENT_ENV, None)
    if not wanted:
        return
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if str(os.getppid()) != wanted:  # the parent died before the request was made
        print("muster run: the webhook's parent process is gone; exiting", file=sys.stderr)
        sys.exit(1)


def _probe_address(addr: str, port: int) -> tuple[str, int]:
    """Where this machine reaches a server bound to `addr`:`port` (a wildcard: loopback)."""
    return ("127.0.0.1" if addr in ("", "0.0.0.0") else "::1" if addr == "::" else addr), port


async def refuses(address: tuple[str, int], timeout: float = 2.0) -> bool:
    """Whether nothing listens at `address` (the connection is refused). A connection that
    does not complete in `timeout` (a busy or stopped server whose backlog is full) counts as
    listening: only a server that is gone is refused."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(*address), timeout)
    except ConnectionRefusedError:
        return True
    except OSError:  # TimeoutError is one
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return False


class WebhookChild:
    """The webhook's child process of a split `muster run`, started again when it dies.

    A webhook that dies (killed, out of memory, a crash) leaves its MutatingWebhookConfiguration
    registered on purpose: with failurePolicy Fail the apiserver then refuses creates in managed
    namespaces ("failed calling webhook") rather than store them unsuspended and unstamped. The
    child is started again with the same command line (same port; with `--local` it registers
    its new certificate), after a backoff: 1 s, doubling to `MAX_BACKOFF`, back to 1 s once a
    child served for `STEADY` seconds. A usage error (exit 2) is not retried: a new child would
    fail the same way, so the parent stops.

    With `address` (where the child serves), a child that is alive but refuses connections
    there is killed (SIGKILL) and so started again: once it served, after `REFUSING` seconds
    of refusals; before, once `STARTUP` seconds passed since it was started (loading the
    cluster's queues and Jobs comes first). A stopped (SIGSTOP) or busy child still accepts
    connections and is left alone."""

    FIRST_BACKOFF = 1.0
    MAX_BACKOFF = 30.0
    STEADY = 60.0
    PROBE_EVERY = 2.0
    REFUSING = 10.0
    STARTUP = 300.0

    def __init__(self, argv: list[str], address: tuple[str, int] | None = None) -> None:
        self.argv = argv
        self.address = _probe_address(*address) if address is not None else None
        self.restarts = 0
        self.unresponsive_kills = 0
        self.proc = self._spawn()
        self._started = time.monotonic()

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.argv, env={**os.environ, PARENT_ENV: str(os.getpid())})

    async def supervise(self, stopping: asyncio.Event) -> None:
        """Restart the child whenever it exits, until `stopping` is set; return when the
        child exited with a usage error (the caller then stops)."""
        backoff = self.FIRST_BACKOFF
        served = False  # the current child accepted a connection
        refused_since: float | None = None
        probed = 0.0
        while not stopping.is_set():
            if self.proc.poll() is None:
                now = time.monotonic()
                if self.address is not None and now - probed >= self.PROBE_EVERY:
                    probed = now
                    if not await refuses(self.address):
                        served, refused_since = True, None
                    elif refused_since is None:
                        refused_since = now
                    if self._stuck(served, refused_since, now):
                        self._kill_stuck(served)
                        continue
                await asyncio.sleep(0.5)
                continue
            served, refused_since = False, None
            code = self.proc.returncode
            if code == 2:
                logging.error("the webhook process exited with a usage error (2); stopping")
                return
            if time.monotonic() - self._started >= self.STEADY:
                backoff = self.FIRST_BACKOFF
            logging.error(
                "the webhook process exited (%s); starting it again in %.0fs (restart %d). "
                "Until it serves, the apiserver refuses creates in managed namespaces "
                "(failurePolicy Fail)",
                code,
                backoff,
                self.restarts + 1,
            )
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stopping.wait(), backoff)
            if stopping.is_set():
                return
            self.proc = self._spawn()
            self._started = time.monotonic()
            self.restarts += 1
            logging.warning("webhook process started again (pid %d)", self.proc.pid)
            backoff = min(backoff * 2, self.MAX_BACKOFF)

    def _stuck(self, served: bool, refused_since: float | None, now: float) -> bool:
        if refused_since is None:
            return False
        if served:
            return now - refused_since >= self.REFUSING
        return now - self._started >= self.STARTUP

    def _kill_stuck(self, served: bool) -> None:
        assert self.address is not None
        logging.error(
            "the webhook process (pid %d) is alive but refuses connections at %s:%d %s; "
            "killing it to start it again",
            self.proc.pid,
            *self.address,
            f"for {self.REFUSING:.0f}s" if served else f"{self.STARTUP:.0f}s after its start",
        )
        self.unresponsive_kills += 1
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        stop_process(self.proc)


async def watch_child(child: WebhookChild, stopping: asyncio.Event) -> None:
    """Supervise `child` until `stopping` is set; if it ends before (a usage error), stop this
    process as a SIGTERM would (a clean exit: the configuration is removed)."""
    await child.supervise(stopping)
    if not stopping.is_set():
        os.kill(os.getpid(), signal.SIGTERM)
