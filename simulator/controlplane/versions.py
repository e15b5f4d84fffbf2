"""Every pinned version of the local control plane, in one place.

Changing a version here makes `muster cluster build` build that component again into a new
cache directory; the old one stays until removed by hand.
"""

from __future__ import annotations

from typing import Final

KUBERNETES: Final = "v1.35.4"
"""k8s.io/kubernetes release; every staging module k8s.io/<m> is pinned to v0.<minor>.<patch>."""

ETCD: Final = "v3.5.35"
"""go.etcd.io/etcd/server/v3 release (etcd 3.5 is supported by Kubernetes 1.35)."""

KWOK: Final = "v0.7.0"
"""sigs.k8s.io/kwok release; only the `kwok` controller binary is built."""

MIN_GO: Final = (1, 25)
"""Kubernetes 1.35's go.mod says `go 1.25.0`; older toolchains cannot build it."""


def staging_version(kubernetes: str = KUBERNETES) -> str:
    """The version of every k8s.io staging module in a Kubernetes release (v1.35.4 → v0.35.4)."""
    major, minor, patch = kubernetes.lstrip("v").split(".")
    if major != "1":
        raise ValueError(
            f"unexpected Kubernetes version {kubernetes!r}: expected v1.<minor>.<patch>"
        )
    return f"v0.{minor}.{patch}"
