"""`muster cluster build|up|down|env|status`: the local control plane from the command line."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from simulator.controlplane.build import BuildError, ensure_built
from simulator.controlplane.cluster import ClusterError, LocalCluster, NodeShape


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _add_name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--name", default="muster", help="cluster name (state dir and logs); default: muster"
    )


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
        parser.epilog = (
            "Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and\n"
            "kwok from their Go modules into ~/.cache/muster (or $MUSTER_CACHE), keyed by\n"
            "version.\n"
            "A no-op when the binaries are already there.\n\nexample:\n  muster cluster build"
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        started = time.monotonic()
        try:
            binaries = ensure_built(log=_err)
        except BuildError as exc:
            _err(f"muster cluster build: {exc}")
            return 1
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
            "--label",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="extra node label (repeatable)",
        )
        parser.add_argument(
            "--group", default="default", help="node group name (nodes are kwok-<group>-<i>)"
        )
        parser.epilog = (
            "Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok on\n"
            "loopback (building them first if needed). On a running cluster it only adds the\n"
            "missing nodes.\n\nexamples:\n  muster cluster up --nodes 1000\n"
            "  muster cluster up --nodes 8 --cpu 8 --memory 30Gi --label zone=a --group a\n"
            '  eval "$(muster cluster env)"; kubectl get nodes'
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        if args.nodes < 0:
            _err("muster cluster up: --nodes must be >= 0")
            return 2
        cluster = LocalCluster(name=args.name, log=_err)
        try:
            shape = NodeShape(
                cpu=args.cpu,
                memory=args.memory,
                pods=args.pods,
                extended={"nvidia.com/gpu": args.gpu} if args.gpu else {},
                labels=_parse_labels(args.label),
            )
            cluster.up(nodes=args.nodes, shape=shape, group=args.group)
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
    versions = status["versions"]
    print(
        f"  versions:   kubernetes {versions['kubernetes']}, etcd {versions['etcd']}, "
        f"kwok {versions['kwok']}"
    )
    for c in status["components"]:
        running = "running" if c["running"] else "EXITED"
        print(
            f"  {c['component']:<24} pid {c['pid']:<8} {running:<8} "
            f"port {c['port'] or '-':<6} log {c['log']}"
        )


SUBCOMMANDS = {"build": Build, "up": Up, "down": Down, "env": Env, "status": Status}
