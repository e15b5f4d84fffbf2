"""The supervisor of a split `muster run`: the webhook's child process, started again when it dies.

By default `muster run` serves the webhook in a child process and runs the controller in its
own: each gets its own interpreter and GIL, so a plan cycle never delays an admission review
(whose latency every `kubectl create` pays), and a burst of reviews never delays a cycle. The
child dies with its parent (SIGKILL from the kernel when the parent dies abnormally); a child
that dies on its own is started again (`WebhookChild`), so the controller, its watches and its
cache live on through a webhook crash. `watch_child` stops the parent when the child cannot
be started again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import time

from admission.launcher import stop_process


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """Ask Linux to kill this (child) process when its parent dies, also by kill -9.

    SIGKILL, not SIGTERM: a parent that died abnormally must leave the webhook configuration in
    place (failurePolicy Fail keeps managed Jobs from being created unsuspended until a new
    muster serves again); a graceful stop removes it through the parent's SIGTERM instead.
    """
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


class WebhookChild:
    """The webhook's child process of a split `muster run`, started again when it dies.

    A webhook that dies (killed, out of memory, a crash) leaves its MutatingWebhookConfiguration
    registered on purpose: with failurePolicy Fail the apiserver then refuses creates in managed
    namespaces ("failed calling webhook") rather than store them unsuspended and unstamped. The
    child is started again with the same command line (same port; with `--local` it registers
    its new certificate), after a backoff: 1 s, doubling to `MAX_BACKOFF`, back to 1 s once a
    child served for `STEADY` seconds. A usage error (exit 2) is not retried: a new child would
    fail the same way, so the parent stops."""

    FIRST_BACKOFF = 1.0
    MAX_BACKOFF = 30.0
    STEADY = 60.0

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.restarts = 0
        self.proc = self._spawn()
        self._started = time.monotonic()

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.argv, preexec_fn=_die_with_parent)

    async def supervise(self, stopping: asyncio.Event) -> None:
        """Restart the child whenever it exits, until `stopping` is set; return when the
        child exited with a usage error (the caller then stops)."""
        backoff = self.FIRST_BACKOFF
        while not stopping.is_set():
            if self.proc.poll() is None:
                await asyncio.sleep(0.5)
                continue
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

    def stop(self) -> None:
        stop_process(self.proc)


async def watch_child(child: WebhookChild, stopping: asyncio.Event) -> None:
    """Supervise `child` until `stopping` is set; if it ends before (a usage error), stop this
    process as a SIGTERM would (a clean exit: the configuration is removed)."""
    await child.supervise(stopping)
    if not stopping.is_set():
        os.kill(os.getpid(), signal.SIGTERM)
