"""A tiny outside controller for the `--admission external` test: the stand-in for Kueue.

    python fifo_controller.py KUBECONFIG KEY=VALUE CAPACITY

Every 0.2 s it lists the Jobs labelled KEY=VALUE and unsuspends them strictly in creation
order while the pods of the Jobs it admitted and that have not finished fit in CAPACITY. The
order is what the API tells: creationTimestamp, which has whole seconds, then the name; so
Jobs created in the same second go by name (DESIGN.md: why muster stamps its own order).
Like Kueue without a LocalQueue, it admits nothing in a namespace that has no ConfigMap named
`fifo-queue` (what the test's --namespace-manifest creates).
It prints `admitted NAMESPACE/NAME` for each Job it unsuspends.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient

QUEUE_CONFIGMAP = "fifo-queue"
CONFIGMAPS = kubeapi.Resource("", "v1", "configmaps")


def finished(job: Mapping[str, Any]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions
    )


def admit_in_order(client: KubeClient, selector: str, capacity: int) -> None:
    jobs = client.get(kubeapi.JOBS.path(), {"labelSelector": selector})["items"]
    queues = client.get(CONFIGMAPS.path(), {"fieldSelector": f"metadata.name={QUEUE_CONFIGMAP}"})
    ready = {c["metadata"]["namespace"] for c in queues["items"]}
    live = [j for j in jobs if not finished(j)]
    in_use = sum(j["spec"]["parallelism"] for j in live if not j["spec"].get("suspend"))
    waiting = sorted(
        (j for j in live if j["spec"].get("suspend")),
        key=lambda j: (j["metadata"]["creationTimestamp"], j["metadata"]["name"]),
    )
    for job in waiting:
        meta = job["metadata"]
        if meta["namespace"] not in ready:
            continue
        size = int(job["spec"]["parallelism"])
        if in_use + size > capacity:
            return  # strictly in order: the head waits, and so does everything behind it
        client.patch(
            kubeapi.JOBS.path(meta["namespace"], meta["name"]), {"spec": {"suspend": False}}
        )
        in_use += size
        print(f"admitted {meta['namespace']}/{meta['name']}", flush=True)


def main(argv: list[str]) -> int:
    kubeconfig, selector, capacity = argv[0], argv[1], int(argv[2])
    with KubeClient.from_kubeconfig(kubeconfig) as client:
        while True:
            try:
                admit_in_order(client, selector, capacity)
            except (ApiError, OSError) as exc:
                print(f"error: {exc}", file=sys.stderr, flush=True)
            time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
