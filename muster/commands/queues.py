"""`muster queues`: every queue with its pending and admitted gangs, usage against quota, share.

Rows come from the status service's `/v1/queues` body (or the same body computed from the API;
see muster/view.py) and are laid out as the cohort tree: a cohort's children are indented under
it, and a cohort's counts and usage are the sums over the queues below it.
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
    table,
)
from policies import QuantityError, format_quantity, parse_quantity


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_output_argument(parser)
    add_source_arguments(parser, plans=False)
    parser.epilog = (
        "Columns: PENDING and ADMITTED count gangs (a cohort: of all queues below it);\n"
        "USAGE/QUOTA is, per resource, what admitted gangs hold against the queue's nominal\n"
        "quota (a cohort: the nominal quota of all queues below it and its own); '-': no\n"
        "quota of its own: unlimited, or only what it borrows in a cohort.\n"
        "SHARE is the weighted dominant share of the cluster (DRF admits the lowest first).\n"
        "\nexamples:\n"
        "  muster queues                                   # read the API with $KUBECONFIG\n"
        "  muster queues --status-url http://localhost:8081\n"
        "  muster queues -o json | jq '.queues[] | select(.pending > 0) | .name'\n"
        "  kubectl muster queues -o yaml"
    )


def amounts(values: Mapping[str, Any] | None, where: str) -> dict[str, int]:
    """Quantities of a status body (``{"cpu": "4"}``) as integers; unreadable ones left out."""
    out: dict[str, int] = {}
    for resource, value in (values or {}).items():
        try:
            out[resource] = parse_quantity(value, field=where, resource=resource)
        except QuantityError:
            continue
    return out


def _formatted(amounts: Mapping[str, int]) -> dict[str, str]:
    return {r: format_quantity(r, a) for r, a in sorted(amounts.items()) if a}


def queue_rows(listing: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The /v1/queues body as rows in cohort-tree order (parents first, then their children,
    by name), with cohorts' counts and usage summed over their subtree."""
    children: dict[str | None, list[str]] = {}
    for name, entry in listing.items():
        parent = (entry.get("spec") or {}).get("parent")
        if parent not in listing:
            parent = None  # an unknown parent: the queue is shown as a root
        children.setdefault(parent, []).append(name)

    rows: list[dict[str, Any]] = []

    def visit(
        name: str, depth: int, seen: frozenset[str]
    ) -> tuple[int, int, dict[str, int], dict[str, int]]:
        entry = listing[name]
        spec = entry.get("spec") or {}
        row: dict[str, Any] = {
            "name": name,
            "depth": depth,
            "parent": spec.get("parent"),
            "children": sorted(children.get(name, [])),
            "pending": int(entry.get("pending") or 0),
            "admitted": int(entry.get("admitted") or 0),
            "usage": {},
            "nominal": spec.get("nominal"),
            "borrowingLimit": spec.get("borrowingLimit"),
            "lendingLimit": spec.get("lendingLimit"),
            "weight": spec.get("weight"),
            "preemption": spec.get("preemption"),
            "share": entry.get("share"),
        }
        if entry.get("error"):
            row["error"] = entry["error"]
        rows.append(row)
        pending, admitted = row["pending"], row["admitted"]
        usage = amounts(entry.get("usage"), f"queue {name} usage")
        quota = amounts(row["nominal"], f"queue {name} nominal")
        for child in row["children"]:
            if child in seen:  # a cycle the controller rejects; never loop on it here
                continue
            p, a, u, q = visit(child, depth + 1, seen | {child})
            pending, admitted = pending + p, admitted + a
            for total, part in ((usage, u), (quota, q)):
                for resource, amount in part.items():
                    total[resource] = total.get(resource, 0) + amount
        row["pending"], row["admitted"], row["usage"] = pending, admitted, _formatted(usage)
        row["quota"] = (
            {r: format_quantity(r, a) for r, a in sorted(quota.items())}
            if row["nominal"] is not None or quota
            else None
        )
        if row["children"]:
            row["share"] = None  # DRF shares belong to the leaf queues that hold gangs
        return pending, admitted, usage, quota

    for root in sorted(children.get(None, [])):
        visit(root, 0, frozenset({root}))
    for name in sorted(listing):  # queues in a parent cycle have no root: start at any
        if name not in {row["name"] for row in rows}:
            visit(name, 0, frozenset({name}))
    return rows


def usage_cell(row: Mapping[str, Any]) -> str:
    """`cpu 12/16, memory 40Gi/64Gi`: usage/quota per resource used or under quota."""
    usage = row.get("usage") or {}
    quota = row.get("quota") or {}
    resources = sorted(set(usage) | set(quota))
    if not resources:
        return "-"
    return ", ".join(f"{r} {usage.get(r, '0')}/{quota.get(r, '-')}" for r in resources)


def render_table(rows: list[dict[str, Any]]) -> str:
    body = [
        [
            "  " * row["depth"] + row["name"],
            row["parent"] or "-",
            str(row["pending"]),
            str(row["admitted"]),
            usage_cell(row),
            row["share"] if row["share"] is not None else "-",
        ]
        for row in rows
    ]
    text = table(["QUEUE", "PARENT", "PENDING", "ADMITTED", "USAGE/QUOTA", "SHARE"], body)
    problems = [f"queue {row['name']} is ignored: {row['error']}" for row in rows if "error" in row]
    return "\n".join([text, *problems])


def run(args: argparse.Namespace) -> int:
    try:
        view = open_view(args)
        try:
            listing = view.queues()
        finally:
            close_view(view)
    except ViewError as exc:
        print(f"muster queues: {exc}", file=sys.stderr)
        return exc.exit_code
    rows = queue_rows(listing)
    if args.output != "table":
        shown = [{k: v for k, v in row.items() if k != "depth"} for row in rows]
        print(dump({"source": view.source.as_dict(), "queues": shown}, args.output))
        return 0
    if rows:
        print(render_table(rows))
    else:
        print("no queues (kind: Queue, group muster.dev); see docs/queue-reference.md")
    print(f"(source: {view.source.describe()})")
    return 0
