"""Every pinned version of the local control plane, in one place.

Changing a version here makes `muster cluster build` build that component again into a new
cache directory; the old one stays until removed by hand.
"""

from __future__ import annotations

from typing import Final

KUBERNETES: Final = "v1.37.2"
"""k8s.io/kubernetes release; every staging module k8s.io/<m> is pinned to v0.<minor>.<patch>."""

ETCD: Final = "v3.5.35"
"""go.etcd.io/etcd/server/v3 release. Kubernetes 1.37 still supports etcd 3.5 (kubeadm's
`MinExternalEtcdVersion` is 3.5.24-0 in cmd/kubeadm/app/constants/constants.go), though it is
built against the 3.7 client and kubeadm deploys 3.7.0."""

KWOK: Final = "v0.7.0"
"""sigs.k8s.io/kwok release; only the `kwok` controller binary is built."""

MIN_GO: Final = (1, 26)
"""Kubernetes 1.37's go.mod says `go 1.26.0`; older toolchains cannot build it."""

HELM: Final = "v3.22.0"
"""helm.sh/helm/v3 release; the `helm` command the chart's tests (charts/muster) run. Not part
of the control plane, built by the same machinery (`muster cluster build`)."""

HELM_MIN_GO: Final = (1, 26)
"""Helm 3.22's go.mod says `go 1.26.0`."""

JOBSET: Final = "v0.12.0"
"""sigs.k8s.io/jobset, built from its source beside the repository (`../shared/src/jobset`, not
served by the module proxy); the cache key adds a digest of that source
(`simulator.controlplane.operators`)."""

FLUX_OPERATOR: Final = "v0.2.1-main.20260627"
"""github.com/flux-framework/flux-operator (0.2.1 and its main branch of 2026-06-27), built from
`../shared/src/flux-operator` like JobSet."""


def staging_version(kubernetes: str = KUBERNETES) -> str:
    """The version of every k8s.io staging module in a Kubernetes release (v1.35.4 → v0.35.4)."""
    major, minor, patch = kubernetes.lstrip("v").split(".")
    if major != "1":
        raise ValueError(
            f"unexpected Kubernetes version {kubernetes!r}: expected v1.<minor>.<patch>"
        )
    return f"v0.{minor}.{patch}"
