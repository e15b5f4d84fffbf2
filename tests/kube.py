"""Helpers for cluster tests: manifests and polling against the real apiserver."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from kubeport.kubeapi import ApiError, KubeClient
from policies.vocabulary import SUBMITTED

T = TypeVar("T")


def wait_for(
    probe: Callable[[], T | None], *, timeout: float, interval: float = 0.25, what: str
) -> T:
    """Poll until `probe` returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def job_condition(job: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in job.get("status", {}).get("conditions") or []
    )


def create_through_webhook(
    kube: KubeClient, path: str, body: dict[str, Any], *, timeout: float = 30
) -> dict[str, Any]:
    """Create `body`, retrying while the apiserver cannot call the webhook yet.

    The apiserver picks up a new or changed MutatingWebhookConfiguration through an informer;
    until it has, it may call the old endpoint, and with failurePolicy Fail the create is
    refused (500, nothing stored). A 409 on a retry means an earlier try was stored after all.
    """
    name = body["metadata"]["name"]
    deadline = time.monotonic() + timeout
    tried = False
    while True:
        try:
            return kube.create(path, body)
        except ApiError as exc:
            if exc.status == 409 and tried:
                return kube.get(f"{path}/{name}")
            if exc.status != 500 or "failed calling webhook" not in exc.message:
                raise
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the apiserver could not call the webhook for {timeout:.0f}s: {exc}"
                ) from exc
        tried = True
        time.sleep(0.5)


def wait_webhook_stamps(
    kube: KubeClient, path: str, body: dict[str, Any], *, timeout: float = 30
) -> None:
    """Return once a dry run of creating `body` (admission runs, nothing is stored) comes back
    stamped by muster's webhook.

    Right after one `muster run --local` replaced another, the apiserver's informer may still
    hold the old MutatingWebhookConfiguration (the create is refused: 500) or, once the old
    one was deleted and before the new one is seen, none at all: the Job is then stored
    unmutated, never suspended and never admitted. Create for real only once this returns.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = kube.request("POST", path, body, params={"dryRun": "All"})
            if SUBMITTED in ((got.get("metadata") or {}).get("annotations") or {}):
                return
            last = "stored unmutated: the apiserver calls no muster webhook yet"
        except ApiError as exc:
            if exc.status != 500 or "failed calling webhook" not in exc.message:
                raise
            last = exc.message
        if time.monotonic() > deadline:
            raise AssertionError(f"the webhook did not stamp a dry run for {timeout:.0f}s: {last}")
        time.sleep(0.25)
