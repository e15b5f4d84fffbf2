"""What admission changes on a gang object's pod templates, and how eviction puts it back.

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

from policies.model import whole_number
from policies.vocabulary import MAX_INT32

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
class TemplateOriginal:
    """One pod template's fields a release may change, as the user wrote them."""

    affinity: dict[str, Any] | None = None
    gates: list[dict[str, Any]] | None = None

    @classmethod
    def of(cls, pod_spec: Mapping[str, Any]) -> TemplateOriginal:
        """The fields as a pod template's spec has them now."""
        affinity = pod_spec.get("affinity")
        gates = pod_spec.get("schedulingGates")
        return cls(
            affinity=copy.deepcopy(dict(affinity)) if affinity else None,
            gates=[dict(g) for g in gates] if gates else None,
        )

    def gated(self) -> list[dict[str, Any]]:
        """The template's scheduling gates with muster's placement gate."""
        return [*(self.gates or []), {"name": PLACEMENT_GATE}]

    def encode(self) -> dict[str, Any]:
        return {"affinity": self.affinity, "schedulingGates": self.gates}

    @classmethod
    def decode(cls, value: Mapping[str, Any], what: str) -> TemplateOriginal:
        affinity = value.get("affinity")
        if affinity is not None and not isinstance(affinity, dict):
            raise PinError(f"{what}: affinity must be an object or null")
        gates = value.get("schedulingGates")
        if gates is not None and not (
            isinstance(gates, list) and all(isinstance(g, dict) for g in gates)
        ):
            raise PinError(f"{what}: schedulingGates must be a list of objects or null")
        return cls(affinity, gates)


@dataclass(frozen=True)
class Original:
    """What a release may change on a gang object, as the user wrote it (saved in
    `muster.dev/restore` for eviction): the kind's own spec fields (a Job's parallelism and
    completions) and each pod template's affinity and scheduling gates, by pod set name ('' for
    a kind with one pod template).

    A kind with one template and only parallelism and completions is encoded as muster always
    wrote a Job's (``{"parallelism", "completions", "affinity", "schedulingGates"}``), so the
    objects of earlier versions read the same; others as ``{"fields": ..., "templates": {name:
    {"affinity", "schedulingGates"}}}``."""

    fields: Mapping[str, int | None]
    templates: Mapping[str, TemplateOriginal]

    def template(self, name: str) -> TemplateOriginal:
        return self.templates.get(name) or TemplateOriginal()

    def encode(self) -> str:
        value: dict[str, Any]
        if set(self.templates) <= {""} and set(self.fields) <= _JOB_FIELDS:
            value = {name: self.fields.get(name) for name in sorted(_JOB_FIELDS)}
            value.update(self.template("").encode())
        else:
            value = {
                "fields": dict(self.fields),
                "templates": {name: t.encode() for name, t in self.templates.items()},
            }
        return json.dumps(value, sort_keys=True, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str, what: str) -> Original:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PinError(f"{what}: not JSON ({exc.msg})") from None
        except ValueError:  # an integer of thousands of digits (Python refuses over 4300)
            raise PinError(f"{what}: holds a number out of range") from None
        if not isinstance(value, dict):
            raise PinError(f"{what}: expected a JSON object")
        if "templates" in value:
            fields = value.get("fields") or {}
            templates = value["templates"]
            if not isinstance(fields, dict) or not isinstance(templates, dict):
                raise PinError(f"{what}: fields and templates must be objects")
            if not all(isinstance(t, dict) for t in templates.values()):
                raise PinError(f"{what}: each template must be an object")
            return cls(
                {str(k): _int_field(v, what) for k, v in fields.items()},
                {
                    str(name): TemplateOriginal.decode(t, f"{what}: template {name}")
                    for name, t in templates.items()
                },
            )
        return cls(
            {name: _int_field(value.get(name), what) for name in sorted(_JOB_FIELDS)},
            {"": TemplateOriginal.decode(value, what)},
        )


_JOB_FIELDS = frozenset({"parallelism", "completions"})


def _int_field(value: object, what: str) -> int | None:
    if value is None:
        return None
    number = whole_number(value)
    if number is None or not 0 <= number <= MAX_INT32:
        raise PinError(
            f"{what}: parallelism and completions must be integers from 0 to {MAX_INT32}"
        )
    return number


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


def encode_placement(placements: Mapping[str, Mapping[str, int]]) -> str:
    """Where the planner put the gang's pods (the `muster.dev/placement` value), by pod set:
    `node=pods,node=pods` for a gang of one pod set (named ''), as muster always wrote it;
    `set:node=pods,...;set:...` for several (node names hold no ':' or ';')."""
    parts = []
    for name, placement in sorted(placements.items()):
        nodes = ",".join(f"{node}={pods}" for node, pods in sorted(placement.items()))
        parts.append(f"{name}:{nodes}" if name or len(placements) > 1 else nodes)
    return ";".join(parts)


def decode_placement(text: str, what: str) -> dict[str, dict[str, int]]:
    """Pod set name -> node -> pods, from a `muster.dev/placement` value."""
    placements: dict[str, dict[str, int]] = {}
    for part in text.split(";") if text else []:
        name, _, nodes = part.rpartition(":")
        placement: dict[str, int] = {}
        for entry in filter(None, nodes.split(",")):
            node, sep, count = entry.partition("=")
            if not sep or not node or not count.isdigit() or int(count) < 1:
                raise PinError(f"{what}: {entry!r} is not node=pods (pods a whole number >= 1)")
            placement[node] = int(count)
        placements[name] = placement
    return placements
