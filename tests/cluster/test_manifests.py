"""The install manifests on the real control plane: apply, RBAC, `muster certs`, and muster run
as its own ServiceAccount.

`NEEDS` is the one list of API calls muster makes (found by reading admission/, webhook/ and
kopf's engines: watches, peering, event posting, CRD observation).
The ClusterRole in manifests/base/rbac.yaml and the RBAC table in docs/install.md must both say
exactly this, `kubectl auth can-i` as the ServiceAccount must answer yes to each entry and no to
each of `NOT_NEEDED`, and `muster run` with a token of the ServiceAccount must admit a Job with
nothing refused.

The session's `muster run --local` registers a webhook configuration of the same name as the
manifests' (muster.dev), so it is stopped while this module runs and restarted at the end.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.launcher import free_port
from kubeport.kubeapi import POD_GROUPS, ApiError, KubeClient
from muster.commands.certs import SECRET_NAME, service_hosts
from policies.vocabulary import ADMITTED, QUEUE, SUBMITTED
from simulator.controlplane.build import Binaries
from tests import builders
from tests.conftest import REPO, MusterProcess, manifest_webhooks
from tests.controller_helpers import create_queue, delete_queue, jobs_path
from tests.kube import create_through_webhook, wait_for
from webhook.configuration import (
    IN_CLUSTER_SERVICE,
    IN_CLUSTER_USER,
    JOB_PATH,
    build_configuration,
)
from webhook.decision import WebhookSettings
from webhook.tls import WebhookTls, create_webhook_tls

pytestmark = [pytest.mark.cluster]

NAMESPACE = "muster-system"
SA = f"system:serviceaccount:{NAMESPACE}:muster"
CONFIG = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/muster.dev"
SECRET = f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET_NAME}"
PEERING = "/apis/kopf.dev/v1/clusterkopfpeerings/muster"
MANIFESTS = REPO / "manifests"


@dataclass(frozen=True)
class Need:
    """One kind of API call muster makes, and the code that makes it."""

    group: str
    resource: str  # with "/subresource" where there is one
    verb: str
    who: str
    name: str | None = None  # the only object the call is allowed on


def _needs(group: str, resource: str, verbs: str, who: str, name: str | None = None) -> list[Need]:
    return [Need(group, resource, verb, who, name) for verb in verbs.split()]


DRA_RESOURCES = ("deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates")
NEEDS: tuple[Need, ...] = (
    *_needs(
        "batch",
        "jobs",
        "list watch",
        "admission/listing.py, cachewatch; webhook/loading.py load_state, ManagedJobs",
    ),
    *_needs("batch", "jobs", "get", "admission/writes.py Writer.get_job"),
    *_needs("batch", "jobs", "patch", "admission/writes.py Writer.admit/evict/suspend/mark_failed"),
    *_needs("batch", "jobs/status", "patch", "admission/writes.py Writer._clear_start"),
    *_needs(
        "",
        "pods",
        "list watch",
        "admission/listing.py list_everything, cachewatch; webhook/loading.py member_pods",
    ),
    *_needs(
        "scheduling.k8s.io",
        "podgroups",
        "list create patch",
        "admission/writes.py Writer._apply, pod_group_counts",
    ),
    *_needs("", "pods", "patch", "admission/writes.py Writer.place_pod"),
    *_needs("", "pods", "delete", "admission/writes.py delete_members (pod groups)"),
    *_needs(
        "muster.dev",
        "gangrecords",
        "get list watch create patch",
        "admission/listing.py; admission/writes.py write_record, get_object",
    ),
    *(
        need
        for plural in (
            "deviceclasses",
            "resourceslices",
            "resourceclaims",
            "resourceclaimtemplates",
        )
        for need in _needs(
            "resource.k8s.io",
            plural,
            "get list watch",
            "admission/devicebook.py (listing, cachewatch); webhook/devices.py device_watches",
        )
    ),
    *_needs(
        "",
        "nodes",
        "list watch",
        "admission/registration.py watch_node; webhook/loading.py load_nodes",
    ),
    *_needs(
        "", "namespaces", "list watch", "webhook/loading.py load_state, webhook watch_namespace"
    ),
    *_needs("", "events", "create", "admission/writes.py Writer.event; kopf settings.posting"),
    *_needs("muster.dev", "queues", "list watch", "controller watch_queue, webhook watch_queue"),
    *_needs("muster.dev", "queues/status", "patch", "admission/writes.py patch_queue_status"),
    *_needs("flux-framework.org", "miniclusters", "list watch", "webhook watch_minicluster"),
    *_needs(
        "flux-framework.org",
        "miniclusters",
        "patch",
        "admission/writes.py Writer.send resize_owner",
    ),
    *_needs(
        "jobset.x-k8s.io",
        "jobsets",
        "list watch",
        "admission/listing.py, cachewatch; webhook/loading.py load_state",
    ),
    *_needs("jobset.x-k8s.io", "jobsets", "get", "admission/writes.py Writer.get_job"),
    *_needs(
        "jobset.x-k8s.io", "jobsets", "patch", "admission/writes.py Writer.send (suspend, hold)"
    ),
    *_needs("kopf.dev", "clusterkopfpeerings", "list watch", "kopf peering; controller lead()"),
    *_needs(
        "kopf.dev", "clusterkopfpeerings", "create", "admission/registration.py ensure_peering"
    ),
    *_needs("kopf.dev", "clusterkopfpeerings", "patch", "kopf keepalive, finalizer", "muster"),
    *_needs("apiextensions.k8s.io", "customresourcedefinitions", "list watch", "kopf observer"),
    *_needs("authentication.k8s.io", "tokenreviews", "create", "kubeport/statusauth.py"),
    *_needs("authorization.k8s.io", "subjectaccessreviews", "create", "kubeport/statusauth.py"),
)

NOT_NEEDED: tuple[tuple[str, ...], ...] = (
    # (kubectl auth can-i arguments); each must be answered "no".
    ("get", "secrets", "-A"),
    ("get", "secrets", "-n", NAMESPACE),
    ("list", "secrets", "-n", NAMESPACE),
    ("list", "configmaps", "-A"),
    ("create", "pods", "-A"),
    ("delete", "gangrecords.muster.dev", "-A"),
    ("create", "pods/eviction", "-A"),
    ("create", "jobs.batch", "-A"),
    ("delete", "jobs.batch", "-A"),
    ("update", "jobs.batch", "-A"),
    ("patch", "nodes"),
    ("delete", "nodes"),
    ("patch", "namespaces"),
    ("delete", "namespaces"),
    ("create", "queues.muster.dev"),
    ("patch", "queues.muster.dev"),
    ("delete", "queues.muster.dev"),
    ("delete", "miniclusters.flux-framework.org", "-A"),
    ("create", "jobsets.jobset.x-k8s.io", "-A"),
    ("delete", "jobsets.jobset.x-k8s.io", "-A"),
    ("delete", "podgroups.scheduling.k8s.io", "-A"),
    ("patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io"),
    ("create", "customresourcedefinitions.apiextensions.k8s.io"),
    ("patch", "clusterkopfpeerings.kopf.dev/someone-else"),
    ("delete", "clusterkopfpeerings.kopf.dev/muster"),
    ("create", "clusterroles.rbac.authorization.k8s.io"),
    ("bind", "clusterroles.rbac.authorization.k8s.io"),
    ("escalate", "clusterroles.rbac.authorization.k8s.io"),
    ("impersonate", "serviceaccounts", "-A"),
    ("create", "serviceaccounts/token", "-A"),
)


def need_keys() -> set[tuple[str, str, str, str | None]]:
    return {(n.group, n.resource, n.verb, n.name) for n in NEEDS}


# -- helpers ------------------------------------------------------------------------------------


def kubectl(
    kubeconfig: Path, *args: str, check: bool = True, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(Binaries.at().kubectl), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        input=stdin,
        check=False,
        timeout=120,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


def kustomize(path: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(Binaries.at().kubectl), "kustomize", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"kubectl kustomize {path}: {done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def muster_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "muster.cli", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


def path_of(doc: dict[str, Any]) -> str:
    """The API path of a manifest's object (the kinds the manifests hold)."""
    version = doc["apiVersion"]
    prefix = f"/api/{version}" if "/" not in version else f"/apis/{version}"
    plural = {
        "Namespace": "namespaces",
        "CustomResourceDefinition": "customresourcedefinitions",
        "ServiceAccount": "serviceaccounts",
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "Service": "services",
        "Deployment": "deployments",
        "PodDisruptionBudget": "poddisruptionbudgets",
        "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
        "NetworkPolicy": "networkpolicies",
        "Queue": "queues",
    }[doc["kind"]]
    namespace = doc["metadata"].get("namespace")
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"{prefix}{where}/{plural}/{doc['metadata']['name']}"


def delete_quietly(kube: KubeClient, path: str) -> None:
    try:
        kube.delete(path)
    except ApiError as exc:
        if exc.status != 404:
            raise


def drop_peering(kube: KubeClient) -> None:
    """Delete the peering object; kopf's finalizer stays on it after its operator stopped."""
    try:
        kube.patch(PEERING, {"metadata": {"finalizers": None}})
    except ApiError as exc:
        if exc.status != 404:
            raise
    delete_quietly(kube, PEERING)


def webhook_bundles(kube: KubeClient) -> list[bytes]:
    config = kube.get(CONFIG)
    return [base64.b64decode(w["clientConfig"].get("caBundle", "")) for w in config["webhooks"]]


# -- the install --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def installed(kube: KubeClient, kubeconfig: Path, muster: MusterProcess) -> Iterator[str]:
    """`kubectl apply --server-side -k manifests/`, exactly as docs/install.md says; its output."""
    muster.stop()  # its cleanup deletes its own muster.dev webhook configuration
    delete_quietly(kube, CONFIG)
    applied = kubectl(kubeconfig, "apply", "--server-side", "-k", str(MANIFESTS))
    kubectl(
        kubeconfig,
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/queues.muster.dev",
        "crd/gangrecords.muster.dev",
        "crd/clusterkopfpeerings.kopf.dev",
    )
    try:
        yield applied.stdout
    finally:
        # Everything but the CRDs: the rest of the session's tests use the Queue CRD.
        delete_quietly(kube, CONFIG)
        drop_peering(kube)
        for path in (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/muster",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/muster",
            f"/api/v1/namespaces/{NAMESPACE}",
        ):
            delete_quietly(kube, path)
        wait_for(
            lambda: _gone(kube, f"/api/v1/namespaces/{NAMESPACE}"),
            timeout=120,
            what=f"namespace {NAMESPACE} deleted",
        )
        muster.restart(signal.SIGTERM)


def _gone(kube: KubeClient, path: str) -> bool:
    try:
        kube.get(path)
    except ApiError as exc:
        return exc.status == 404
    return False


def test_every_object_of_the_install_exists_for_real(installed: str, kube: KubeClient) -> None:
    docs = kustomize(MANIFESTS)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "Deployment",
            "MutatingWebhookConfiguration",
            "Namespace",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "Service",
            "ServiceAccount",
        ]
    )
    assert installed.count("serverside-applied") == len(docs), installed
    for doc in docs:
        live = kube.get(path_of(doc))
        assert live["metadata"]["labels"]["app.kubernetes.io/part-of"] == "muster", path_of(doc)


def test_the_deployment_passes_pod_security_restricted(installed: str, kube: KubeClient) -> None:
    # The ReplicaSet controller creates the pods only if Pod Security "restricted" admits them
    # (they then stay Pending: the kwok nodes are tainted and no image can run here).
    pods_path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    selector = {"labelSelector": "app.kubernetes.io/name=muster"}

    def two_pods() -> list[dict[str, Any]] | None:
        pods: list[dict[str, Any]] = kube.get(pods_path, selector)["items"]
        return pods if len(pods) == 2 else None

    pods = wait_for(two_pods, timeout=60, what="the Deployment's 2 pods are created")
    spec = pods[0]["spec"]
    assert spec["serviceAccountName"] == "muster"
    assert spec["securityContext"]["runAsNonRoot"] is True
    container = spec["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["image"] == "muster:0.1.0"
    # And the namespace really enforces it: a privileged pod is refused there.
    privileged = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "privileged"},
        "spec": {
            "containers": [
                {"name": "c", "image": "busybox", "securityContext": {"privileged": True}}
            ]
        },
    }
    with pytest.raises(ApiError, match='violates PodSecurity "restricted') as refused:
        kube.request("POST", pods_path, privileged, params={"dryRun": "All"})
    assert refused.value.status == 403


def test_reapplying_the_install_changes_nothing(
    installed: str, kube: KubeClient, kubeconfig: Path
) -> None:
    docs = kustomize(MANIFESTS)

    def applied(path: str) -> dict[str, Any]:
        # What an apply can change: everything but status (the Deployment and PDB controllers
        # keep writing theirs, which moves resourceVersion), and apply's own managedFields
        # entries, timestamps included (an apply that changes nothing writes nothing).
        obj = kube.get(path)
        meta = dict(obj["metadata"])
        meta.pop("resourceVersion")
        meta["managedFields"] = [
            f for f in meta.get("managedFields") or [] if f.get("operation") == "Apply"
        ]
        return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}

    before = {path_of(d): applied(path_of(d)) for d in docs}
    kubectl(kubeconfig, "apply", "--server-side", "-k", str(MANIFESTS))
    after = {path_of(d): applied(path_of(d)) for d in docs}
    assert after == before


def test_the_webhook_configuration_is_the_builders_and_points_at_the_service(
    installed: str,
) -> None:
    docs = kustomize(MANIFESTS)
    (config,) = by_kind(docs, "MutatingWebhookConfiguration")
    built = build_configuration(
        WebhookSettings(), service=IN_CLUSTER_SERVICE, own_user=IN_CLUSTER_USER
    )
    assert config["webhooks"] == built["webhooks"]
    # The user whose updates skip the review is the Deployment's ServiceAccount.
    (account,) = by_kind(docs, "ServiceAccount")
    meta = account["metadata"]
    assert f"system:serviceaccount:{meta['namespace']}:{meta['name']}" == IN_CLUSTER_USER
    (deployment,) = by_kind(docs, "Deployment")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == meta["name"]
    (service,) = by_kind(docs, "Service")
    assert service["metadata"]["name"] == IN_CLUSTER_SERVICE["name"]
    assert service["metadata"]["namespace"] == IN_CLUSTER_SERVICE["namespace"]
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert ports["webhook"]["port"] == IN_CLUSTER_SERVICE["port"]
    (deployment,) = by_kind(docs, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    # Every Service port targets a named container port, and `muster run` listens there.
    assert {p["targetPort"] for p in ports.values()} == set(container_ports)
    args = container["args"]
    assert f"--webhook-port={container_ports['webhook']}" in args
    assert f"--status-port={container_ports['status']}" in args
    assert f"--metrics-port={container_ports['metrics']}" in args
    assert f"--webhook-metrics-port={container_ports['webhook-metrics']}" in args
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "status"}
    assert deployment["spec"]["replicas"] == 2 and "--peering=muster" in args


def test_overlays_build(installed: str) -> None:
    with_cert_manager = kustomize(MANIFESTS / "overlays/cert-manager")
    (config,) = by_kind(with_cert_manager, "MutatingWebhookConfiguration")
    certificates = {c["metadata"]["name"]: c for c in by_kind(with_cert_manager, "Certificate")}
    issuers = {i["metadata"]["name"]: i for i in by_kind(with_cert_manager, "Issuer")}
    namespace, name = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].split("/")
    serving = certificates[name]
    assert namespace == serving["metadata"]["namespace"] == NAMESPACE
    assert serving["spec"]["secretName"] == SECRET_NAME
    assert set(serving["spec"]["dnsNames"]) <= set(service_hosts())
    assert service_hosts()[0] in serving["spec"]["dnsNames"]
    # Issued by a CA that cert-manager keeps (so renewals leave the caBundle alone), which is
    # itself self-signed.
    ca_issuer = issuers[serving["spec"]["issuerRef"]["name"]]
    ca = next(
        c
        for c in certificates.values()
        if c["spec"]["secretName"] == ca_issuer["spec"]["ca"]["secretName"]
    )
    assert ca["spec"]["isCA"] is True
    assert "selfSigned" in issuers[ca["spec"]["issuerRef"]["name"]]["spec"]
    # Everything else is the plain install.
    plain = {(d["kind"], d["metadata"]["name"]) for d in kustomize(MANIFESTS)}
    assert plain <= {(d["kind"], d["metadata"]["name"]) for d in with_cert_manager}

    monitoring = kustomize(MANIFESTS / "overlays/monitoring")
    (monitor,) = by_kind(monitoring, "ServiceMonitor")
    (service,) = by_kind(kustomize(MANIFESTS), "Service")
    assert {e["port"] for e in monitor["spec"]["endpoints"]} == {"metrics", "webhook-metrics"}
    # Each scrape sends the token of the scraper, whose ClusterRole may get /metrics only.
    (secret,) = by_kind(monitoring, "Secret")
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["authorization"]["credentials"]["name"] == secret["metadata"]["name"]
    (reader,) = by_kind(monitoring, "ClusterRole")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {
        p["name"] for p in service["spec"]["ports"]
    }
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()


def test_the_documented_image_overlay_builds(installed: str, tmp_path: Path) -> None:
    text = (REPO / "docs/install.md").read_text()
    block = re.search(r"```yaml\n(apiVersion: kustomize[^`]*)```", text)
    assert block, "docs/install.md shows an overlay that sets the image"
    overlay = yaml.safe_load(block[1])
    assert overlay["resources"] == ["../muster/manifests"]
    for variant in ("", "/overlays/cert-manager"):
        here = tmp_path / f"my-muster{variant.replace('/', '-')}"
        here.mkdir()
        overlay["resources"] = [os.path.relpath(MANIFESTS, here) + variant]
        (here / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
        (deployment,) = by_kind(kustomize(here), "Deployment")
        image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
        assert image == "registry.example.com/muster:0.1.0"


def test_the_uninstall_command_is_accepted(installed: str, kubeconfig: Path) -> None:
    # Server-side dry run only: deleting the Queue CRD would delete the session's Queues.
    done = kubectl(kubeconfig, "delete", "-k", str(MANIFESTS), "--dry-run=server")
    assert done.stdout.count(" deleted ") == len(kustomize(MANIFESTS)), done.stdout
    assert done.stdout.count("(server dry run)") == len(kustomize(MANIFESTS))


def test_example_queues_apply_and_are_accepted(
    installed: str, kube: KubeClient, kubeconfig: Path
) -> None:
    examples = MANIFESTS / "examples"
    docs = kustomize(examples)
    queues = {d["metadata"]["name"]: d for d in by_kind(docs, "Queue")}
    try:
        done = kubectl(kubeconfig, "apply", "--server-side", "-k", str(examples))
        assert done.stdout.count("serverside-applied") == len(docs)
        live = {name: kube.get(path_of(doc)) for name, doc in queues.items()}
        # A cohort with two leaf queues and a GPU queue, with borrowing and lending limits.
        parents = {name: q["spec"].get("parent") for name, q in live.items()}
        cohort = {p for p in parents.values() if p}
        assert len(cohort) == 1
        assert sum(1 for p in parents.values() if p in cohort) >= 3
        assert any("nvidia.com/gpu" in q["spec"].get("nominal", {}) for q in live.values())
        assert any(q["spec"].get("borrowingLimit") for q in live.values())
        assert any(q["spec"].get("lendingLimit") for q in live.values())
        # Defaults were filled in by the CRD schema: the apiserver read them as Queues.
        assert all(q["spec"]["clogTimeout"] for q in live.values())
        for namespace in by_kind(docs, "Namespace"):
            default_queue = namespace["metadata"]["labels"][QUEUE]
            assert default_queue in queues and default_queue not in cohort
    finally:
        kubectl(kubeconfig, "delete", "-k", str(examples), "--ignore-not-found", "--wait=false")


# -- RBAC ---------------------------------------------------------------------------------------


def cluster_role() -> dict[str, Any]:
    docs = list(yaml.safe_load_all((MANIFESTS / "base/rbac.yaml").read_text()))
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    return dict(role)


def test_the_cluster_role_grants_exactly_the_needs_and_no_wildcard() -> None:
    granted: set[tuple[str, str, str, str | None]] = set()
    for rule in cluster_role()["rules"]:
        assert "nonResourceURLs" not in rule
        for field in ("apiGroups", "resources", "verbs", "resourceNames"):
            assert "*" not in rule.get(field, []), f"wildcard in {field} of {rule}"
            assert all("*" not in value for value in rule.get(field, [])), rule
        names = rule.get("resourceNames") or [None]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in names:
                        granted.add((group, resource, verb, name))
    assert granted - need_keys() == set(), "granted but not needed"
    assert need_keys() - granted == set(), "needed but not granted"


def test_the_rbac_table_in_the_docs_matches() -> None:
    text = (REPO / "docs/install.md").read_text()
    section = text.split("## RBAC", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    documented: set[tuple[str, str, str, str | None]] = set()
    for row in rows[1:]:  # the header is first
        group, resource, verbs, only, _who = (
            c.strip().strip("`") for c in row.strip("|").split("|")
        )
        for verb in verbs.split(", "):
            documented.add(("" if group == "core" else group, resource, verb, only or None))
    assert documented == need_keys()


def can_i(kubeconfig: Path, *args: str) -> str:
    done = kubectl(kubeconfig, "auth", "can-i", *args, f"--as={SA}", check=False)
    return done.stdout.strip()


def review_access(kube: KubeClient, need: Need) -> bool:
    """What RBAC answers the service account for `need`, asked with a SubjectAccessReview:
    for an API the cluster does not serve (PodGroups without GenericWorkload), which `kubectl
    auth can-i` cannot name (it resolves the type by discovery and answers no)."""
    resource, _, subresource = need.resource.partition("/")
    attributes = {"verb": need.verb, "group": need.group, "resource": resource}
    if subresource:
        attributes["subresource"] = subresource
    if need.name:
        attributes["name"] = need.name
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": SA,
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"],
            "resourceAttributes": attributes,
        },
    }
    answer = kube.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool(answer["status"].get("allowed"))


def test_the_service_account_can_do_what_muster_needs(
    installed: str, kubeconfig: Path, kube: KubeClient
) -> None:
    refused = []
    for need in NEEDS:
        resource, _, subresource = need.resource.partition("/")
        target = f"{resource}.{need.group}" if need.group else resource
        if need.name:
            target += f"/{need.name}"
        args = [need.verb, target, "-A"]
        if subresource:
            args.append(f"--subresource={subresource}")
        served = need.group != "scheduling.k8s.io" or kube.serves(POD_GROUPS)
        allowed = can_i(kubeconfig, *args) == "yes" if served else review_access(kube, need)
        if not allowed:
            refused.append(f"{' '.join(args)} ({need.who})")
    assert refused == []


def test_the_service_account_cannot_do_what_muster_does_not_need(
    installed: str, kubeconfig: Path
) -> None:
    allowed = [" ".join(args) for args in NOT_NEEDED if can_i(kubeconfig, *args) != "no"]
    assert allowed == []


# -- muster certs -------------------------------------------------------------------------------


def test_muster_certs_refuses_without_the_webhook_configuration(
    installed: str, kube: KubeClient, kubeconfig: Path
) -> None:
    delete_quietly(kube, SECRET)
    done = muster_cli(
        "certs", "--kubeconfig", str(kubeconfig), "--webhook-configuration", "not-installed.dev"
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "muster certs: MutatingWebhookConfiguration not-installed.dev not found: apply the "
        "manifests first: kubectl apply --server-side -k manifests/"
    )
    assert _gone(kube, SECRET), "a refused run must write nothing"


def test_muster_certs_writes_the_secret_and_ca_bundle_and_keeps_them(
    installed: str, kube: KubeClient, kubeconfig: Path
) -> None:
    from cryptography import x509

    delete_quietly(kube, SECRET)
    done = muster_cli("certs", "--kubeconfig", str(kubeconfig))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Secret {NAMESPACE}/{SECRET_NAME} created")
    secret = kube.get(SECRET)
    assert secret["type"] == "kubernetes.io/tls"
    ca = base64.b64decode(secret["data"]["ca.crt"])
    serving = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    serving.verify_directly_issued_by(x509.load_pem_x509_certificate(ca))
    assert webhook_bundles(kube) == [ca] * manifest_webhooks()

    # Again: kept, not rewritten.
    version = secret["metadata"]["resourceVersion"]
    done = muster_cli("certs", "--kubeconfig", str(kubeconfig))
    assert done.returncode == 0 and " kept " in done.stdout, done.stdout + done.stderr
    assert kube.get(SECRET)["metadata"]["resourceVersion"] == version

    # Re-applying the manifests (an upgrade) leaves the caBundle alone: other field manager.
    kubectl(kubeconfig, "apply", "--server-side", "-k", str(MANIFESTS))
    assert webhook_bundles(kube) == [ca] * manifest_webhooks()

    # --rotate: new material; the bundle trusts new and old until the next plain run.
    done = muster_cli("certs", "--kubeconfig", str(kubeconfig), "--rotate")
    assert done.returncode == 0 and "replaced" in done.stdout, done.stderr
    new_ca = base64.b64decode(kube.get(SECRET)["data"]["ca.crt"])
    assert new_ca != ca
    assert webhook_bundles(kube) == [new_ca + ca] * manifest_webhooks()
    done = muster_cli("certs", "--kubeconfig", str(kubeconfig))
    assert done.returncode == 0 and " kept " in done.stdout
    assert webhook_bundles(kube) == [new_ca] * manifest_webhooks()


def test_muster_certs_output_applies_with_kubectl(
    installed: str, kube: KubeClient, kubeconfig: Path
) -> None:
    printed = muster_cli("certs", "--dry-run")
    assert printed.returncode == 0, printed.stderr
    kubectl(
        kubeconfig,
        "apply",
        "--server-side",
        "--field-manager=muster-certs",
        "-f",
        "-",
        stdin=printed.stdout,
    )
    secret, _ = yaml.safe_load_all(printed.stdout)
    assert kube.get(SECRET)["data"] == secret["data"]
    assert (
        webhook_bundles(kube) == [base64.b64decode(secret["data"]["ca.crt"])] * manifest_webhooks()
    )


# -- muster run as the ServiceAccount -----------------------------------------------------------


def service_account_kubeconfig(kube: KubeClient, kubeconfig: Path, where: Path) -> Path:
    """A kubeconfig with a fresh token of muster's ServiceAccount (TokenRequest API)."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    request["spec"] = {"expirationSeconds": 3600}
    token = kube.create(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/muster/token", request)[
        "status"
    ]["token"]
    admin = yaml.safe_load(kubeconfig.read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
    cluster = next(c for c in admin["clusters"] if c["name"] == context["context"]["cluster"])
    path = where / "muster-sa.kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": "muster", "user": {"token": token}}],
                "contexts": [
                    {"name": "muster", "context": {"cluster": cluster["name"], "user": "muster"}}
                ],
                "current-context": "muster",
            }
        )
    )
    return path


def serves_tls(port: int) -> bool:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=1) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1"),
        ):
            return True
    except OSError:
        return False


@dataclass
class Replica:
    """One `muster run` with the Deployment's flags, as the ServiceAccount, on loopback."""

    proc: subprocess.Popen[str]
    port: int
    log_path: Path

    @classmethod
    def start(cls, as_muster: Path, tls: WebhookTls, priority: int, log_path: Path) -> Replica:
        port = free_port()
        with log_path.open("w") as sink:
            proc = subprocess.Popen(
                [sys.executable, "-m", "muster.cli", "run", "--kubeconfig", str(as_muster)]
                + ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key), "--peering", "muster"]
                + ["--webhook-addr", "127.0.0.1", "--webhook-port", str(port)]
                + ["--priority", str(priority), "--peering-lifetime", "15"]
                + ["--status-port", "0", "--metrics-port", "0"],
                stdout=sink,
                stderr=subprocess.STDOUT,
                text=True,
            )
        replica = cls(proc, port, log_path)
        wait_for(
            lambda: serves_tls(port) or proc.poll() is not None,
            timeout=60,
            what=f"the webhook of replica {priority} listens on 127.0.0.1:{port}",
        )
        replica.check_alive()
        return replica

    def log(self) -> str:
        return self.log_path.read_text()

    def check_alive(self) -> None:
        assert self.proc.poll() is None, self.log()[-3000:]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def review(port: int, ca_bundle: bytes, namespace: str, job: dict[str, Any]) -> list[Any]:
    """POST an AdmissionReview for creating `job` to a webhook; the JSON patch it answers."""
    context = ssl.create_default_context(cadata=ca_bundle.decode())
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "test",
            "operation": "CREATE",
            "namespace": namespace,
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "object": {**job, "metadata": {**job["metadata"], "namespace": namespace}},
        },
    }
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}/{JOB_PATH}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, context=context, timeout=5) as answer:
        response = json.load(answer)["response"]
    assert response["allowed"], response
    patch: list[Any] = json.loads(base64.b64decode(response.get("patch") or "W10="))
    return patch


def suspends(patch: list[Any]) -> bool:
    return any(op["path"] == "/spec/suspend" and op.get("value") is True for op in patch)


def test_muster_runs_as_its_service_account_and_admits_a_job(
    installed: str, kube: KubeClient, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    as_muster = service_account_kubeconfig(kube, kubeconfig, tmp_path)
    who = kubectl(as_muster, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
    assert who.stdout == SA
    tls = create_webhook_tls(tmp_path / "tls", ["127.0.0.1"])
    drop_peering(kube)  # muster run must create it itself, as in a fresh install
    queue = f"{namespace}-q"
    late = f"{namespace}-late"[-63:].lstrip("-")
    create_queue(kube, queue, {"nominal": {"cpu": "16"}})
    active = standby = None
    try:
        active = Replica.start(as_muster, tls, 200, tmp_path / "active.log")
        wait_for(
            lambda: "controller ready" in active.log() or active.proc.poll() is not None,
            timeout=90,
            what="muster run (as the ServiceAccount) becomes the active replica",
        )
        active.check_alive()
        # What the Service does in a real cluster: send the apiserver to the replica.
        config = kube.get(CONFIG)
        for webhook in config["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {
                "url": f"https://127.0.0.1:{active.port}{path}",
                "caBundle": base64.b64encode(tls.ca_bundle).decode(),
            }
        kube.request("PUT", CONFIG, config)

        create_through_webhook(
            kube,
            jobs_path(namespace),
            builders.job("gang", pods=2, labels={QUEUE: queue}),
        )
        job = wait_for(
            lambda: (
                (j := kube.get(f"{jobs_path(namespace)}/gang"))["metadata"]
                .get("annotations", {})
                .get(ADMITTED)
                and j
            ),
            timeout=60,
            what="the Job is admitted by muster running as its ServiceAccount",
        )
        assert job["metadata"]["annotations"][SUBMITTED]  # stamped by this replica's webhook
        assert job["spec"]["suspend"] is False
        # The replica logs the admission once its PATCH has returned: wait for the line.
        wait_for(
            lambda: f"{namespace}/gang admitted 2 of 2 pods" in active.log(),
            timeout=10,
            what="the replica logs the admission as its own",
        )
        # Writes only the ServiceAccount's rights allow: an Event, the Queue's status, the
        # peering object (created here, heartbeat in its status, kopf's finalizer).
        wait_for(
            lambda: (
                (kube.get(f"/apis/muster.dev/v1alpha1/queues/{queue}").get("status") or {}).get(
                    "admitted"
                )
                == 1
            ),
            timeout=30,
            what="the Queue's status is written",
        )
        wait_for(
            lambda: any(
                e["reason"] == "Admitted" and e["source"]["component"] == "muster"
                for e in kube.get(f"/api/v1/namespaces/{namespace}/events")["items"]
            ),
            timeout=30,
            what="the replica's Admitted Event",
        )
        peering = kube.get(PEERING)
        assert len(peering["status"]) >= 1, "kopf's heartbeat in the peering status"
        assert peering["metadata"]["finalizers"] == ["muster.dev/finalizer"]

        # The second replica stands by; its webhook still serves, and with a current view: a
        # namespace labelled with a default queue after it started manages unlabelled Jobs.
        standby = Replica.start(as_muster, tls, 100, tmp_path / "standby.log")
        wait_for(
            lambda: "controller standby" in standby.log(),
            timeout=60,
            what="the second replica stands by",
        )
        kube.create("/api/v1/namespaces", {"metadata": {"name": late, "labels": {QUEUE: queue}}})
        unlabelled = builders.job("late", pods=1)

        def standby_suspends() -> bool:
            try:
                return suspends(review(standby.port, tls.ca_bundle, late, unlabelled))
            except OSError:  # a slow answer on a loaded machine: ask again
                return False

        wait_for(
            standby_suspends,
            timeout=30,
            what=f"the standby's webhook suspends a Job in namespace {late}, labelled after "
            "it started (its view of namespaces must not be paused with its controller)",
        )
        assert "this replica is active" not in standby.log()

        # Nothing muster (or kopf) asked for was refused, in either replica.
        for replica in (active, standby):
            assert not re.search(r"[Ff]orbidden|HTTP 403|[Pp]ermission", replica.log()), (
                replica.log()
            )
    finally:
        codes = [replica.stop() for replica in (standby, active) if replica is not None]
        delete_queue(kube, queue)
        delete_quietly(kube, f"/api/v1/namespaces/{late}")
    assert codes == [0, 0], (active.log() if active else "")[-3000:]
    # A clean stop leaves the peering at once (a standby would not wait out the lifetime).
    assert not (kube.get(PEERING).get("status") or {}), "stopped replicas left the peering"
