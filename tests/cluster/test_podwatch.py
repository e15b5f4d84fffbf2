"""The controller's lean pod watch (admission.cachewatch) against the real apiserver."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from admission.cache import Cache
from admission.cachewatch import CacheWatch
from admission.listing import PODS
from kubeport.kubeapi import KubeClient
from kubeport.streamwatch import list_collection
from tests import builders

pytestmark = [pytest.mark.cluster]


async def _until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def _pod_watch(kube: KubeClient, cache: Cache) -> CacheWatch:
    """The controller's pod watch (30 s watch requests); call in a running loop."""
    loop = asyncio.get_running_loop()
    return CacheWatch(kube, cache, loop, "pod", PODS, None, list_collection, 30)


def _pods_of(cache: Cache, namespace: str, client: KubeClient) -> set[str]:
    """uids of the namespace's pods the cache holds (as the API lists them)."""
    listed = client.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    uids = {p["metadata"]["uid"] for p in listed}
    return uids & set(cache.pods)


def test_pod_watch_follows_binding_and_deletion(kube: KubeClient, namespace: str) -> None:
    async def scenario() -> None:
        cache = Cache()
        items, version = list_collection(kube, PODS)
        for item in items:
            cache.apply_pod("ADDED", item)
        watch = CacheWatch(
            kube, cache, asyncio.get_running_loop(), "pod", PODS, None, list_collection, 30
        )
        watch.start(version)
        try:
            kube.create(
                f"/apis/batch/v1/namespaces/{namespace}/jobs",
                builders.job("w", pods=3, runtime="600s"),
            )
            await _until(
                lambda: (
                    len(_pods_of(cache, namespace, kube)) == 3
                    and all(cache.pods[uid].node for uid in _pods_of(cache, namespace, kube))
                ),
                60,
                "three bound pods in the cache",
            )
            held = {uid: cache.pods[uid] for uid in _pods_of(cache, namespace, kube)}
            assert all(cache.pods.used[p.node]["pods"] >= 1 for p in held.values())
            kube.request(
                "DELETE",
                f"/apis/batch/v1/namespaces/{namespace}/jobs/w",
                {"propagationPolicy": "Foreground", "gracePeriodSeconds": 0},
            )
            await _until(
                lambda: not (set(held) & set(cache.pods)), 60, "the pods to leave the cache"
            )
            assert watch.events > 0
        finally:
            await asyncio.to_thread(watch.stop)

    asyncio.run(scenario())


def test_relist_drops_pods_that_are_gone_and_keeps_the_rest(
    kube: KubeClient, namespace: str
) -> None:
    """What a 410 Gone leads to (a real apiserver rarely says it in a short test: its watch
    cache replays old versions): LIST again, drop what vanished, go on from the LIST."""

    async def scenario() -> None:
        cache = Cache()
        kube.create(
            f"/apis/batch/v1/namespaces/{namespace}/jobs",
            builders.job("r", pods=2, runtime="600s"),
        )
        await _until(
            lambda: len(kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]) == 2,
            60,
            "the Job's pods",
        )
        ghost = {
            "metadata": {"uid": "ghost-uid", "namespace": namespace, "name": "ghost"},
            "spec": {"nodeName": "nowhere", "containers": []},
            "status": {"phase": "Running"},
        }
        cache.apply_pod("ADDED", ghost)
        watch = CacheWatch(
            kube, cache, asyncio.get_running_loop(), "pod", PODS, None, list_collection, 30
        )
        version = await asyncio.to_thread(watch.stream._relist)
        await _until(lambda: "ghost-uid" not in cache.pods, 10, "the relist to be applied")
        assert version > 0 and watch.relists == 1
        assert len(_pods_of(cache, namespace, kube)) == 2
        assert "nowhere" not in cache.pods.used or not cache.pods.used["nowhere"]["pods"]

    asyncio.run(scenario())
