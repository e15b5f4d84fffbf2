"""The CustomResourceDefinitions muster owns, shipped inside the package so an installed muster
(a wheel, the image) finds them without the repository: the Queue kind, and the GangRecord kind
(what muster decided about a pod group, `policies.kinds.members`).

manifests/crd/ holds the same files for `kubectl apply`; tests/unit/test_crd_package.py keeps the
two copies equal.
"""

from __future__ import annotations

from importlib import resources
from typing import Any, Final

import yaml

QUEUE_CRD_FILE: Final = "queues.muster.dev.yaml"
GANG_RECORD_CRD_FILE: Final = "gangrecords.muster.dev.yaml"
CRD_FILES: Final = (QUEUE_CRD_FILE, GANG_RECORD_CRD_FILE)


def queue_crd_text() -> str:
    """The Queue CRD as shipped (YAML text)."""
    return resources.files(__package__).joinpath(QUEUE_CRD_FILE).read_text(encoding="utf-8")


def queue_crd() -> dict[str, Any]:
    """The Queue CRD as shipped, parsed."""
    body: dict[str, Any] = yaml.safe_load(queue_crd_text())
    return body


def gang_record_crd() -> dict[str, Any]:
    """The GangRecord CRD as shipped, parsed."""
    text = resources.files(__package__).joinpath(GANG_RECORD_CRD_FILE).read_text(encoding="utf-8")
    body: dict[str, Any] = yaml.safe_load(text)
    return body


def muster_crds() -> list[dict[str, Any]]:
    """Every CRD muster owns (Queue, GangRecord), parsed."""
    return [queue_crd(), gang_record_crd()]
