"""`muster queues`: rows in cohort-tree order with sums for cohorts, usage against quota."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from admission.status import queue_listing, queue_status
from muster import cli
from muster.commands.queues import queue_rows, render_table, usage_cell
from muster.view import dump, plan_listing
from tests.unit.test_cli_view import NOW, listing, served


def _listing() -> dict[str, dict[str, Any]]:
    cache = plan_listing(listing(), now=NOW).cache
    return queue_listing(cache, queue_status(cache))


def test_rows_follow_the_cohort_tree() -> None:
    rows = queue_rows(_listing())
    assert [(r["name"], r["depth"]) for r in rows] == [("a", 0), ("org", 0), ("b", 1), ("c", 1)]
    org = rows[1]
    assert org["children"] == ["b", "c"] and org["share"] is None


def test_cohort_rows_sum_their_queues() -> None:
    listing = {
        "org": {"pending": 0, "admitted": 0, "usage": {}, "share": "0.000", "spec": {}},
        "b": {
            "pending": 2,
            "admitted": 1,
            "usage": {"cpu": "1500m", "memory": "1Gi"},
            "share": "0.100",
            "spec": {"parent": "org", "nominal": {"cpu": "4"}},
        },
        "c": {
            "pending": 1,
            "admitted": 2,
            "usage": {"cpu": "2500m"},
            "share": "0.200",
            "spec": {"parent": "org"},
        },
    }
    org = queue_rows(listing)[0]
    assert (org["pending"], org["admitted"]) == (3, 3)
    assert org["usage"] == {"cpu": "4", "memory": "1Gi"}
    assert org["quota"] == {"cpu": "4"}  # b's nominal; c has none of its own
    assert usage_cell(org) == "cpu 4/4, memory 1Gi/-"


def test_a_parent_cycle_or_unknown_parent_never_hides_a_queue() -> None:
    listing = {
        "x": {"pending": 1, "admitted": 0, "spec": {"parent": "y"}},
        "y": {"pending": 0, "admitted": 0, "spec": {"parent": "x"}},
        "z": {"pending": 0, "admitted": 0, "spec": {"parent": "gone"}},
    }
    names = [r["name"] for r in queue_rows(listing)]
    assert sorted(names) == ["x", "y", "z"] and len(names) == 3


@pytest.mark.parametrize(
    ("row", "cell"),
    [
        ({"usage": {"cpu": "12"}, "quota": {"cpu": "16"}}, "cpu 12/16"),
        ({"usage": {}, "quota": {"cpu": "16", "memory": "64Gi"}}, "cpu 0/16, memory 0/64Gi"),
        ({"usage": {"cpu": "4"}, "quota": None}, "cpu 4/-"),
        ({"usage": {}, "quota": None}, "-"),
    ],
)
def test_usage_cell(row: dict[str, Any], cell: str) -> None:
    assert usage_cell(row) == cell


def test_table_shows_usage_against_quota_and_indents_children() -> None:
    text = render_table(queue_rows(_listing()))
    lines = text.splitlines()
    assert lines[0].split() == ["QUEUE", "PARENT", "PENDING", "ADMITTED", "USAGE/QUOTA", "SHARE"]
    a = lines[1].split()
    # Queue a: ns/second, ns/third and ns/huge pending; ns/first admitted with all 16 cpu.
    assert a[:4] == ["a", "-", "3", "1"] and "cpu 16/16" in lines[1]
    assert lines[3].startswith("  b ") and lines[4].startswith("  c ")
    assert lines[4].split()[1] == "org"


def test_problems_are_listed_under_the_table() -> None:
    rows = queue_rows({"bad": {"pending": 0, "admitted": 0, "error": "weight must be > 0"}})
    assert render_table(rows).splitlines()[-1] == "queue bad is ignored: weight must be > 0"


def test_json_and_yaml_carry_the_same_rows(capsys: pytest.CaptureFixture[str]) -> None:
    data = {"queues": [{"name": "a", "usage": {"cpu": "1"}}]}
    assert json.loads(dump(data, "json")) == data
    assert yaml.safe_load(dump(data, "yaml")) == data


def test_queues_command_over_the_status_service(capsys: pytest.CaptureFixture[str]) -> None:
    cache = plan_listing(listing(), now=NOW).cache
    with served(cache) as url:
        assert cli.main(["queues", "--status-url", url]) == 0
        table = capsys.readouterr().out
        assert cli.main(["queues", "--status-url", url, "-o", "json"]) == 0
        body = json.loads(capsys.readouterr().out)
    assert table.splitlines()[-1] == f"(source: the controller's status service at {url})"
    assert [q["name"] for q in body["queues"]] == ["a", "org", "b", "c"]
    a = body["queues"][0]
    assert a["usage"] == {"cpu": "16"} and a["nominal"] == a["quota"] == {"cpu": "16"}
    assert (a["pending"], a["admitted"], a["share"]) == (3, 1, "0.500")
    assert body["source"]["from"] == "statusService"
