"""`muster status NS/NAME`: where one gang stands: state, queue, position, admission, evictions,
and, while it waits, the planner's reason and its expected start
(policies/estimate.py). Reads the status service or the API (muster/view.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from muster.view import (
    ViewError,
    add_output_argument,
    add_source_arguments,
    close_view,
    dump,
    open_view,
    parse_gang,
)
from policies.durations import format_duration


def add_gang_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "gang", metavar="NS/NAME", help="the gang's Job (or MiniCluster): NAMESPACE/NAME, or NAME"
    )
    parser.add_argument(
        "--namespace", "-n", default=None, help="namespace when GANG is only a NAME (default)"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_gang_arguments(parser)
    add_output_argument(parser)
    add_source_arguments(parser, plans=True)
    parser.epilog = (
        "States: Pending (waits for admission; position = its place in its queue),\n"
        "BackingOff (evicted, requeued later), Admitted (unsuspended, fewer than min pods\n"
        "ready), Running, Finished, Failed (backoff limit reached). Without --status-url the\n"
        "answer is computed from the API as the controller would (see `muster explain`).\n"
        "\nexamples:\n"
        "  muster status team-a/train-64\n"
        "  muster status train-64 -n team-a --status-url http://localhost:8081\n"
        "  muster status team-a/train-64 -o json | jq -r .state\n"
        "  kubectl muster status team-a/train-64"
    )


def gang_label(body: Mapping[str, Any]) -> str:
    """`Job, 64 pods (min 48)`."""
    size, minimum = body.get("size"), body.get("min")
    text = f"{body.get('kind') or 'Job'}, {size} pod{'' if size == 1 else 's'}"
    return text + (f" (min {minimum})" if minimum is not None and minimum != size else "")


def _in(seconds: float) -> str:
    return "now" if seconds < 1 else f"~{format_duration(seconds)}"


def estimate_text(body: Mapping[str, Any]) -> str | None:
    """`in ~4m (between 2m and 9m)`, or `unknown — why`; None when the body has no estimate."""
    found = body.get("estimate")
    if not isinstance(found, Mapping):
        return None
    if found.get("unknown"):
        return f"unknown \u2014 {found['unknown']}"
    start = float(found.get("startsInSeconds") or 0.0)
    if start < 1:
        text = "now: the planner admits it at the controller's next cycle"
    else:
        text = f"in ~{format_duration(start)} ({found.get('expectedStart')})"
    earliest = float(found.get("earliestInSeconds") or 0.0)
    latest = found.get("latestInSeconds")
    if latest is None:
        return f"{text} (between {_in(earliest)} and later)"
    if round(earliest) == round(start) == round(float(latest)):
        return text
    return f"{text} (between {_in(earliest)} and {_in(float(latest))})"


def status_lines(body: Mapping[str, Any], source: str) -> list[tuple[str, str]]:
    """(field, value) pairs for the table output, in reading order."""
    state = str(body.get("state"))
    queue = body.get("queue") or "-"
    lines = [
        ("gang", str(body.get("gang"))),
        ("kind", gang_label(body)),
        ("queue", queue),
        ("state", state),
    ]
    if body.get("position") is not None:
        lines.append(("position", f"{body['position']} in queue {queue}"))
    admitted = body.get("admittedAt")
    lines.append(
        ("admitted", f"{admitted} at {body.get('admittedSize')} pods" if admitted else "-")
    )
    lines.append(("evictions", str(body.get("evictions", 0))))
    lines.append(("preemptions", str(body.get("preemptions", 0))))
    reason = body.get("reason")
    if reason:
        lines.append(("reason", f"{reason.get('code')}: {reason.get('message')}"))
    if body.get("rejected"):
        lines.append(("rejected", "yes: it can never be admitted as it is (see the reason)"))
    expected = estimate_text(body)
    if expected is not None:
        lines.append(("expected start", expected))
    if body.get("admitNow") is not None:
        lines.append(
            (
                "plan",
                f"the planner admits it now at {body['admitNow']} pods; the controller does so "
                "at its next cycle",
            )
        )
    lines.append(
        (
            "pods",
            f"{body.get('ready', 0)} ready, {body.get('podsBound', 0)} bound to nodes, "
            f"{body.get('podsWaiting', 0)} not scheduled yet",
        )
    )
    lines.append(("source", source))
    return lines


def render(lines: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in lines) + 2
    return "\n".join(f"{(k + ':').ljust(width)}{v}" for k, v in lines)


def run(args: argparse.Namespace) -> int:
    try:
        namespace, name = parse_gang(args.gang, args.namespace)
        view = open_view(args)
        try:
            body = view.gang(namespace, name)
        finally:
            close_view(view)
    except ViewError as exc:
        print(f"muster status: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.output == "table":
        print(render(status_lines(body, view.source.describe())))
    else:
        print(dump({**body, "source": view.source.as_dict()}, args.output))
    return 0
