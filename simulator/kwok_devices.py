"""What a kwok replay creates for a trace's DRA devices (`simulator.tracedevices`): the
DeviceClasses (those missing on the cluster), each node's ResourceSlices (labelled with the
run, deleted with its nodes), a claim template per job pod set that claims devices in each of
the replay's namespaces, and how each gang's pods claim from them (`PodClaims`).

kube-scheduler allocates the claims against the slices and kube-controller-manager makes each
pod's claim from its template, for real; kwok prepares nothing (there is no device), so a pod
runs once bound. muster runs with the trace's `--device-class` mapping (`flags`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from policies.kinds.registry import kind_named, made_by_operator
from simulator.kwok_objects import SIM_RUN, NodePlan, PodClaims
from simulator.kwok_settings import KwokError
from simulator.trace import Trace
from simulator.tracedevices import claim_templates, device_objects, template_name


def flags(trace: Trace) -> tuple[str, ...]:
    """`muster run --device-class` for the trace's device classes (none without)."""
    return tuple(trace.devices.mapping.flags())


def pod_claims(trace: Trace) -> dict[str, PodClaims]:
    """Job group name -> how its gangs' pods claim their devices (groups that claim some)."""
    names = trace.devices.resources
    return {
        job.name: PodClaims(names, {s: template_name(job.name, s) for s, _ in job.devices})
        for job in trace.jobs
        if job.devices
    }


def refuse(trace: Trace) -> None:
    """What the kwok engine cannot replay with devices: the pods of a kind whose operator makes
    its gang object (a MiniCluster's: the Flux Operator's pod template has no resourceClaims)."""
    for job in trace.jobs:
        if job.devices and made_by_operator(kind_named(job.kind)):
            raise KwokError(
                f"jobs {job.name}: a {job.kind}'s pods are made by its operator, whose pod "
                "template cannot claim devices; make it a Job, a JobSet or a PodGroup, or "
                "replay in-process (--engine in-process)"
            )


class KwokDevices:
    """The DRA objects of one session (classes and slices) and of each replay (templates)."""

    def __init__(self, client: KubeClient, trace: Trace, run: str) -> None:
        self.client, self.trace, self.run = client, trace, run
        self.classes_created: list[str] = []

    def create_cluster_objects(self, plans: Sequence[NodePlan]) -> int:
        """The classes and each node's slices; how many objects were created."""
        trace = self.trace
        if not trace.devices.classes:
            return 0
        names: dict[int, list[str]] = {}
        index = 0
        for group_index, group in enumerate(trace.node_groups):
            names[group_index] = [p.name for p in plans[index : index + group.total]]
            index += group.total
        created = 0
        for body in device_objects(trace.devices, trace.node_groups, names):
            if body["kind"] == "DeviceClass":
                try:
                    self.client.create(kubeapi.DEVICE_CLASSES.path(), body)
                except ApiError as exc:
                    if exc.status != 409:
                        raise KwokError(f"cannot create DeviceClass: {exc.message}") from None
                    continue
                self.classes_created.append(body["metadata"]["name"])
            else:
                body["metadata"].setdefault("labels", {})[SIM_RUN] = self.run
                try:
                    self.client.create(kubeapi.RESOURCE_SLICES.path(), body)
                except ApiError as exc:
                    raise KwokError(f"cannot create ResourceSlice: {exc.message}") from None
            created += 1
        return created

    def delete_cluster_objects(self) -> None:
        with contextlib.suppress(ApiError, OSError):
            self.client.request(
                "DELETE",
                kubeapi.RESOURCE_SLICES.path(),
                params={"labelSelector": f"{SIM_RUN}={self.run}"},
            )
        for name in self.classes_created:
            with contextlib.suppress(ApiError, OSError):
                self.client.delete(kubeapi.DEVICE_CLASSES.path(name=name))
        self.classes_created = []


def namespace_templates(
    trace: Trace, namespaces: Mapping[str, str]
) -> list[tuple[str, dict[str, Any]]]:
    """(replay namespace, ResourceClaimTemplate) for each job claiming devices, in the replay's
    namespace of the job's."""
    out: list[tuple[str, dict[str, Any]]] = []
    for job in trace.jobs:
        namespace = namespaces.get(job.namespace)
        if namespace is None:
            continue
        out.extend((namespace, body) for body in claim_templates(job))
    return out


def create_templates(client: KubeClient, templates: Sequence[tuple[str, dict[str, Any]]]) -> None:
    for namespace, body in templates:
        try:
            client.create(kubeapi.RESOURCE_CLAIM_TEMPLATES.path(namespace), body)
        except ApiError as exc:
            if exc.status != 409:
                raise KwokError(
                    f"cannot create ResourceClaimTemplate {namespace}/{body['metadata']['name']}: "
                    f"{exc.message}"
                ) from None
