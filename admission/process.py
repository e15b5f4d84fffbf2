"""One `muster run` process: kopf running the webhook, the queue controller, or both.

`run_process` runs what its `ProcessSettings` ask for in this process, under kopf, until kopf
stops (SIGTERM, SIGINT): the webhook's view loaded and its server put on kopf's registry
(`webhook.startup`, `webhook.loading`), the controller registered (`admission.registration`),
kopf logged in with muster's own credentials and tuned for muster (`tune_kopf`). `run_split`
runs the webhook in a child process instead (`admission.supervisor.WebhookChild`) and the
controller here. kopf's watches keep the webhook's view of namespaces, Queues and
MiniClusters current; with peering only the live replica of highest priority admits.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import kopf

from admission.launcher import free_port
from admission.registration import ServeSettings, ensure_peering, register
from admission.settings import ControllerSettings
from admission.supervisor import WebhookChild, watch_child
from kubeport.credentials import Credentials, kopf_login
from kubeport.kubeapi import KubeClient
from kubeport.streamwatch import StreamWatch
from webhook.loading import ManagedJobs, webhook_view
from webhook.review import WebhookState
from webhook.startup import WebhookServe, WebhookServing, register_webhook, serving_tls


@dataclass(frozen=True)
class ProcessSettings:
    """What one `muster run` process runs, and how (its flags, read)."""

    controller: ControllerSettings | None = None
    """None: no controller here (the webhook alone)."""
    serve: ServeSettings = field(default_factory=ServeSettings)
    """Where the controller's status service and metrics listen."""
    webhook: WebhookServe | None = None
    """None: no webhook here (the controller alone, or a split run's parent)."""
    peering: str | None = None
    """A ClusterKopfPeering name: only the live replica of highest priority admits."""
    priority: int = 1
    peering_lifetime: int = 60
    """Seconds a silent replica still counts as alive."""
    event_loop: Literal["auto", "asyncio", "uvloop"] = "auto"
    """auto: uvloop for the webhook alone, asyncio otherwise (`event_loop`)."""


class PeeringError(RuntimeError):
    """The peering object cannot be made; the message says why and what to do."""


@dataclass
class _WebhookView:
    """The webhook's loaded state and the streams that keep it current (not started yet)."""

    state: WebhookState
    watches: list[tuple[StreamWatch, int]]
    managed_jobs: ManagedJobs | None

    def start(self) -> None:
        for watch, version in self.watches:
            watch.start(version)
        if self.managed_jobs is not None:
            self.managed_jobs.start()

    def stop(self) -> None:
        for watch, _version in self.watches:
            watch.stop()
        if self.managed_jobs is not None:
            self.managed_jobs.stop()


def run_process(
    settings: ProcessSettings, credentials: Credentials, child: WebhookChild | None = None
) -> int:
    """Run what `settings` ask for in this process, under kopf, until kopf stops; with
    `child`, supervise that webhook process meanwhile. Raises `PeeringError`."""
    hook = settings.webhook
    port = (hook.port or free_port(hook.addr)) if hook is not None else 0
    tmp = tempfile.TemporaryDirectory(prefix="muster-webhook-")
    tls = serving_tls(hook, Path(tmp.name)) if hook is not None else ("", "", b"")
    client = KubeClient(credentials)
    view = _WebhookView(WebhookState(), [], None)
    if hook is not None:
        view = _WebhookView(*webhook_view(client, hook.devices))
        if view.state.queues is None:
            logging.warning(
                "Queue CRD not installed (kubectl apply -f manifests/crd/); "
                "queue names are not checked"
            )
    if settings.peering is not None:
        problem = ensure_peering(client, settings.peering)
        if problem:
            client.close()
            tmp.cleanup()
            raise PeeringError(problem)
        logging.info("peering %s with priority %d", settings.peering, settings.priority)
    registry = kopf.OperatorRegistry()
    serving = None
    if hook is not None:
        metrics = register_webhook(registry, hook, client, view.state, port, tls[:2])
        serving = WebhookServing(hook, client, port, tls[2], metrics)
    if settings.controller is not None:
        register(registry, client, settings.controller, settings.serve, peering=settings.peering)
    _start_and_stop(registry, settings, credentials, serving, child)
    view.start()
    try:
        kopf.run(
            loop=event_loop(settings.event_loop, webhook_only=settings.controller is None),
            registry=registry,
            clusterwide=True,
            # The webhook alone never takes part in peering: every replica serves reviews, and
            # kopf would pause the watches that keep its view of the cluster on a standby.
            standalone=settings.peering is None or settings.controller is None,
            peering_name=None if settings.controller is None else settings.peering,
            priority=settings.priority,
        )
    finally:
        view.stop()
        client.close()
        tmp.cleanup()
    return 0


def _start_and_stop(
    registry: kopf.OperatorRegistry,
    process: ProcessSettings,
    credentials: Credentials,
    serving: WebhookServing | None,
    child: WebhookChild | None,
) -> None:
    """kopf's login, and the process's startup and cleanup beside what the webhook and the
    controller registered: kopf tuned, the webhook's serving, the child supervised."""
    # kopf logs in with the same credentials as muster's own client, and their renewal. A
    # private registry gets none of kopf's default login handlers; of those, login_with_kubeconfig
    # reads kubeconfigs by hand (no exec plugins, no tokenFile), and login_via_client runs the
    # official loader but prefers a pod's service account to a given kubeconfig, reads the
    # $KUBECONFIG of import time into the library's global configuration, and knows neither
    # --kubeconfig nor --context.
    kopf.on.login(registry=registry)(kopf_login(credentials))
    stopping = asyncio.Event()  # no webhook child is started again once set
    tasks: list[asyncio.Task[None]] = []  # held, so none is collected while it runs

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        tune_kopf(settings, process)
        if serving is not None:
            await serving.start()
        if child is not None:
            tasks.append(asyncio.get_running_loop().create_task(watch_child(child, stopping)))

    @kopf.on.cleanup(registry=registry)
    async def clean_up(**_: Any) -> None:
        stopping.set()
        if serving is not None:
            await serving.stop()


def run_split(
    settings: ProcessSettings,
    credentials: Credentials,
    child_argv: list[str],
    address: tuple[str, int] | None = None,
) -> tuple[int, int | None]:
    """Run the webhook in a child process (`child_argv`: `muster run` for the webhook alone,
    serving at `address`) and what `settings` ask for here; return this process's exit code
    and the child's.

    Each gets its own interpreter and GIL (see `admission.supervisor`); the child is stopped
    when this process's run ends, whichever way."""
    child = WebhookChild(child_argv, address)
    try:
        code = run_process(settings, credentials, child)
    finally:
        child.stop()
    return code, child.proc.returncode


def event_loop(choice: str, *, webhook_only: bool) -> asyncio.AbstractEventLoop | None:
    """The loop kopf runs in (`--event-loop`); None: kopf makes an asyncio one. auto: uvloop
    for the webhook alone (its watches; reviews are served on threads of their own)."""
    if choice == "auto":
        choice = "uvloop" if webhook_only else "asyncio"
    if choice == "asyncio":
        return None
    import uvloop

    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    return loop


def tune_kopf(settings: kopf.OperatorSettings, process: ProcessSettings) -> None:
    """kopf's settings for muster."""
    settings.posting.level = logging.WARNING
    settings.persistence.finalizer = "muster.dev/finalizer"
    # Only @kopf.on.event handlers watch Jobs and Pods; keep kopf from writing its
    # progress/diff-base annotations anywhere should a change handler ever be added.
    settings.persistence.progress_storage = kopf.StatusProgressStorage(field="status.kopf")
    settings.persistence.diffbase_storage = _NoDiffBase()
    # Bounded per-object workers: kopf starts one per object with an event and keeps it
    # idle_timeout seconds; unbounded, a 10k-Job LIST made 10k workers, each holding its
    # object, at once. With a limit the watch stream waits for a free worker instead.
    settings.queueing.worker_limit = 1000
    settings.queueing.idle_timeout = 1.0
    # kopf's own initial LIST of each watched kind, in pages: all 10k Jobs parsed at once
    # were most of the controller's peak memory (the controller's LIST pages too).
    settings.watching.chunk_size = 500
    settings.watching.server_timeout = 300
    if process.peering is not None:
        settings.peering.lifetime = process.peering_lifetime
        settings.peering.stealth = True


class _NoDiffBase(kopf.DiffBaseStorage):
    """A kopf diff-base storage that keeps nothing and costs nothing.

    muster registers only `@kopf.on.event` watches and daemons, which never look at diffs, yet
    kopf builds each event's "essence" (a deep copy of the whole object) for its diff base:
    about a tenth of muster's CPU during a burst. This storage builds an empty essence instead.
    """

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: Any) -> Any:
        return None

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        return None
