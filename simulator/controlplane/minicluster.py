"""A stand-in for the Flux Operator: turns each MiniCluster into the Indexed Job the operator makes.

The real operator cannot be built here (the Go module proxy refuses its module path), so tests
and the kwok engine install `minicluster-crd.yaml` and run this reconciler. It creates what the
operator's `newMiniClusterJob` creates, which is all muster looks at: a Job named after the
MiniCluster, labelled with `spec.jobLabels`, Indexed, completions = parallelism = `spec.size`,
restartPolicy OnFailure, activeDeadlineSeconds from `spec.deadlineSeconds`, pod
labels/annotations/nodeSelector from `spec.pod`, and a controller owner reference to the
MiniCluster. (It also reads `spec.pod.tolerations`, which the stand-in CRD keeps, so pods can
land on tainted kwok nodes.) Flux itself, its ConfigMaps, Secrets and Services are not modelled.
"""

from __future__ import annotations

import threading
from importlib import resources
from typing import Any

import yaml

from admission.kubeapi import ApiError, KubeClient

CRD_NAME = "miniclusters.flux-framework.org"
MINICLUSTERS = "/apis/flux-framework.org/v1alpha2/miniclusters"


def install_crd(client: KubeClient) -> None:
    """Create the stand-in MiniCluster CRD if absent and wait until it is served."""
    crd = yaml.safe_load(
        resources.files("simulator.controlplane").joinpath("minicluster-crd.yaml").read_text()
    )
    apply_crd(client, crd)


def apply_crd(client: KubeClient, crd: dict[str, Any], timeout: float = 30) -> None:
    """Create a CRD (or leave an existing one) and wait for Established."""
    import time

    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    try:
        client.create(path, crd)
    except ApiError as exc:
        if exc.status != 409:
            raise
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = client.get(f"{path}/{crd['metadata']['name']}")
        for cond in current.get("status", {}).get("conditions") or []:
            if cond.get("type") == "Established" and cond.get("status") == "True":
                return
        time.sleep(0.1)
    raise TimeoutError(f"CRD {crd['metadata']['name']} not Established within {timeout:.0f}s")


def job_for(minicluster: dict[str, Any]) -> dict[str, Any]:
    """The Job the Flux Operator would create for this MiniCluster."""
    meta = minicluster["metadata"]
    spec = minicluster.get("spec") or {}
    pod = spec.get("pod") or {}
    size = int(spec.get("size", 1))
    pod_labels = {
        **(pod.get("labels") or {}),
        "namespace": meta["namespace"],
        "app.kubernetes.io/name": meta["name"],
    }
    containers = [
        {
            "name": c.get("name") or meta["name"],
            "image": c.get("image", "ghcr.io/flux-framework/flux-restful-api"),
            "resources": c.get("resources") or {},
        }
        for c in spec.get("containers") or [{}]
    ]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": dict(spec.get("jobLabels") or {}),
            "ownerReferences": [
                {
                    "apiVersion": minicluster["apiVersion"],
                    "kind": "MiniCluster",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "backoffLimit": 100,
            # The operator copies spec.deadlineSeconds (its CRD defaults it to about a year).
            **(
                {"activeDeadlineSeconds": int(spec["deadlineSeconds"])}
                if spec.get("deadlineSeconds") is not None
                else {}
            ),
            "completions": size,
            "parallelism": size,
            "completionMode": "Indexed",
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    "annotations": dict(pod.get("annotations") or {}),
                },
                "spec": {
                    "restartPolicy": "OnFailure",
                    "nodeSelector": dict(pod.get("nodeSelector") or {}),
                    "tolerations": list(pod.get("tolerations") or []),
                    "affinity": pod.get("affinity") or {},
                    "containers": containers,
                },
            },
        },
    }


class MiniClusterReconciler:
    """Polls MiniClusters and creates each one's Job once; run it in a background thread.

    With `namespace`, only that namespace's MiniClusters are reconciled (tests run one
    reconciler per test namespace; a cluster-wide one would also see earlier tests' namespaces
    while they are being deleted).
    """

    def __init__(
        self, client: KubeClient, namespace: str | None = None, interval: float = 0.2
    ) -> None:
        self.client = client
        self.path = (
            f"/apis/flux-framework.org/v1alpha2/namespaces/{namespace}/miniclusters"
            if namespace
            else MINICLUSTERS
        )
        self.interval = interval
        self.created: set[tuple[str, str]] = set()
        self.errors: list[str] = []
        """Refusals (4xx) and failed polls: what a test should see none of."""
        self.retried: list[str] = []
        """Creates the apiserver failed for a passing reason (5xx, 429), tried again."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="minicluster-reconciler")

    def start(self) -> MiniClusterReconciler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def reconcile_once(self) -> None:
        for mc in self.client.get(self.path)["items"]:
            self.reconcile(mc)

    def reconcile(self, mc: dict[str, Any]) -> bool:
        """Create one MiniCluster's Job unless it exists; True once it does (or never will).

        The kwok engine calls this with the body a create returned, as the operator reacts to
        a watch event at once; the polling loop then only catches what that missed.
        """
        key = (mc["metadata"]["namespace"], mc["metadata"]["name"])
        if key in self.created or mc["metadata"].get("deletionTimestamp"):
            # Like the operator: nothing new for an object that is going away.
            return True
        try:
            self.client.create(f"/apis/batch/v1/namespaces/{key[0]}/jobs", job_for(mc))
        except ApiError as exc:
            if exc.status == 403 and "being terminated" in exc.message:
                # The namespace is going away with the MiniCluster in it: nothing to make.
                self.created.add(key)
                return True
            if exc.status >= 500 or exc.status == 429:
                # The apiserver could not call the webhook in time (failurePolicy Fail) or is
                # overloaded: nothing was stored; the operator would retry, so do we.
                self.retried.append(exc.message)
                return False
            if exc.status != 409:
                # The webhook refused the Job: a real error, though we still retry like the
                # operator would.
                self.errors.append(exc.message)
                return False
        self.created.add(key)
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.reconcile_once()
            except (ApiError, OSError) as exc:
                self.errors.append(str(exc))
