"""The Queue CRD shipped in the package (admission/crd/, what the kwok engine, the benches and
the tests install) is the one in manifests/crd/ (what `kubectl apply` installs), byte for byte."""

from __future__ import annotations

from pathlib import Path

from admission.crd import CRD_FILES, QUEUE_CRD_FILE, gang_record_crd, queue_crd, queue_crd_text

REPO = Path(__file__).resolve().parents[2]


def test_packaged_queue_crd_equals_the_manifest() -> None:
    manifest = REPO / "manifests" / "crd" / QUEUE_CRD_FILE
    assert queue_crd_text() == manifest.read_text(encoding="utf-8"), (
        f"admission/crd/{QUEUE_CRD_FILE} and {manifest.relative_to(REPO)} differ: "
        f"edit one and copy it over the other"
    )


def test_every_packaged_crd_equals_its_manifest() -> None:
    for name in CRD_FILES:
        packaged = (REPO / "admission" / "crd" / name).read_text(encoding="utf-8")
        assert packaged == (REPO / "manifests" / "crd" / name).read_text(encoding="utf-8"), name


def test_packaged_gang_record_crd_is_namespaced() -> None:
    crd = gang_record_crd()
    assert crd["metadata"]["name"] == "gangrecords.muster.dev"
    assert crd["spec"]["names"]["kind"] == "GangRecord"
    assert crd["spec"]["scope"] == "Namespaced"


def test_packaged_queue_crd_is_the_queue_kind() -> None:
    crd = queue_crd()
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == "queues.muster.dev"
    assert crd["spec"]["names"]["kind"] == "Queue"


def test_pyproject_ships_the_crd_as_package_data() -> None:
    import tomllib

    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = data["tool"]["setuptools"]["package-data"]["admission"]
    assert any(Path("crd", QUEUE_CRD_FILE).match(p) for p in patterns), patterns
