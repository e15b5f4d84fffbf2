"""The webhook's view of the cluster: loaded once at start, then kept current by lean streams.

`load_state` LISTs the namespaces, the Queues, the managed Jobs (only while some Queue sets
`spec.limits`) and the MiniClusters into a `WebhookState`; `load_nodes` the Nodes into its
never-fits check. Then `ManagedJobs` follows the managed Jobs into the backlog while some Queue
sets limits, and a stream follows the Nodes (`webhook_watches`); kopf's watches
(`webhook.handlers.register_watches`) keep the namespaces, Queues and MiniClusters current.
"""

from __future__ import annotations

import logging
import threading

from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from kubeport.streamwatch import StreamWatch, list_collection
from policies.devices import NO_DEVICES, DeviceMapping
from policies.kinds import Kind
from policies.kinds.registry import KINDS, POD_GANGS, made_by_operator
from policies.vocabulary import QUEUE
from webhook.devices import WebhookDevices, device_watches
from webhook.handlers import set_queue, stamp_of
from webhook.review import WebhookState

QUEUES_PATH = kubeapi.QUEUES.path()
JOBS_PATH = kubeapi.JOBS.path()
NODES_PATH = kubeapi.NODES.path()
PODS_PATH = kubeapi.PODS.path()
MANAGED_JOBS = {"labelSelector": QUEUE}
"""The Jobs muster manages, as the controller's watch selects them."""


def load_state(client: KubeClient) -> tuple[WebhookState, int | None]:
    """One LIST each of namespaces, Queues, managed Jobs (in pages, only while some Queue sets
    `spec.limits`: `ManagedJobs`) and MiniClusters (absent CRDs are fine); and the Jobs'
    collection version, to watch them on from (None when they were not listed)."""
    state = WebhookState(native_gangs=serves_pod_groups(client))
    for ns in client.get(kubeapi.NAMESPACES.path())["items"]:
        state.namespace_labels[ns["metadata"]["name"]] = dict(ns["metadata"].get("labels") or {})
    try:
        queues = client.get(QUEUES_PATH)["items"]
        state.queues = {q["metadata"]["name"] for q in queues}
        for queue in queues:
            set_queue(state, queue)
    except ApiError as exc:
        if exc.status != 404:
            raise
    if not state.limits:
        _load_all_owners(client, state)
        return state, None
    query = {**MANAGED_JOBS, "limit": "500"}
    jobs_version = 0
    while True:
        page = client.get(JOBS_PATH, query)
        for job in page["items"]:
            state.backlog.observe_job(None, job)
        meta = page.get("metadata") or {}
        # Later pages of a chunked LIST are served at the first page's version.
        jobs_version = jobs_version or int(meta.get("resourceVersion") or 0)
        token = meta.get("continue")
        if not token:
            break
        query["continue"] = token
    _load_all_owners(client, state)
    return state, jobs_version


def serves_pod_groups(client: KubeClient) -> bool:
    """Whether the cluster serves PodGroups (Kubernetes 1.37 with GenericWorkload): then new
    gangs are linked to theirs (`policies.kinds.nativegroups`). Asked once, at start: a cluster
    that turns the API on or off is seen by the next `muster run`."""
    try:
        served = client.serves(kubeapi.POD_GROUPS)
    except ApiError as exc:
        logging.warning("cannot tell whether PodGroups are served (%s): not linking gangs", exc)
        return False
    logging.info(
        "PodGroups %s: %s",
        "served" if served else "not served",
        ("new gangs are linked to theirs" if served else "gangs are released by pins alone"),
    )
    return served


def _load_all_owners(client: KubeClient, state: WebhookState) -> None:
    for kind in KINDS.values():
        if made_by_operator(kind):
            _load_owners(client, state, kind)


def _load_owners(client: KubeClient, state: WebhookState, kind: Kind) -> None:
    """The objects of a kind whose operator makes their gang object (a MiniCluster): their
    stamps and, for the limits, that they are pending. Nothing when its API is not served."""
    path = kubeapi.Resource(kind.api.group, kind.api.version, kind.api.plural).path()
    try:
        for body in client.get(path)["items"]:
            state.backlog.observe_owner(kind, None, body)
            stamp = stamp_of(body)
            if stamp:
                meta = body["metadata"]
                state.owner_stamps[(kind.name, meta["namespace"], meta["name"])] = stamp
    except ApiError as exc:
        if exc.status != 404:
            raise


class ManagedJobs:
    """The webhook's stream of managed Jobs into its backlog, followed only while some Queue
    sets `spec.limits`: the backlog serves nothing else, and following every event of every
    managed Job doubled the webhook's CPU in a burst (docs/benchmarks.md, Controller CPU per
    gang). `sync` is called whenever a Queue's limits change (`WebhookState.limits_changed`):
    the first limit starts the stream with a LIST, the last one gone stops it and empties the
    backlog's Jobs."""

    def __init__(
        self, client: KubeClient, state: WebhookState, listed_version: int | None = None
    ) -> None:
        self.client = client
        self.state = state
        self._listed_version = listed_version  # load_state's list of the Jobs (None: none)
        self._lock = threading.Lock()
        self._watch: StreamWatch | None = None

    def start(self) -> None:
        """Follow the Jobs if some Queue sets limits, from `load_state`'s list."""
        self.sync(self._listed_version)

    @property
    def following(self) -> bool:
        return self._watch is not None

    def sync(self, listed_version: int | None = None) -> None:
        """Start or stop the stream as the Queues' limits ask; `listed_version`: the Jobs were
        just listed into the backlog at that version (`load_state`)."""
        with self._lock:
            wanted = bool(self.state.limits)
            if wanted and self._watch is None:
                backlog = self.state.backlog
                self._watch = StreamWatch(
                    self.client,
                    JOBS_PATH,
                    MANAGED_JOBS,
                    apply=backlog.observe_job,
                    relist=lambda items, _version: backlog.relist_jobs(items),
                    lister=list_collection,
                    name="webhook-jobs",
                )
                self._watch.start(listed_version)
                logging.info("following managed Jobs: a Queue sets spec.limits")
            elif not wanted and self._watch is not None:
                watch, self._watch = self._watch, None
                threading.Thread(
                    target=self._stop, args=(watch,), name="muster-webhook-jobs-stop", daemon=True
                ).start()

    def _stop(self, watch: StreamWatch) -> None:
        watch.stop()
        with self._lock:
            if self._watch is None:  # no new stream meanwhile: forget the Jobs it counted
                self.state.backlog.relist_jobs([])
        logging.info("no Queue sets spec.limits: managed Jobs no longer followed")

    def stop(self) -> None:
        with self._lock:
            watch, self._watch = self._watch, None
        if watch is not None:
            watch.stop()


def load_nodes(client: KubeClient, state: WebhookState) -> int | None:
    """One LIST of the Nodes into the never-fits check; the version to watch them on from, or
    None when they cannot be listed (the check then skips its node rule, never refuses)."""
    try:
        items, version = list_collection(client, NODES_PATH)
    except ApiError as exc:
        logging.warning(
            "cannot list nodes (%s); the webhook does not warn of gangs larger than the cluster",
            exc.message,
        )
        return None
    state.never_fits.relist_nodes(items)
    return version


def webhook_view(
    client: KubeClient, devices: DeviceMapping = NO_DEVICES
) -> tuple[WebhookState, list[tuple[StreamWatch, int]], ManagedJobs]:
    """The webhook's state, loaded (`load_state`), with its streams, not started yet: the
    lean ones (`webhook_watches`; with `devices` mapped, the DRA objects': `webhook.devices`),
    each with the version to start from, and the managed Jobs'."""
    state, jobs_version = load_state(client)
    managed_jobs = ManagedJobs(client, state, jobs_version)
    state.limits_changed = managed_jobs.sync
    watches = webhook_watches(client, state)
    if devices:
        state.devices = WebhookDevices(devices, state.never_fits)
        watches += device_watches(client, state.devices)
    return state, watches, managed_jobs


def webhook_watches(client: KubeClient, state: WebhookState) -> list[tuple[StreamWatch, int]]:
    """The webhook's lean streams besides the managed Jobs (`ManagedJobs`), each with the
    version to start from: Nodes into the never-fits check (the planner's view: `node_from`),
    and the pods of pod groups into `WebhookState.members`. Each runs on a thread of its own;
    what they feed is locked."""
    watches: list[tuple[StreamWatch, int]] = [member_pods(client, state)]
    listed = load_nodes(client, state)
    if listed is not None:
        node_watch = StreamWatch(
            client,
            NODES_PATH,
            {},
            apply=state.never_fits.apply_node,
            relist=lambda items, _version: state.never_fits.relist_nodes(items),
            lister=list_collection,
            name="webhook-nodes",
        )
        watches.append((node_watch, listed))
    return watches


def member_pods(client: KubeClient, state: WebhookState) -> tuple[StreamWatch, int]:
    """One LIST of the pods that carry a pod gang's member label into `state.members`, and the
    stream that keeps it current from there."""
    selector = {"labelSelector": ",".join(kind.member_label for kind in POD_GANGS.values())}
    items, version = list_collection(client, PODS_PATH, selector)
    state.members.relist(items)
    watch = StreamWatch(
        client,
        PODS_PATH,
        selector,
        apply=state.members.observe,
        relist=lambda items, _version: state.members.relist(items),
        lister=list_collection,
        name="webhook-member-pods",
    )
    return watch, version
