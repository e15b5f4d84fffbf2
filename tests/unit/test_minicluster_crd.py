"""The MiniCluster CRD muster installs, held to the Flux Operator's published schema.

Where `../shared/crds/miniclusters.flux-framework.org.yaml` sits beside the repository (CI,
the development machines), the tests below walk its openAPIV3Schema: every field of the
stand-in CRD exists there with the same type, every field the stand-in reconciler reads exists
there, and every field muster writes into a MiniCluster (the kwok engine's objects, the
webhook's patch) survives it instead of being pruned by the apiserver. Without it, the checks
that need it are skipped and the rest run against the stand-in.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from policies.kinds import MINICLUSTER
from policies.vocabulary import QUEUE
from simulator.controlplane.minicluster import (
    CRD_ENV,
    SHARED_CRD,
    STAND_IN_FILE,
    MiniClusterCrd,
    job_for,
    minicluster_crd,
)
from simulator.kwok_objects import gang_object
from simulator.trace import expand, from_dict
from webhook.decision import WebhookSettings, decide_create

STAND_IN = minicluster_crd({CRD_ENV: "stand-in"})
_FOUND = minicluster_crd({})
REAL: MiniClusterCrd | None = None if _FOUND.stand_in else _FOUND
needs_real = pytest.mark.skipif(
    REAL is None, reason=f"no Flux Operator CRD at ../shared/{SHARED_CRD} beside the repository"
)


def real() -> MiniClusterCrd:
    assert REAL is not None
    return REAL


# -- walking an openAPIV3Schema ------------------------------------------------------


def child(schema: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    """The schema of field `key` of an object ("[]": an item of an array), or None (pruned)."""
    if key == "[]":
        items: Mapping[str, Any] | None = schema.get("items")
        return items
    properties = schema.get("properties") or {}
    if key in properties:
        found: Mapping[str, Any] = properties[key]
        return found
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, Mapping) else None


def node_at(schema: Mapping[str, Any], path: tuple[str, ...]) -> Mapping[str, Any] | None:
    node: Mapping[str, Any] | None = schema
    for key in path:
        if node is None:
            return None
        node = child(node, key)
    return node


def type_matches(schema: Mapping[str, Any], value: Any) -> bool:
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, (int, str)) and not isinstance(value, bool)
    wanted = schema.get("type")
    if isinstance(value, bool):
        return wanted == "boolean"
    if isinstance(value, int):
        return wanted in ("integer", "number")
    kinds = {str: "string", float: "number", dict: "object", list: "array"}
    return any(isinstance(value, k) and wanted == name for k, name in kinds.items())


def problems(schema: Mapping[str, Any], value: Any, path: str = "") -> Iterator[str]:
    """Fields of `value` the apiserver would prune under `schema`, and fields of a wrong type.

    `metadata` is left out: the apiserver validates ObjectMeta itself, whatever the CRD says."""
    if not type_matches(schema, value):
        yield f"{path or '.'}: {type(value).__name__} where the schema has {schema.get('type')}"
        return
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if where == "metadata":
                continue
            sub = child(schema, key)
            if sub is None:
                yield f"{where}: not in the schema (pruned)"
            else:
                yield from problems(sub, item, where)
    elif isinstance(value, list):
        items = schema.get("items") or {}
        for item in value:
            yield from problems(items, item, f"{path}[]")


# -- which CRD ---------------------------------------------------------------------------


def test_the_flux_operators_crd_beside_the_repository_wins_over_the_stand_in(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "muster"
    repo.mkdir()
    assert minicluster_crd({}, repo=repo).path == STAND_IN_FILE
    shared = tmp_path / "shared" / SHARED_CRD
    shared.parent.mkdir(parents=True)
    body = copy.deepcopy(STAND_IN.body)
    del body["metadata"]["annotations"]
    body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "tasks"
    ] = {"type": "integer"}
    shared.write_text("# comment\n---\n" + yaml_dump(body))
    found = minicluster_crd({}, repo=repo)
    assert found.path == shared and not found.stand_in
    assert "tasks" in found.schema()["properties"]["spec"]["properties"]
    assert "Flux Operator" in found.describe() and str(shared) in found.describe()
    # The environment overrides both ways.
    assert minicluster_crd({CRD_ENV: "stand-in"}, repo=repo).stand_in
    assert minicluster_crd({CRD_ENV: str(shared)}, repo=tmp_path).path == shared
    with pytest.raises(FileNotFoundError, match=CRD_ENV):
        minicluster_crd({CRD_ENV: str(tmp_path / "missing.yaml")}, repo=repo)


def yaml_dump(body: Mapping[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(dict(body), sort_keys=False)


def test_the_stand_in_says_it_is_one() -> None:
    assert STAND_IN.stand_in and STAND_IN.path == STAND_IN_FILE
    assert "stand-in" in STAND_IN.describe()


# -- the stand-in is a subset of the real schema --------------------------------------------


def subset_differences(
    stand_in: Mapping[str, Any], real: Mapping[str, Any], path: str = ""
) -> Iterator[str]:
    where = path or "."
    for key in ("type", "format", "default", "x-kubernetes-int-or-string"):
        if key in stand_in and stand_in.get(key) != real.get(key):
            yield f"{where}: {key} {stand_in.get(key)!r} here, {real.get(key)!r} in the real CRD"
    if stand_in.get("x-kubernetes-preserve-unknown-fields"):
        # Only the status, which the operator writes and nothing in muster reads.
        if path != "status":
            yield f"{where}: keeps unknown fields, which the real CRD prunes"
        return
    if set(stand_in.get("required") or []) != set(real.get("required") or []):
        yield f"{where}: required {stand_in.get('required')} here, {real.get('required')} there"
    for key in stand_in.get("properties") or {}:
        sub = (real.get("properties") or {}).get(key)
        name = f"{path}.{key}" if path else key
        if sub is None:
            yield f"{name}: not in the real CRD"
        else:
            yield from subset_differences(stand_in["properties"][key], sub, name)
    for key, mark in (("items", "[]"), ("additionalProperties", ".*")):
        if isinstance(stand_in.get(key), Mapping):
            if not isinstance(real.get(key), Mapping):
                yield f"{where}: has {key}, the real CRD has not"
            else:
                yield from subset_differences(stand_in[key], real[key], f"{path}{mark}")
    if "anyOf" in stand_in and stand_in["anyOf"] != real.get("anyOf"):
        yield f"{where}: anyOf differs"


@needs_real
def test_every_stand_in_field_is_in_the_real_schema_with_the_same_type() -> None:
    assert list(subset_differences(STAND_IN.schema(), real().schema())) == []


def test_the_subset_check_finds_a_field_the_real_schema_lacks() -> None:
    schema = copy.deepcopy(STAND_IN.schema())
    schema["properties"]["spec"]["properties"]["pod"]["properties"]["affinity"] = {"type": "object"}
    schema["properties"]["spec"]["properties"]["size"]["type"] = "string"
    found = list(subset_differences(schema, STAND_IN.schema()))
    assert found == [
        "spec.size: type 'string' here, 'integer' in the real CRD",
        "spec.pod.affinity: not in the real CRD",
    ]


@needs_real
def test_versions_and_subresources_match_the_real_crd() -> None:
    """Both serve and store v1alpha2 only, and both have the status subresource (the real one
    also has scale, on spec.size; nothing in muster scales a MiniCluster)."""

    def versions(crd: MiniClusterCrd) -> list[tuple[str, bool, bool]]:
        return [(v["name"], v["served"], v["storage"]) for v in crd.body["spec"]["versions"]]

    assert versions(STAND_IN) == versions(real()) == [("v1alpha2", True, True)]
    (stand_in,) = (v["subresources"] for v in STAND_IN.body["spec"]["versions"])
    (flux,) = (v["subresources"] for v in real().body["spec"]["versions"])
    assert stand_in == {"status": {}}
    assert flux["status"] == {} and flux["scale"]["specReplicasPath"] == ".spec.size"
    stand_in_spec, flux_spec = STAND_IN.body["spec"], real().body["spec"]
    assert (stand_in_spec["group"], stand_in_spec["scope"]) == (flux_spec["group"], "Namespaced")
    assert stand_in_spec["names"] == flux_spec["names"]


# -- what the stand-in reconciler reads -----------------------------------------------------


class Recording(Mapping[str, Any]):
    """A read-only view of a dict that records the path of every field read (or looked for)."""

    def __init__(
        self, data: Mapping[str, Any], path: tuple[str, ...], reads: dict[tuple[str, ...], Any]
    ) -> None:
        self.data, self.path, self.reads = data, path, reads

    def __getitem__(self, key: str) -> Any:
        where = (*self.path, key)
        self.reads.setdefault(where, None)
        value = self.data[key]
        self.reads[where] = value
        return recording(value, where, self.reads)

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


def recording(value: Any, path: tuple[str, ...], reads: dict[tuple[str, ...], Any]) -> Any:
    if isinstance(value, Mapping):
        return Recording(value, path, reads)
    if isinstance(value, list):
        return [recording(item, (*path, "[]"), reads) for item in value]
    return value


FULL_MINICLUSTER: dict[str, Any] = {
    "apiVersion": "flux-framework.org/v1alpha2",
    "kind": "MiniCluster",
    "metadata": {"name": "lammps", "namespace": "ns", "uid": "u1"},
    "spec": {
        "size": 4,
        "minSize": 2,
        "maxSize": 8,
        "backoffLimit": 3,
        "deadlineSeconds": 600,
        "jobLabels": {QUEUE: "q"},
        "network": {"disableAffinity": False},
        "containers": [
            {
                "name": "lammps",
                "image": "ghcr.io/converged-computing/metric-lammps",
                "resources": {"limits": {"cpu": 2}, "requests": {"cpu": "2", "memory": "4Gi"}},
            }
        ],
        "pod": {
            "labels": {"team": "physics"},
            "annotations": {"note": "x"},
            "nodeSelector": {"pool": "cpu"},
            "nodeAffinity": {"zone": ["a", "b"]},
            "restartPolicy": "Never",
            "tolerations": [
                {"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}
            ],
        },
    },
}


FieldPath = tuple[str, ...]


def reconciler_reads(minicluster: Mapping[str, Any]) -> dict[FieldPath, Any]:
    """Every field `job_for` reads or looks for, by path ("[]": an array item), with its value
    (None where absent); metadata is left out (ObjectMeta is not the CRD's)."""
    reads: dict[FieldPath, Any] = {}
    job_for(Recording(minicluster, (), reads))
    return {path: value for path, value in reads.items() if path[0] != "metadata"}


def read_problems(schema: Mapping[str, Any], reads: Mapping[FieldPath, Any]) -> list[str]:
    found = []
    for path, value in sorted(reads.items()):
        node = node_at(schema, path)
        if node is None:
            found.append(f"{'.'.join(path)}: read, but not in the schema")
        elif value is not None and not type_matches(node, value):
            found.append(
                f"{'.'.join(path)}: {type(value).__name__}, the schema has {node.get('type')}"
            )
    return found


@pytest.mark.parametrize("crd", ["stand-in", "real"])
def test_the_reconciler_reads_only_fields_of_the_schema_with_their_types(crd: str) -> None:
    if crd == "real" and REAL is None:
        pytest.skip(f"no Flux Operator CRD at ../shared/{SHARED_CRD}")
    schema = STAND_IN.schema() if crd == "stand-in" else real().schema()
    assert list(problems(schema, FULL_MINICLUSTER)) == []
    reads = reconciler_reads(FULL_MINICLUSTER)
    # The walk saw what the operator copies (so a read the schema lacks would show here).
    for path in (
        "spec.size",
        "spec.jobLabels",
        "spec.deadlineSeconds",
        "spec.backoffLimit",
        "spec.network.disableAffinity",
        "spec.pod.labels",
        "spec.pod.annotations",
        "spec.pod.nodeSelector",
        "spec.pod.nodeAffinity",
        "spec.pod.tolerations.[].effect",
        "spec.containers.[].resources.requests",
    ):
        assert tuple(path.split(".")) in reads, path
    assert read_problems(schema, reads) == []
    disabled = copy.deepcopy(FULL_MINICLUSTER)
    disabled["spec"]["network"]["disableAffinity"] = True
    assert read_problems(schema, reconciler_reads(disabled)) == []


def test_a_read_outside_the_schema_is_found() -> None:
    reads = reconciler_reads(FULL_MINICLUSTER)
    reads["spec", "pod", "affinity"] = None
    reads["spec", "size"] = "4"
    assert read_problems(STAND_IN.schema(), reads) == [
        "spec.pod.affinity: read, but not in the schema",
        "spec.size: str, the schema has integer",
    ]


def test_the_job_is_the_operators() -> None:
    job = job_for(FULL_MINICLUSTER)
    spec, template = job["spec"], job["spec"]["template"]
    assert (spec["parallelism"], spec["completions"], spec["completionMode"]) == (4, 4, "Indexed")
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"]) == (3, 600)
    assert job["metadata"]["labels"] == {QUEUE: "q"}
    assert template["metadata"]["labels"]["app.kubernetes.io/name"] == "lammps"
    assert template["metadata"]["labels"]["team"] == "physics"
    pod = template["spec"]
    assert pod["restartPolicy"] == "Never" and pod["nodeSelector"] == {"pool": "cpu"}
    assert pod["tolerations"] == FULL_MINICLUSTER["spec"]["pod"]["tolerations"]
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    node = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert node["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "zone", "operator": "In", "values": ["a", "b"]}
    ]
    assert pod["containers"][0]["resources"] == {
        "limits": {"cpu": 2},
        "requests": {"cpu": "2", "memory": "4Gi"},
    }


# -- what muster writes into a MiniCluster survives the schema ---------------------------


TRACE: dict[str, Any] = {
    "name": "t",
    "cluster": {
        "nodes": [
            {
                "count": 2,
                "name": "gpu",
                "allocatable": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"},
                "labels": {"accel": "a100"},
                "taints": [{"key": "gpu", "value": "yes"}],
            },
        ]
    },
    "queues": [{"name": "q"}],
    "jobs": [
        {
            "name": "mc",
            "kind": "MiniCluster",
            "queue": "q",
            "size": 2,
            "minSize": 1,
            "priority": 3,
            "elasticAfter": "30s",
            "podRequests": {"cpu": "6", "memory": "20Gi", "nvidia.com/gpu": "1"},
            "onePodPerNode": True,
            "nodeSelector": {"accel": "a100"},
            "tolerations": [{"key": "gpu", "operator": "Equal", "value": "yes"}],
            "runtime": "50s",
            "runtimeLimit": "100s",
        },
        {
            "name": "spread",
            "kind": "MiniCluster",
            "queue": "q",
            "size": 3,
            "podRequests": {"cpu": "1"},
            "runtime": "50s",
        },
    ],
}


@pytest.mark.parametrize("crd", ["stand-in", "real"])
def test_the_kwok_engines_miniclusters_and_the_webhooks_patch_keep_every_field(
    crd: str,
) -> None:
    if crd == "real" and REAL is None:
        pytest.skip(f"no Flux Operator CRD at ../shared/{SHARED_CRD}")
    schema = STAND_IN.schema() if crd == "stand-in" else real().schema()
    bodies = [
        gang_object(
            arrival,
            namespace="ns",
            admission=admission,
            scale=10,
            run="r1",
            node_selector={"muster.dev/sim-run": "r1"},
        ).body
        for arrival in expand(from_dict(TRACE))
        for admission in ("muster", "none")
    ]
    assert {b["kind"] for b in bodies} == {"MiniCluster"}
    for body in bodies:
        assert list(problems(schema, body)) == [], body["metadata"]["name"]
        decision = decide_create(
            MINICLUSTER,
            body,
            namespace="ns",
            namespace_labels={},
            known_queues=None,
            settings=WebhookSettings(),
            stamp="2026-01-01T00:00:00.000000Z",
        )
        if decision.managed:
            assert list(problems(schema, {"spec": decision.patch["spec"]})) == []


def test_the_prune_check_finds_what_the_apiserver_would_drop() -> None:
    body = copy.deepcopy(FULL_MINICLUSTER)
    body["spec"]["pod"]["affinity"] = {"podAntiAffinity": {}}
    body["spec"]["size"] = "4"
    body["spec"]["pod"]["tolerations"][0]["tolerationSeconds"] = 5
    assert list(problems(STAND_IN.schema(), body)) == [
        "spec.size: str where the schema has integer",
        "spec.pod.tolerations[].tolerationSeconds: not in the schema (pruned)",
        "spec.pod.affinity: not in the schema (pruned)",
    ]
