"""The processes a local control plane runs, supervised (`Supervisor`): each started in its own
session with its log file, recorded (pid, start time, command, log) in the cluster's
`processes.json`, waited for until it answers its health check, and stopped by its recorded
pid, after checking that the pid still belongs to the process we started (same start time), so
nothing else is ever signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from simulator.controlplane.errors import ClusterError

_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
"""Processes this Python process started, kept so they are waited on (not leaked) at `down`."""


@dataclass(frozen=True)
class ProcessRecord:
    component: str
    pid: int
    start_ticks: int
    argv: list[str]
    log: str


def start_ticks(pid: int) -> int | None:
    """The process start time in clock ticks since boot, or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22, counted after the parenthesised command name (which may contain spaces).
    return int(stat.rsplit(")", 1)[1].split()[19])


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process has used so far, or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 (1-based, counting the pid and the command name).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def alive(record: ProcessRecord) -> bool:
    """The recorded process still runs (the same pid AND start time; not a zombie)."""
    ticks = start_ticks(record.pid)
    if ticks is None or ticks != record.start_ticks:
        return False
    try:
        state = Path(f"/proc/{record.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def reap(pid: int) -> None:
    """Collect our own exited children so they do not linger as zombies."""
    proc = _CHILDREN.get(pid)
    if proc is not None:
        if proc.poll() is not None:
            del _CHILDREN[pid]
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Supervisor:
    """The processes of one cluster's state directory: started, recorded, awaited, stopped."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    @property
    def records_path(self) -> Path:
        return self.state_dir / "processes.json"

    def records(self) -> list[ProcessRecord]:
        try:
            raw = json.loads(self.records_path.read_text())
        except (OSError, ValueError):
            return []
        return [ProcessRecord(**r) for r in raw]

    def _save(self, records: Sequence[ProcessRecord]) -> None:
        tmp = self.records_path.with_suffix(".tmp")
        tmp.write_text(json.dumps([r.__dict__ for r in records], indent=2))
        tmp.rename(self.records_path)

    def spawn(self, component: str, argv: list[str], records: list[ProcessRecord]) -> None:
        """Start ``component`` in its own session, its output in logs/<component>.log, and
        record it (with ``records``, the cluster's processes so far)."""
        log_path = self.state_dir / "logs" / f"{component}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log_file:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.state_dir,
            )
        _CHILDREN[proc.pid] = proc
        ticks = start_ticks(proc.pid)
        records.append(ProcessRecord(component, proc.pid, ticks or 0, argv, str(log_path)))
        self._save(records)

    def wait(
        self,
        component: str,
        records: Sequence[ProcessRecord],
        check: Callable[[], bool],
        timeout: float,
    ) -> None:
        """Until ``component`` answers ``check``; raise with the end of its log if it exits or
        does not answer in ``timeout`` seconds."""
        record = next(r for r in records if r.component == component)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not alive(record):
                log = Path(record.log)
                hint = ""
                if "address already in use" in tail(log, 50):
                    hint = "\nhint: a port was taken between picking it and binding; run up again"
                raise ClusterError(f"{component} exited at start; log {log}:\n{tail(log)}{hint}")
            with contextlib.suppress(OSError, ValueError, ssl.SSLError):
                if check():
                    return
            time.sleep(0.2)
        raise ClusterError(
            f"{component} did not become healthy within {timeout:.0f}s; "
            f"log {record.log}:\n{tail(Path(record.log))}"
        )

    def kill(self, record: ProcessRecord, sig: int) -> None:
        """Signal one recorded process and wait until it is gone."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, sig)
        while alive(record):
            reap(record.pid)
            time.sleep(0.05)
        reap(record.pid)

    def discard(self, component: str, records: list[ProcessRecord]) -> None:
        """Kill ``component`` (a start that failed) and drop it from ``records`` and the file,
        so the cluster's health is the rest's."""
        for record in [r for r in records if r.component == component]:
            self.kill(record, signal.SIGKILL)
            records.remove(record)
        self._save(records)

    def stop_all(self) -> list[int]:
        """Stop every live recorded process, newest first (SIGTERM, then SIGKILL after 15 s
        in all); returns the pids stopped."""
        stopped: list[int] = []
        every = self.records()
        records = [r for r in reversed(every) if alive(r)]
        for record in records:
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for record in records:
            while alive(record) and time.monotonic() < deadline:
                reap(record.pid)
                time.sleep(0.05)
            if alive(record):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(record.pid, signal.SIGKILL)
                while alive(record):
                    reap(record.pid)
                    time.sleep(0.05)
            stopped.append(record.pid)
        for record in every:
            reap(record.pid)
        return stopped
