"""`muster certs`, the parts that need no cluster: material, manifests, the keep/rotate plan."""

from __future__ import annotations

import base64
import datetime as dt
import subprocess
import sys
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from muster.commands.certs import (
    CERT_MANAGER_SECRET,
    CertsError,
    ServingMaterial,
    ca_bundle_apply,
    generate,
    inspect,
    plan,
    render,
    secret_manifest,
    service_hosts,
    shipped_webhook_names,
)
from webhook.configuration import IN_CLUSTER_SERVICE, build_configuration
from webhook.decision import WebhookSettings

HOST = "muster.muster-system.svc"
NOW = dt.datetime.now(dt.UTC)


@pytest.fixture(scope="module")
def material() -> ServingMaterial:
    return generate(service_hosts())


@pytest.fixture(scope="module")
def other() -> ServingMaterial:
    return generate(service_hosts())


def secret_of(material: ServingMaterial, **annotations: str) -> dict[str, Any]:
    secret = secret_manifest(material)
    secret["metadata"]["annotations"].update(annotations)
    return secret


def never() -> ServingMaterial:
    raise AssertionError("a kept Secret needs no new material")


def test_hosts_are_the_service_the_webhook_configuration_names() -> None:
    # The apiserver dials <service>.<namespace>.svc; the shipped configuration names the Service.
    expected = f"{IN_CLUSTER_SERVICE['name']}.{IN_CLUSTER_SERVICE['namespace']}.svc"
    assert service_hosts()[0] == expected == HOST
    assert f"{expected}.cluster.local" in service_hosts()


def test_serving_certificate_is_signed_by_the_ca_for_every_service_name(
    material: ServingMaterial,
) -> None:
    cert = x509.load_pem_x509_certificate(material.cert)
    ca = x509.load_pem_x509_certificate(material.ca)
    cert.verify_directly_issued_by(ca)  # raises if the signature or issuer do not match
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(sans.get_values_for_type(x509.DNSName)) == sorted(service_hosts())
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    key = serialization.load_pem_private_key(material.key, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()  # type: ignore[union-attr]


def test_secret_is_a_tls_secret_with_the_ca(material: ServingMaterial) -> None:
    secret = secret_manifest(material)
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"]["name"] == "muster-webhook-tls"
    assert secret["metadata"]["namespace"] == "muster-system"
    decoded = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert decoded == {"tls.crt": material.cert, "tls.key": material.key, "ca.crt": material.ca}


def test_the_deployment_mounts_the_secret_muster_certs_writes() -> None:
    from tests.conftest import REPO

    deployment = yaml.safe_load((REPO / "manifests/base/deployment.yaml").read_text())
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert (
        volumes["tls"]["secret"]["secretName"]
        == secret_manifest(generate([HOST]))["metadata"]["name"]
    )
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--tls-cert=/tls/tls.crt" in args and "--tls-key=/tls/tls.key" in args


def test_ca_bundle_apply_touches_only_each_webhooks_ca_bundle(material: ServingMaterial) -> None:
    names = shipped_webhook_names()
    shipped = build_configuration(WebhookSettings(), service=IN_CLUSTER_SERVICE)
    assert names == [w["name"] for w in shipped["webhooks"]]
    body = ca_bundle_apply(names, material.ca)
    assert body["metadata"] == {"name": "muster.dev"}
    assert [w["name"] for w in body["webhooks"]] == names
    for webhook in body["webhooks"]:
        assert webhook["clientConfig"] == {"caBundle": base64.b64encode(material.ca).decode()}


def test_no_secret_creates_one_trusting_its_ca(material: ServingMaterial) -> None:
    decided = plan(None, rotate=False, fresh=lambda: material, host=HOST, now=NOW)
    assert (decided.action, decided.material, decided.ca_bundle) == (
        "create",
        material,
        material.ca,
    )


def test_an_existing_secret_is_kept_and_its_ca_reapplied(material: ServingMaterial) -> None:
    decided = plan(secret_of(material), rotate=False, fresh=never, host=HOST, now=NOW)
    assert (decided.action, decided.material, decided.ca_bundle) == ("keep", material, material.ca)
    assert decided.warnings == ()


def test_rotate_replaces_and_trusts_both_cas_meanwhile(
    material: ServingMaterial, other: ServingMaterial
) -> None:
    decided = plan(secret_of(material), rotate=True, fresh=lambda: other, host=HOST, now=NOW)
    assert decided.action == "replace"
    assert decided.material == other
    assert decided.ca_bundle == other.ca + material.ca
    # Both CAs parse out of the bundle, as the apiserver reads it.
    assert len(x509.load_pem_x509_certificates(decided.ca_bundle)) == 2


def test_a_kept_secret_must_serve_the_service(material: ServingMaterial) -> None:
    with pytest.raises(
        CertsError, match=r"not other\.ns\.svc: replace it with muster certs --rotate"
    ):
        plan(secret_of(material), rotate=False, fresh=never, host="other.ns.svc", now=NOW)


def test_expiring_and_expired_secrets_warn(material: ServingMaterial) -> None:
    not_after = inspect(material.cert).not_after
    soon = plan(
        secret_of(material),
        rotate=False,
        fresh=never,
        host=HOST,
        now=not_after - dt.timedelta(days=3),
    )
    assert soon.action == "keep" and "--rotate before then" in soon.warnings[0]
    late = plan(
        secret_of(material),
        rotate=False,
        fresh=never,
        host=HOST,
        now=not_after + dt.timedelta(days=1),
    )
    assert "expired" in late.warnings[0]


@pytest.mark.parametrize("rotate", [False, True])
def test_a_cert_manager_secret_is_refused(material: ServingMaterial, rotate: bool) -> None:
    secret = secret_of(material, **{CERT_MANAGER_SECRET: "muster-webhook"})
    with pytest.raises(CertsError, match=r"issued by cert-manager .*do not run muster certs"):
        plan(secret, rotate=rotate, fresh=lambda: material, host=HOST, now=NOW)


def test_a_foreign_secret_names_what_is_missing(material: ServingMaterial) -> None:
    secret = secret_of(material)
    del secret["data"]["ca.crt"]
    with pytest.raises(CertsError, match=r"has no ca\.crt: .*--rotate"):
        plan(secret, rotate=False, fresh=never, host=HOST, now=NOW)
    # --rotate replaces it; with no old CA there is nothing else to trust.
    decided = plan(secret, rotate=True, fresh=lambda: material, host=HOST, now=NOW)
    assert decided.ca_bundle == material.ca


def test_yaml_output_is_two_appliable_documents(material: ServingMaterial) -> None:
    text = render(
        [secret_manifest(material), ca_bundle_apply(["a.muster.dev"], material.ca)], "yaml"
    )
    assert text.startswith("# Written by muster certs")
    docs = list(yaml.safe_load_all(text))
    assert [d["kind"] for d in docs] == ["Secret", "MutatingWebhookConfiguration"]


def muster_certs(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "muster.cli", "certs", *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )


def test_dry_run_prints_fresh_manifests_without_a_cluster(tmp_path: Any) -> None:
    # No kubeconfig anywhere: --dry-run must not need one.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = muster_certs("--dry-run", "-o", "json", env=env)
    assert done.returncode == 0, done.stderr
    listing = yaml.safe_load(done.stdout)
    secret, config = listing["items"]
    assert secret["type"] == "kubernetes.io/tls"
    ca = base64.b64decode(secret["data"]["ca.crt"])
    assert {w["clientConfig"]["caBundle"] for w in config["webhooks"]} == {
        base64.b64encode(ca).decode()
    }


def test_a_missing_kubeconfig_is_one_line_and_exit_1(tmp_path: Any) -> None:
    done = muster_certs("--kubeconfig", str(tmp_path / "nope"))
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("muster certs: cannot read kubeconfig")


def test_help_has_examples() -> None:
    done = muster_certs("--help")
    assert done.returncode == 0
    assert "examples:" in done.stdout and "muster certs --rotate" in done.stdout


def test_an_unreachable_cluster_is_one_line_and_exit_1(tmp_path: Any) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    done = muster_certs("--kubeconfig", str(kubeconfig))
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(
        f"muster certs: cannot reach the API server https://127.0.0.1:1 (kubeconfig {kubeconfig}, "
        "context x, user u): Connection refused;"
    )
