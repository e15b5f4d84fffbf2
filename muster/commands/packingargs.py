"""The packing options `muster run` and `muster sim` share: `--packing` and
`--packing-gpu-weight` (`policies.packing`)."""

from __future__ import annotations

import argparse

from policies.packing import DEFAULT_GPU_WEIGHT, STRATEGIES, Packing, PackingError

__all__ = ["add_packing_arguments", "packing_from"]


def add_packing_arguments(parser: argparse.ArgumentParser, fallback: str) -> None:
    """``fallback`` says in the help what applies without ``--packing``."""
    parser.add_argument(
        "--packing",
        choices=STRATEGIES,
        default=None,
        help="the order in which the planner offers gangs nodes: lexicographic (least free "
        "first, resource by resource: muster's behaviour before strategies), best-fit (most "
        "allocated first: leaves the most whole nodes free), worst-fit (least allocated "
        "first: spreads), weighted (best fit, a GPU counting --packing-gpu-weight times); "
        f"docs/queue-reference.md, 'Packing' (default: {fallback})",
    )
    parser.add_argument(
        "--packing-gpu-weight",
        type=_gpu_weight,
        default=None,
        metavar="WEIGHT",
        help=f"--packing weighted: a free GPU weighs this many times another resource "
        f"(default {DEFAULT_GPU_WEIGHT:g})",
    )


def _gpu_weight(text: str) -> float:
    try:
        return Packing.parse("weighted", text, "--packing", "--packing-gpu-weight").gpu_weight
    except PackingError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def packing_from(args: argparse.Namespace) -> Packing | None:
    """The packing the options ask for; None without ``--packing``."""
    if args.packing_gpu_weight is not None and args.packing != "weighted":
        raise PackingError("--packing-gpu-weight: only with --packing weighted")
    if args.packing is None:
        return None
    return Packing.parse(args.packing, args.packing_gpu_weight, "--packing")
