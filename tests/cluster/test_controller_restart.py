"""State lives in the cluster: kill -9 the controller five times during a 2000-Job burst.

Every Job completes exactly once (one pod, succeeded), none is admitted twice, and the quota the
API shows held (sampled throughout) never exceeds the queue's nominal quota.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import defaultdict

import pytest

from admission.kubeapi import ApiError, KubeClient
from tests.conftest import MusterProcess
from tests.controller_helpers import (
    admitted,
    create_queue,
    delete_queue,
    finished,
    gang_job,
    job_cpu,
    jobs_path,
    sampling,
    wait_all_finished,
)

pytestmark = [pytest.mark.cluster]

JOBS = 2000
QUOTA_M = 100_000  # 100 cpu: 100 one-pod gangs of 1 cpu at a time


def test_kill_9_five_times_during_a_burst(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    queue = f"{namespace}-q"
    create_queue(kube, queue, {"nominal": {"cpu": "100"}})
    done = threading.Event()

    def submit(part: list[str]) -> None:
        with KubeClient(kube.credentials) as own:
            for name in part:
                while True:
                    try:
                        own.create(
                            jobs_path(namespace), gang_job(name, queue, pods=1, runtime="1s")
                        )
                        break
                    except ApiError as exc:
                        if exc.status == 409:
                            break
                        # The webhook is down while the controller restarts (failurePolicy Fail).
                        time.sleep(0.5)
                    except OSError:
                        time.sleep(0.5)

    names = [f"j-{i:04d}" for i in range(JOBS)]
    try:
        with sampling(kube, namespace, interval=1.0) as samples:
            threads = [threading.Thread(target=submit, args=(names[i::8],)) for i in range(8)]
            for t in threads:
                t.start()
            for _ in range(5):
                time.sleep(6)
                muster.restart(signal.SIGKILL)
            for t in threads:
                t.join()
            done.set()
            wait_all_finished(kube, namespace, JOBS, 900)
            jobs = kube.get(jobs_path(namespace))["items"]
    finally:
        delete_queue(kube, queue)

    assert len(jobs) == JOBS
    for job in jobs:
        status = job["status"]
        assert admitted(job), job["metadata"]["name"]
        assert status.get("succeeded") == 1 and not status.get("failed"), job["metadata"]["name"]
    # Each Job ran one pod: a second admission would have started a second one.
    pods = kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    per_job: dict[str, int] = defaultdict(int)
    for pod in pods:
        per_job[pod["metadata"]["labels"].get("job-name", "")] += 1
    assert max(per_job.values(), default=1) == 1
    for sample in samples:
        held = sum(job_cpu(j) for j in sample if admitted(j) and not finished(j))
        assert held <= QUOTA_M, f"{held}m cpu held > {QUOTA_M}m"
