"""The one builder of the Jobs (and pod groups' pods) tests make: as a user creates one (for the
apiserver, the webhook's decision, a review) and as the watches deliver one stored (for the
cache, the backlog, the kwok engine's timeline), with keyword arguments for what tests vary.

By default a Job is what a cluster test creates: one pod of 1 cpu that tolerates kwok's nodes
and succeeds after 5 s on kwok (`muster.dev/runtime`), not suspended, in no queue. Unit tests
mostly pass `tolerations=()`: a toleration is part of the gang the planner reads (and of the
words of some of its reasons).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from policies.submitted import format_stamp
from policies.vocabulary import GANG, POD_GROUP, POD_GROUP_SIZE, QUEUE, RUNTIME

KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}

PODS: Literal["pods"] = "pods"
"""`completions=PODS` (the default): as many completions as pods."""


def job(
    name: str = "train",
    queue: str | None = None,
    *,
    namespace: str | None = None,
    pods: int | None = 1,
    completions: int | Literal["pods"] | None = PODS,
    indexed: bool = False,
    suspend: bool | None = False,
    cpu: str | None = "1",
    runtime: str | None = "5s",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    gang_label: bool = False,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, str]] = (KWOK_TOLERATION,),
    owner: Mapping[str, Any] | None = None,
    deadline: int | None = None,
    resource_version: int | None = None,
    status: Mapping[str, Any] | None = None,
    extended: Mapping[str, str] | None = None,
    claim_templates: Sequence[str] = (),
    shared_claims: Sequence[str] = (),
) -> dict[str, Any]:
    """A Job named `name`, labelled for `queue` (None: unlabelled; "" labels it with no queue)
    besides `labels`.

    `pods` is its parallelism and `completions` its completions (None: that field left out),
    `indexed` its completion mode; `suspend` None leaves `spec.suspend` out. Each pod requests
    `cpu` (None: no requests), runs `runtime` on kwok (None: until deleted), has `tolerations`
    (by default kwok's nodes'; none: no tolerations, as a pod of a cluster without kwok), selects
    `node_selector`; with `gang_label` it carries the
    `muster.dev/gang` label the webhook stamps. `owner` is its controller's reference,
    `deadline` its activeDeadlineSeconds. Its pods also request `extended` resources and use
    a claim made from each of `claim_templates` and each ResourceClaim of `shared_claims`
    (DRA devices: `spec.resourceClaims`, named `c0`, `c1`, ..., each used by the container).

    Stored: with a `resource_version` it has the uid (`uid-NAME`) and resourceVersion the
    apiserver gives, and a `status` (also given alone)."""
    meta: dict[str, Any] = {"name": name, "labels": {} if queue is None else {QUEUE: queue}}
    meta["labels"].update(labels or {})
    if namespace is not None:
        meta["namespace"] = namespace
    if resource_version is not None:
        meta["uid"] = f"uid-{name}"
        meta["resourceVersion"] = str(resource_version)
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    if owner is not None:
        meta["ownerReferences"] = [dict(owner)]
    body: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": _spec(name, pods, completions, indexed, suspend, gang_label, runtime),
    }
    body["spec"]["template"]["spec"] = _pod(cpu, node_selector, tolerations)
    _devices(body["spec"]["template"]["spec"], extended, claim_templates, shared_claims)
    if deadline is not None:
        body["spec"]["activeDeadlineSeconds"] = deadline
    if status is not None or resource_version is not None:
        body["status"] = dict(status or {})
    return body


def _spec(
    name: str,
    pods: int | None,
    completions: int | Literal["pods"] | None,
    indexed: bool,
    suspend: bool | None,
    gang_label: bool,
    runtime: str | None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if pods is not None:
        spec["parallelism"] = pods
    if completions == PODS:
        completions = pods
    if completions is not None:
        spec["completions"] = completions
    if indexed:
        spec["completionMode"] = "Indexed"
    if suspend is not None:
        spec["suspend"] = suspend
    template_meta: dict[str, Any] = {"annotations": {RUNTIME: runtime} if runtime else {}}
    if gang_label:
        template_meta["labels"] = {GANG: name}
    spec["template"] = {"metadata": template_meta}
    return spec


def _pod(
    cpu: str | None,
    node_selector: Mapping[str, str] | None,
    tolerations: Sequence[Mapping[str, str]],
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if cpu is not None:
        container["resources"] = {"requests": {"cpu": cpu}}
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if tolerations:
        pod["tolerations"] = [dict(t) for t in tolerations]
    if node_selector:
        pod["nodeSelector"] = dict(node_selector)
    return pod


def _devices(
    pod: dict[str, Any],
    extended: Mapping[str, str] | None,
    templates: Sequence[str],
    shared: Sequence[str],
) -> None:
    container = pod["containers"][0]
    if extended:
        requests = container.setdefault("resources", {}).setdefault("requests", {})
        requests.update(extended)
    claims = [{"resourceClaimTemplateName": t} for t in templates]
    claims += [{"resourceClaimName": c} for c in shared]
    if claims:
        pod["resourceClaims"] = [{"name": f"c{i}", **c} for i, c in enumerate(claims)]
        container.setdefault("resources", {})["claims"] = [
            {"name": f"c{i}"} for i in range(len(claims))
        ]


def stamp(seq: int, at: float) -> str:
    """A `muster.dev/submitted` stamp as the webhook writes it: at `at` (seconds, whole ones
    kept), sequence `seq` (a strict order among stamps of one second)."""
    return format_stamp(int(at) * 10**9 + seq, seq)


def group_pod(
    name: str,
    group: str,
    *,
    size: int | str | None = 2,
    queue: str | None = None,
    namespace: str | None = None,
    cpu: str | None = "1",
    runtime: str | None = "5s",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, str]] = (KWOK_TOLERATION,),
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A pod of pod group `group` (`muster.dev/pod-group`) that says the group has `size` pods
    (`muster.dev/pod-group-size` label; None: left out), labelled for `queue` (None: no label)
    besides `labels`; its pod spec as a Job's (`job`: `cpu`, `runtime` on kwok, ...)."""
    meta: dict[str, Any] = {"name": name, "labels": {POD_GROUP: group}}
    if size is not None:
        meta["labels"][POD_GROUP_SIZE] = str(size)
    if queue is not None:
        meta["labels"][QUEUE] = queue
    meta["labels"].update(labels or {})
    if namespace is not None:
        meta["namespace"] = namespace
    meta["annotations"] = {RUNTIME: runtime} if runtime else {}
    meta["annotations"].update(annotations or {})
    if owner is not None:
        meta["ownerReferences"] = [dict(owner)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": _pod(cpu, node_selector, tolerations),
    }
