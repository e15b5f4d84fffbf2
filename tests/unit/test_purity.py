"""policies/ stays pure: importing it (and running a plan) loads neither kopf nor kubernetes,
nor the project's I/O packages. A fresh interpreter checks, so other tests' imports don't count."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import policies
from policies import plan
from tests.unit.test_policies import _snapshot
plan(_snapshot())
bad = sorted(
    m for m in sys.modules
    if m.split(".")[0]
    in {"kopf", "kubernetes", "aiohttp", "admission", "webhook", "kubeport", "simulator"}
)
print(",".join(bad))
"""


def test_policies_import_no_kubernetes_kopf_or_io() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"policies pulled in: {done.stdout.strip()}"
