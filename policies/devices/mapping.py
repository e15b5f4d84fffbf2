"""Which DeviceClasses muster counts, and the resource name each counts as: the one mapping an
administrator configures (`muster run --device-class CLASS=RESOURCE`, the chart's
`deviceClasses`). A Queue's quota, a gang's requests and a node's capacity then name the
resource as they name any extended resource (docs/devices.md). Pure."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from policies.model import PolicyError

_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
STANDARD: Final = frozenset({"cpu", "memory", "pods", "ephemeral-storage", "storage"})
"""Resources Kubernetes itself counts: never a device class's."""
FLAG: Final = "--device-class"


def check_class_name(name: str, where: str) -> None:
    """A DeviceClass name is a DNS subdomain (at most 253 characters)."""
    if len(name) > 253 or not _SUBDOMAIN.fullmatch(name):
        raise PolicyError(
            f"{where}: {name!r} is not a DeviceClass name; use a lower-case DNS subdomain such "
            "as gpu.example.com"
        )


def check_resource_name(name: str, where: str) -> None:
    """A resource name as Kubernetes spells extended resources: an optional DNS subdomain
    prefix and a name of at most 63 characters (`muster.dev/gpu`), not a standard resource."""
    prefix, _, short = name.rpartition("/")
    if (
        name in STANDARD
        or len(short) > 63
        or not _NAME.fullmatch(short)
        or (prefix and (len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix)))
        or name.startswith("requests.")
    ):
        raise PolicyError(
            f"{where}: {name!r} is not a resource name a device class can count as; use a "
            "qualified name no node offers otherwise, such as muster.dev/gpu (not cpu, memory, "
            "pods or ephemeral-storage)"
        )


@dataclass(frozen=True, slots=True)
class DeviceMapping:
    """DeviceClass name -> the resource name its devices count as. Empty: muster counts no
    device (claims are left to kube-scheduler, as before DRA support)."""

    classes: Mapping[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.classes)

    def resource(self, device_class: str) -> str | None:
        """The resource `device_class` counts as; None when muster does not count it."""
        return self.classes.get(device_class)

    @property
    def resources(self) -> frozenset[str]:
        return frozenset(self.classes.values())

    def classes_of(self, resource: str) -> tuple[str, ...]:
        """The DeviceClasses that count as `resource`, sorted."""
        return tuple(sorted(c for c, r in self.classes.items() if r == resource))

    def flags(self) -> list[str]:
        """The mapping as `muster run` flags (what a parent process hands its webhook child)."""
        out: list[str] = []
        for device_class, resource in sorted(self.classes.items()):
            out += [FLAG, f"{device_class}={resource}"]
        return out

    @classmethod
    def parse(cls, entries: Iterable[str], where: str = FLAG) -> DeviceMapping:
        """``CLASS=RESOURCE`` entries (`--device-class gpu.example.com=muster.dev/gpu`);
        PolicyError naming the entry."""
        pairs: dict[str, str] = {}
        for entry in entries:
            device_class, sep, resource = entry.partition("=")
            if not sep:
                raise PolicyError(
                    f"{where} {entry!r}: expected CLASS=RESOURCE, such as "
                    "gpu.example.com=muster.dev/gpu"
                )
            pairs[device_class.strip()] = resource.strip()
        return cls.of(pairs, where)

    @classmethod
    def of(cls, pairs: Mapping[str, str], where: str) -> DeviceMapping:
        """From a mapping (the chart's `deviceClasses`, a trace's), checked."""
        for device_class, resource in pairs.items():
            check_class_name(str(device_class), f"{where} {device_class}")
            if not isinstance(resource, str):
                raise PolicyError(f"{where} {device_class}: expected a resource name string")
            check_resource_name(resource, f"{where} {device_class}")
        return cls(dict(pairs))


NO_DEVICES: Final = DeviceMapping()
