"""Handing a kwok replay to a controller muster does not run (`--admission external`).

What the `external` admission needs besides the replay itself, checked before anything is
created: the labels that hand every replayed object to that controller (`--label KEY=VALUE`,
e.g. Kueue's `kueue.x-k8s.io/queue-name`), the objects each replay namespace gets before any
gang is submitted (`--namespace-manifest FILE`, e.g. a Kueue LocalQueue), how long a replay
waits without any change before the rest is stuck (`--external-stall`), and the processes whose
CPU seconds the report attributes (`--controller-pid`).

Pure apart from reading the manifest file and `/proc`; the kwok engine creates the objects.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from policies.vocabulary import QUEUE
from simulator.kwok_objects import SIM_RUN

DEFAULT_STALL: Final = 120.0
"""Wall seconds without any change after which an external replay's unfinished gangs are
stuck: an outside controller may wait out a requeue backoff (Kueue's grows to minutes) before
it admits again, and the engine cannot see it counting."""

RESERVED_LABELS: Final = frozenset({SIM_RUN, QUEUE})
"""Label keys `--label` may not set: the replay's own, and muster's queue label (muster's
webhook would take the object over)."""

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class ExternalError(ValueError):
    """An `--admission external` option is wrong; the message says which and how to fix it."""


@dataclass(frozen=True)
class ExternalController:
    """How the `external` admission hands a replay to a controller muster does not run."""

    labels: Mapping[str, str] = field(default_factory=dict)
    """Labels on every replayed Job and MiniCluster (a MiniCluster's Job gets them too)."""
    namespace_objects: tuple[Mapping[str, Any], ...] = ()
    """Objects created in each replay namespace right after it, before any gang."""
    stall: float = DEFAULT_STALL
    """Wall seconds without any change after which the unfinished gangs are stuck."""
    name: str | None = None
    """What reports call the controller (`--external-name`, e.g. kueue); None: `external`."""


def parse_label(text: str) -> tuple[str, str]:
    """`KEY=VALUE` as a Kubernetes label (`[prefix/]name`, value up to 63 characters)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ExternalError(
            f"--label {text!r}: expected KEY=VALUE, e.g. --label kueue.x-k8s.io/queue-name=lq"
        )
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise ExternalError(
            f"--label {text!r}: the key's prefix {prefix!r} is not a DNS subdomain "
            "(lowercase letters, digits, '-' and '.', at most 253 characters)"
        )
    if len(name) > 63 or not _NAME.match(name):
        raise ExternalError(
            f"--label {text!r}: the key's name {name!r} is not a label name (at most 63 "
            "letters, digits, '-', '_' or '.', beginning and ending with a letter or digit)"
        )
    if value and (len(value) > 63 or not _NAME.match(value)):
        raise ExternalError(
            f"--label {text!r}: the value {value!r} is not a label value (at most 63 letters, "
            "digits, '-', '_' or '.', beginning and ending with a letter or digit)"
        )
    if key in RESERVED_LABELS:
        raise ExternalError(
            f"--label {text!r}: {key} is muster's own label and cannot hand objects to "
            "another controller"
        )
    return key, value


def parse_labels(texts: Sequence[str]) -> dict[str, str]:
    """Every `--label`, in order; one key given twice with two values is an error."""
    labels: dict[str, str] = {}
    for text in texts:
        key, value = parse_label(text)
        if labels.get(key, value) != value:
            raise ExternalError(f"--label {key} is given twice: {labels[key]!r} and {value!r}")
        labels[key] = value
    return labels


def load_namespace_manifest(path: Path) -> tuple[dict[str, Any], ...]:
    """The objects of a YAML or JSON file of one or more documents, each with apiVersion,
    kind and metadata.name; their namespace is the replay's, whatever the file says."""
    where = f"--namespace-manifest {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ExternalError(f"{where}: cannot read it: {exc}") from None
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ExternalError(f"{where}: not YAML or JSON: {exc}") from None
    if not documents:
        raise ExternalError(f"{where}: holds no object")
    objects: list[dict[str, Any]] = []
    for number, document in enumerate(documents, start=1):
        objects.append(_namespace_object(document, f"{where}, document {number}"))
    return tuple(objects)


def _namespace_object(document: object, where: str) -> dict[str, Any]:
    if not isinstance(document, dict):
        raise ExternalError(f"{where}: expected an object (a mapping), got {document!r:.60}")
    for key in ("apiVersion", "kind"):
        if not isinstance(document.get(key), str) or not document[key]:
            raise ExternalError(f"{where}: {key} is missing (every object needs it)")
    kind = document["kind"]
    if kind in ("List", "Namespace") or kind.endswith("List"):
        raise ExternalError(
            f"{where}: kind {kind}: give the objects one per document; the replay creates "
            "its namespaces itself"
        )
    meta = document.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ExternalError(f"{where}: {kind} needs metadata.name")
    return document


def in_namespace(body: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """A namespace-manifest object as created in one replay namespace (its namespace set)."""
    meta = dict(body.get("metadata") or {})
    meta["namespace"] = namespace
    for server_side in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
        meta.pop(server_side, None)
    return {**body, "metadata": meta}


# --------------------------------------------------------------------------- processes


@dataclass(frozen=True, slots=True)
class ControllerProcess:
    """A process whose CPU seconds the report attributes (`--controller-pid`)."""

    pid: int
    command: str
    """Its name as /proc has it (`comm`), e.g. `manager` or `python3`."""

    @property
    def label(self) -> str:
        """Its key in the report's CPU figures."""
        return f"{self.command} (pid {self.pid})"


def controller_process(pid: int, proc: Path = Path("/proc")) -> ControllerProcess:
    """The live process `pid`, or an error saying it is not there."""
    if pid <= 0:
        raise ExternalError(f"--controller-pid {pid}: a process id is a positive number")
    try:
        command = (proc / str(pid) / "comm").read_text(encoding="utf-8").strip()
    except OSError:
        raise ExternalError(
            f"--controller-pid {pid}: no such process on this machine (the controller must run "
            "here, e.g. `pgrep -f kueue` finds it)"
        ) from None
    return ControllerProcess(pid=pid, command=command or "process")
