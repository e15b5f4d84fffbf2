"""Feature gates of a local control plane (`muster cluster up --feature-gates A=true,B=false`).

Parsed (`parse_feature_gates`), checked against what this release's kube-apiserver,
kube-controller-manager and kube-scheduler accept before anything starts (`check_gates`: each
binary says itself which gates it knows, in its `--help`), passed to every component that knows
each gate (`FeatureGates.flag`), with the API group versions the gates' objects are served in
(`FeatureGates.runtime_config`: a beta or alpha version is off by default even when its gate is
on), and remembered in the cluster's state directory (`features.json`) so `muster cluster
status` shows them.
"""

from __future__ import annotations

import difflib
import json
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from simulator.controlplane.errors import ClusterError

GATED_COMPONENTS: Final = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
"""The components that take `--feature-gates` (etcd and kwok have none of Kubernetes')."""

GATE_APIS: Final[Mapping[str, tuple[str, ...]]] = {
    # pkg/controlplane/instance.go lists scheduling.k8s.io/v1beta1 among the beta versions
    # disabled by default; pkg/registry/scheduling/rest/storage_scheduling.go serves workloads
    # and podgroups in it only when GenericWorkload is on. Both are needed.
    "GenericWorkload": ("scheduling.k8s.io/v1beta1",),
    # compositepodgroups exist only in the alpha scheduling.k8s.io/v1alpha3 (same files).
    "CompositePodGroup": ("scheduling.k8s.io/v1alpha3",),
}
"""The API group versions a gate's objects need served (`--runtime-config GV=true`), for the
gates whose API is not in a version served by default (Kubernetes 1.37)."""

_HELP_GATE = re.compile(r"(?:\b\w+:)?\b([A-Z][A-Za-z0-9]*)=true\|false \((ALPHA|BETA)")
"""A gate in a component's `--help`: `GenericWorkload=true|false (BETA - default=false)`, with
a `kube:` prefix in releases whose components have emulation versions."""

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


def parse_feature_gates(values: Sequence[str]) -> dict[str, bool]:
    """`["A=true,B=false", "C=true"]` (the flag, repeatable) as {gate: on}; a later value of the
    same gate wins. Raises ClusterError naming the bad part."""
    gates: dict[str, bool] = {}
    for value in values:
        for part in filter(None, (p.strip() for p in value.split(","))):
            name, sep, setting = part.partition("=")
            if not sep or not _NAME.match(name):
                raise ClusterError(
                    f"--feature-gates {part!r}: expected GATE=true or GATE=false, "
                    "e.g. --feature-gates GenericWorkload=true"
                )
            if setting.lower() not in ("true", "false"):
                raise ClusterError(
                    f"--feature-gates {part!r}: the value must be true or false, not {setting!r}"
                )
            gates[name] = setting.lower() == "true"
    return gates


def gates_in_help(text: str) -> frozenset[str]:
    """The alpha and beta gates a component's `--help` lists (GA and deprecated gates are
    accepted too but not listed: `FeatureSpec.HelpString` in component-base leaves them out)."""
    return frozenset(match.group(1) for match in _HELP_GATE.finditer(text))


def component_gates(binary: Path) -> frozenset[str]:
    """The alpha and beta gates `binary` lists in its `--help`."""
    proc = subprocess.run(
        [str(binary), "--help"], capture_output=True, text=True, check=False, timeout=60
    )
    return gates_in_help(proc.stdout + proc.stderr)


_KLOG_ERR = re.compile(r'err="((?:[^"\\]|\\.)*)"')


def refusal(binary: Path, settings: Mapping[str, bool]) -> str | None:
    """None when `binary` starts with `--feature-gates` set so (asked with `--version`, which
    parses and checks the gates, then exits: unknown names, bad values, gates locked to their
    default and gates whose dependencies are off are refused), else the binary's own words."""
    flag = ",".join(f"{n}={'true' if on else 'false'}" for n, on in sorted(settings.items()))
    proc = subprocess.run(
        [str(binary), f"--feature-gates={flag}", "--version"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if proc.returncode == 0:
        return None
    said = proc.stderr or proc.stdout
    match = _KLOG_ERR.search(said)
    if match:
        return match.group(1).replace('\\"', '"')
    lines = [line for line in said.splitlines() if line.strip()]
    return lines[0] if lines else f"exit {proc.returncode}"


@dataclass(frozen=True)
class FeatureGates:
    """The gates a cluster runs with, and which components take each."""

    gates: Mapping[str, bool]
    takers: Mapping[str, tuple[str, ...]]
    """gate -> the components (of `GATED_COMPONENTS`) that know it."""

    def flag(self, component: str) -> list[str]:
        """`--feature-gates=...` for `component`: the gates it knows (none: no flag)."""
        mine = [name for name in sorted(self.gates) if component in self.takers.get(name, ())]
        if not mine:
            return []
        settings = ",".join(f"{n}={'true' if self.gates[n] else 'false'}" for n in mine)
        return [f"--feature-gates={settings}"]

    def runtime_config(self) -> list[str]:
        """`--runtime-config=...` for the apiserver: every API version an enabled gate needs."""
        versions = sorted({gv for n, on in self.gates.items() if on for gv in GATE_APIS.get(n, ())})
        if not versions:
            return []
        return ["--runtime-config=" + ",".join(f"{gv}=true" for gv in versions)]

    def describe(self) -> str:
        """`GenericWorkload=true, WorkloadWithJob=false`, or `none`."""
        if not self.gates:
            return "none"
        return ", ".join(f"{n}={'true' if on else 'false'}" for n, on in sorted(self.gates.items()))

    def to_json(self) -> dict[str, object]:
        return {
            "featureGates": dict(sorted(self.gates.items())),
            "components": {n: list(t) for n, t in sorted(self.takers.items())},
            "runtimeConfig": self.runtime_config(),
        }

    @classmethod
    def from_json(cls, value: Mapping[str, object]) -> FeatureGates:
        gates = value.get("featureGates") or {}
        takers = value.get("components") or {}
        if not isinstance(gates, dict) or not isinstance(takers, dict):
            raise ClusterError("features.json: featureGates and components must be objects")
        return cls(
            gates={str(k): bool(v) for k, v in gates.items()},
            takers={str(k): tuple(str(c) for c in v) for k, v in takers.items()},
        )


NONE: Final = FeatureGates(gates={}, takers={})


def check_gates(
    gates: Mapping[str, bool], binaries: Mapping[str, Path], release: str
) -> FeatureGates:
    """Which of `binaries` (component -> path) takes each gate. Raises ClusterError, before
    anything starts, for a gate no component accepts (with the names closest to it) and for a
    setting a component refuses (a gate locked to its default, one whose dependencies are off),
    in the component's words."""
    listed = {component: component_gates(path) for component, path in binaries.items()}
    takers: dict[str, tuple[str, ...]] = {}
    for name, on in sorted(gates.items()):
        knowing = tuple(c for c in binaries if name in listed[c])
        if not knowing:
            # GA and deprecated gates are accepted but not listed: ask each binary.
            said = {c: refusal(path, {name: on}) for c, path in binaries.items()}
            knowing = tuple(c for c, words in said.items() if words is None)
            if not knowing:
                raise ClusterError(_unknown_gate(name, on, listed, said, release))
        takers[name] = knowing
    features = FeatureGates(gates=dict(gates), takers=takers)
    for component, path in binaries.items():
        mine = {n: on for n, on in gates.items() if component in takers[n]}
        if mine and (words := refusal(path, mine)) is not None:
            raise ClusterError(
                f"--feature-gates {features.describe()}: {component} {release} refuses "
                f"them: {words}"
            )
    return features


def _unknown_gate(
    name: str,
    on: bool,
    listed: Mapping[str, frozenset[str]],
    said: Mapping[str, str | None],
    release: str,
) -> str:
    every = sorted(set().union(*listed.values()))
    close = difflib.get_close_matches(name, every, n=3, cutoff=0.6)
    words = next((w for w in said.values() if w), "refused")
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    first = next(iter(listed), "kube-apiserver")
    return (
        f"--feature-gates {name}={'true' if on else 'false'}: no component of Kubernetes "
        f"{release} accepts it ({', '.join(listed)}: {words}){hint} "
        f"(`{first} --help` lists the alpha and beta gates it knows)"
    )


def write_state(state_dir: Path, features: FeatureGates) -> None:
    (state_dir / "features.json").write_text(json.dumps(features.to_json(), indent=2) + "\n")


def read_state(state_dir: Path) -> FeatureGates:
    """The gates a cluster was started with (none when it recorded none)."""
    try:
        value = json.loads((state_dir / "features.json").read_text())
    except (OSError, ValueError):
        return NONE
    return FeatureGates.from_json(value) if isinstance(value, dict) else NONE
