"""`muster certs`: the webhook's serving certificate for clusters without cert-manager.

Owns the certificate wiring of an in-cluster install: a self-signed CA and a serving certificate
for the Service the webhook configuration names (muster.muster-system.svc, from
`webhook.configuration.IN_CLUSTER_SERVICE`), stored as the `kubernetes.io/tls` Secret the
Deployment mounts (`tls.crt`, `tls.key`, plus the CA as `ca.crt`), and the CA put into the
`caBundle` of every webhook of the MutatingWebhookConfiguration so the apiserver trusts it.

Both writes are server-side applies under the field manager `muster-certs`: a later
`kubectl apply --server-side -k manifests/` (which sets no caBundle) leaves them alone.
Idempotent: an existing Secret is kept (and its CA re-applied to the caBundle) unless
`--rotate`; a rotation keeps trusting the old CA next to the new one until the next plain run,
so replicas still serving the old certificate are not cut off mid-rollout.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import yaml
from cryptography import x509

from kubeport import kubeapi
from kubeport.kubeapi import ApiError, ApiUnreachable, KubeClient, KubeconfigError
from webhook.configuration import IN_CLUSTER_SERVICE
from webhook.configuration import NAME as WEBHOOK_CONFIG_NAME
from webhook.decision import WebhookSettings
from webhook.tls import create_webhook_tls

SECRET_NAME: Final = "muster-webhook-tls"
"""The Secret the Deployment mounts (manifests/base/deployment.yaml) and cert-manager writes."""
NAMESPACE: Final = str(IN_CLUSTER_SERVICE["namespace"])
SERVICE: Final = str(IN_CLUSTER_SERVICE["name"])
FIELD_MANAGER: Final = "muster-certs"
APPLY_PATCH: Final = "application/apply-patch+yaml"
CONFIG_PATH: Final = kubeapi.WEBHOOK_CONFIGURATIONS.path()
CERT_MANAGER_SECRET: Final = "cert-manager.io/certificate-name"
CERT_MANAGER_INJECT: Final = "cert-manager.io/inject-ca-from"
RENEW_WITHIN: Final = dt.timedelta(days=30)
INSTALL_HINT: Final = "apply the manifests first: kubectl apply --server-side -k manifests/"


class CertsError(RuntimeError):
    """Something `muster certs` will not do; the message says what and what to do instead."""


@dataclass(frozen=True)
class ServingMaterial:
    """PEM bytes of the serving certificate, its key and the CA that signed it."""

    cert: bytes
    key: bytes
    ca: bytes


def service_hosts(service: str = SERVICE, namespace: str = NAMESPACE) -> list[str]:
    """The names a client may dial the Service by; the apiserver uses `<svc>.<ns>.svc`."""
    return [
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
        f"{service}.{namespace}",
        service,
    ]


def generate(hosts: Sequence[str]) -> ServingMaterial:
    """A fresh CA and a serving certificate for `hosts` (webhook.tls, in a scratch directory)."""
    with tempfile.TemporaryDirectory(prefix="muster-certs-") as scratch:
        tls = create_webhook_tls(Path(scratch), hosts)
        return ServingMaterial(tls.cert.read_bytes(), tls.key.read_bytes(), tls.ca_bundle)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def secret_manifest(
    material: ServingMaterial, name: str = SECRET_NAME, namespace: str = NAMESPACE
) -> dict[str, Any]:
    """The `kubernetes.io/tls` Secret the Deployment mounts at /tls."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "muster", "app.kubernetes.io/part-of": "muster"},
            "annotations": {"muster.dev/generated-by": "muster certs"},
        },
        "type": "kubernetes.io/tls",
        "data": {
            "tls.crt": _b64(material.cert),
            "tls.key": _b64(material.key),
            "ca.crt": _b64(material.ca),
        },
    }


def ca_bundle_apply(
    webhook_names: Sequence[str], ca_bundle: bytes, name: str = WEBHOOK_CONFIG_NAME
) -> dict[str, Any]:
    """A server-side apply configuration that sets only caBundle, on every named webhook.

    `webhooks` is a list keyed by name, so the apply merges into the installed entries and this
    field manager owns nothing but the caBundles.
    """
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {"name": webhook, "clientConfig": {"caBundle": _b64(ca_bundle)}}
            for webhook in webhook_names
        ],
    }


def shipped_webhook_names() -> list[str]:
    """The webhooks of manifests/base/webhook.yaml, for output made without a cluster."""
    from webhook.configuration import build_configuration

    config = build_configuration(WebhookSettings(), service=IN_CLUSTER_SERVICE)
    return [str(w["name"]) for w in config["webhooks"]]


def _where(secret: Mapping[str, Any]) -> str:
    meta = secret.get("metadata") or {}
    return f"Secret {meta.get('namespace')}/{meta.get('name')}"


def _refuse_cert_manager(secret: Mapping[str, Any]) -> None:
    """cert-manager renews its Secret and injects the caBundle itself: two writers would fight."""
    certificate = ((secret.get("metadata") or {}).get("annotations") or {}).get(CERT_MANAGER_SECRET)
    if certificate:
        raise CertsError(
            f"{_where(secret)} is issued by cert-manager (Certificate {certificate}), which "
            "also injects the caBundle: do not run muster certs on this install"
        )


def material_from_secret(secret: Mapping[str, Any]) -> ServingMaterial:
    """The PEM material of an existing Secret; CertsError if it is not one we can keep."""
    where = _where(secret)
    _refuse_cert_manager(secret)
    data = secret.get("data") or {}
    missing = [key for key in ("tls.crt", "tls.key", "ca.crt") if not data.get(key)]
    if missing:
        raise CertsError(
            f"{where} has no {', '.join(missing)}: it was not written by muster certs; "
            "replace it with muster certs --rotate"
        )
    try:
        return ServingMaterial(
            base64.b64decode(data["tls.crt"]),
            base64.b64decode(data["tls.key"]),
            base64.b64decode(data["ca.crt"]),
        )
    except ValueError as exc:
        raise CertsError(f"{where}: data is not base64 ({exc}); replace it with --rotate") from None


@dataclass(frozen=True)
class CertificateFacts:
    """What a user needs to know about a serving certificate."""

    not_after: dt.datetime
    dns_names: tuple[str, ...]
    issuer: str


def inspect(cert_pem: bytes) -> CertificateFacts:
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        raise CertsError(
            f"tls.crt is not a PEM certificate ({exc}); replace it with --rotate"
        ) from None
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = tuple(sans.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        names = ()
    return CertificateFacts(cert.not_valid_after_utc, names, cert.issuer.rfc4514_string())


Action = Literal["create", "keep", "replace"]


@dataclass(frozen=True)
class Plan:
    """What one run does: the Secret's action, the material it holds after, the caBundle."""

    action: Action
    material: ServingMaterial
    ca_bundle: bytes
    warnings: tuple[str, ...] = ()


def plan(
    existing: Mapping[str, Any] | None,
    *,
    rotate: bool,
    fresh: Callable[[], ServingMaterial],
    host: str,
    now: dt.datetime,
) -> Plan:
    """Decide from the current Secret (None: absent). Pure but for calling `fresh`.

    - no Secret: create one; the caBundle is its CA.
    - a Secret and no --rotate: keep it if it serves `host`; the caBundle is its CA.
    - --rotate: a new CA and certificate; the caBundle trusts the new CA and the old one.
    """
    if existing is None:
        material = fresh()
        return Plan("create", material, material.ca)
    _refuse_cert_manager(existing)
    if rotate:
        old = _old_ca(existing)
        material = fresh()
        bundle = material.ca if old is None or old == material.ca else material.ca + old
        return Plan("replace", material, bundle)
    material = material_from_secret(existing)
    facts = inspect(material.cert)
    where = _where(existing)
    if host not in facts.dns_names:
        raise CertsError(
            f"{where} serves {', '.join(facts.dns_names) or 'no DNS names'}, not {host}: "
            "replace it with muster certs --rotate"
        )
    warnings: list[str] = []
    if facts.not_after <= now:
        warnings.append(
            f"{where} expired at {facts.not_after:%Y-%m-%d %H:%M} UTC: the apiserver refuses it; "
            "run muster certs --rotate"
        )
    elif facts.not_after - now < RENEW_WITHIN:
        warnings.append(
            f"{where} expires at {facts.not_after:%Y-%m-%d %H:%M} UTC: "
            "run muster certs --rotate before then"
        )
    return Plan("keep", material, material.ca, tuple(warnings))


def _old_ca(existing: Mapping[str, Any]) -> bytes | None:
    """The CA of a Secret being replaced, if it has a readable one (to keep trusting it)."""
    value = (existing.get("data") or {}).get("ca.crt")
    if not value:
        return None
    try:
        return base64.b64decode(value)
    except ValueError:
        return None


def render(manifests: Sequence[Mapping[str, Any]], output: str) -> str:
    """The manifests as a YAML stream (with how to apply it) or as a JSON v1 List."""
    if output == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(manifests)}, indent=2)
    header = (
        f"# Written by muster certs. Apply with:\n"
        f"#   kubectl apply --server-side --field-manager={FIELD_MANAGER} -f FILE\n"
        f"# The second document sets only the caBundles of the installed webhook configuration.\n"
    )
    return header + yaml.safe_dump_all(list(manifests), sort_keys=False)


# -- command line -------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="cluster to write to (default: $KUBECONFIG, else ~/.kube/config, else in-cluster)",
    )
    parser.add_argument("--context", default=None, help="kubeconfig context (default: current)")
    parser.add_argument(
        "--rotate",
        action="store_true",
        help="replace an existing Secret with a new CA and certificate (default: keep it)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="write nothing and contact no cluster: print fresh manifests (as --output yaml)",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json"),
        default=None,
        help="print the Secret and the caBundle apply configuration instead of writing them",
    )
    parser.add_argument(
        "--namespace",
        default=NAMESPACE,
        help=f"namespace of the Service and the Secret (default: {NAMESPACE})",
    )
    parser.add_argument(
        "--service", default=SERVICE, help=f"Service that fronts the webhook (default: {SERVICE})"
    )
    parser.add_argument(
        "--secret", default=SECRET_NAME, help=f"Secret to write (default: {SECRET_NAME})"
    )
    parser.add_argument(
        "--webhook-configuration",
        default=WEBHOOK_CONFIG_NAME,
        help=f"MutatingWebhookConfiguration to patch (default: {WEBHOOK_CONFIG_NAME})",
    )
    parser.epilog = (
        "Creates a self-signed CA and a serving certificate for the webhook Service\n"
        f"({SERVICE}.{NAMESPACE}.svc), stores them in the kubernetes.io/tls Secret\n"
        f"{NAMESPACE}/{SECRET_NAME} that the Deployment mounts, and sets the CA as caBundle on\n"
        f"every webhook of the MutatingWebhookConfiguration {WEBHOOK_CONFIG_NAME}. Run it after\n"
        "`kubectl apply --server-side -k manifests/`, as a user who may write Secrets in\n"
        f"{NAMESPACE} and patch webhook configurations. An existing Secret is kept (run it again\n"
        "any time); --rotate replaces it and keeps trusting the old CA until the next plain run.\n"
        "With cert-manager, use manifests/overlays/cert-manager/ instead.\n"
        "\nexamples:\n"
        "  muster certs                 # create, or keep it and re-apply the caBundle\n"
        "  muster certs --rotate && kubectl -n muster-system rollout restart deployment/muster\n"
        "  muster certs --dry-run       # print the manifests, touch nothing\n"
        "  muster certs -o yaml | kubectl apply --server-side --field-manager=muster-certs -f -"
    )


def _err(message: str) -> int:
    print(f"muster certs: {message}", file=sys.stderr)
    return 1


def _client(args: argparse.Namespace) -> tuple[KubeClient, str]:
    try:
        client = KubeClient.connect(args.kubeconfig, args.context)
    except KubeconfigError as exc:
        raise CertsError(str(exc)) from None
    return client, str(client.credentials.server)


def run(args: argparse.Namespace) -> int:
    host = service_hosts(args.service, args.namespace)[0]
    if args.dry_run or args.output:
        material = generate(service_hosts(args.service, args.namespace))
        manifests = [
            secret_manifest(material, args.secret, args.namespace),
            ca_bundle_apply(shipped_webhook_names(), material.ca, args.webhook_configuration),
        ]
        print(render(manifests, args.output or "yaml"))
        return 0
    try:
        client, where = _client(args)
    except CertsError as exc:
        return _err(str(exc))
    client.user_agent = FIELD_MANAGER
    try:
        return _apply(client, args, host)
    except CertsError as exc:
        return _err(str(exc))
    except ApiError as exc:
        return _err(f"{exc} (cluster {where})")
    except ApiUnreachable as exc:
        return _err(str(exc))
    except OSError as exc:
        return _err(
            f"cannot reach the cluster at {where}: {exc.strerror or exc}; "
            "check --kubeconfig / KUBECONFIG and that the apiserver is up"
        )
    finally:
        client.close()


def _get(client: KubeClient, path: str, what: str) -> dict[str, Any] | None:
    """GET `path`; None on 404; a CertsError that says which permission is missing on 403."""
    try:
        return client.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        if exc.status == 403:
            raise CertsError(
                f"not allowed to read {what} ({exc.message}): run muster certs as a cluster "
                "admin (it writes a Secret and patches a webhook configuration)"
            ) from None
        raise


def _apply(client: KubeClient, args: argparse.Namespace, host: str) -> int:
    # Everything is checked before the first write, so bad input changes nothing.
    config_name = args.webhook_configuration
    config = _get(
        client, f"{CONFIG_PATH}/{config_name}", f"MutatingWebhookConfiguration {config_name}"
    )
    if config is None:
        raise CertsError(f"MutatingWebhookConfiguration {config_name} not found: {INSTALL_HINT}")
    injected = ((config.get("metadata") or {}).get("annotations") or {}).get(CERT_MANAGER_INJECT)
    if injected:
        raise CertsError(
            f"MutatingWebhookConfiguration {config_name} gets its caBundle from cert-manager "
            f"({CERT_MANAGER_INJECT}: {injected}): do not run muster certs on this install"
        )
    webhook_names = [str(w["name"]) for w in config.get("webhooks") or []]
    if not webhook_names:
        raise CertsError(
            f"MutatingWebhookConfiguration {config_name} has no webhooks: {INSTALL_HINT}"
        )
    if (
        _get(client, kubeapi.NAMESPACES.path(name=args.namespace), f"namespace {args.namespace}")
        is None
    ):
        raise CertsError(f"namespace {args.namespace} not found: {INSTALL_HINT}")
    secret_path = kubeapi.SECRETS.path(args.namespace, args.secret)
    existing = _get(client, secret_path, f"Secret {args.namespace}/{args.secret}")
    decided = plan(
        existing,
        rotate=args.rotate,
        fresh=lambda: generate(service_hosts(args.service, args.namespace)),
        host=host,
        now=dt.datetime.now(dt.UTC),
    )
    for warning in decided.warnings:
        print(f"muster certs: warning: {warning}", file=sys.stderr)

    params = {"fieldManager": FIELD_MANAGER, "force": "true"}
    if decided.action != "keep":
        client.request(
            "PATCH",
            secret_path,
            secret_manifest(decided.material, args.secret, args.namespace),
            content_type=APPLY_PATCH,
            params=params,
        )
    try:
        client.request(
            "PATCH",
            f"{CONFIG_PATH}/{config_name}",
            ca_bundle_apply(webhook_names, decided.ca_bundle, config_name),
            content_type=APPLY_PATCH,
            params=params,
        )
    except (ApiError, OSError):
        _undo_secret(client, secret_path, existing, decided.action)
        raise

    facts = inspect(decided.material.cert)
    verb = {"create": "created", "keep": "kept", "replace": "replaced"}[decided.action]
    print(
        f"Secret {args.namespace}/{args.secret} {verb} (serving {host}, valid until "
        f"{facts.not_after:%Y-%m-%d} UTC); caBundle set on {len(webhook_names)} webhooks of "
        f"{config_name}"
    )
    if decided.action == "replace":
        print(
            "The running replicas still serve the old certificate (it is read at start); the "
            "caBundle trusts both CAs meanwhile. Restart them, then run muster certs again to "
            f"drop the old CA:\n  kubectl -n {args.namespace} rollout restart deployment/muster"
        )
    return 0


def _undo_secret(
    client: KubeClient, path: str, before: Mapping[str, Any] | None, action: Action
) -> None:
    """Put the Secret back as it was when the caBundle write failed (best effort)."""
    try:
        if action == "create":
            client.delete(path)
        elif action == "replace" and before is not None:
            body = {k: before[k] for k in ("apiVersion", "kind", "metadata", "type", "data")}
            body["metadata"] = {k: v for k, v in before["metadata"].items() if k != "managedFields"}
            client.request("PUT", path, body)
    except (ApiError, OSError) as exc:
        print(f"muster certs: could not restore {path}: {exc}", file=sys.stderr)
