"""The MiniCluster CRD on the real apiserver: which one is installed, that a stand-in gives way
to the Flux Operator's, and that the installed schema refuses and prunes what the operator's does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kubeport.kubeapi import ApiError, KubeClient
from simulator.controlplane.minicluster import (
    CRD_ENV,
    CRD_NAME,
    CRDS,
    MiniClusterCrd,
    install_crd,
    minicluster_crd,
    storage_schema,
)

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("crds")]

CHOSEN = minicluster_crd()
STAND_IN = minicluster_crd({CRD_ENV: "stand-in"})


def installed(kube: KubeClient) -> dict[str, Any]:
    return kube.get(f"{CRDS}/{CRD_NAME}")


def put(kube: KubeClient, crd: MiniClusterCrd) -> None:
    body = {**crd.body, "metadata": {**crd.body["metadata"]}}
    body["metadata"]["resourceVersion"] = installed(kube)["metadata"]["resourceVersion"]
    kube.request("PUT", f"{CRDS}/{CRD_NAME}", body)


@pytest.fixture
def restore_chosen(kube: KubeClient) -> Iterator[None]:
    """Whatever a test does to the CRD, the session's choice is installed again afterwards."""
    yield
    if storage_schema(installed(kube)) != CHOSEN.schema():
        put(kube, CHOSEN)


def test_the_session_installed_the_chosen_crd(kube: KubeClient) -> None:
    assert storage_schema(installed(kube)) == CHOSEN.schema()


@pytest.mark.skipif(CHOSEN.stand_in, reason="no Flux Operator CRD beside the repository")
@pytest.mark.usefixtures("restore_chosen")
def test_a_stand_in_gives_way_to_the_real_crd_and_never_the_other_way(kube: KubeClient) -> None:
    put(kube, STAND_IN)
    assert install_crd(kube, CHOSEN) == f"replaced muster's stand-in with {CHOSEN.describe()}"
    assert storage_schema(installed(kube)) == CHOSEN.schema()
    # Asking for the stand-in where the real CRD is installed keeps the real one.
    outcome = install_crd(kube, STAND_IN)
    assert outcome.startswith("kept the installed MiniCluster CRD (not muster's stand-in)")
    assert storage_schema(installed(kube)) == CHOSEN.schema()
    assert install_crd(kube, CHOSEN) == f"{CHOSEN.describe()}, installed already"


def test_the_installed_schema_refuses_and_prunes_like_the_operators(
    kube: KubeClient, namespace: str
) -> None:
    """No muster queue label, so the webhook leaves these alone: what happens is the schema's."""
    path = f"/apis/flux-framework.org/v1alpha2/namespaces/{namespace}/miniclusters"
    body: dict[str, Any] = {
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": "plain"},
        "spec": {"size": 2},
    }
    with pytest.raises(ApiError) as error:
        kube.create(path, body)
    assert error.value.status == 422 and "spec.containers: Required value" in error.value.message
    body["spec"] = {
        "size": 2,
        "containers": [{"image": "lammps"}],
        "pod": {"affinity": {"podAntiAffinity": {}}, "nodeSelector": {"pool": "cpu"}},
    }
    with pytest.raises(ApiError) as error:
        kube.create(path, {**body, "spec": {**body["spec"], "size": "two"}})
    assert error.value.status == 422 and "spec.size" in error.value.message
    stored = kube.create(path, body)
    assert stored["spec"]["pod"] == {"nodeSelector": {"pool": "cpu"}}
    # Both CRDs default the runtime limit the operator copies to the Job.
    assert stored["spec"]["deadlineSeconds"] == 31500000
