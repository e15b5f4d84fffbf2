"""`muster run`: start muster's webhook and queue controller, each under kopf.

By default the webhook runs in a child process and the controller in this one (`--one-process`
puts both in one; `--no-controller` / `--no-webhook` run one of them); a webhook child that dies
is started again (`admission.supervisor.WebhookChild`). The webhook is served by
`webhook.server` (started from its kopf event loop, serving each connection on a thread;
`--webhook-server kopf`: by kopf's `@kopf.on.mutate` handlers on `kopf.WebhookServer`
instead); kopf's watches keep the webhook's view of namespaces,
Queues and MiniClusters current. `--local` serves it on loopback
with a fresh self-signed CA (or `--tls-cert`/`--tls-key` signed by `--tls-ca`) and writes the
MutatingWebhookConfiguration (url + caBundle) itself once the server accepts connections; it
removes that configuration again on a clean exit. In a cluster, the static manifests carry the
configuration and the certificate comes from a Secret (`--tls-cert`, `--tls-key`). Either way
the webhook serves TLS 1.2 or newer and reloads a renewed certificate without a restart.

This module reads the flags into `admission.process.ProcessSettings` and says what went wrong;
the process itself is `admission.process` (`run_process`, `run_split`).
"""

from __future__ import annotations

import argparse
import logging
import random
import signal
import sys
from typing import Literal, cast

from admission.launcher import free_port
from admission.process import PeeringError, ProcessSettings, run_process, run_split
from admission.registration import ServeSettings
from admission.settings import ControllerSettings
from admission.supervisor import die_with_parent
from kubeport.credentials import Credentials, KubeconfigSource, source_for
from kubeport.kubeapi import KubeconfigError
from kubeport.statusauth import StatusAuth
from muster.commands.packingargs import add_packing_arguments, packing_from
from policies.devices import DeviceMapping
from policies.model import PolicyError
from policies.packing import DEFAULT_PACKING, PackingError
from policies.topology import NO_TOPOLOGY, Topology, TopologyError
from webhook.decision import WebhookSettings
from webhook.startup import WebhookServe


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
        "--topology-levels",
        type=_topology_levels,
        default=NO_TOPOLOGY,
        metavar="LEVELS",
        help="the cluster's topology levels, node label keys outermost first, e.g. "
        "block,rack,kubernetes.io/hostname: gangs asking for muster.dev/topology-required or "
        "-preferred are placed within their domains (docs/queue-reference.md, 'Topology'); "
        "default none: those requests are not looked at",
    )
    add_packing_arguments(parser, "lexicographic")
    parser.add_argument(
        "--device-class",
        dest="device_classes",
        action="append",
        default=[],
        metavar="CLASS=RESOURCE",
        help="count the DRA devices of DeviceClass CLASS as resource RESOURCE (repeatable), "
        "e.g. gpu.nvidia.com=muster.dev/gpu: the claims of gangs, the quota of Queues and the "
        "ResourceSlices of nodes then name it like an extended resource (docs/devices.md); "
        "default none: claims are not counted",
    )
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
    argv += device_mapping(args).flags()
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


def run(args: argparse.Namespace) -> int:
    die_with_parent()  # a split run's webhook child: first thing (see the function)
    if args.no_controller and args.no_webhook:
        print("muster run: --no-controller and --no-webhook leave nothing to run", file=sys.stderr)
        return 2
    if args.history_limit < 1:
        print("muster run: --history-limit must be at least 1", file=sys.stderr)
        return 2
    if not args.fail_rejected_after >= 0:
        print("muster run: --fail-rejected-after must be 0 or more seconds", file=sys.stderr)
        return 2
    try:
        packing_from(args)
        device_mapping(args)
    except (PackingError, PolicyError) as exc:
        print(f"muster run: {exc}", file=sys.stderr)
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
    _configure_logging(args)
    try:
        if not args.no_controller and not args.no_webhook and not args.one_process:
            return _run_split(args, credentials)
        return run_process(process_settings(args), credentials)
    except PeeringError as exc:
        print(f"muster run: {exc}", file=sys.stderr)
        return 2


def _run_split(args: argparse.Namespace, credentials: Credentials) -> int:
    """The webhook in a child process (`muster run --no-controller` with this invocation's
    webhook flags), the controller in this one (`admission.process.run_split`)."""
    port = args.webhook_port or free_port(args.webhook_addr)
    controller_args = argparse.Namespace(**{**vars(args), "no_webhook": True})
    code, child_code = run_split(
        process_settings(controller_args),
        credentials,
        _webhook_child_argv(args, port),
        (args.webhook_addr, port),
    )
    if child_code not in (0, -signal.SIGTERM) and code == 0:
        print(f"muster run: the webhook process exited with {child_code}", file=sys.stderr)
        return 1
    return code


def _topology_levels(text: str) -> Topology:
    """`--topology-levels`: comma-separated node label keys, checked as the planner reads them."""
    try:
        return Topology.parse([level for level in text.split(",") if level.strip()])
    except TopologyError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def device_mapping(args: argparse.Namespace) -> DeviceMapping:
    """`--device-class` entries as one mapping; PolicyError naming a bad one."""
    return DeviceMapping.parse(args.device_classes)


def process_settings(args: argparse.Namespace) -> ProcessSettings:
    """What `args` ask one process to run: the controller's settings and where it serves,
    the webhook's, peering (a random priority unless given) and the event loop."""
    controller = ControllerSettings(
        policy=args.policy,
        topology=args.topology_levels,
        packing=packing_from(args) or DEFAULT_PACKING,
        deadlock_grace=args.deadlock_grace,
        admit_events=not args.no_admit_events,
        estimate_interval=args.estimate_interval,
        pin=not args.no_pin,
        clog_progress=not args.clog_from_admission,
        history_limit=args.history_limit,
        fail_rejected_after=args.fail_rejected_after,
        devices=device_mapping(args),
    )
    return ProcessSettings(
        controller=None if args.no_controller else controller,
        serve=ServeSettings(
            status_addr=args.status_addr,
            status_port=None if args.status_port < 0 else args.status_port,
            metrics_port=None if args.metrics_port < 0 else args.metrics_port,
            status_auth=status_auth(args),
        ),
        webhook=None if args.no_webhook else _webhook_serve(args),
        peering=args.peering,
        priority=args.priority if args.priority is not None else random.randint(1, 2**31 - 1),
        peering_lifetime=args.peering_lifetime,
        event_loop=cast('Literal["auto", "asyncio", "uvloop"]', args.event_loop),
    )


def _webhook_serve(args: argparse.Namespace) -> WebhookServe:
    return WebhookServe(
        decision=WebhookSettings(
            manage_jobs_without_queue_name=args.manage_jobs_without_queue_name,
            default_queue=args.default_queue,
        ),
        addr=args.webhook_addr,
        port=args.webhook_port,
        server=cast('Literal["lean", "kopf"]', args.webhook_server),
        local=args.local,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_ca=args.tls_ca,
        metrics_addr=args.status_addr,
        metrics_port=webhook_metrics_port(args),
        status_auth=status_auth(args),
        devices=device_mapping(args),
    )


def _configure_logging(args: argparse.Namespace) -> None:
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        # kopf logs every handled event at INFO: thousands of lines a second in a burst.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
