"""`muster cluster build|up|down|env|status`: the local control plane from the command line."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from simulator.controlplane.build import BuildError, ensure_built, ensure_helm
from simulator.controlplane.cluster import LocalCluster
from simulator.controlplane.dra import FAKE_GPU, DeviceShape
from simulator.controlplane.errors import ClusterError
from simulator.controlplane.features import parse_feature_gates
from simulator.controlplane.nodes import NodeShape
from simulator.controlplane.operators import (
    OPERATORS,
    SOURCES_ENV,
    Operator,
    ensure_operators,
    parse_operators,
    sources_root,
)


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _add_name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--name", default="muster", help="cluster name (state dir and logs); default: muster"
    )


def _add_operators(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--operators",
        default=default,
        metavar="LIST",
        help=(
            "real operators beside the control plane, built from their sources in "
            f"../shared/src (or ${SOURCES_ENV}): jobset, flux (comma-separated), "
            f"`available` (those whose source is there) or `none`; default: {default}"
        ),
    )


def _operators(text: str) -> list[Operator]:
    try:
        return parse_operators(text)
    except ValueError as exc:
        raise ClusterError(str(exc)) from None


def _parse_labels(values: list[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise ClusterError(f"--label {value!r}: expected KEY=VALUE, e.g. --label zone=a")
        labels[key] = val
    return labels


class Build:
    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        _add_operators(parser, "available")
        parser.epilog = (
            "Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and\n"
            "kwok from their Go modules into ~/.cache/muster (or $MUSTER_CACHE), keyed by\n"
            "version, helm (for the chart in charts/muster), and the operators whose sources\n"
            "are in ../shared/src (the JobSet controller, the Flux Operator; keyed by version\n"
            "and a digest of the source).\n"
            "A no-op when the binaries are already there.\n\nexamples:\n"
            "  muster cluster build\n  muster cluster build --operators none"
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        started = time.monotonic()
        try:
            operators = _operators(args.operators)
            binaries = ensure_built(log=_err)
            ensure_helm(log=_err)
            ensure_operators(operators, log=_err)
        except (BuildError, ClusterError) as exc:
            _err(f"muster cluster build: {exc}")
            return 1
        if args.operators == "available":
            absent = [name for name in OPERATORS if OPERATORS[name] not in operators]
            if absent:
                where = sources_root()
                _err(f"no source in {where} of {', '.join(absent)}: not built")
        _err(
            f"control-plane binaries ready in {binaries.kube_apiserver.parent.parent.parent} "
            f"({time.monotonic() - started:.1f}s)"
        )
        return 0


class Up:
    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        _add_name(parser)
        parser.add_argument("--nodes", type=int, default=0, help="kwok fake nodes to create")
        parser.add_argument("--cpu", default="32", help="cpu per node (quantity); default 32")
        parser.add_argument("--memory", default="256Gi", help="memory per node; default 256Gi")
        parser.add_argument("--pods", default="110", help="pods per node; default 110")
        parser.add_argument(
            "--gpu", default=None, help="nvidia.com/gpu per node (omit for CPU-only nodes)"
        )
        parser.add_argument(
            "--devices",
            type=int,
            default=0,
            metavar="N",
            help="DRA devices per node: a ResourceSlice of N devices of the fake driver "
            "gpu.muster.dev (gpu-0.., attributes model and memory), and the DeviceClass "
            "gpu.muster.dev selecting them (docs/devices.md); default 0: none",
        )
        parser.add_argument(
            "--label",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="extra node label (repeatable)",
        )
        parser.add_argument(
            "--group", default="default", help="node group name (nodes are kwok-<group>-<i>)"
        )
        _add_operators(parser, "none")
        parser.add_argument(
            "--feature-gates",
            action="append",
            default=[],
            metavar="GATE=true,...",
            help="Kubernetes feature gates for every component that takes them (repeatable); "
            "checked against the components before anything starts",
        )
        parser.epilog = (
            "Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok on\n"
            "loopback (building them first if needed), and the --operators beside them (their\n"
            "CRDs installed, JobSet's webhooks registered). On a running cluster it only adds\n"
            "the missing nodes and operators. --feature-gates goes to the apiserver, the\n"
            "controller manager and the scheduler (each gets the gates it knows); a gate whose\n"
            "API is in a version not served by default also turns that version on\n"
            "(GenericWorkload: --runtime-config=scheduling.k8s.io/v1beta1=true). `status` shows\n"
            "them.\n\nexamples:\n  muster cluster up --nodes 1000\n"
            "  muster cluster up --nodes 8 --cpu 8 --memory 30Gi --label zone=a --group a\n"
            "  muster cluster up --nodes 100 --operators jobset,flux\n"
            "  muster cluster up --name dra --nodes 8 --devices 8 --group gpu\n"
            "  muster cluster up --name gangs --nodes 16 --feature-gates GenericWorkload=true\n"
            '  eval "$(muster cluster env)"; kubectl get nodes'
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        if args.nodes < 0 or args.devices < 0:
            _err("muster cluster up: --nodes and --devices must be >= 0")
            return 2
        cluster = LocalCluster(name=args.name, log=_err)
        try:
            shape = NodeShape(
                cpu=args.cpu,
                memory=args.memory,
                pods=args.pods,
                extended={"nvidia.com/gpu": args.gpu} if args.gpu else {},
                labels=_parse_labels(args.label),
                devices=DeviceShape(args.devices, attributes=FAKE_GPU) if args.devices else None,
            )
            gates = parse_feature_gates(args.feature_gates) if args.feature_gates else None
            cluster.up(
                nodes=args.nodes,
                shape=shape,
                group=args.group,
                operators=_operators(args.operators),
                feature_gates=gates,
            )
        except (BuildError, ClusterError) as exc:
            _err(f"muster cluster up: {exc}")
            return 1
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        return 0


class Down:
    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        _add_name(parser)
        parser.epilog = (
            "Stops exactly the processes `up` started and removes the state dir.\n\n"
            "examples:\n  muster cluster down\n  muster cluster down --name dev"
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        LocalCluster(name=args.name, log=_err).down()
        return 0


class Env:
    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        _add_name(parser)
        parser.epilog = 'example:\n  eval "$(muster cluster env)"'

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        cluster = LocalCluster(name=args.name, log=_err)
        if not cluster.kubeconfig.exists():
            _err(f"cluster {args.name!r} is not running: start it with `muster cluster up`")
            return 1
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        return 0


class Status:
    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        _add_name(parser)
        from muster.view import add_output_argument

        add_output_argument(parser)
        parser.epilog = (
            "Shows versions and each component's pid, port and log; exits 1 when the cluster\n"
            "is not healthy.\n\n"
            "examples:\n  muster cluster status\n  muster cluster status --name dev -o json"
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from muster.view import dump

        status = LocalCluster(name=args.name, log=_err).status()
        if args.output != "table":
            print(dump(status, args.output))
        else:
            _print_status(status)
        return 0 if status["healthy"] else 1


def _print_status(status: dict[str, Any]) -> None:
    state = "healthy" if status["healthy"] else "not running"
    print(f"cluster {status['name']}: {state}")
    print(f"  state dir:  {status['state_dir']}")
    print(f"  kubeconfig: {status['kubeconfig'] or '-'}")
    versions = dict(status["versions"])
    print(
        f"  versions:   kubernetes {versions.pop('kubernetes')}, etcd {versions.pop('etcd')}, "
        f"kwok {versions.pop('kwok')}"
    )
    if versions:
        print(f"  operators:  {', '.join(f'{name} {v}' for name, v in versions.items())}")
    gates = status.get("featureGates") or {}
    described = ", ".join(f"{g}={'true' if on else 'false'}" for g, on in gates.items())
    print(f"  gates:      {described or 'none'}")
    if status.get("runtimeConfig"):
        print(f"  apis:       {' '.join(status['runtimeConfig'])}")
    for c in status["components"]:
        running = "running" if c["running"] else "EXITED"
        print(
            f"  {c['component']:<24} pid {c['pid']:<8} {running:<8} "
            f"port {c['port'] or '-':<6} log {c['log']}"
        )


SUBCOMMANDS = {"build": Build, "up": Up, "down": Down, "env": Env, "status": Status}
