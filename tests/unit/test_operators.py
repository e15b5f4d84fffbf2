"""The real operators beside the local control plane, without a cluster: where their sources are
found (and what a checkout without them does), the cache key, the `--operators` list, the
JobSet webhook configurations made from its kustomize folder and pointed at loopback, the
serving certificate signed by the cluster's CA, and which MiniCluster Job maker is chosen."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from kubeport.kubeapi import KubeClient
from simulator.controlplane import operators
from simulator.controlplane.build import BuildError
from simulator.controlplane.minicluster import (
    CRD_NAME,
    FluxOperator,
    MiniClusterReconciler,
    describe_job_maker,
    job_maker,
    minicluster_crd,
)
from simulator.controlplane.operatorrun import (
    json_patch,
    kustomized_webhooks,
    on_loopback,
    operator_crds,
)
from simulator.controlplane.operators import FLUX, JOBSET, SOURCES_ENV
from simulator.controlplane.pki import create_cluster_pki, issue_loopback_serving

JOBSET_SOURCE = operators.source_of(JOBSET)
needs_jobset = pytest.mark.skipif(
    not operators.is_present(JOBSET_SOURCE), reason=f"no JobSet source at {JOBSET_SOURCE}"
)


def fake_source(root: Path, operator: operators.Operator, go: str = "1.24") -> Path:
    source = root / operator.folder
    source.mkdir(parents=True)
    (source / "go.mod").write_text(f"module example.com/{operator.name}\n\ngo {go}\n")
    (source / "main.go").write_text("package main\n\nfunc main() {}\n")
    return source


# -- sources and the cache ----------------------------------------------------------------


def test_a_checkout_without_the_sources_has_no_operators(tmp_path: Path) -> None:
    """No `shared/src` beside the repository: nothing is available, and asking for one says
    where it looked and how to do without it."""
    repo = tmp_path / "muster"
    repo.mkdir()
    assert operators.sources_root({}, repo) == tmp_path / "shared" / "src"
    assert operators.available({}, repo) == []
    message = operators.absent_message(JOBSET, operators.source_of(JOBSET, {}, repo))
    assert str(tmp_path / "shared" / "src" / "jobset") in message
    assert SOURCES_ENV in message and "leave jobset out of --operators" in message


def test_the_environment_names_another_sources_folder(tmp_path: Path) -> None:
    fake_source(tmp_path, FLUX)
    environ = {SOURCES_ENV: str(tmp_path)}
    assert operators.available(environ) == [FLUX]
    assert operators.source_of(FLUX, environ) == tmp_path / "flux-operator"


def test_asking_for_an_absent_operator_is_a_build_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(SOURCES_ENV, str(tmp_path / "nothing"))
    with pytest.raises(BuildError, match="the jobset operator's source is not at"):
        operators.ensure_operator(JOBSET, tmp_path / "cache", log=lambda _: None)
    assert not (tmp_path / "cache").exists()


def test_the_cache_is_keyed_by_version_and_source(tmp_path: Path) -> None:
    source = fake_source(tmp_path / "src", JOBSET)
    first = operators.binary_path(JOBSET, source, tmp_path / "cache")
    assert first.parent.parent.name.startswith(f"jobset-{JOBSET.version}-")
    assert first.name == "jobset-controller"
    assert operators.binary_path(JOBSET, source, tmp_path / "cache") == first
    (source / "main.go").write_text("package main\n\nfunc main() { println() }\n")
    assert operators.binary_path(JOBSET, source, tmp_path / "cache") != first


def test_the_go_version_comes_from_the_sources_go_mod(tmp_path: Path) -> None:
    assert operators.go_minimum(fake_source(tmp_path, JOBSET, go="1.26.0")) == (1, 26)


def test_the_operators_option(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert operators.parse_operators("jobset,flux") == [JOBSET, FLUX]
    assert operators.parse_operators(" flux , flux ") == [FLUX]
    assert operators.parse_operators("none") == operators.parse_operators("") == []
    with pytest.raises(ValueError, match=r"'kueue' is not an operator; name any of jobset, flux"):
        operators.parse_operators("jobset,kueue")
    fake_source(tmp_path, JOBSET)
    monkeypatch.setenv(SOURCES_ENV, str(tmp_path))
    assert operators.parse_operators("available") == [JOBSET]


# -- what runs beside the cluster ---------------------------------------------------------


def test_json_patches_as_kustomize_applies_them() -> None:
    doc = {"webhooks": [{"name": "a"}, {"name": "b"}], "metadata": {"name": "x"}}
    patched = json_patch(
        doc,
        [
            {"op": "replace", "path": "/webhooks/1", "value": {"name": "B"}},
            {"op": "add", "path": "/webhooks/-", "value": {"name": "c"}},
            {"op": "remove", "path": "/webhooks/0"},
            {"op": "add", "path": "/metadata/labels", "value": {"k": "v"}},
        ],
    )
    assert patched == {
        "webhooks": [{"name": "B"}, {"name": "c"}],
        "metadata": {"name": "x", "labels": {"k": "v"}},
    }
    assert doc["webhooks"] == [{"name": "a"}, {"name": "b"}]  # the original is left alone


@needs_jobset
def test_jobsets_webhooks_point_at_loopback_with_the_patches_applied() -> None:
    configurations = kustomized_webhooks(JOBSET_SOURCE / "config/components/webhook")
    kinds = sorted(c["kind"] for c in configurations)
    assert kinds == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    loopback = [on_loopback(c, 9443, b"CA PEM", "jobset-") for c in configurations]
    hooks = {w["name"]: w for c in loopback for w in c["webhooks"]}
    assert set(hooks) == {"mjobset.kb.io", "mpod.kb.io", "vjobset.kb.io", "vpod.kb.io"}
    assert hooks["mjobset.kb.io"]["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate-jobset-x-k8s-io-v1alpha2-jobset",
        "caBundle": base64.b64encode(b"CA PEM").decode(),
    }
    # The kustomize patches limit the pod webhooks to JobSet's own pods: every other pod
    # is created whether or not the JobSet controller answers.
    for name in ("mpod.kb.io", "vpod.kb.io"):
        selector = hooks[name]["objectSelector"]["matchExpressions"]
        assert selector == [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]
    assert all(c["metadata"]["name"].startswith("jobset-") for c in loopback)


@needs_jobset
def test_the_jobset_crd_comes_from_its_config_folder() -> None:
    (crd,) = operator_crds(JOBSET, JOBSET_SOURCE)
    assert crd["metadata"]["name"] == "jobsets.jobset.x-k8s.io"
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1alpha2"]
    assert "conversion" not in crd["spec"]  # one version: nothing to convert


def test_a_loopback_serving_certificate_is_signed_by_the_clusters_ca(tmp_path: Path) -> None:
    pki = create_cluster_pki(tmp_path / "pki")
    pair = issue_loopback_serving(tmp_path / "pki", tmp_path / "certs", "jobset-webhook")
    assert pair.cert == tmp_path / "certs" / "tls.crt" and pair.key.name == "tls.key"
    cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())
    ca = x509.load_pem_x509_certificate(pki.ca.cert.read_bytes())
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usage
    assert os.stat(pair.key).st_mode & 0o077 == 0


# -- which makes a MiniCluster's Job ------------------------------------------------------


def test_the_real_operator_or_the_stand_in_makes_the_jobs(tmp_path: Path) -> None:
    client = KubeClient.__new__(KubeClient)  # never used: nothing is started
    assert isinstance(job_maker(client, "ns", real=True), FluxOperator)
    stand_in = job_maker(client, "ns", real=False, suspend=True)
    assert isinstance(stand_in, MiniClusterReconciler) and stand_in.suspend
    assert describe_job_maker(True).startswith(f"the Flux Operator {FLUX.version}")
    absent = {SOURCES_ENV: str(tmp_path)}
    assert describe_job_maker(False, absent) == (
        f"muster's stand-in reconciler (no Flux Operator source at {tmp_path / 'flux-operator'})"
    )


def test_the_operators_own_crd_is_the_minicluster_crd_where_its_source_is(tmp_path: Path) -> None:
    repo = tmp_path / "muster"
    repo.mkdir()
    assert minicluster_crd({}, repo).stand_in  # a checkout alone: the stand-in
    source = fake_source(tmp_path / "shared" / "src", FLUX)
    crd_file = source / FLUX.crds[0]
    crd_file.parent.mkdir(parents=True)
    schema = {"type": "object", "properties": {"spec": {"type": "object"}}}
    crd_file.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": CRD_NAME},
                "spec": {
                    "versions": [
                        {"name": "v1alpha2", "storage": True, "schema": {"openAPIV3Schema": schema}}
                    ]
                },
            }
        )
    )
    chosen = minicluster_crd({}, repo)
    assert chosen.path == crd_file and not chosen.stand_in
