"""The Helm chart (charts/muster) against the kustomize install (manifests/), with the real helm
and kubectl that `muster cluster build` builds: no cluster is needed to render.

manifests/ is the one source: the chart reads its files (links `charts/muster/manifests` and
`charts/muster/crds`) and sets values on them. Here: `helm lint`; with the default values the
chart renders what `kubectl kustomize manifests/` does, and with each optional part what the
matching overlay adds; every value reaches the objects it names; another release namespace
moves every mention of the namespace; the packaged chart (links resolved) renders the same.
Installing it for real: tests/cluster/test_chart.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator.controlplane.build import Binaries, helm_path

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "muster"
MANIFESTS = REPO / "manifests"
NAMESPACE = "muster-system"
HELM_LABELS = (
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
)

Doc = dict[str, Any]
Key = tuple[str, str, str]


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    binary = helm_path()
    assert os.access(binary, os.X_OK), f"{binary} is not built: run `muster cluster build`"
    done = subprocess.run(
        [str(binary), *args], capture_output=True, text=True, check=False, timeout=120
    )
    if check:
        assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def render(*args: str, namespace: str = NAMESPACE, chart: Path = CHART) -> list[Doc]:
    out = helm("template", "muster", str(chart), "--namespace", namespace, *args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def kustomize(path: Path) -> list[Doc]:
    kubectl = Binaries.at().kubectl
    assert os.access(kubectl, os.X_OK), f"{kubectl} is not built: run `muster cluster build`"
    done = subprocess.run(
        [str(kubectl), "kustomize", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"kubectl kustomize {path}: {done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def key(doc: Doc) -> Key:
    return (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])


def without_helm_labels(doc: Doc) -> Doc:
    """The object as kustomize would write it: Helm's own labels are the one addition."""
    labels = {k: v for k, v in doc["metadata"].get("labels", {}).items() if k not in HELM_LABELS}
    metadata = {k: v for k, v in doc["metadata"].items() if k != "labels"}
    if labels:
        metadata["labels"] = labels
    return {**doc, "metadata": metadata}


def by_key(docs: Iterable[Doc]) -> dict[Key, Doc]:
    out: dict[Key, Doc] = {}
    for doc in docs:
        assert key(doc) not in out, f"rendered twice: {key(doc)}"
        out[key(doc)] = without_helm_labels(doc)
    return out


def one(docs: Iterable[Doc], kind: str, name: str | None = None) -> Doc:
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]


def container(docs: Iterable[Doc]) -> Doc:
    deployment = one(docs, "Deployment")
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(only)


def test_helm_lint_passes_strict() -> None:
    done = helm("lint", "--strict", str(CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


def test_the_defaults_render_exactly_the_kustomize_install() -> None:
    chart = by_key(render("--include-crds"))
    kustomized = by_key(kustomize(MANIFESTS))
    # The one object the chart leaves out: a release's namespace exists before the release
    # (helm install --namespace NS --create-namespace, or kubectl create namespace), so the
    # chart cannot own it. docs/install.md labels it for Pod Security "restricted".
    assert set(kustomized) - set(chart) == {("Namespace", "", NAMESPACE)}
    assert set(chart) - set(kustomized) == set()
    for k, doc in chart.items():
        assert doc == kustomized[k], f"{k} differs from kubectl kustomize manifests/"


def test_every_templated_object_carries_helms_labels() -> None:
    for doc in render():
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm", key(doc)
        assert labels["app.kubernetes.io/instance"] == "muster", key(doc)
        assert labels["app.kubernetes.io/part-of"] == "muster", key(doc)


def test_cert_manager_renders_what_the_overlay_adds() -> None:
    chart = by_key(render("--include-crds", "--set", "certManager.enabled=true"))
    overlay = by_key(kustomize(MANIFESTS / "overlays/cert-manager"))
    assert set(overlay) - set(chart) == {("Namespace", "", NAMESPACE)}
    assert set(chart) - set(overlay) == set()
    for k, doc in chart.items():
        assert doc == overlay[k], f"{k} differs from kubectl kustomize overlays/cert-manager"


def test_monitoring_renders_what_the_overlay_holds() -> None:
    flags = [f"metrics.{part}.enabled=true" for part in ("serviceMonitor", "prometheusRule")]
    flags.append("metrics.dashboard.enabled=true")
    chart = by_key(render(*[a for flag in flags for a in ("--set", flag)]))
    base = by_key(render())
    overlay = by_key(kustomize(MANIFESTS / "overlays/monitoring"))
    assert {k: chart[k] for k in set(chart) - set(base)} == overlay
    dashboard = overlay[("ConfigMap", NAMESPACE, "muster-dashboard")]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = (MANIFESTS / "overlays/monitoring/muster-dashboard.json").read_text()
    assert json.loads(dashboard["data"]["muster-dashboard.json"]) == json.loads(shipped)
    # Each part alone.
    rule_only = by_key(render("--set", "metrics.prometheusRule.enabled=true"))
    assert [k[0] for k in set(rule_only) - set(base)] == ["PrometheusRule"]


def test_example_queues_are_the_examples_queues_without_their_namespaces() -> None:
    chart = render("--set", "examples.queues=true")
    queues = {d["metadata"]["name"]: without_helm_labels(d) for d in chart if d["kind"] == "Queue"}
    examples = {d["metadata"]["name"]: d for d in kustomize(MANIFESTS / "examples")}
    assert queues == {n: d for n, d in examples.items() if d["kind"] == "Queue"}
    assert not any(d["kind"] == "Namespace" for d in chart)
    # The Queues belong to the teams, not to muster's install.
    assert all(
        "app.kubernetes.io/part-of" not in q["metadata"].get("labels", {}) for q in queues.values()
    )


VALUES: dict[str, Any] = {
    "image": {"repository": "registry.example.com/muster", "tag": "0.2.0", "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "pull"}],
    "replicaCount": 3,
    "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}},
    "logLevel": "debug",
    "statusAuth": "none",
    "topologyLevels": ["example.com/block", "example.com/rack"],
    "deviceClasses": {"gpu.example.com": "example.com/gpu"},
    "extraArgs": ["--fail-rejected-after=600"],
    "nodeSelector": {"pool": "system"},
    "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
    "priorityClassName": "system-cluster-critical",
    "podAnnotations": {"example.com/owner": "batch"},
    "podDisruptionBudget": {"minAvailable": 2},
    "webhook": {
        "failurePolicy": "Ignore",
        "timeoutSeconds": 5,
        "excludedNamespaces": ["ops"],
        "namespaceSelector": {
            "matchLabels": {"muster.dev/enabled": "true"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["infra"]}],
        },
    },
    "networkPolicy": {"podCIDRs": ["10.0.0.0/14", "fd00::/48"], "monitoringNamespace": "obs"},
}


def test_every_value_reaches_the_objects_it_names(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(VALUES))
    docs = render("--values", str(values))
    default = render()
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    c = container(docs)
    assert deployment["spec"]["replicas"] == 3
    assert c["image"] == "registry.example.com/muster:0.2.0"
    assert c["imagePullPolicy"] == "Always"
    assert pod["imagePullSecrets"] == [{"name": "pull"}]
    assert c["resources"] == VALUES["resources"]
    assert "--status-auth=none" in c["args"] and "--status-auth=kubernetes" not in c["args"]
    assert c["args"][-4:] == [
        "--topology-levels=example.com/block,example.com/rack",
        "--device-class=gpu.example.com=example.com/gpu",
        "--verbose",
        "--fail-rejected-after=600",
    ]
    # Every other flag is the manifest's, in its order.
    assert [a for a in c["args"] if not a.startswith("--status-auth")][: len(c["args"]) - 5] == [
        a for a in container(default)["args"] if not a.startswith("--status-auth")
    ]
    assert pod["nodeSelector"] == {"pool": "system"}
    assert pod["tolerations"] == VALUES["tolerations"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert deployment["spec"]["template"]["metadata"]["annotations"] == VALUES["podAnnotations"]
    assert pod["affinity"] == one(default, "Deployment")["spec"]["template"]["spec"]["affinity"]
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 2
    for webhook in one(docs, "MutatingWebhookConfiguration")["webhooks"]:
        assert webhook["failurePolicy"] == "Ignore" and webhook["timeoutSeconds"] == 5
        selector = webhook["namespaceSelector"]
        excluded, *rest = selector["matchExpressions"]
        assert excluded["values"] == ["kube-system", NAMESPACE, "ops"]
        assert rest[-1] == {"key": "tier", "operator": "NotIn", "values": ["infra"]}
        assert selector["matchLabels"] == {"muster.dev/enabled": "true"}
    policy = one(docs, "NetworkPolicy")["spec"]["ingress"]
    assert policy[0]["from"][0]["ipBlock"]["except"] == ["10.0.0.0/14", "fd00::/48"]
    assert policy[2]["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "obs"
    }


def test_a_digest_pins_the_image_and_network_policy_can_be_left_out() -> None:
    digest = "sha256:" + "ab" * 32
    docs = render("--set", f"image.digest={digest}", "--set", "networkPolicy.enabled=false")
    assert container(docs)["image"] == f"muster@{digest}"
    assert not any(d["kind"] == "NetworkPolicy" for d in docs)


@pytest.mark.parametrize(
    ("flag", "field"),
    [
        ("logLevel=loud", "/logLevel"),
        ("webhook.failurePolicy=Maybe", "/webhook/failurePolicy"),
        ("statusAuth=basic", "/statusAuth"),
        ("topologyLevels={rack,a b}", "/topologyLevels/1"),
        ("deviceClasses.gpu=cpu memory", "/deviceClasses/gpu"),
        ("image.digest=latest", "/image/digest"),
        ("replicas=3", "replicas"),  # a typo of replicaCount is refused, not ignored
    ],
)
def test_the_schema_refuses_bad_values(flag: str, field: str) -> None:
    done = helm("template", "muster", str(CHART), "--set", flag, check=False)
    assert done.returncode != 0
    assert "don't meet the specifications of the schema" in done.stderr
    assert field in done.stderr


def test_another_release_namespace_moves_every_mention_of_it() -> None:
    flags = ["certManager.enabled=true", "metrics.serviceMonitor.enabled=true"]
    flags += ["metrics.dashboard.enabled=true", "metrics.prometheusRule.enabled=true"]
    docs = render(*[a for f in flags for a in ("--set", f)], namespace="batch-admission")
    assert NAMESPACE not in yaml.safe_dump_all(docs)
    for doc in docs:
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration"):
            assert doc["metadata"]["namespace"] == "batch-admission", key(doc)
    config = one(docs, "MutatingWebhookConfiguration")
    for webhook in config["webhooks"]:
        assert webhook["clientConfig"]["service"]["namespace"] == "batch-admission"
        assert "batch-admission" in webhook["namespaceSelector"]["matchExpressions"][0]["values"]
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        "batch-admission/muster-webhook"
    )
    serving = one(docs, "Certificate", "muster-webhook")
    assert "muster.batch-admission.svc" in serving["spec"]["dnsNames"]
    (subject,) = one(docs, "ClusterRoleBinding", "muster")["subjects"]
    assert subject["namespace"] == "batch-admission"


def test_the_packaged_chart_holds_the_files_it_links_to(tmp_path: Path) -> None:
    helm("package", str(CHART), "--destination", str(tmp_path))
    (package,) = tmp_path.glob("muster-*.tgz")
    with tarfile.open(package) as archive:
        members = archive.getmembers()
        assert not [m.name for m in members if m.issym() or m.islnk()]
        names = {m.name for m in members}
    assert "muster/crds/queues.muster.dev.yaml" in names
    assert "muster/crds/gangrecords.muster.dev.yaml" in names
    assert "muster/crds/kustomization.yaml" not in names  # .helmignore: not a CRD
    assert "muster/manifests/base/deployment.yaml" in names
    flags = ("--include-crds", "--set", "certManager.enabled=true")
    assert render(*flags, chart=package) == render(*flags)


def test_the_chart_the_image_and_the_package_share_one_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    base = yaml.safe_load((MANIFESTS / "base/kustomization.yaml").read_text())
    (image,) = base["images"]
    assert chart["version"] == chart["appVersion"] == project == image["newTag"]
    assert container(render())["image"] == f"muster:{project}"


def test_the_links_point_into_manifests() -> None:
    assert (CHART / "manifests").resolve() == MANIFESTS.resolve()
    assert (CHART / "crds").resolve() == (MANIFESTS / "crd").resolve()
