"""Control-plane building blocks that need no running cluster: versions, wrapper, PKI, config."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from simulator.controlplane import build, versions
from simulator.controlplane.cluster import LocalCluster
from simulator.controlplane.components import API_ONLY, free_ports
from simulator.controlplane.errors import ClusterError
from simulator.controlplane.nodes import NodeShape
from simulator.controlplane.pki import create_cluster_pki


def test_staging_version_follows_the_kubernetes_minor_and_patch() -> None:
    assert versions.staging_version("v1.35.4") == "v0.35.4"
    with pytest.raises(ValueError, match="expected v1"):
        versions.staging_version("v2.0.0")


def test_wrapper_gomod_pins_every_staging_module_to_the_release() -> None:
    gomod = build.kubernetes_wrapper_gomod(["k8s.io/api", "k8s.io/client-go"])
    assert f"require k8s.io/kubernetes {versions.KUBERNETES}" in gomod
    staging = versions.staging_version()
    assert f"\tk8s.io/api => k8s.io/api {staging}" in gomod
    assert f"\tk8s.io/client-go => k8s.io/client-go {staging}" in gomod


def test_ldflags_stamp_the_version() -> None:
    flags = build.kubernetes_ldflags()
    assert f"gitVersion={versions.KUBERNETES}" in flags
    assert "gitMinor=" + versions.KUBERNETES.split(".")[1] in flags


def test_missing_go_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(build.BuildError, match=r"go not found on PATH.*install Go >= 1\.26"):
        build.check_go()


def test_too_old_go_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "go"
    fake.write_text("#!/bin/sh\necho go version go1.21.0 linux/amd64\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(build.BuildError, match=r"Go 1\.21 is too old"):
        build.check_go()


def test_a_failed_module_download_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The real `go` against a module proxy that does not answer (a closed loopback port) and an
    empty module cache: the build stops with the step, the end of its log and a hint."""
    import socket

    with socket.socket() as probe:  # a loopback port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    monkeypatch.setenv("GOPROXY", f"http://127.0.0.1:{closed}")
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "modcache"))
    monkeypatch.setenv("GOSUMDB", "off")
    with pytest.raises(build.BuildError) as failed:
        build.build_etcd(build.check_go(), tmp_path / "cache", log=lambda _: None)
    message = str(failed.value)
    assert message.startswith(f"go build of etcd {versions.ETCD} failed (exit 1); full log: ")
    assert "--- last lines ---" in message and "connection refused" in message
    assert "hint: a module download failed; check that the Go module proxy is reachable" in message
    assert not (tmp_path / "cache" / f"etcd-{versions.ETCD}").exists()  # nothing half-installed


def _only_etcd_missing(root: Path) -> None:
    for path in build.Binaries.at(root).all():
        if path.name != "etcd":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("#!/bin/sh\n")
            path.chmod(0o755)


def _etcd_on_path(monkeypatch: pytest.MonkeyPatch, folder: Path, version: str) -> Path:
    """A fake `etcd` that reports `version`, first on PATH."""
    folder.mkdir()
    fake = folder / "etcd"
    fake.write_text(f"#!/bin/sh\necho 'etcd Version: {version}'\necho 'Go Version: go1.19'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return fake


def _failing_etcd_build(go: str, root: Path, log: build.Log) -> None:
    raise build.BuildError("go build of etcd failed (exit 1)")


def test_a_failed_etcd_build_falls_back_to_debians_etcd(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root = tmp_path / "cache"
    _only_etcd_missing(root)
    fake = _etcd_on_path(monkeypatch, tmp_path / "usr-bin", "3.4.23")
    monkeypatch.setattr(build, "build_etcd", _failing_etcd_build)
    said: list[str] = []
    binaries = build.ensure_built(root, log=said.append)
    assert binaries.etcd == root / build.SYSTEM_ETCD / "bin" / "etcd"
    assert binaries.etcd.resolve() == fake.resolve()
    assert binaries.missing() == []
    assert any("using the machine's etcd 3.4.23" in line for line in said), said
    assert build.Binaries.at(root).etcd == binaries.etcd  # found again without building


def test_without_a_machine_etcd_the_build_error_says_how_to_get_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root = tmp_path / "cache"
    _only_etcd_missing(root)
    _etcd_on_path(monkeypatch, tmp_path / "old-bin", "3.3.25")  # too old
    monkeypatch.setattr(build, "build_etcd", _failing_etcd_build)
    with pytest.raises(build.BuildError) as failed:
        build.ensure_built(root, log=lambda _: None)
    message = str(failed.value)
    assert message.startswith("go build of etcd failed (exit 1)")
    assert "apt-get install etcd-server" in message
    assert not (root / build.SYSTEM_ETCD).exists()


def test_cache_is_keyed_by_version(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MUSTER_CACHE", str(tmp_path))
    binaries = build.Binaries.at()
    assert binaries.kube_apiserver == tmp_path / f"k8s-{versions.KUBERNETES}/bin/kube-apiserver"
    assert binaries.etcd == tmp_path / f"etcd-{versions.ETCD}/bin/etcd"
    assert binaries.kwok == tmp_path / f"kwok-{versions.KWOK}/bin/kwok"
    assert len(binaries.missing()) == 6


def test_pki_certificates_have_the_names_components_check(tmp_path: Path) -> None:
    pki = create_cluster_pki(tmp_path)
    server = x509.load_pem_x509_certificate(pki.apiserver.cert.read_bytes())
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "kubernetes.default.svc" in sans.get_values_for_type(x509.DNSName)
    assert "127.0.0.1" in [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    admin = x509.load_pem_x509_certificate(pki.admin.cert.read_bytes())
    org = admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value
    assert org == "system:masters"
    usage = admin.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usage
    assert os.stat(pki.admin.key).st_mode & 0o077 == 0


def test_a_cluster_runs_a_subset_only_with_etcd_and_the_apiserver(tmp_path: Path) -> None:
    assert LocalCluster("a", tmp_path, components=API_ONLY).components == API_ONLY
    with pytest.raises(ClusterError, match="missing etcd"):
        LocalCluster("b", tmp_path, components=("kube-apiserver", "kwok"))
    with pytest.raises(ClusterError, match="unknown kubelet"):
        LocalCluster("c", tmp_path, components=(*API_ONLY, "kubelet"))


def test_kwok_nodes_are_refused_before_anything_starts_without_kwok(tmp_path: Path) -> None:
    cluster = LocalCluster("d", tmp_path, components=API_ONLY)
    with pytest.raises(ClusterError, match="kwok nodes need kwok"):
        cluster.up(nodes=2)
    assert not cluster.state_dir.exists()


def test_free_ports_are_distinct_loopback_ports() -> None:
    ports = free_ports(6)
    assert len(set(ports)) == 6
    assert all(1024 < p < 65536 for p in ports)


def test_node_shape_allocatable_includes_extended_resources() -> None:
    shape = NodeShape(cpu="8", memory="30Gi", extended={"nvidia.com/gpu": "4"})
    assert shape.allocatable() == {
        "cpu": "8",
        "memory": "30Gi",
        "pods": "110",
        "nvidia.com/gpu": "4",
    }


def test_api_errors_with_plain_text_bodies_are_api_errors() -> None:
    """An unserved API group answers 404 with text, not a Status object."""
    import http.server
    import ssl
    import threading

    from kubeport.kubeapi import ApiError, Credentials, KubeClient
    from webhook.tls import create_webhook_tls

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.send_header("Content-Length", "19")
            self.end_headers()
            self.wfile.write(b"404 page not found\n")

        def log_message(self, *args: object) -> None:
            pass

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        tls = create_webhook_tls(Path(tmp), ["127.0.0.1"])
        server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(tls.cert, tls.key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        thread = threading.Thread(target=server.serve_forever)
        thread.start()
        ca = Path(tmp) / "ca.crt"
        try:
            creds = Credentials(f"https://127.0.0.1:{server.server_port}", str(ca), None, None)
            with KubeClient(creds) as client, pytest.raises(ApiError) as error:
                client.get("/apis/nope.example/v1/things")
            assert error.value.status == 404
            assert error.value.message == "404 page not found"
        finally:
            server.shutdown()
            server.server_close()
            thread.join()
