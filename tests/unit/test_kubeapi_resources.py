"""Typed resources build every API path (kubeport.kubeapi.Resource): no raw `/apis/...`
strings in callers."""

from __future__ import annotations

import pytest

from kubeport import kubeapi


def test_core_and_group_paths() -> None:
    assert kubeapi.PODS.path() == "/api/v1/pods"
    assert kubeapi.PODS.path("ns") == "/api/v1/namespaces/ns/pods"
    assert kubeapi.PODS.path("ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert kubeapi.JOBS.path("ns", "j") == "/apis/batch/v1/namespaces/ns/jobs/j"
    assert kubeapi.QUEUES.path() == "/apis/muster.dev/v1alpha1/queues"
    assert kubeapi.QUEUES.path(name="gpu") == "/apis/muster.dev/v1alpha1/queues/gpu"
    assert kubeapi.NAMESPACES.path(name="ns") == "/api/v1/namespaces/ns"
    assert kubeapi.MINICLUSTERS.api_version == "flux-framework.org/v1alpha2"
    assert kubeapi.EVENTS.api_version == "v1"


def test_scope_mistakes_are_refused() -> None:
    with pytest.raises(ValueError, match="cluster-scoped"):
        kubeapi.QUEUES.path("ns")
    with pytest.raises(ValueError, match="needs its namespace"):
        kubeapi.JOBS.path(name="j")
