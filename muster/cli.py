"""The `muster` command line (also installed as `kubectl-muster`).

Each command has its own module, in muster/commands/ (or muster/bench/ for `muster bench ...`),
which holds its arguments and output; the work is done in the packages below. This file only
wires names to modules. A command module exposes `add_arguments(parser)` and
`run(args) -> int` (or a `SUBCOMMANDS` dict of objects that do, for sibling commands). Only the
module of the command being run is imported, so `muster --help` stays fast and one broken module
cannot break every command.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from muster import __version__


@dataclass(frozen=True)
class Command:
    """One leaf subcommand: its words on the command line, the module that runs it, its help."""

    words: tuple[str, ...]
    module: str
    help: str


COMMANDS: tuple[Command, ...] = (
    Command(("sim",), "muster.commands.sim", "replay a trace in the in-process simulator"),
    Command(("run",), "muster.commands.run", "run muster's webhook and controller"),
    Command(("cluster", "build"), "muster.commands.cluster", "build control-plane binaries"),
    Command(("cluster", "up"), "muster.commands.cluster", "start a local control plane"),
    Command(("cluster", "down"), "muster.commands.cluster", "stop the local control plane"),
    Command(("cluster", "env"), "muster.commands.cluster", "print KUBECONFIG exports"),
    Command(("cluster", "status"), "muster.commands.cluster", "show components and logs"),
    Command(("bench", "apiserver"), "muster.bench.apiserver", "raw Job PATCH throughput"),
    Command(
        ("bench", "webhook"), "muster.bench.webhook", "Job-create latency with/without webhook"
    ),
    Command(
        ("bench", "admit"), "muster.bench.admit", "gangs admitted per second by the controller"
    ),
    Command(
        ("bench", "pipeline"),
        "muster.bench.pipeline",
        "Jobs/s and create-to-running with muster against none, alternating",
    ),
    Command(
        ("bench", "status-estimate"),
        "muster.bench.status_estimate",
        "status service latency of a wait-time estimate with a large backlog",
    ),
    Command(
        ("bench", "status"),
        "muster.bench.status",
        "status service at scale: long-poll latency, wake-ups, apiserver requests",
    ),
    Command(("bench", "plan"), "muster.bench.plan", "time policies.plan on a synthetic burst"),
    Command(("bench", "sim"), "muster.bench.sim", "time the in-process simulator on a burst"),
    Command(
        ("bench", "estimate"),
        "muster.bench.estimate",
        "wait-time estimates vs. actual starts, replaying a trace",
    ),
    Command(
        ("bench", "kueue-perf"),
        "muster.bench.kueue_perf",
        "Kueue's scheduler benchmark run against muster, with Kueue's metrics",
    ),
    Command(
        ("bench", "kwok"),
        "muster.bench.kwok",
        "kwok engine: agreement with in-process, pods/s end to end",
    ),
    Command(("trace", "burst"), "muster.commands.trace", "generate a synthetic burst trace"),
    Command(
        ("trace", "from-kueue-perf"),
        "muster.commands.trace_kueue",
        "Kueue's scheduler benchmark (its generator.yaml) as a trace",
    ),
    Command(
        ("trace", "family"),
        "muster.commands.tracefamily",
        "generate a family of traces, one per seed, for muster sim --family",
    ),
    Command(
        ("sweep",), "muster.commands.sweep", "find the smallest cluster meeting a wait-time SLO"
    ),
    Command(("queues",), "muster.commands.queues", "list queues: pending, admitted, usage, share"),
    Command(("status",), "muster.commands.status", "show where one gang stands"),
    Command(("explain",), "muster.commands.explain", "explain why a gang is pending"),
    Command(
        ("history",), "muster.commands.history", "gangs that finished or failed (gangs.csv columns)"
    ),
    Command(("certs",), "muster.commands.certs", "write a self-signed webhook Secret and caBundle"),
    Command(
        ("image", "build"), "muster.commands.image", "build the container image (no daemon needed)"
    ),
    Command(("image", "lock"), "muster.commands.image", "pin the image's Python dependencies"),
)

# The epilog of `muster --help` and of each group's `--help` (leaves set their own in
# add_arguments). Every example must parse: tests/unit/test_cli.py checks each one.
EXAMPLES: dict[tuple[str, ...], str] = {
    (): (
        "examples:\n"
        "  muster sim                                   # replay the shipped blog-burst trace\n"
        "  muster trace burst --jobs 200 --nodes 149 --out burst.yaml\n"
        "  muster cluster up --nodes 100\n"
        "  muster run --local --kubeconfig ~/.cache/muster/clusters/muster/kubeconfig\n"
        "  muster queues\n"
        "  muster cluster up --help                     # every command has --help"
    ),
    ("cluster",): (
        "examples:\n"
        "  muster cluster build\n"
        "  muster cluster up --nodes 100\n"
        '  eval "$(muster cluster env)"; kubectl get nodes\n'
        "  muster cluster status\n"
        "  muster cluster down"
    ),
    ("bench",): (
        "examples:\n"
        "  muster bench plan --pending 1000 --json      # no cluster needed\n"
        "  muster bench sim --gangs 1000 --nodes 100    # no cluster needed\n"
        "  muster bench apiserver --json\n"
        "  muster bench kwok --help"
    ),
    ("image",): (
        "examples:\n"
        "  muster image build                           # as root; cached by its inputs\n"
        "  muster image build --out dist/\n"
        "  muster image lock                            # after changing the dependencies"
    ),
    ("trace",): (
        "examples:\n"
        "  muster trace burst --jobs 200 --sizes 1,8,64 --queues a,b,c --nodes 149 "
        "--out burst.yaml\n"
        "  muster trace from-kueue-perf generator.yaml --out kueue.yaml\n"
        "  muster sim burst.yaml\n"
        "  muster trace family --seed-range 1-50 --out out/family\n"
        "  muster sim --family out/family"
    ),
}


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The full parser; only the leaf that `argv` selects gets its real arguments."""
    selected = _selected(argv)
    parser = argparse.ArgumentParser(
        prog="muster",
        description="Gang-aware queue admission for Kubernetes.",
        epilog=EXAMPLES[()],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"muster {__version__}")
    root = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict[tuple[str, ...], argparse._SubParsersAction[argparse.ArgumentParser]] = {(): root}
    for command in COMMANDS:
        for depth in range(1, len(command.words)):
            prefix = command.words[:depth]
            if prefix not in groups:
                group = groups[prefix[:-1]].add_parser(
                    prefix[-1],
                    help=f"{prefix[-1]} commands",
                    epilog=EXAMPLES.get(prefix),
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                )
                groups[prefix] = group.add_subparsers(dest="_".join(prefix), metavar="COMMAND")
                group.set_defaults(_group=group)
        leaf = groups[command.words[:-1]].add_parser(
            command.words[-1],
            help=command.help,
            description=command.help,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        leaf.set_defaults(_command=command)
        if command is selected:
            _module(command).add_arguments(leaf)
    return parser


def _selected(argv: Sequence[str]) -> Command | None:
    words = [a for a in argv if not a.startswith("-")]
    for command in COMMANDS:
        if tuple(words[: len(command.words)]) == command.words:
            return command
    return None


def _module(command: Command) -> CommandModule:
    module = importlib.import_module(command.module)
    if command.words[-1] in getattr(module, "SUBCOMMANDS", {}):
        # One module may serve several sibling commands (cluster up/down/...).
        return module.SUBCOMMANDS[command.words[-1]]  # type: ignore[no-any-return]
    return cast(CommandModule, module)


class CommandModule(Protocol):
    """What a command module (or an entry of its SUBCOMMANDS) provides."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    command: Command | None = getattr(args, "_command", None)
    if command is None:
        group: argparse.ArgumentParser = getattr(args, "_group", parser)
        group.print_help()
        return 2
    from kubeport.kubeapi import ApiError, ApiUnreachable, KubeconfigError

    try:
        return _module(command).run(args)
    except KeyboardInterrupt:
        print("muster: interrupted", file=sys.stderr)
        return 130
    except (KubeconfigError, ApiUnreachable) as exc:
        # What admins hit first (no such context, a server that does not answer): one line
        # that names the cause, from any command that did not say it its own way.
        print(f"muster {' '.join(command.words)}: {exc}", file=sys.stderr)
        return 1
    except ApiError as exc:
        if exc.status not in (401, 403):
            raise
        print(f"muster {' '.join(command.words)}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
