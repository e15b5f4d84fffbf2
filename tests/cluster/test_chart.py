"""The Helm chart on the real local control plane, driven by the commands docs/install.md shows.

The shell blocks of docs/install.md marked `<!-- test_chart: install|upgrade|uninstall -->`
are run as they are (with this cluster's kubeconfig added): create and label the namespace,
`helm install`, `muster certs`; `helm upgrade` with changed values; `helm uninstall` and the
clean-up of what muster made for itself. Between the upgrade and the uninstall, `muster run`
is started with the flags of the Deployment as the upgrade left it and a token of the chart's
ServiceAccount (the Deployment's pods cannot run on kwok's nodes), the webhook configuration is
pointed at it as the Service would, and a labelled Job must be suspended and admitted. After
the uninstall, nothing labelled app.kubernetes.io/part-of=muster may be left but the CRDs.

The session's `muster run --local` registers a webhook configuration of the same name, so it is
stopped while this module runs. Rendering without a cluster: tests/unit/test_chart.py.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.launcher import free_port
from kubeport.kubeapi import ApiError, KubeClient
from policies.vocabulary import ADMITTED, SUBMITTED
from simulator.controlplane.build import Binaries, helm_path
from tests import builders
from tests.conftest import REPO, MusterProcess, manifest_webhooks
from tests.controller_helpers import create_queue, delete_queue, jobs_path
from tests.kube import create_through_webhook, wait_for
from webhook.tls import create_webhook_tls

pytestmark = [pytest.mark.cluster]

NAMESPACE = "muster-system"
CONFIG = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/muster.dev"
PEERING = "/apis/kopf.dev/v1/clusterkopfpeerings/muster"
DEPLOYMENT = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/muster"
PART_OF = "app.kubernetes.io/part-of=muster"


def documented(step: str) -> list[str]:
    """The command lines of the shell block docs/install.md marks `test_chart: step`."""
    text = (REPO / "docs/install.md").read_text()
    block = re.search(rf"<!-- test_chart: {step} -->\n```bash\n(.*?)```", text, re.DOTALL)
    assert block, f"docs/install.md has no block marked test_chart: {step}"
    return [line for line in block[1].splitlines() if line.strip()]


def run_line(line: str, kubeconfig: Path) -> str:
    """One documented line, against this cluster; its output."""
    words = shlex.split(line)
    tools = {"kubectl": [str(Binaries.at().kubectl)], "helm": [str(helm_path())]}
    tools["muster"] = [sys.executable, "-m", "muster.cli"]
    argv = [*tools[words[0]], *words[1:], "--kubeconfig", str(kubeconfig)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def kubectl(kubeconfig: Path, *args: str) -> str:
    return run_line(shlex.join(["kubectl", *args]), kubeconfig)


def gone(kube: KubeClient, path: str) -> bool:
    try:
        kube.get(path)
    except ApiError as exc:
        return exc.status == 404
    return False


def api_path(doc: dict[str, Any]) -> str:
    plural = {
        "ServiceAccount": "serviceaccounts",
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "Service": "services",
        "Deployment": "deployments",
        "PodDisruptionBudget": "poddisruptionbudgets",
        "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
        "NetworkPolicy": "networkpolicies",
    }[doc["kind"]]
    version = doc["apiVersion"]
    prefix = f"/api/{version}" if "/" not in version else f"/apis/{version}"
    namespace = doc["metadata"].get("namespace")
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"{prefix}{where}/{plural}/{doc['metadata']['name']}"


@pytest.fixture(scope="module")
def cluster(kube: KubeClient, kubeconfig: Path, muster: MusterProcess) -> Iterator[Path]:
    """The cluster without the session's muster; whatever a failed run left is removed after."""
    muster.stop()  # its clean stop deletes its own muster.dev webhook configuration
    try:
        yield kubeconfig
    finally:
        subprocess.run(
            [
                str(helm_path()),
                "uninstall",
                "muster",
                "-n",
                NAMESPACE,
                "--kubeconfig",
                str(kubeconfig),
            ],
            capture_output=True,
            check=False,
        )
        try:
            kube.patch(PEERING, {"metadata": {"finalizers": None}})
            kube.delete(PEERING)
        except ApiError:
            pass
        if not gone(kube, f"/api/v1/namespaces/{NAMESPACE}"):
            kube.delete(f"/api/v1/namespaces/{NAMESPACE}")
        wait_for(
            lambda: gone(kube, f"/api/v1/namespaces/{NAMESPACE}"),
            timeout=120,
            what=f"namespace {NAMESPACE} deleted",
        )
        muster.restart(signal.SIGTERM)


def test_install_upgrade_admit_and_uninstall(
    cluster: Path, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    outputs = [run_line(line, cluster) for line in documented("install")]
    rendered = installed_as_rendered(kube, cluster)
    assert "ContainerCreating until the webhook's certificate exists" in outputs[2]  # NOTES
    ca = certificate_is_in_place(kube)

    for line in documented("upgrade"):
        run_line(line, cluster)
    upgraded_values_are_live(kube, ca)

    job_is_suspended_and_admitted(kube, cluster, namespace, tmp_path)

    for line in documented("uninstall"):
        run_line(line, cluster)
    nothing_but_the_crds_is_left(kube, cluster, rendered)


def installed_as_rendered(kube: KubeClient, kubeconfig: Path) -> list[dict[str, Any]]:
    """Every object of the release exists, as `helm get manifest` has it; its pods are made
    under Pod Security "restricted" (and stay Pending: kwok's nodes run no image)."""
    manifest = run_line(f"helm get manifest muster --namespace {NAMESPACE}", kubeconfig)
    docs = [d for d in yaml.safe_load_all(manifest) if d]
    assert sorted(d["kind"] for d in docs) == sorted(
        ["ClusterRole", "ClusterRoleBinding", "Deployment", "MutatingWebhookConfiguration"]
        + ["NetworkPolicy", "PodDisruptionBudget", "Service", "ServiceAccount"]
    )
    for doc in docs:
        live = kube.get(api_path(doc))
        assert live["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    namespace = kube.get(f"/api/v1/namespaces/{NAMESPACE}")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    pods = wait_for(
        lambda: (
            items
            if len(items := kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]) == 2
            else None
        ),
        timeout=60,
        what="the Deployment's 2 pods are created under Pod Security restricted",
    )
    assert pods[0]["spec"]["containers"][0]["image"] == "registry.example.com/muster:0.1.0"
    for crd in ("queues.muster.dev", "gangrecords.muster.dev", "clusterkopfpeerings.kopf.dev"):
        kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
    return docs


def bundles(kube: KubeClient) -> list[bytes]:
    return [
        base64.b64decode(w["clientConfig"].get("caBundle", ""))
        for w in kube.get(CONFIG)["webhooks"]
    ]


def certificate_is_in_place(kube: KubeClient) -> bytes:
    """`muster certs` wrote the Secret the Deployment mounts and the CA into every webhook."""
    secret = kube.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/muster-webhook-tls")
    ca = base64.b64decode(secret["data"]["ca.crt"])
    assert bundles(kube) == [ca] * manifest_webhooks()
    return ca


def upgraded_values_are_live(kube: KubeClient, ca: bytes) -> None:
    deployment = kube.get(DEPLOYMENT)
    assert deployment["spec"]["replicas"] == 3
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--verbose" in args
    assert "--topology-levels=example.com/block,example.com/rack" in args
    assert {w["timeoutSeconds"] for w in kube.get(CONFIG)["webhooks"]} == {5}
    assert bundles(kube) == [ca] * manifest_webhooks(), (
        "the upgrade must keep the caBundle muster certs wrote"
    )


def service_account_kubeconfig(kube: KubeClient, kubeconfig: Path, where: Path) -> Path:
    """A kubeconfig with a fresh token of the chart's ServiceAccount (TokenRequest API)."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest"}
    token = kube.create(
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/muster/token",
        {**request, "spec": {"expirationSeconds": 3600}},
    )["status"]["token"]
    admin = yaml.safe_load(kubeconfig.read_text())
    (cluster,) = admin["clusters"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "muster", "user": {"token": token}}],
        "contexts": [{"name": "muster", "context": {"cluster": cluster["name"], "user": "muster"}}],
        "current-context": "muster",
    }
    path = where / "muster-sa.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass
class Replica:
    """`muster run` with the live Deployment's flags, on loopback, as the chart's account."""

    proc: subprocess.Popen[str]
    webhook_port: int
    log: Path

    @classmethod
    def start(cls, kube: KubeClient, as_muster: Path, cert: Path, key: Path, log: Path) -> Replica:
        container = kube.get(DEPLOYMENT)["spec"]["template"]["spec"]["containers"][0]
        port = free_port()
        here = {
            "--tls-cert": str(cert),
            "--tls-key": str(key),
            "--webhook-addr": "127.0.0.1",
            "--status-addr": "127.0.0.1",
            "--webhook-port": str(port),
            "--status-port": str(free_port()),
            "--metrics-port": str(free_port()),
            "--webhook-metrics-port": str(free_port()),
        }
        args = []
        for arg in container["args"]:
            flag, _, value = arg.partition("=")
            args.append(f"{flag}={here.get(flag, value)}" if value else arg)
        with log.open("w") as sink:
            proc = subprocess.Popen(
                [sys.executable, "-m", "muster.cli", "run", "--kubeconfig", str(as_muster), *args],
                stdout=sink,
                stderr=subprocess.STDOUT,
                text=True,
                env={**os.environ, "POD_ID": "muster-0"},  # the Deployment's downward API
            )
        return cls(proc, port, log)

    def text(self) -> str:
        return self.log.read_text()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def job_is_suspended_and_admitted(
    kube: KubeClient, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    as_muster = service_account_kubeconfig(kube, kubeconfig, tmp_path)
    tls = create_webhook_tls(tmp_path / "tls", ["127.0.0.1"])
    replica = Replica.start(kube, as_muster, tls.cert, tls.key, tmp_path / "replica.log")
    queue = f"{namespace}-q"
    create_queue(kube, queue, {"nominal": {"cpu": "16"}})
    try:
        wait_for(
            lambda: "controller ready" in replica.text() or replica.proc.poll() is not None,
            timeout=90,
            what="muster run (the chart's flags and account) becomes the active replica",
        )
        assert replica.proc.poll() is None, replica.text()[-3000:]
        # What the Service does in a cluster: send the apiserver to the replica.
        config = kube.get(CONFIG)
        for webhook in config["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {
                "url": f"https://127.0.0.1:{replica.webhook_port}{path}",
                "caBundle": base64.b64encode(tls.ca_bundle).decode(),
            }
        kube.request("PUT", CONFIG, config)
        created = create_through_webhook(
            kube, jobs_path(namespace), builders.job("gang", queue, pods=2)
        )
        assert created["spec"]["suspend"] is True
        assert created["metadata"]["annotations"][SUBMITTED]
        wait_for(
            lambda: kube.get(f"{jobs_path(namespace)}/gang")["metadata"]["annotations"].get(
                ADMITTED
            ),
            timeout=60,
            what="the Job is admitted by muster with the chart's flags and account",
        )
        assert not re.search(r"[Ff]orbidden|HTTP 403", replica.text()), replica.text()[-3000:]
    finally:
        code = replica.stop()
        delete_queue(kube, queue)
    assert code == 0, replica.text()[-3000:]


def nothing_but_the_crds_is_left(
    kube: KubeClient, kubeconfig: Path, rendered: list[dict[str, Any]]
) -> None:
    for doc in rendered:
        assert gone(kube, api_path(doc)), f"{doc['kind']} {doc['metadata']['name']} is left"
    assert gone(kube, PEERING) and gone(kube, f"/api/v1/namespaces/{NAMESPACE}")
    kinds = kubectl(kubeconfig, "api-resources", "--verbs=list", "-o", "name").split()
    left = kubectl(kubeconfig, "get", ",".join(kinds), "-A", "-l", PART_OF, "-o", "name")
    assert sorted(left.split()) == [
        "customresourcedefinition.apiextensions.k8s.io/clusterkopfpeerings.kopf.dev",
        "customresourcedefinition.apiextensions.k8s.io/gangrecords.muster.dev",
        "customresourcedefinition.apiextensions.k8s.io/queues.muster.dev",
    ]
