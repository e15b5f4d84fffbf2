"""Start a `muster run` as a child process, wait until it is ready, stop it: the one launcher
behind the tests' session muster, the benches and the kwok engine.

Readiness is an HTTP probe, not a line on stdout: the launcher gives the process free ports for
its status, metrics and webhook metrics services and polls `/healthz` on them. The controller
is ready when its cache is synced (`{"synced": true}`; a `--peering` replica on standby serves
`/healthz` unsynced and counts as started), the webhook when it serves reviews and, with
`--local`, has registered its configuration (`{"ready": true}`). A thread reads the process's
output the whole time, so its pipe never fills; the lines are kept (the last ones name what went
wrong when it does not start) and, optionally, copied to a log file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from admission.metrics import api_figures
from kubeport.listenports import listen_port

LOOPBACK = "127.0.0.1"


class LaunchError(RuntimeError):
    """`muster run` exited or did not become ready in time; the message ends with its output."""


def free_port(addr: str = LOOPBACK) -> int:
    """A port nothing listens on now, below the kernel's ephemeral range, for a child to bind
    (and to bind again when restarted in place: `kubeport.listenports`)."""
    return listen_port(addr)


def stop_process(
    proc: subprocess.Popen[Any],
    sig: int = signal.SIGTERM,
    timeout: float = 30,
    reader: threading.Thread | None = None,
) -> bool:
    """Send `sig` to `proc` (SIGTERM: a clean stop, which unregisters what it registered),
    SIGKILL after `timeout` seconds; then close its output pipe, if it has one, once `reader`
    (a thread reading that pipe, which ends at its EOF) is done with it. True when it had to be
    killed."""
    killed = False
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        killed = True
    if reader is not None:
        reader.join(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()
    return killed


@dataclass
class MusterRun:
    """A running `muster run` and where its services listen (None: not served)."""

    proc: subprocess.Popen[str]
    status_url: str | None
    metrics_url: str | None
    webhook_metrics_url: str | None
    output: list[str] = field(default_factory=list)
    """What the process printed so far (the last `keep_lines` lines, when that is set)."""
    keep_lines: int | None = None
    log_path: Path | None = None
    _reader: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        """Everything the process printed so far (or its last `keep_lines` lines)."""
        with self._lock:
            return "".join(self.output)

    def tail(self, lines: int = 40) -> str:
        with self._lock:
            return "".join(self.output[-lines:])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def api_figures(self) -> dict[str, float]:
        """The controller's API calls and admissions so far, read from its metrics
        (`admission.metrics.api_figures`); empty when they are not served or do not answer."""
        if self.metrics_url is None:
            return {}
        try:
            with urllib.request.urlopen(f"{self.metrics_url}/metrics", timeout=5) as response:
                return api_figures(response.read().decode())
        except OSError:  # urllib's URLError is one
            return {}

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> bool:
        """`stop_process`: `sig`, SIGKILL after `timeout` seconds, the output pipe closed once
        read to the end. True when it had to be killed."""
        return stop_process(self.proc, sig, timeout, self._reader)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with open(self.log_path or os.devnull, "a", encoding="utf-8") as log:
            for line in self.proc.stdout:
                with self._lock:
                    self.output.append(line)
                    if self.keep_lines is not None and len(self.output) > 2 * self.keep_lines:
                        del self.output[: -self.keep_lines]
                log.write(line)
                log.flush()


def launch(
    kubeconfig: Path | None,
    *flags: str,
    status: bool = True,
    env: Mapping[str, str] | None = None,
    timeout: float = 90,
    log_path: Path | None = None,
    keep_lines: int | None = None,
    new_session: bool = False,
    command: Sequence[str] | None = None,
) -> MusterRun:
    """Start `muster run --local [--kubeconfig K] FLAGS` and return it once ready (see the
    module docstring). Without `kubeconfig`, muster finds one as kubectl does ($KUBECONFIG in
    `env`). The launcher owns the service ports: `flags` must not set --status-port,
    --metrics-port or --webhook-metrics-port; `status=False` serves no status service (the
    metrics port still answers `/healthz`). `new_session`: the child does not get the
    terminal's Ctrl-C; the caller stops it. `command`: the words that start `muster run`
    (default: this interpreter's `python -m muster.cli run`; the image test runs the image's
    entrypoint in its root filesystem). Raises LaunchError."""
    owned = ("--status-port", "--metrics-port", "--webhook-metrics-port")
    if given := [f for f in flags if f.split("=", 1)[0] in owned]:
        raise ValueError(f"launch() picks the service ports itself; drop {' '.join(given)}")
    controller = "--no-controller" not in flags
    webhook = "--no-webhook" not in flags
    status_port = free_port() if status and controller else -1
    metrics_port = free_port() if controller else -1
    webhook_port = free_port() if webhook else -1
    where = ["--kubeconfig", str(kubeconfig)] if kubeconfig is not None else []
    argv = [*(command or (sys.executable, "-m", "muster.cli", "run")), "--local", *where]
    argv += ["--status-addr", LOOPBACK, "--status-port", str(status_port)]
    argv += ["--metrics-port", str(metrics_port), "--webhook-metrics-port", str(webhook_port)]
    argv += flags
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **env} if env is not None else None,
        start_new_session=new_session,
    )

    def url(port: int) -> str | None:
        return f"http://{LOOPBACK}:{port}" if port >= 0 else None

    run = MusterRun(
        proc, url(status_port), url(metrics_port), url(webhook_port), [], keep_lines, log_path
    )
    run._reader = threading.Thread(target=run._read, name=f"muster-run-{proc.pid}", daemon=True)
    run._reader.start()
    # A --peering replica stays unsynced until it leads: started is all we can wait for.
    probes: list[tuple[str, str, bool]] = []
    if run.metrics_url is not None:
        probes.append(("controller", run.metrics_url, "--peering" not in flags))
    if run.webhook_metrics_url is not None:
        probes.append(("webhook", run.webhook_metrics_url, True))
    deadline = time.monotonic() + timeout
    waiting = list(probes)
    while waiting:
        if proc.poll() is not None:
            run.stop()
            raise LaunchError(
                f"muster run exited ({proc.returncode}) before it was ready:\n" + run.tail()
            )
        if time.monotonic() > deadline:
            run.stop()  # SIGTERM first: a clean stop unregisters the webhook
            names = " and ".join(name for name, _, _ in waiting)
            raise LaunchError(
                f"muster run: the {names} did not become ready within {timeout:.0f}s:\n"
                + run.tail()
            )
        waiting = [p for p in waiting if not is_ready(p[1], p[2])]
        if waiting:
            time.sleep(0.1)
    return run


def is_ready(base: str, synced: bool) -> bool:
    """`/healthz` answers; with `synced`, says the controller is synced or the webhook ready."""
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=2) as response:
            body: Any = json.load(response)
    except (OSError, urllib.error.URLError, ValueError):
        return False
    if not synced:
        return True
    return bool(isinstance(body, dict) and (body.get("synced") or body.get("ready")))
