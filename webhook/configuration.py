"""The MutatingWebhookConfiguration muster needs, built as a plain dict (pure).

Used by `muster run --local` (url + caBundle of a webhook server on loopback) and to render the
static manifest for in-cluster installs (service reference; caBundle injected by cert-manager or
`muster certs`). Selectors keep the apiserver from calling us for objects we never manage:

- `labelled`: objects with a `muster.dev/queue` label, in any namespace but the excluded ones;
- `namespace-default`: unlabelled objects in namespaces that name a default queue with the
  `muster.dev/queue` label (only when manageJobsWithoutQueueName is off);
- `all` (manageJobsWithoutQueueName on): every object outside the excluded namespaces.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from policies.vocabulary import QUEUE
from webhook.decision import WebhookSettings

NAME: Final = "muster.dev"
JOB_PATH: Final = "muster-job-create"
MINICLUSTER_PATH: Final = "muster-minicluster-create"


def _client_config(
    path: str, *, url: str | None, service: Mapping[str, Any] | None, ca_bundle: str | None
) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if url is not None:
        config["url"] = f"{url.rstrip('/')}/{path}"
    elif service is not None:
        config["service"] = {**service, "path": f"/{path}"}
    else:
        raise ValueError("a webhook needs either a url or a service reference")
    if ca_bundle:
        config["caBundle"] = ca_bundle
    return config


def _rule(group: str, version: str, resource: str) -> dict[str, Any]:
    return {
        "apiGroups": [group],
        "apiVersions": [version],
        "resources": [resource],
        "operations": ["CREATE"],
        "scope": "Namespaced",
    }


def build_configuration(
    settings: WebhookSettings,
    *,
    url: str | None = None,
    service: Mapping[str, Any] | None = None,
    ca_bundle: str | None = None,
    include_miniclusters: bool = True,
) -> dict[str, Any]:
    """The whole MutatingWebhookConfiguration object."""
    excluded = {
        "key": "kubernetes.io/metadata.name",
        "operator": "NotIn",
        "values": sorted(settings.excluded_namespaces),
    }
    targets: list[tuple[str, str, dict[str, Any]]] = [
        ("jobs", JOB_PATH, _rule("batch", "v1", "jobs"))
    ]
    if include_miniclusters:
        targets.append(
            ("miniclusters", MINICLUSTER_PATH, _rule("flux-framework.org", "*", "miniclusters"))
        )
    variants: Sequence[tuple[str, list[dict[str, Any]], list[dict[str, Any]]]]
    if settings.manage_jobs_without_queue_name:
        variants = [("all", [excluded], [])]
    else:
        variants = [
            ("labelled", [excluded], [{"key": QUEUE, "operator": "Exists"}]),
            (
                "namespace-default",
                [excluded, {"key": QUEUE, "operator": "Exists"}],
                [{"key": QUEUE, "operator": "DoesNotExist"}],
            ),
        ]
    webhooks = []
    for kind, path, rule in targets:
        for variant, ns_exprs, obj_exprs in variants:
            webhook: dict[str, Any] = {
                "name": f"{kind}-{variant}.{NAME}",
                "admissionReviewVersions": ["v1"],
                "clientConfig": _client_config(path, url=url, service=service, ca_bundle=ca_bundle),
                "rules": [rule],
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "timeoutSeconds": 3,
                "matchPolicy": "Equivalent",
                "reinvocationPolicy": "Never",
                "namespaceSelector": {"matchExpressions": ns_exprs},
            }
            if obj_exprs:
                webhook["objectSelector"] = {"matchExpressions": obj_exprs}
            webhooks.append(webhook)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": NAME, "labels": {"app.kubernetes.io/name": "muster"}},
        "webhooks": webhooks,
    }
