"""What admission changes on a Job, and how eviction puts it back.

Admitting a gang pins it to the nodes the planner chose, in two steps:

- The PATCH that unsuspends the Job also ANDs a required node affinity naming the planned
  nodes into every term of the pod template's required node affinity (one term if it had
  none): `metadata.name` per node (`matchFields`), or `kubernetes.io/hostname In [planned
  nodes]` for a pin of many nodes (`pinned_affinity`); and it adds the scheduling gate
  `muster.dev/placement`.
- Each pod is created gated; the controller gives it its planned node (a `nodeSelector` on
  `kubernetes.io/hostname`, which a gated pod may gain) and removes the gate in one PATCH, so
  each node gets exactly as many of the gang's pods as planned. The affinity alone fixes the
  set of nodes but not how many pods each gets: measured on the local control plane, pods of
  gangs admitted together crossed onto each other's planned room.

The scheduler still binds each pod; it can no longer put one elsewhere than planned. An elastic
Indexed Job admitted at k of its n pods also gets `parallelism = completions = k`, so it runs
exactly k pods, once.

Everything admission changes is first saved on the Job (annotation `muster.dev/restore`), and
where the pods were planned (annotation `muster.dev/placement`): a restarted controller reads
both from the object. Eviction and preemption put the saved fields back once the Job is
suspended again, and remove both annotations.

Kubernetes lets a Job's pod-template node affinity change only while the Job is suspended and
its `status.startTime` is unset (a Job that never ran). The Job controller does not clear it on
suspension (unless the alpha gate MutableSchedulingDirectivesForSuspendedJobs is on), so muster
clears it through the status subresource, as Kueue does, before it restores or re-pins.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

HOSTNAME: Final = "kubernetes.io/hostname"
"""The node label the pin matches (set by the kubelet; usually the node's name)."""
PLACEMENT_GATE: Final = "muster.dev/placement"
"""The scheduling gate admission adds to the pod template: each pod waits until muster names
its node (a nodeSelector on the pod) and removes the gate, so each planned node gets exactly as
many pods as planned."""
NODE_NAME: Final = "metadata.name"
"""The node field a pin matches for a node without a hostname label (`matchFields`)."""


class PinError(ValueError):
    """A `muster.dev/restore` or `muster.dev/placement` value muster cannot read."""


@dataclass(frozen=True)
class Original:
    """The Job fields admission may change, as they were before it (saved for eviction)."""

    parallelism: int | None
    completions: int | None
    affinity: dict[str, Any] | None
    gates: list[dict[str, Any]] | None = None

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> Original:
        """The fields as the Job spec has them now."""
        pod_spec = (spec.get("template") or {}).get("spec") or {}
        affinity = pod_spec.get("affinity")
        gates = pod_spec.get("schedulingGates")
        return cls(
            parallelism=_int_or_none(spec.get("parallelism")),
            completions=_int_or_none(spec.get("completions")),
            affinity=copy.deepcopy(dict(affinity)) if affinity else None,
            gates=[dict(g) for g in gates] if gates else None,
        )

    def gated(self) -> list[dict[str, Any]]:
        """The template's scheduling gates with muster's placement gate."""
        return [*(self.gates or []), {"name": PLACEMENT_GATE}]

    def fields(self, indexed: bool) -> dict[str, int]:
        """The saved spec fields to put back (completions only for an Indexed Job: it is
        immutable otherwise, and muster never changes it there)."""
        out: dict[str, int] = {}
        if self.parallelism is not None:
            out["parallelism"] = self.parallelism
        if indexed and self.completions is not None:
            out["completions"] = self.completions
        return out

    def encode(self) -> str:
        return json.dumps(
            {
                "parallelism": self.parallelism,
                "completions": self.completions,
                "affinity": self.affinity,
                "schedulingGates": self.gates,
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def decode(cls, text: str, what: str) -> Original:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PinError(f"{what}: not JSON ({exc.msg})") from None
        if not isinstance(value, dict):
            raise PinError(f"{what}: expected a JSON object")
        affinity = value.get("affinity")
        if affinity is not None and not isinstance(affinity, dict):
            raise PinError(f"{what}: affinity must be an object or null")
        gates = value.get("schedulingGates")
        if gates is not None and not (
            isinstance(gates, list) and all(isinstance(g, dict) for g in gates)
        ):
            raise PinError(f"{what}: schedulingGates must be a list of objects or null")
        try:
            return cls(
                parallelism=_int_or_none(value.get("parallelism")),
                completions=_int_or_none(value.get("completions")),
                affinity=affinity,
                gates=gates,
            )
        except (TypeError, ValueError):
            raise PinError(f"{what}: parallelism and completions must be integers") from None


def _int_or_none(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(value)
    return int(value)


NAME_PIN_TERMS: Final = 64
"""Up to this many terms (planned nodes × the user's required terms) a pin names each node by
`matchFields` on its name; past it, by its hostname label (see `pinned_affinity`). Each named
node adds ~80 bytes to the Job, carried by every Job event every watcher decodes; and the pods
of a gang on more than one node are gated, so each gets a `nodeSelector` that turns every other
node away at one of the scheduler's first, cheap checks."""


def pinned_affinity(
    affinity: Mapping[str, Any] | None, nodes: Mapping[str, str | None]
) -> dict[str, Any]:
    """`affinity` with the pod held to ``nodes`` (node name -> its `kubernetes.io/hostname`
    label, None if it has none): ANDed into each required term (terms are ORed, so every one
    must carry it), one term of its own if there were none.

    Up to `NAME_PIN_TERMS` terms (64), each node gets a term of its own per user term, matching its
    name (`matchFields` `metadata.name`, which allows only one value): when every term names
    nodes so, kube-scheduler's NodeAffinity PreFilter hands back just those nodes and the
    scheduler filters and scores the planned nodes only, not the whole cluster (measured: with
    a hostname pin it filters every node to find the one that fits). A larger pin names the
    nodes by their hostname label, all in one `In` expression (a 160-node pin is a few KB; a
    node without that label still gets a `matchFields` term of its own)."""
    out: dict[str, Any] = copy.deepcopy(dict(affinity)) if affinity else {}
    node_affinity = out.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    user_terms = required.get("nodeSelectorTerms") or [{}]
    by_name = len(nodes) * len(user_terms) <= NAME_PIN_TERMS
    hostnames = [] if by_name else sorted({host for host in nodes.values() if host})
    named = sorted(nodes) if by_name else sorted(name for name, host in nodes.items() if not host)
    terms: list[dict[str, Any]] = []
    for term in user_terms:
        if hostnames:
            pin = {"key": HOSTNAME, "operator": "In", "values": hostnames}
            terms.append({**term, "matchExpressions": [*(term.get("matchExpressions") or []), pin]})
        for name in named:
            pin = {"key": NODE_NAME, "operator": "In", "values": [name]}
            terms.append({**term, "matchFields": [*(term.get("matchFields") or []), pin]})
    required["nodeSelectorTerms"] = terms
    return out


def encode_placement(placement: Mapping[str, int]) -> str:
    """`node=pods,node=pods`, by node name: where the planner put the gang's pods."""
    return ",".join(f"{node}={pods}" for node, pods in sorted(placement.items()))


def decode_placement(text: str, what: str) -> dict[str, int]:
    placement: dict[str, int] = {}
    for part in filter(None, text.split(",")):
        node, sep, count = part.partition("=")
        if not sep or not node or not count.isdigit() or int(count) < 1:
            raise PinError(f"{what}: {part!r} is not node=pods (pods a whole number >= 1)")
        placement[node] = int(count)
    return placement


def elastic_fields(original: Original, indexed: bool, size: int) -> dict[str, int]:
    """What makes the Job run exactly `size` pods once: parallelism, and for an Indexed Job
    whose completions equal its parallelism, completions too (Kubernetes allows changing the
    two in tandem). Empty when `size` is the Job's own."""
    if original.parallelism is not None and size >= original.parallelism:
        return {}
    fields = {"parallelism": size}
    if indexed and original.completions == original.parallelism:
        fields["completions"] = size
    return fields
