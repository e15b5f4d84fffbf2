"""The MiniCluster CRD muster's tests and kwok engine install, and what makes each MiniCluster's
Job there: the real Flux Operator where the cluster runs it, else a stand-in reconciler.

The CRD: where the Flux Operator's source sits beside the repository
(`../shared/src/flux-operator/config/crd/bases/`, `simulator.controlplane.operators`), its CRD
is installed; else its published CRD (`../shared/crds/miniclusters.flux-framework.org.yaml`);
so every MiniCluster muster handles is validated (and pruned) by the real schema. A checkout
without either installs the stand-in `minicluster-crd.yaml`, a subset of the real schema (a unit
test holds it to that). `minicluster_crd` is the one place that chooses; `$MUSTER_MINICLUSTER_CRD`
overrides it with a file, or with `stand-in`.

The Job: a cluster brought up with the Flux Operator (`muster cluster up --operators flux`) has
the real operator make it (`FluxOperator`, nothing to run here). Elsewhere (a checkout without
the operator's source, a cluster started without it) tests and the kwok engine run
`MiniClusterReconciler`, which creates what the operator's `NewMiniClusterJob` creates and all
that muster looks at: a Job named after the MiniCluster, labelled with `spec.jobLabels`, Indexed,
completions = parallelism = `spec.size`, backoffLimit from `spec.backoffLimit` (else 100),
activeDeadlineSeconds from `spec.deadlineSeconds` (the real CRD defaults it to 31500000), pod
labels, annotations, nodeSelector, tolerations and restartPolicy from `spec.pod`, the operator's
affinity (preferred one pod per node, preferred one zone; required node affinity from
`spec.pod.nodeAffinity`; none with `spec.network.disableAffinity`), container name, image and
resources from `spec.containers`, and a controller owner reference to the MiniCluster. Flux
itself, its init container, ConfigMaps, Services and the operator's resizing of the Job to
`spec.size` are not modelled. `job_maker` is the one place that chooses.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import yaml

from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from policies.kinds.minicluster import minicluster_job
from simulator.controlplane.operators import FLUX, is_present, source_of

CRD_NAME: Final = "miniclusters.flux-framework.org"
MINICLUSTERS: Final = kubeapi.MINICLUSTERS.path()
CRDS: Final = kubeapi.CRDS.path()
CRD_ENV: Final = "MUSTER_MINICLUSTER_CRD"
"""Environment override of the MiniCluster CRD: a CRD file, or `stand-in`."""
STAND_IN_ANNOTATION: Final = "muster.dev/stand-in"
"""Annotation on the stand-in CRD: an installed CRD that has it may be replaced by the real one."""
STAND_IN_FILE: Final = Path(__file__).with_name("minicluster-crd.yaml")
SHARED_CRD: Final = Path("crds") / f"{CRD_NAME}.yaml"
"""The Flux Operator's CRD, relative to the `shared/` folder beside the repository."""
REPO: Final = Path(__file__).resolve().parents[2]

job_for = minicluster_job
"""The Job the Flux Operator would create for a MiniCluster (`policies.kinds.minicluster`, which
the webhook reads too, to tell whether a MiniCluster's gang could ever fit)."""


@dataclass(frozen=True, slots=True)
class MiniClusterCrd:
    """One MiniCluster CRD to install: its body, the file it came from, and which kind it is."""

    body: dict[str, Any]
    path: Path
    stand_in: bool

    def describe(self) -> str:
        kind = "muster's stand-in" if self.stand_in else "the Flux Operator's"
        return f"{kind} ({self.path})"

    def schema(self) -> dict[str, Any]:
        """The openAPIV3Schema of the storage version."""
        return storage_schema(self.body)


def storage_schema(crd: Mapping[str, Any]) -> dict[str, Any]:
    for version in crd["spec"]["versions"]:
        if version.get("storage"):
            schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
            return schema
    raise ValueError(f"CRD {crd['metadata']['name']} has no storage version")


def minicluster_crd(environ: Mapping[str, str] | None = None, repo: Path = REPO) -> MiniClusterCrd:
    """The MiniCluster CRD to install: `$MUSTER_MINICLUSTER_CRD` (a file, or `stand-in`), else
    the Flux Operator's CRD in its source, else its published CRD in `shared/crds/` beside the
    repository, else the stand-in."""
    environ = os.environ if environ is None else environ
    override = environ.get(CRD_ENV, "").strip()
    if override == "stand-in":
        path = STAND_IN_FILE
    elif override:
        path = Path(override)
        if not path.is_file():
            raise FileNotFoundError(
                f"${CRD_ENV}={override}: no such file; name a MiniCluster CRD file, or "
                "`stand-in`, or unset it to use ../shared/crds beside the repository"
            )
    else:
        candidates = [
            source_of(FLUX, environ, repo) / FLUX.crds[0],
            repo.parent / "shared" / SHARED_CRD,
        ]
        path = next((c for c in candidates if c.is_file()), STAND_IN_FILE)
    crd = _load_crd(path)
    return MiniClusterCrd(body=crd, path=path, stand_in=_is_stand_in(crd))


def _load_crd(path: Path) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    crds = [d for d in docs if d.get("kind") == "CustomResourceDefinition"]
    if len(crds) != 1 or crds[0]["metadata"]["name"] != CRD_NAME:
        raise ValueError(f"{path}: expected exactly one CustomResourceDefinition {CRD_NAME}")
    crd: dict[str, Any] = crds[0]
    return crd


def _is_stand_in(crd: Mapping[str, Any]) -> bool:
    annotations = (crd.get("metadata") or {}).get("annotations") or {}
    if annotations.get(STAND_IN_ANNOTATION) == "true":
        return True
    # Stand-ins installed before the annotation existed kept unknown spec fields; the
    # operator's schema (controller-gen) is structural and never does.
    try:
        spec = storage_schema(crd)["properties"]["spec"]
    except (KeyError, ValueError):
        return False
    return bool(spec.get("x-kubernetes-preserve-unknown-fields"))


def install_crd(client: KubeClient, crd: MiniClusterCrd | None = None) -> str:
    """Make `crd` (default: `minicluster_crd()`) the cluster's MiniCluster CRD; say what was done.

    An installed stand-in is replaced by the real CRD; any other installed MiniCluster CRD (the
    real operator's, or the real one where the stand-in was asked for) is kept as it is.
    """
    chosen = crd or minicluster_crd()
    try:
        existing = client.get(f"{CRDS}/{CRD_NAME}")
    except ApiError as exc:
        if exc.status != 404:
            raise
        apply_crd(client, chosen.body)
        return f"installed {chosen.describe()}"
    if _same_versions(existing, chosen.body):
        wait_established(client, CRD_NAME)
        return f"{chosen.describe()}, installed already"
    if chosen.stand_in or not _is_stand_in(existing):
        wait_established(client, CRD_NAME)
        kind = "muster's stand-in" if _is_stand_in(existing) else "not muster's stand-in"
        return f"kept the installed MiniCluster CRD ({kind}) instead of {chosen.describe()}"
    body = {**chosen.body, "metadata": {**chosen.body["metadata"]}}
    body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
    client.request("PUT", f"{CRDS}/{CRD_NAME}", body)
    wait_established(client, CRD_NAME)
    return f"replaced muster's stand-in with {chosen.describe()}"


def _same_versions(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    def versions(crd: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        return sorted(
            (
                v["name"],
                v.get("served"),
                v.get("storage"),
                yaml.safe_dump(v.get("schema"), sort_keys=True),
                yaml.safe_dump(v.get("subresources"), sort_keys=True),
            )
            for v in crd["spec"]["versions"]
        )

    return versions(a) == versions(b)


def apply_crd(client: KubeClient, crd: Mapping[str, Any], timeout: float = 30) -> None:
    """Create a CRD (or leave an existing one) and wait for Established."""
    try:
        client.create(CRDS, crd)
    except ApiError as exc:
        if exc.status != 409:
            raise
    wait_established(client, crd["metadata"]["name"], timeout)


def wait_established(client: KubeClient, name: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = client.get(f"{CRDS}/{name}")
        for cond in current.get("status", {}).get("conditions") or []:
            if cond.get("type") == "Established" and cond.get("status") == "True":
                return
        time.sleep(0.1)
    raise TimeoutError(f"CRD {name} not Established within {timeout:.0f}s")


class MiniClusterReconciler:
    """Polls MiniClusters and creates each one's Job once; run it in a background thread.

    With `namespace`, only that namespace's MiniClusters are reconciled (tests run one
    reconciler per test namespace; a cluster-wide one would also see earlier tests' namespaces
    while they are being deleted).
    """

    def __init__(
        self,
        client: KubeClient,
        namespace: str | None = None,
        interval: float = 0.2,
        *,
        suspend: bool = False,
    ) -> None:
        self.client = client
        self.suspend = suspend
        """Create each Job suspended: what the webhook of a controller muster does not run
        (e.g. Kueue's, for a Job with its queue-name label) makes of it."""
        self.path = kubeapi.MINICLUSTERS.path(namespace) if namespace else MINICLUSTERS
        self.interval = interval
        self.created: set[tuple[str, str]] = set()
        self.errors: list[str] = []
        """Refusals (4xx) and failed polls: what a test should see none of."""
        self.retried: list[str] = []
        """Creates the apiserver failed for a passing reason (5xx, 429), tried again."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="minicluster-reconciler")

    def start(self) -> MiniClusterReconciler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def reconcile_once(self) -> None:
        for mc in self.client.get(self.path)["items"]:
            self.reconcile(mc)

    def reconcile(self, mc: dict[str, Any]) -> bool:
        """Create one MiniCluster's Job unless it exists; True once it does (or never will).

        The kwok engine calls this with the body a create returned, as the operator reacts to
        a watch event at once; the polling loop then only catches what that missed.
        """
        key = (mc["metadata"]["namespace"], mc["metadata"]["name"])
        if key in self.created or mc["metadata"].get("deletionTimestamp"):
            # Like the operator: nothing new for an object that is going away.
            return True
        job = job_for(mc)
        if self.suspend:
            job["spec"]["suspend"] = True
        try:
            self.client.create(kubeapi.JOBS.path(key[0]), job)
        except ApiError as exc:
            if exc.status == 403 and "being terminated" in exc.message:
                # The namespace is going away with the MiniCluster in it: nothing to make.
                self.created.add(key)
                return True
            if exc.status >= 500 or exc.status == 429:
                # The apiserver could not call the webhook in time (failurePolicy Fail) or is
                # overloaded: nothing was stored; the operator would retry, so do we.
                self.retried.append(exc.message)
                return False
            if exc.status != 409:
                # The webhook refused the Job: a real error, though we still retry like the
                # operator would.
                self.errors.append(exc.message)
                return False
        self.created.add(key)
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.reconcile_once()
            except (ApiError, OSError) as exc:
                self.errors.append(str(exc))


class JobMaker(Protocol):
    """What makes each MiniCluster's Job for a test or a replay (`job_maker` chooses)."""

    errors: list[str]
    retried: list[str]

    def start(self) -> JobMaker: ...

    def stop(self) -> None: ...

    def reconcile(self, mc: dict[str, Any]) -> bool: ...


class FluxOperator:
    """The real Flux Operator makes the Jobs: it runs beside the cluster
    (`simulator.controlplane.operatorrun`), so there is nothing to start or stop here, and its
    errors are in its log (logs/flux-operator.log), not here."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.retried: list[str] = []

    def start(self) -> FluxOperator:
        return self

    def stop(self) -> None:
        return None

    def reconcile(self, mc: dict[str, Any]) -> bool:
        return True


def job_maker(
    client: KubeClient,
    namespace: str | None = None,
    *,
    real: bool,
    interval: float = 0.2,
    suspend: bool = False,
) -> JobMaker:
    """The real operator (`real`: the cluster runs it), else the stand-in reconciler of
    `namespace` (its Jobs created suspended with `suspend`; the real operator cannot: an
    outside controller's webhook must hold them, as Kueue's does)."""
    if real:
        return FluxOperator()
    return MiniClusterReconciler(client, namespace, interval, suspend=suspend)


def describe_job_maker(real: bool, environ: Mapping[str, str] | None = None) -> str:
    """Which one makes the MiniClusters' Jobs, for a test report or a replay's log."""
    source = source_of(FLUX, environ)
    if real:
        return f"the Flux Operator {FLUX.version} (built from {source})"
    why = "the cluster runs no Flux Operator"
    if not is_present(source):
        why = f"no Flux Operator source at {source}"
    return f"muster's stand-in reconciler ({why})"
