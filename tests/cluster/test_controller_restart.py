"""State lives in the cluster: kill -9 the controller twenty times during a 5,000-Job burst.

The kills are spread over the admissions (one each time another 5,000/21 Jobs have been seen
admitted), and each new muster is killed again a moment after it is ready. `./run test` (and so
CI) runs it at half that scale, ten kills over 2,500 Jobs, about 240 Jobs between kills as at
full scale: the full run took 11 minutes of CI's 90. `MUSTER_FULL_BURSTS=1` runs the 20 kills
over 5,000 Jobs that docs/reliability.md reports. Every Job completes
exactly once (one pod, succeeded), none is admitted twice, and the quota held, as the test's
watch of the Jobs sees it at every revision, never exceeds the queue's nominal quota
(tests/faults.py). The quota is reached after every restart, yet 200 one-cpu gangs at a time
are more than this control plane finishes: the restarts and the apiserver, not the quota, set
the pace.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from kubeport.kubeapi import KubeClient
from tests.conftest import MusterProcess
from tests.faults import Burst, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

FULL = os.environ.get("MUSTER_FULL_BURSTS") == "1"
JOBS = 5000 if FULL else 2500
KILLS = 20 if FULL else 10
QUOTA_CPU = 200  # binds (each restart finds a backlog), yet outpaces the control plane
PAUSE = 2.0
"""Seconds a new muster runs (ready, admitting) before the next kill at the earliest."""


def test_kill_9_twenty_times_during_a_burst(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    restarts: list[float] = []
    with Burst(kube, namespace, jobs=JOBS, quota_cpu=QUOTA_CPU) as burst:
        burst.start()
        for kill in range(1, KILLS + 1):
            due = kill * JOBS // (KILLS + 1)
            wait_until(
                lambda: burst.ledger.admitted_count() >= due,  # noqa: B023 (called at once)
                900,
                f"{due} Jobs admitted before kill {kill}",
            )
            began = time.monotonic()
            muster.restart(signal.SIGKILL)  # returns once the new one is ready
            restarts.append(time.monotonic() - began)
            time.sleep(PAUSE)
        burst.finish(1800)
        burst.check()
    burst.report(
        f"controller kill -9 x{KILLS}",
        injected=f"kill -9 of muster run {KILLS} times, spread over the admissions",
        kills=KILLS,
        restart_seconds_mean=round(sum(restarts) / len(restarts), 1),
        restart_seconds_max=round(max(restarts), 1),
    )
