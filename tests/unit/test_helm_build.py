"""Helm, built from its Go module into the cache beside the control plane (`muster cluster
build`): where it lives, what its build stamps, how a failed build reads, and the built binary."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from simulator.controlplane import build, versions


def test_helm_is_cached_by_version(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MUSTER_CACHE", str(tmp_path))
    assert build.helm_path() == tmp_path / f"helm-{versions.HELM}" / "bin" / "helm"


def test_helm_ldflags_stamp_its_version_and_its_client_go_kubernetes() -> None:
    gomod = (
        "module helm.sh/helm/v3\n\nrequire (\n\tk8s.io/api v0.37.0\n\tk8s.io/client-go v0.37.2\n)\n"
    )
    flags = build.helm_ldflags(gomod)
    assert f"-X helm.sh/helm/v3/internal/version.version={versions.HELM}" in flags
    # What `helm template` reports as .Capabilities.KubeVersion and `helm lint` checks against.
    assert "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37" in flags
    assert "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37" in flags
    with pytest.raises(build.BuildError, match=r"requires no k8s\.io/client-go"):
        build.helm_ldflags("module helm.sh/helm/v3\n")


def test_too_old_go_for_helm_names_helm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "go"
    fake.write_text("#!/bin/sh\necho go version go1.25.3 linux/amd64\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    # Kubernetes 1.37 needs Go 1.26 too; each refusal names what needs it.
    with pytest.raises(
        build.BuildError, match=rf"Go 1\.25 is too old: Kubernetes {versions.KUBERNETES}"
    ):
        build.check_go()
    with pytest.raises(build.BuildError, match=rf"Go 1\.25 is too old: helm {versions.HELM}"):
        build.ensure_helm(tmp_path / "cache", log=lambda _: None)


def test_an_unreachable_module_proxy_fails_the_helm_build_with_a_hint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    monkeypatch.setenv("GOPROXY", f"http://127.0.0.1:{closed}")
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "modcache"))
    monkeypatch.setenv("GOSUMDB", "off")
    with pytest.raises(build.BuildError) as failed:
        build.ensure_helm(tmp_path / "cache", log=lambda _: None)
    message = str(failed.value)
    assert message.startswith(f"downloading helm.sh/helm/v3@{versions.HELM} failed")
    assert "check that the Go module proxy is reachable" in message
    assert not build.helm_path(tmp_path / "cache").parent.parent.exists()  # nothing half-built


def test_the_built_helm_is_the_pinned_release() -> None:
    helm = build.helm_path()
    assert os.access(helm, os.X_OK), f"{helm} is not built: run `muster cluster build`"
    done = subprocess.run([str(helm), "version"], capture_output=True, text=True, check=True)
    assert f'Version:"{versions.HELM}"' in done.stdout
    assert 'GoVersion:"go' in done.stdout
