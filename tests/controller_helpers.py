"""Helpers for controller cluster tests: queues, gangs, kwok node groups, sampling Jobs."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from kubeport.kubeapi import ApiError, KubeClient
from policies import Resources
from policies.vocabulary import ADMITTED, EVICTIONS
from simulator.controlplane.nodes import (
    NODE_GROUP_LABEL,
    kwok_node,
    wait_nodes_ready,
)
from tests.kube import job_condition

QUEUES = "/apis/muster.dev/v1alpha1/queues"


def jobs_path(namespace: str) -> str:
    return f"/apis/batch/v1/namespaces/{namespace}/jobs"


def create_queue(kube: KubeClient, name: str, spec: Mapping[str, Any]) -> None:
    body = {"apiVersion": "muster.dev/v1alpha1", "kind": "Queue", "metadata": {"name": name}}
    kube.create(QUEUES, {**body, "spec": dict(spec)})


def delete_queue(kube: KubeClient, name: str) -> None:
    try:
        kube.delete(f"{QUEUES}/{name}")
    except ApiError as exc:
        if exc.status != 404:
            raise


def event_reasons(kube: KubeClient, namespace: str, name: str) -> list[str]:
    """Reasons of the Events about object `name` in `namespace`."""
    events = kube.get(
        f"/api/v1/namespaces/{namespace}/events", {"fieldSelector": f"involvedObject.name={name}"}
    )["items"]
    return [e["reason"] for e in events]


def admitted(job: Mapping[str, Any]) -> str | None:
    return ((job.get("metadata") or {}).get("annotations") or {}).get(ADMITTED)


def evictions(job: Mapping[str, Any]) -> int:
    return int(((job.get("metadata") or {}).get("annotations") or {}).get(EVICTIONS, "0"))


def finished(job: Mapping[str, Any]) -> bool:
    return job_condition(dict(job), "Complete") or job_condition(dict(job), "Failed")


def job_cpu(job: Mapping[str, Any]) -> int:
    """Millicores a job holds as admitted: admitted size x the pod's cpu request."""
    size = int(str(admitted(job)).rsplit("/", 1)[1])
    container = job["spec"]["template"]["spec"]["containers"][0]
    requests = Resources.parse(container["resources"]["requests"], field="requests")
    return size * requests["cpu"]


def all_jobs(kube: KubeClient, namespace: str) -> list[dict[str, Any]]:
    return list(kube.get(jobs_path(namespace))["items"])


@contextmanager
def in_background(
    kube: KubeClient, look: Callable[[KubeClient], None], interval: float
) -> Iterator[None]:
    """Calls `look` with a client of its own every `interval` seconds in a thread while the
    body runs; a look the apiserver answers slowly or refuses is simply taken again."""
    stop = threading.Event()

    def run() -> None:
        with KubeClient(kube.credentials) as own:
            while not stop.wait(interval):
                try:
                    look(own)
                except (ApiError, OSError):
                    continue  # a slow or refused LIST on a loaded apiserver: look again

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextmanager
def sampling(
    kube: KubeClient, namespace: str, interval: float = 0.3
) -> Iterator[list[list[dict[str, Any]]]]:
    """Lists the namespace's Jobs every `interval` seconds in a thread while the body runs."""
    samples: list[list[dict[str, Any]]] = []
    with in_background(kube, lambda own: samples.append(all_jobs(own, namespace)), interval):
        yield samples


def create_nodes(
    kube: KubeClient,
    group: str,
    names_labels: Mapping[str, Mapping[str, str]],
    *,
    cpu: str = "8",
    memory: str = "30Gi",
    taints: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
) -> None:
    """kwok nodes of one group with extra labels (and taints) per node; wait until Ready."""
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    for name, labels in names_labels.items():
        body = kwok_node(
            name, allocatable, {NODE_GROUP_LABEL: group, **labels}, (taints or {}).get(name) or ()
        )
        try:
            kube.create("/api/v1/nodes", body)
        except ApiError as exc:
            if exc.status != 409:
                raise
    wait_nodes_ready(kube, len(names_labels), f"{NODE_GROUP_LABEL}={group}", 120)


def delete_nodes(kube: KubeClient, group: str) -> None:
    nodes = kube.get("/api/v1/nodes", {"labelSelector": f"{NODE_GROUP_LABEL}={group}"})["items"]
    for node in nodes:
        try:
            kube.delete(f"/api/v1/nodes/{node['metadata']['name']}")
        except ApiError as exc:
            if exc.status != 404:
                raise


def http_json(url: str, timeout: float = 30) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


def pending_reason(url: str, *codes: str) -> dict[str, Any] | None:
    """The status service's answer for one gang once it carries a reason (one of `codes`, if
    given), else None.

    The service answers 404 until the controller's watch has seen the new Job; right after a
    create that is a normal wait, not an error. Jobs and Queues arrive on separate watches, so a
    gang created right after its Queue may first wait with QueueNotFound: pass the code the
    test expects to wait past that.
    """
    try:
        status: dict[str, Any] = http_json(url)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    reason = status.get("reason")
    if not reason or (codes and reason.get("code") not in codes):
        return None
    return status


def metric(metrics_url: str, name: str) -> float:
    with urllib.request.urlopen(f"{metrics_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_all_finished(kube: KubeClient, namespace: str, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    jobs: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        jobs = all_jobs(kube, namespace)
        if len(jobs) >= count and all(finished(j) for j in jobs):
            return
        time.sleep(1)
    left = [j["metadata"]["name"] for j in jobs if not finished(j)]
    raise AssertionError(
        f"{len(left)} of {count} jobs not finished after {timeout:.0f}s: {left[:10]}"
    )
