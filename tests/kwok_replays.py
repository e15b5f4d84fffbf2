"""`muster sim --engine kwok` as the kwok engine's cluster tests run it: the command itself, and
a trace replayed with both admissions on a cluster of the test's own (brought up and stopped by
the replay)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from simulator.controlplane.build import Binaries
from simulator.controlplane.cluster import LocalCluster


def muster_sim(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`muster sim ARGS` in a child process, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "muster.cli", "sim", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def replay_both(trace: str, cluster: str, folder: Path) -> Path:
    """Replay ``trace`` (its YAML) with admission none and muster at time scale 20 on a fresh
    cluster named ``cluster``; the output folder. Fails the test when the binaries are missing,
    a cluster of that name runs already, or the replay fails."""
    if Binaries.at().missing():
        pytest.fail("control-plane binaries missing: run `muster cluster build`")
    if LocalCluster(name=cluster).is_healthy():
        pytest.fail(f"a cluster named {cluster!r} is running already; stop it first")
    path = folder / "trace.yaml"
    path.write_text(trace)
    out = folder / "out"
    proc = muster_sim(
        str(path),
        "--engine",
        "kwok",
        "--admission",
        "both",
        "--time-scale",
        "20",
        # Stuck only after 15 quiet seconds, not 5: on a loaded CI machine admitting the next
        # gang after the last one finished can take a few seconds.
        "--stall",
        "15",
        "--cluster-name",
        cluster,
        "--out",
        str(out),
        "--quiet",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out
