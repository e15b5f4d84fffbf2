"""How each operator (`simulator.controlplane.operators`) runs beside a local control plane.

- Its CRDs, read at run time from its source's `config/` folder and applied as they are there
  (an installed CRD that differs, e.g. muster's MiniCluster stand-in, is replaced: the running
  operator's own schema is the one its objects must pass). JobSet's kustomization would add a
  conversion webhook to its CRD; it serves one version only (v1alpha2), so the apiserver never
  converts and the CRD is installed without it.
- Its process, on loopback against the cluster's admin kubeconfig, with controller-runtime's
  flags: its health probe on a free loopback port (`/readyz` is its health check), no leader
  election (one replica), no metrics server (nothing scrapes it; one port and TLS setup less).
  It runs as the cluster's admin (group system:masters), so its RBAC roles are not installed.
- JobSet's admission webhooks (defaulting and validation of JobSets, and of its own pods): its
  webhook server listens on a free loopback port with a serving certificate signed by the
  cluster's CA (`pki.issue_loopback_serving`, internal certificate management off), and the
  configurations of its `config/components/webhook/` (its kustomize patches applied) are
  registered pointing at that port by URL, with the cluster's CA as caBundle, once the process
  is ready: before that its failurePolicy Fail would refuse every JobSet.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from kubeport.kubeapi import ApiError, KubeClient, Resource
from simulator.controlplane.components import free_ports, http_ok
from simulator.controlplane.minicluster import wait_established
from simulator.controlplane.operators import Operator
from simulator.controlplane.pki import issue_loopback_serving
from simulator.controlplane.processes import ProcessRecord, Supervisor

CRDS: Final = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False)
MUTATING: Final = Resource(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", namespaced=False
)
VALIDATING: Final = Resource(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", namespaced=False
)
CONFIGURATION_RESOURCES: Final = {
    "MutatingWebhookConfiguration": MUTATING,
    "ValidatingWebhookConfiguration": VALIDATING,
}
LOG_LEVEL: Final = "info"
"""controller-runtime's zap level for the operators' logs (in logs/<component>.log)."""
READY_TIMEOUT: Final = 120.0


@dataclass(frozen=True, slots=True)
class OperatorPlace:
    """Where one operator of one cluster keeps its files and what it runs with."""

    operator: Operator
    binary: Path
    source: Path
    state_dir: Path
    kubeconfig: Path

    @property
    def directory(self) -> Path:
        return self.state_dir / "operators" / self.operator.component

    @property
    def pki_dir(self) -> Path:
        return self.state_dir / "pki"


# -- CRDs ---------------------------------------------------------------------------------


def load_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def operator_crds(operator: Operator, source: Path) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in `operator`'s CRD files."""
    crds: list[dict[str, Any]] = []
    for relative in operator.crds:
        docs = load_documents(source / relative)
        crds += [doc for doc in docs if doc.get("kind") == "CustomResourceDefinition"]
    if not crds:
        raise ValueError(f"{operator.name}: no CustomResourceDefinition in {operator.crds}")
    return crds


def apply_crd(client: KubeClient, crd: Mapping[str, Any]) -> str:
    """Create `crd`, or replace an installed one whose spec differs; wait for Established."""
    name = crd["metadata"]["name"]
    try:
        client.create(CRDS.path(), crd)
        outcome = f"installed {name}"
    except ApiError as exc:
        if exc.status != 409:
            raise
        existing = client.get(CRDS.path(name=name))
        if existing.get("spec") == _with_server_defaults(crd, existing).get("spec"):
            outcome = f"{name} installed already"
        else:
            body = copy.deepcopy(dict(crd))
            body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            client.request("PUT", CRDS.path(name=name), body)
            outcome = f"replaced the installed {name}"
    wait_established(client, name)
    return outcome


def _with_server_defaults(crd: Mapping[str, Any], existing: Mapping[str, Any]) -> dict[str, Any]:
    """`crd` with the fields the apiserver fills in on a stored CRD (conversion None), so
    that an unchanged CRD compares equal to its stored self."""
    body = copy.deepcopy(dict(crd))
    spec = body.setdefault("spec", {})
    stored = existing.get("spec") or {}
    if "conversion" not in spec and "conversion" in stored:
        spec["conversion"] = stored["conversion"]
    return body


def install_crds(client: KubeClient, operator: Operator, source: Path) -> list[str]:
    return [apply_crd(client, crd) for crd in operator_crds(operator, source)]


# -- webhooks -----------------------------------------------------------------------------


def json_patch(doc: dict[str, Any], operations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """`doc` with RFC 6902 `add`, `replace` and `remove` operations applied (what kustomize's
    JSON 6902 patches of webhook manifests use)."""
    result = copy.deepcopy(doc)
    for op in operations:
        *parents, last = [
            part.replace("~1", "/").replace("~0", "~") for part in op["path"].split("/")[1:]
        ]
        target: Any = result
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        kind = op["op"]
        if isinstance(target, list):
            index = len(target) if last == "-" else int(last)
            if kind == "add":
                target.insert(index, copy.deepcopy(op["value"]))
            elif kind == "replace":
                target[index] = copy.deepcopy(op["value"])
            elif kind == "remove":
                del target[index]
            else:
                raise ValueError(f"unsupported JSON patch op {kind!r}")
        elif kind in ("add", "replace"):
            target[last] = copy.deepcopy(op["value"])
        elif kind == "remove":
            del target[last]
        else:
            raise ValueError(f"unsupported JSON patch op {kind!r}")
    return result


def kustomized_webhooks(folder: Path) -> list[dict[str, Any]]:
    """The webhook configurations of a kustomize folder: its resources that are webhook
    configurations, with the patches that target them (by kind and name) applied."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for resource in kustomization.get("resources") or []:
        docs += [
            d for d in load_documents(folder / resource) if d["kind"] in CONFIGURATION_RESOURCES
        ]
    for patch in kustomization.get("patches") or []:
        target = patch.get("target") or {}
        operations = yaml.safe_load((folder / patch["path"]).read_text())
        docs = [
            json_patch(doc, operations)
            if doc["kind"] == target.get("kind") and doc["metadata"]["name"] == target.get("name")
            else doc
            for doc in docs
        ]
    return docs


def on_loopback(
    configuration: Mapping[str, Any], port: int, ca_bundle: bytes, prefix: str
) -> dict[str, Any]:
    """`configuration` with each webhook's service reference replaced by the URL of the same
    path on 127.0.0.1:`port`, trusting `ca_bundle`; named `prefix` + its name."""
    body = copy.deepcopy(dict(configuration))
    body["metadata"] = {"name": prefix + configuration["metadata"]["name"]}
    for webhook in body["webhooks"]:
        path = webhook["clientConfig"]["service"].get("path", "/")
        webhook["clientConfig"] = {
            "url": f"https://127.0.0.1:{port}{path}",
            "caBundle": base64.b64encode(ca_bundle).decode(),
        }
    return body


def register(client: KubeClient, configuration: Mapping[str, Any]) -> None:
    """Create a webhook configuration, or replace the one of the same name."""
    resource = CONFIGURATION_RESOURCES[configuration["kind"]]
    name = configuration["metadata"]["name"]
    try:
        client.create(resource.path(), configuration)
    except ApiError as exc:
        if exc.status != 409:
            raise
        existing = client.get(resource.path(name=name))
        body = copy.deepcopy(dict(configuration))
        body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
        client.request("PUT", resource.path(name=name), body)


# -- command lines ------------------------------------------------------------------------


def config_file_argv(place: OperatorPlace, health: int, webhook: int) -> list[str]:
    """A manager that reads most settings from its Configuration file only (JobSet's)."""
    assert place.operator.config_api is not None
    config = place.directory / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": place.operator.config_api,
                "kind": "Configuration",
                "leaderElection": {"leaderElect": False},
                # Certificates come from the cluster's CA, not from a Secret it would rotate
                # and a Service it would point the configurations at.
                "internalCertManagement": {"enable": False},
                "webhook": {
                    "host": "127.0.0.1",
                    "port": webhook,
                    "certDir": str(place.directory / "serving-certs"),
                },
                "metrics": {"bindAddress": "0"},
                "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
                "clientConnection": {"qps": 500, "burst": 500},
            }
        )
    )
    return [
        str(place.binary),
        f"--kubeconfig={place.kubeconfig}",
        f"--config={config}",
        f"--zap-log-level={LOG_LEVEL}",
    ]


def flag_argv(place: OperatorPlace, health: int) -> list[str]:
    """A manager that takes its settings as flags (the Flux Operator's)."""
    return [
        str(place.binary),
        f"--kubeconfig={place.kubeconfig}",
        "--metrics-bind-address=0",
        f"--health-probe-bind-address=127.0.0.1:{health}",
        "--leader-elect=false",
        f"--zap-log-level={LOG_LEVEL}",
    ]


def ready(port: int) -> Callable[[], bool]:
    """An operator's health check: controller-runtime's `/readyz` on its probe port (JobSet's
    says ready once its webhook server serves)."""
    return lambda: http_ok(f"http://127.0.0.1:{port}/readyz")


def start_operator(
    place: OperatorPlace,
    processes: Supervisor,
    records: list[ProcessRecord],
    client: KubeClient,
) -> int:
    """Install the operator's CRDs, start its process, wait until it is ready, register its
    webhooks; return its health port."""
    operator = place.operator
    install_crds(client, operator, place.source)
    place.directory.mkdir(parents=True, exist_ok=True)
    health, webhook = free_ports(2)
    if operator.webhooks is not None:
        issue_loopback_serving(
            place.pki_dir, place.directory / "serving-certs", f"{operator.component}-webhook"
        )
    if operator.config_api is not None:
        argv = config_file_argv(place, health, webhook)
    else:
        argv = flag_argv(place, health)
    processes.spawn(operator.component, argv, records)
    processes.wait(operator.component, records, ready(health), READY_TIMEOUT)
    if operator.webhooks is not None:
        ca_bundle = (place.pki_dir / "ca.crt").read_bytes()
        for configuration in kustomized_webhooks(place.source / operator.webhooks):
            register(client, on_loopback(configuration, webhook, ca_bundle, f"{operator.name}-"))
    return health
