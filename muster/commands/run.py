"""`muster run`: start muster's webhook and queue controller, each under kopf.

By default the webhook runs in a child process and the controller in this one (`--one-process`
puts both in one; `--no-controller` / `--no-webhook` run one of them); a webhook child that dies
is started again (`WebhookChild`). The webhook is served by
`webhook.server` (started from its kopf event loop, serving each connection on a thread;
`--webhook-server kopf`: by kopf's `@kopf.on.mutate` handlers on `kopf.WebhookServer`
instead); kopf's watches keep the webhook's view of namespaces,
Queues and MiniClusters current. `--local` serves it on loopback
with a fresh self-signed CA (or `--tls-cert`/`--tls-key` signed by `--tls-ca`) and writes the
MutatingWebhookConfiguration (url + caBundle) itself once the server accepts connections; it
removes that configuration again on a clean exit. In a cluster, the static manifests carry the
configuration and the certificate comes from a Secret (`--tls-cert`, `--tls-key`). Either way
the webhook serves TLS 1.2 or newer and reloads a renewed certificate without a restart.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import logging
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, cast

from admission import kubeapi
from admission.credentials import Credentials, KubeconfigSource, kopf_login, source_for
from admission.kubeapi import ApiError, KubeClient, KubeconfigError
from admission.launcher import free_port, stop_process
from admission.statusauth import StatusAuth, access_for
from admission.streamwatch import StreamWatch
from policies.vocabulary import QUEUE
from webhook.configuration import NAME as WEBHOOK_CONFIG_NAME
from webhook.configuration import build_configuration
from webhook.decision import WebhookSettings
from webhook.handlers import set_queue, stamp_of
from webhook.review import WebhookState

QUEUES_PATH = kubeapi.QUEUES.path()
JOBS_PATH = kubeapi.JOBS.path()
NODES_PATH = kubeapi.NODES.path()
MANAGED_JOBS = {"labelSelector": QUEUE}
"""The Jobs muster manages, as the controller's watch selects them."""
MINICLUSTERS_PATH = kubeapi.MINICLUSTERS.path()

CONFIG_PATH = kubeapi.WEBHOOK_CONFIGURATIONS.path()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `muster run`. Long because it is one flat list of flags in the order
    `--help` shows them: split up, the help text of one command would be scattered."""
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="cluster to run against (default: the files $KUBECONFIG lists, else "
        "~/.kube/config, else the pod's service account); any kubeconfig kubectl reads",
    )
    parser.add_argument("--context", default=None, help="kubeconfig context (default: current)")
    parser.add_argument(
        "--local",
        action="store_true",
        help="serve the webhook on loopback and register it with url + caBundle (local runs)",
    )
    parser.add_argument("--webhook-addr", default="127.0.0.1", help="listen address")
    parser.add_argument(
        "--webhook-port", type=int, default=0, help="listen port (0: pick a free one)"
    )
    parser.add_argument(
        "--webhook-server",
        choices=("lean", "kopf"),
        default="lean",
        help="lean: muster's own small HTTP/1.1 endpoint (default, about a third of kopf's "
        "CPU per review); kopf: kopf's @kopf.on.mutate handlers. Both call the same pure "
        "decision",
    )
    parser.add_argument(
        "--event-loop",
        choices=("auto", "asyncio", "uvloop"),
        default="auto",
        help="the process's event loop. auto (default): uvloop for a webhook-only process "
        "(--no-controller, what `muster run` starts as its webhook child: its watches; the "
        "reviews are served on threads of their own, off the loop), asyncio otherwise",
    )
    parser.add_argument(
        "--tls-cert",
        help="serving certificate (in-cluster installs); reloaded when the file changes",
    )
    parser.add_argument("--tls-key", help="serving key (in-cluster installs)")
    parser.add_argument(
        "--tls-ca",
        help="with --local and --tls-cert/--tls-key: the CA that signed them, registered as the "
        "webhook configuration's caBundle (default with --local: a fresh CA and certificate)",
    )
    parser.add_argument(
        "--manage-jobs-without-queue-name",
        action="store_true",
        help="also manage Jobs without a muster.dev/queue label (they go to --default-queue)",
    )
    parser.add_argument("--default-queue", default="default")
    parser.add_argument(
        "--peering",
        default=None,
        help="ClusterKopfPeering name for multi-replica exclusivity: only the live replica of "
        "highest priority admits (default: standalone); created if missing",
    )
    parser.add_argument(
        "--priority",
        type=int,
        default=None,
        help="peering priority (default: random, so replicas of one Deployment differ)",
    )
    parser.add_argument(
        "--peering-lifetime",
        type=int,
        default=60,
        help="seconds a silent replica still counts as alive (takeover time after a crash)",
    )
    parser.add_argument(
        "--status-port",
        type=int,
        default=8081,
        help="status service port (/v1/gangs, /v1/queues); 0: pick a free one; -1: off",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=8082,
        help="Prometheus /metrics port; 0: pick a free one; -1: off",
    )
    parser.add_argument(
        "--webhook-metrics-port",
        type=int,
        default=None,
        help="the webhook's own Prometheus /metrics (queue depth, refusals; docs/metrics.md); "
        "0: pick a free one; -1: off (default: 8083, off when --metrics-port is -1, a free one "
        "when it is 0)",
    )
    parser.add_argument("--status-addr", default="127.0.0.1", help="status/metrics address")
    parser.add_argument(
        "--status-auth",
        choices=("kubernetes", "none"),
        default=None,
        help="kubernetes: the status service and the metrics want Authorization: Bearer TOKEN, "
        "checked by TokenReview, and show a caller only the gangs of namespaces where it may "
        "get jobs (SubjectAccessReview; /metrics: get on the URL /metrics); none: anyone reads "
        "everything (default: kubernetes; none with --local)",
    )
    parser.add_argument("--policy", default="drf", help="admission policy (drf, fifo, ...)")
    parser.add_argument(
        "--deadlock-grace",
        type=float,
        default=10.0,
        help="seconds a gang is partially placed before the deadlock detector looks at it",
    )
    parser.add_argument(
        "--no-admit-events",
        action="store_true",
        help="no Event per admission (evictions and failures still get one)",
    )
    parser.add_argument(
        "--no-pin",
        action="store_true",
        help="do not pin admitted gangs to their planned nodes (the scheduler then places their "
        "pods wherever they fit, and what runs may differ from the plan; docs/concepts.md)",
    )
    parser.add_argument(
        "--clog-from-admission",
        action="store_true",
        help="time a clog from the admission, as Kueue's waitForPodsReady, instead of from "
        "when the Job controller started the gang and its pods last advanced (created, bound, "
        "ready) (docs/concepts.md, 'Clogs')",
    )
    parser.add_argument(
        "--estimate-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="least seconds between two background refreshes of the wait-time estimates "
        "(longer when a refresh takes long; 0: no estimates; default 5)",
    )
    parser.add_argument(
        "--no-controller", action="store_true", help="run the webhook only (no admission)"
    )
    parser.add_argument(
        "--no-webhook", action="store_true", help="run the controller only (no webhook server)"
    )
    parser.add_argument(
        "--one-process",
        action="store_true",
        help="serve the webhook in the controller's process (default: a child process, so "
        "admission reviews and plan cycles do not share one interpreter lock)",
    )
    parser.add_argument(
        "--history-limit",
        type=int,
        default=100_000,
        metavar="N",
        help="gangs seen finish or fail that the status service keeps for /v1/history and "
        "`muster history` (the oldest go first; default 100000)",
    )
    parser.add_argument(
        "--fail-rejected-after",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="a gang that can never be admitted (NeverFits, SizeRatioRejected) is marked "
        "Failed, with the reason and an Event, once it has been rejected this long "
        "(default 300)",
    )
    parser.add_argument("--verbose", "-v", action="store_true")
    parser.epilog = (
        "examples:\n"
        "  muster run --local --kubeconfig ~/.cache/muster/clusters/muster/kubeconfig\n"
        "  muster run --tls-cert /tls/tls.crt --tls-key /tls/tls.key --peering muster"
    )


def _wait_for_tls(addr: str, port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    while time.monotonic() < deadline:
        try:
            with (
                socket.create_connection((addr, port), timeout=1) as raw,
                ctx.wrap_socket(raw, server_hostname=addr),
            ):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"webhook server on {addr}:{port} did not start within {timeout:.0f}s")


def register_configuration(client: KubeClient, configuration: dict[str, Any]) -> None:
    """Create or replace muster's MutatingWebhookConfiguration."""
    try:
        current = client.get(f"{CONFIG_PATH}/{WEBHOOK_CONFIG_NAME}")
    except ApiError as exc:
        if exc.status != 404:
            raise
        client.create(CONFIG_PATH, configuration)
        return
    body = dict(configuration)
    body["metadata"] = {
        **configuration["metadata"],
        "resourceVersion": current["metadata"]["resourceVersion"],
    }
    client.request("PUT", f"{CONFIG_PATH}/{WEBHOOK_CONFIG_NAME}", body)


def unregister_configuration(client: KubeClient, url: str) -> bool:
    """Delete muster's MutatingWebhookConfiguration if it still points at `url`.

    Another `muster run --local` may have registered its own server since (a restart racing the
    old process's shutdown); its configuration is left alone. Returns whether one was deleted.
    """
    path = f"{CONFIG_PATH}/{WEBHOOK_CONFIG_NAME}"
    try:
        current = client.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    urls = {
        str((hook.get("clientConfig") or {}).get("url") or "").rsplit("/", 1)[0]
        for hook in current.get("webhooks") or []
    }
    if urls != {url}:
        return False
    preconditions = {"resourceVersion": current["metadata"]["resourceVersion"]}
    try:
        client.request("DELETE", path, {"preconditions": preconditions})
    except ApiError as exc:
        if exc.status in (404, 409):
            return False
        raise
    return True


def load_state(client: KubeClient) -> tuple[WebhookState, int | None]:
    """One LIST each of namespaces, Queues, managed Jobs (in pages, only while some Queue sets
    `spec.limits`: `ManagedJobs`) and MiniClusters (absent CRDs are fine); and the Jobs'
    collection version, to watch them on from (None when they were not listed)."""
    state = WebhookState()
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
        _load_miniclusters(client, state)
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
    _load_miniclusters(client, state)
    return state, jobs_version


def _load_miniclusters(client: KubeClient, state: WebhookState) -> None:
    try:
        for mc in client.get(MINICLUSTERS_PATH)["items"]:
            state.backlog.observe_minicluster(None, mc)
            stamp = stamp_of(mc)
            if stamp:
                state.minicluster_stamps[(mc["metadata"]["namespace"], mc["metadata"]["name"])] = (
                    stamp
                )
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
        from admission.streamwatch import list_collection

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
    from admission.streamwatch import list_collection

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


PEERINGS_PATH = kubeapi.KOPF_PEERINGS.path()


def ensure_peering(client: KubeClient, name: str) -> str | None:
    """Create the ClusterKopfPeering `name` if it is missing; a message if that cannot be."""
    body = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": name}}
    try:
        client.create(PEERINGS_PATH, body)
    except ApiError as exc:
        if exc.status == 409:
            return None
        if exc.status == 404:
            return (
                "--peering needs the ClusterKopfPeering CRD: "
                "kubectl apply -f manifests/crd/clusterkopfpeerings.kopf.dev.yaml"
            )
        return f"cannot create ClusterKopfPeering {name!r}: {exc.message}"
    return None


def _no_diff_base() -> Any:
    """A kopf diff-base storage that keeps nothing and costs nothing.

    muster registers only `@kopf.on.event` watches and daemons, which never look at diffs, yet
    kopf builds each event's "essence" (a deep copy of the whole object) for its diff base:
    about a tenth of muster's CPU during a burst. This storage builds an empty essence instead.
    """
    import kopf

    class NoDiffBase(kopf.DiffBaseStorage):
        def build(self, *, body: Any, extra_fields: Any = None) -> Any:
            return {}

        def fetch(self, *, body: Any) -> Any:
            return None

        def store(self, *, body: Any, patch: Any, essence: Any) -> None:
            return None

    return NoDiffBase()


def webhook_metrics_port(args: argparse.Namespace) -> int:
    """`--webhook-metrics-port`, or its default: as `--metrics-port` is -1 (off) or 0 (a free
    port), else 8083."""
    if args.webhook_metrics_port is not None:
        return int(args.webhook_metrics_port)
    return int(args.metrics_port) if args.metrics_port in (-1, 0) else 8083


def status_auth(args: argparse.Namespace) -> StatusAuth:
    """`--status-auth`, or its default: none for `--local` runs (tests, benches, the demo:
    loopback only), else kubernetes."""
    if args.status_auth is not None:
        return cast("StatusAuth", args.status_auth)
    return "none" if args.local else "kubernetes"


def _webhook_child_argv(args: argparse.Namespace, port: int) -> list[str]:
    """`muster run` for the webhook alone, with this invocation's webhook flags."""
    argv = [sys.executable, "-m", "muster.cli", "run", "--no-controller"]
    argv += ["--webhook-addr", args.webhook_addr, "--webhook-port", str(port)]
    argv += ["--default-queue", args.default_queue, "--status-port", "-1", "--metrics-port", "-1"]
    argv += ["--status-addr", args.status_addr, "--status-auth", status_auth(args)]
    argv += ["--webhook-metrics-port", str(webhook_metrics_port(args))]
    argv += ["--webhook-server", args.webhook_server, "--event-loop", args.event_loop]
    for flag, value in (
        ("--kubeconfig", args.kubeconfig),
        ("--context", args.context),
        ("--tls-cert", args.tls_cert),
        ("--tls-key", args.tls_key),
        ("--tls-ca", args.tls_ca),
    ):
        if value:
            argv += [flag, str(value)]
    for flag, on in (
        ("--local", args.local),
        ("--manage-jobs-without-queue-name", args.manage_jobs_without_queue_name),
        ("--verbose", args.verbose),
    ):
        if on:
            argv.append(flag)
    return argv


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """Ask Linux to kill this (child) process when its parent dies, also by kill -9.

    SIGKILL, not SIGTERM: a parent that died abnormally must leave the webhook configuration in
    place (failurePolicy Fail keeps managed Jobs from being created unsuspended until a new
    muster serves again); a graceful stop removes it through the parent's SIGTERM instead.
    """
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _run_split(args: argparse.Namespace, credentials: Credentials) -> int:
    """The webhook in a child process, the controller in this one.

    Each gets its own interpreter and GIL: a plan cycle never delays an admission review (whose
    latency every `kubectl create` pays), and a burst of reviews never delays a cycle. The child
    dies with this process (SIGKILL from the kernel when this one dies abnormally); a child
    that dies on its own is started again (`WebhookChild`), so the controller, its watches and
    its cache live on through a webhook crash.
    """
    port = args.webhook_port or free_port(args.webhook_addr)
    child = WebhookChild(_webhook_child_argv(args, port))
    controller_args = argparse.Namespace(**{**vars(args), "no_webhook": True})
    try:
        code = _run_one(controller_args, credentials, webhook_child=child)
    finally:
        child.stop()
    if child.proc.returncode not in (0, -signal.SIGTERM) and code == 0:
        print(
            f"muster run: the webhook process exited with {child.proc.returncode}",
            file=sys.stderr,
        )
        return 1
    return code


class WebhookChild:
    """The webhook's child process of a split `muster run`, started again when it dies.

    A webhook that dies (killed, out of memory, a crash) leaves its MutatingWebhookConfiguration
    registered on purpose: with failurePolicy Fail the apiserver then refuses creates in managed
    namespaces ("failed calling webhook") rather than store them unsuspended and unstamped. The
    child is started again with the same command line (same port; with `--local` it registers
    its new certificate), after a backoff: 1 s, doubling to `MAX_BACKOFF`, back to 1 s once a
    child served for `STEADY` seconds. A usage error (exit 2) is not retried: a new child would
    fail the same way, so the parent stops."""

    FIRST_BACKOFF = 1.0
    MAX_BACKOFF = 30.0
    STEADY = 60.0

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.restarts = 0
        self.proc = self._spawn()
        self._started = time.monotonic()

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.argv, preexec_fn=_die_with_parent)

    async def supervise(self, stopping: asyncio.Event) -> None:
        """Restart the child whenever it exits, until `stopping` is set; return when the
        child exited with a usage error (the caller then stops)."""
        backoff = self.FIRST_BACKOFF
        while not stopping.is_set():
            if self.proc.poll() is None:
                await asyncio.sleep(0.5)
                continue
            code = self.proc.returncode
            if code == 2:
                logging.error("the webhook process exited with a usage error (2); stopping")
                return
            if time.monotonic() - self._started >= self.STEADY:
                backoff = self.FIRST_BACKOFF
            logging.error(
                "the webhook process exited (%s); starting it again in %.0fs (restart %d). "
                "Until it serves, the apiserver refuses creates in managed namespaces "
                "(failurePolicy Fail)",
                code,
                backoff,
                self.restarts + 1,
            )
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stopping.wait(), backoff)
            if stopping.is_set():
                return
            self.proc = self._spawn()
            self._started = time.monotonic()
            self.restarts += 1
            logging.warning("webhook process started again (pid %d)", self.proc.pid)
            backoff = min(backoff * 2, self.MAX_BACKOFF)

    def stop(self) -> None:
        stop_process(self.proc)


def run(args: argparse.Namespace) -> int:
    if args.no_controller and args.no_webhook:
        print("muster run: --no-controller and --no-webhook leave nothing to run", file=sys.stderr)
        return 2
    if args.history_limit < 1:
        print("muster run: --history-limit must be at least 1", file=sys.stderr)
        return 2
    if not args.fail_rejected_after >= 0:
        print("muster run: --fail-rejected-after must be 0 or more seconds", file=sys.stderr)
        return 2
    source = source_for(args.kubeconfig, args.context)
    if args.local and not isinstance(source, KubeconfigSource):
        print("muster run --local needs --kubeconfig (or $KUBECONFIG)", file=sys.stderr)
        return 2
    if not args.local and not args.no_webhook and not (args.tls_cert and args.tls_key):
        print("muster run: give --tls-cert and --tls-key (in-cluster), or --local", file=sys.stderr)
        return 2
    tls_given = [bool(value) for value in (args.tls_cert, args.tls_key, args.tls_ca)]
    if args.local and any(tls_given) and not all(tls_given):
        print(
            "muster run --local: give --tls-cert, --tls-key and --tls-ca together (the CA goes "
            "into the webhook configuration's caBundle), or none of them for a fresh CA",
            file=sys.stderr,
        )
        return 2
    try:
        credentials = Credentials.load(source)
    except KubeconfigError as exc:
        print(f"muster run: {exc}", file=sys.stderr)
        return 2
    if not args.no_controller and not args.no_webhook and not args.one_process:
        return _run_split(args, credentials)
    return _run_one(args, credentials)


def _run_one(
    args: argparse.Namespace,
    credentials: Credentials,
    webhook_child: WebhookChild | None = None,
) -> int:
    """Run what `args` asks for (webhook, controller or both) in this process, under kopf."""
    import kopf

    _configure_logging(args)
    webhook = not args.no_webhook
    settings = WebhookSettings(
        manage_jobs_without_queue_name=args.manage_jobs_without_queue_name,
        default_queue=args.default_queue,
    )
    port = args.webhook_port or free_port(args.webhook_addr)
    tmp = tempfile.TemporaryDirectory(prefix="muster-webhook-")
    certfile, keyfile, ca_bundle = _webhook_tls(args, Path(tmp.name)) if webhook else ("", "", b"")
    client = KubeClient(credentials)
    state, watches, managed_jobs = _webhook_view(client, webhook)
    if webhook and state.queues is None:
        logging.warning(
            "Queue CRD not installed (kubectl apply -f manifests/crd/); queue names are not checked"
        )

    priority = args.priority if args.priority is not None else random.randint(1, 2**31 - 1)
    if args.peering is not None:
        problem = ensure_peering(client, args.peering)
        if problem:
            print(f"muster run: {problem}", file=sys.stderr)
            client.close()
            return 2
        logging.info("peering %s with priority %d", args.peering, priority)

    registry = kopf.OperatorRegistry()
    webhook_metrics = None
    if webhook:
        webhook_metrics = _register_webhook(
            registry, args, client, state, settings, port, (certfile, keyfile)
        )
    if not args.no_controller:
        _register_controller(registry, client, args)

    # kopf logs in with the same credentials as muster's own client, and their renewal. A
    # private registry gets none of kopf's default login handlers; of those, login_with_kubeconfig
    # reads kubeconfigs by hand (no exec plugins, no tokenFile), and login_via_client runs the
    # official loader but prefers a pod's service account to a given kubeconfig, reads the
    # $KUBECONFIG of import time into the library's global configuration, and knows neither
    # --kubeconfig nor --context.
    kopf.on.login(registry=registry)(kopf_login(credentials))
    serving = _WebhookServing(
        args, client, settings, port, ca_bundle, webhook_metrics, webhook_child, webhook
    )

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        _tune_kopf(settings, args)
        await serving.start()

    kopf.on.cleanup(registry=registry)(serving.stop)
    for watch, version in watches:
        watch.start(version)
    managed_jobs.start()
    try:
        kopf.run(
            loop=_event_loop(args),
            registry=registry,
            clusterwide=True,
            # The webhook alone never takes part in peering: every replica serves reviews, and
            # kopf would pause the watches that keep its view of the cluster on a standby.
            standalone=args.peering is None or args.no_controller,
            peering_name=None if args.no_controller else args.peering,
            priority=priority,
        )
    finally:
        for watch, _version in watches:
            watch.stop()
        managed_jobs.stop()
        client.close()
        tmp.cleanup()
    return 0


def _event_loop(args: argparse.Namespace) -> asyncio.AbstractEventLoop | None:
    """The loop kopf runs in (`--event-loop`); None: kopf makes an asyncio one."""
    choice = args.event_loop
    if choice == "auto":
        choice = "uvloop" if args.no_controller else "asyncio"
    if choice == "asyncio":
        return None
    import uvloop

    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    return loop


def _register_webhook(
    registry: Any,
    args: argparse.Namespace,
    client: KubeClient,
    state: WebhookState,
    settings: WebhookSettings,
    port: int,
    tls: tuple[str, str],
) -> Any:
    """Put the webhook's server on `registry` (muster's lean one, or kopf's with
    `--webhook-server kopf`); return its metrics server (a webhook.metrics.MetricsServer), or
    None without one."""
    from policies.submitted import SubmissionClock
    from webhook import handlers
    from webhook.metrics import MetricsServer
    from webhook.server import WebhookServer

    if args.webhook_server == "kopf":
        from webhook.serving import ServingCertificate

        # kopf serves the @kopf.on.mutate handlers with muster's certificate (kopf's own
        # self-signed path needs oscrypto); muster writes the configuration, not kopf.
        serving = (args.webhook_addr, port, ServingCertificate(*tls))
        handlers.register_kopf_mutate(registry, state, settings, SubmissionClock(), serving)
    else:
        server = WebhookServer(
            addr=args.webhook_addr,
            port=port,
            certfile=tls[0],
            keyfile=tls[1],
            state=state,
            settings=settings,
            clock=SubmissionClock(),
        )
        handlers.register(registry, server)
    if webhook_metrics_port(args) < 0:
        return None
    return MetricsServer(
        state,
        args.status_addr,
        webhook_metrics_port(args),
        access=access_for(status_auth(args), client),
    )


def _configure_logging(args: argparse.Namespace) -> None:
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        # kopf logs every handled event at INFO: thousands of lines a second in a burst.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)


def _webhook_tls(args: argparse.Namespace, where: Path) -> tuple[str, str, bytes]:
    """(certificate file, key file, CA bundle) the webhook serves with: made here for
    `--local` (unless given with `--tls-ca`), else the files given (the CA bundle is then the
    configuration's business)."""
    from webhook.tls import create_webhook_tls

    if args.local and args.tls_ca:
        return args.tls_cert, args.tls_key, Path(args.tls_ca).read_bytes()
    if args.local:
        tls = create_webhook_tls(where, [args.webhook_addr])
        return str(tls.cert), str(tls.key), tls.ca_bundle
    return args.tls_cert, args.tls_key, b""


def _webhook_view(
    client: KubeClient, webhook: bool
) -> tuple[WebhookState, list[tuple[StreamWatch, int]], ManagedJobs]:
    """The webhook's state, loaded (`load_state`), with its streams, not started yet; empty
    without a webhook."""
    if not webhook:
        return WebhookState(), [], ManagedJobs(client, WebhookState())
    state, jobs_version = load_state(client)
    managed_jobs = ManagedJobs(client, state, jobs_version)
    state.limits_changed = managed_jobs.sync
    return state, _webhook_watches(client, state), managed_jobs


def _webhook_watches(client: KubeClient, state: WebhookState) -> list[tuple[StreamWatch, int]]:
    """The webhook's lean streams besides the managed Jobs (`ManagedJobs`), each with the
    version to start from: Nodes into the never-fits check (the planner's view: `node_from`).
    Each runs on a thread of its own; what they feed is locked."""
    from admission.streamwatch import StreamWatch, list_collection

    watches: list[tuple[StreamWatch, int]] = []
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


def _register_controller(registry: Any, client: KubeClient, args: argparse.Namespace) -> None:
    from admission import controller
    from admission.controller import ServeSettings
    from admission.loop import ControllerSettings

    controller.register(
        registry,
        client,
        ControllerSettings(
            policy=args.policy,
            deadlock_grace=args.deadlock_grace,
            admit_events=not args.no_admit_events,
            estimate_interval=args.estimate_interval,
            pin=not args.no_pin,
            clog_progress=not args.clog_from_admission,
            history_limit=args.history_limit,
            fail_rejected_after=args.fail_rejected_after,
        ),
        ServeSettings(
            status_addr=args.status_addr,
            status_port=None if args.status_port < 0 else args.status_port,
            metrics_port=None if args.metrics_port < 0 else args.metrics_port,
            status_auth=status_auth(args),
        ),
        peering=args.peering,
    )


def _tune_kopf(settings: Any, args: argparse.Namespace) -> None:
    """kopf's settings for muster (`settings` is a kopf.OperatorSettings)."""
    import kopf

    settings.posting.level = logging.WARNING
    settings.persistence.finalizer = "muster.dev/finalizer"
    # Only @kopf.on.event handlers watch Jobs and Pods; keep kopf from writing its
    # progress/diff-base annotations anywhere should a change handler ever be added.
    settings.persistence.progress_storage = kopf.StatusProgressStorage(field="status.kopf")
    settings.persistence.diffbase_storage = _no_diff_base()
    # Bounded per-object workers: kopf starts one per object with an event and keeps it
    # idle_timeout seconds; unbounded, a 10k-Job LIST made 10k workers, each holding its
    # object, at once. With a limit the watch stream waits for a free worker instead.
    settings.queueing.worker_limit = 1000
    settings.queueing.idle_timeout = 1.0
    # kopf's own initial LIST of each watched kind, in pages: all 10k Jobs parsed at once
    # were most of the controller's peak memory (the controller's LIST pages too).
    settings.watching.chunk_size = 500
    settings.watching.server_timeout = 300
    if args.peering is not None:
        settings.peering.lifetime = args.peering_lifetime
        settings.peering.stealth = True


class _WebhookServing:
    """The webhook's side of startup and cleanup: its metrics server, its readiness, the
    configuration `--local` registers (and removes), and the watch on a webhook child.

    Registering and unregistering the configuration never overlap, and nothing is registered
    once stopping began: a muster stopped while it started (SIGTERM a moment after launch) must
    not leave a configuration that points at a webhook that is gone, which with failurePolicy
    Fail would refuse every create in managed namespaces."""

    def __init__(
        self,
        args: argparse.Namespace,
        client: KubeClient,
        settings: WebhookSettings,
        port: int,
        ca_bundle: bytes,
        metrics: Any,
        child: WebhookChild | None,
        webhook: bool,
    ) -> None:
        self.args, self.client, self.settings = args, client, settings
        self.port, self.ca_bundle, self.metrics = port, ca_bundle, metrics
        self.child, self.webhook = child, webhook
        self.registration = asyncio.Lock()
        self.stopping = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []  # held, so none is collected while it runs

    async def start(self) -> None:
        if self.metrics is not None:
            await self.metrics.start()
        loop = asyncio.get_running_loop()
        if self.args.local and self.webhook:
            self.tasks.append(loop.create_task(self._register_when_serving()))
        elif self.webhook and self.metrics is not None:
            self.tasks.append(loop.create_task(self._ready_when_serving()))
        if self.child is not None:
            self.tasks.append(loop.create_task(self._watch_child()))

    async def stop(self, **_: Any) -> None:
        self.stopping.set()  # no webhook child is started again from here on
        if self.metrics is not None:
            await self.metrics.stop()
        if self.args.local and self.webhook:
            async with self.registration:
                await asyncio.to_thread(unregister_configuration, self.client, self._url())

    def _url(self) -> str:
        return f"https://{self.args.webhook_addr}:{self.port}"

    async def _watch_child(self) -> None:
        assert self.child is not None
        await self.child.supervise(self.stopping)
        if not self.stopping.is_set():
            os.kill(os.getpid(), signal.SIGTERM)

    async def _register_when_serving(self) -> None:
        await asyncio.to_thread(_wait_for_tls, self.args.webhook_addr, self.port)
        configuration = build_configuration(
            self.settings,
            url=self._url(),
            ca_bundle=base64.b64encode(self.ca_bundle).decode(),
        )
        async with self.registration:
            if self.stopping.is_set():
                return
            await asyncio.to_thread(register_configuration, self.client, configuration)
        logging.info("webhook registered at %s", self._url())
        metrics = ""
        if self.metrics is not None:
            self.metrics.ready = True
            metrics = f" metrics={self.metrics.url}"
        print(f"muster: webhook ready at {self._url()}{metrics}", flush=True)

    async def _ready_when_serving(self) -> None:
        # In a cluster the configuration is the manifests' to register; serving TLS is ready.
        with contextlib.suppress(TimeoutError):  # not serving: never ready, /healthz says so
            await asyncio.to_thread(_wait_for_tls, self.args.webhook_addr, self.port)
            self.metrics.ready = True
