"""The MutatingWebhookConfiguration muster needs, built as a plain dict (pure).

Used by `muster run --local` (url + caBundle of a webhook server on loopback) and to render the
static manifest for in-cluster installs (service reference; caBundle injected by cert-manager or
`muster certs`). Selectors keep the apiserver from calling us for objects we never manage:

- `labelled`: objects with a `muster.dev/queue` label, in any namespace but the excluded ones;
- `namespace-default`: unlabelled objects in namespaces that name a default queue with the
  `muster.dev/queue` label (only when manageJobsWithoutQueueName is off);
- `all` (manageJobsWithoutQueueName on): every object outside the excluded namespaces;
- for a kind whose gang object is a set of pods (a pod group), one entry for pods that carry its
  member label (`pods-podgroup`), whatever the settings: no other pod is ever sent to muster, so
  a webhook outage cannot block a pod that did not opt in. Its failurePolicy is Fail, as for the
  other kinds: while the webhook is down an opted-in pod is refused at create (its operator
  retries) rather than let through ungated, where it would run outside its gang's admission.

Creates are reviewed with failurePolicy Fail: nothing is stored past muster unsuspended and
unstamped. Updates of labelled objects (`updates`: an objectSelector matches an UPDATE when the
old or the new object matches, so removing the label, or adding it, is reviewed too) with
failurePolicy Ignore: muster's own writes to the objects it admits, evicts and restores are
updates too, and the controller must go on admitting and evicting while its webhook is down; what
an update gets past a webhook that is down, the controller finds (docs/reliability.md). A pod
group's pods get no update review: Kubernetes does not let a pod's requests, node selector or
tolerations change.

muster's own updates are not sent to the update review when muster runs under an identity of its
own (`own_user`: its ServiceAccount in a cluster, `CONTROLLER_USER` on the local control plane):
a `matchConditions` expression leaves out requests by that user. Each admission is an update
(the release PATCH), and reviewing it cost the apiserver a webhook call per admission. A muster
that shares its identity with people (`muster run --local` with an admin's kubeconfig) gets no
such condition: their updates must be reviewed.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from policies.kinds import JOB, MINICLUSTER, Kind
from policies.kinds.registry import KINDS, pod_gang
from policies.vocabulary import QUEUE
from webhook.decision import WebhookSettings

NAME: Final = "muster.dev"

IN_CLUSTER_USER: Final = "system:serviceaccount:muster-system:muster"
"""The identity of the shipped manifests' Deployment (its ServiceAccount)."""
CONTROLLER_USER: Final = "muster-controller"
"""The identity the local control plane gives muster (`muster cluster up` writes its
kubeconfig beside the admin's: `simulator.controlplane.cluster.controller_kubeconfig`)."""


def own_identity(username: str | None) -> str | None:
    """``username`` if it is an identity of muster's own whose updates need no review: a
    ServiceAccount, or the local control plane's `CONTROLLER_USER`; else None (an admin's or
    a person's identity, shared with updates that must be reviewed)."""
    if username is None:
        return None
    if username.startswith("system:serviceaccount:") or username == CONTROLLER_USER:
        return username
    return None


def path_of(kind: Kind) -> str:
    """The webhook path a kind's creates are reviewed at (`muster-job-create`, ...)."""
    return f"muster-{kind.name.lower()}-create"


def update_path_of(kind: Kind) -> str:
    """The webhook path a kind's updates are reviewed at (`muster-job-update`, ...)."""
    return f"muster-{kind.name.lower()}-update"


JOB_PATH: Final = path_of(JOB)
MINICLUSTER_PATH: Final = path_of(MINICLUSTER)
PATHS: Final[Mapping[str, Kind]] = {path_of(kind): kind for kind in KINDS.values()}
"""Every kind muster admits, by its webhook path."""
UPDATE_PATHS: Final[Mapping[str, Kind]] = {
    update_path_of(kind): kind for kind in KINDS.values() if pod_gang(kind) is None
}
"""Every kind muster admits through a gang object of its own, by the path its updates are
reviewed at (a pod group's pods get no update review: `build_configuration`)."""


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


def _versions(kind: Kind) -> str:
    # A CRD's served versions change more often than the Job's: any version, the apiserver
    # converts (matchPolicy: Equivalent).
    return "v1" if kind.api.group in ("batch", "") else "*"


def _rule(group: str, version: str, resource: str, operation: str = "CREATE") -> dict[str, Any]:
    return {
        "apiGroups": [group],
        "apiVersions": [version],
        "resources": [resource],
        "operations": [operation],
        "scope": "Namespaced",
    }


def _webhook(
    name: str,
    path: str,
    rule: dict[str, Any],
    client: Mapping[str, Any],
    namespaces: list[dict[str, Any]],
    objects: list[dict[str, Any]],
    failure_policy: str,
    unless_by: str | None = None,
) -> dict[str, Any]:
    webhook: dict[str, Any] = {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": _client_config(path, **client),
        "rules": [rule],
        "failurePolicy": failure_policy,
        "sideEffects": "None",
        "timeoutSeconds": 3,
        "matchPolicy": "Equivalent",
        "reinvocationPolicy": "Never",
        "namespaceSelector": {"matchExpressions": namespaces},
    }
    if objects:
        webhook["objectSelector"] = {"matchExpressions": objects}
    if unless_by is not None:
        webhook["matchConditions"] = [
            {
                "name": "not-muster-itself",
                "expression": f"request.userInfo.username != {json.dumps(unless_by)}",
            }
        ]
    return webhook


def build_configuration(
    settings: WebhookSettings,
    *,
    url: str | None = None,
    service: Mapping[str, Any] | None = None,
    ca_bundle: str | None = None,
    kinds: Collection[str] | None = None,
    own_user: str | None = None,
) -> dict[str, Any]:
    """The whole MutatingWebhookConfiguration object, for ``kinds`` (names; None: every kind
    muster admits; the caller leaves out a kind whose API the cluster does not serve). With
    ``own_user`` (muster's own identity, `own_identity`), its updates skip the update review."""
    excluded = {
        "key": "kubernetes.io/metadata.name",
        "operator": "NotIn",
        "values": sorted(settings.excluded_namespaces),
    }
    chosen = [kind for kind in KINDS.values() if kinds is None or kind.name in kinds]
    client = {"url": url, "service": service, "ca_bundle": ca_bundle}
    labelled = [{"key": QUEUE, "operator": "Exists"}]
    Variants = Sequence[tuple[str, list[dict[str, Any]], list[dict[str, Any]]]]
    variants: Variants
    if settings.manage_jobs_without_queue_name:
        variants = [("all", [excluded], [])]
    else:
        variants = [
            ("labelled", [excluded], labelled),
            (
                "namespace-default",
                [excluded, {"key": QUEUE, "operator": "Exists"}],
                [{"key": QUEUE, "operator": "DoesNotExist"}],
            ),
        ]
    webhooks = []
    for kind in chosen:
        plural, versions = kind.api.plural, _versions(kind)
        rule = _rule(kind.api.group, versions, plural)
        gang = pod_gang(kind)
        opted_in: Variants = (
            [(kind.name.lower(), [excluded], [{"key": gang.member_label, "operator": "Exists"}])]
            if gang is not None
            else variants
        )
        for variant, ns_exprs, obj_exprs in opted_in:
            webhooks.append(
                _webhook(
                    f"{plural}-{variant}.{NAME}",
                    path_of(kind),
                    rule,
                    client,
                    ns_exprs,
                    obj_exprs,
                    "Fail",
                )
            )
    # Updates: of the kinds held through a gang object of their own. A pod group's members are
    # pods, whose requests, node selector and tolerations Kubernetes does not let change.
    for kind in chosen:
        if pod_gang(kind) is not None:
            continue
        plural, versions = kind.api.plural, _versions(kind)
        webhooks.append(
            _webhook(
                f"{plural}-updates.{NAME}",
                update_path_of(kind),
                _rule(kind.api.group, versions, plural, "UPDATE"),
                client,
                [excluded],
                labelled,
                "Ignore",
                unless_by=own_user,
            )
        )
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": NAME, "labels": {"app.kubernetes.io/name": "muster"}},
        "webhooks": webhooks,
    }


IN_CLUSTER_SERVICE: Final = {"name": "muster", "namespace": "muster-system", "port": 443}
"""The Service that fronts the webhook in the shipped manifests."""


def render_manifest() -> str:
    """The static in-cluster configuration shipped in manifests/base/webhook.yaml."""
    import yaml

    class NoAliases(yaml.SafeDumper):
        def ignore_aliases(self, data: object) -> bool:
            return True

    config = build_configuration(
        WebhookSettings(), service=IN_CLUSTER_SERVICE, own_user=IN_CLUSTER_USER
    )
    header = (
        "# Generated by `python -m webhook.configuration > manifests/base/webhook.yaml`;\n"
        "# tests/unit/test_webhook_decision.py checks it matches. caBundle is injected by\n"
        "# cert-manager (overlay manifests/overlays/cert-manager) or by `muster certs`.\n"
    )
    return header + yaml.dump(config, Dumper=NoAliases, sort_keys=False)


if __name__ == "__main__":
    print(render_manifest(), end="")
