"""`muster status`: the fields of one gang, in reading order, from a real plan's status body."""

from __future__ import annotations

import pytest
import yaml

from admission.status import gang_status
from muster import cli
from muster.commands.status import gang_label, render, status_lines
from muster.view import plan_listing
from policies import reasons
from tests.unit.test_cli_view import NOW, listing, served


def _lines(name: str) -> dict[str, str]:
    cache = plan_listing(listing(), now=NOW).cache
    body = gang_status(cache, f"ns/{name}", NOW)
    assert body is not None
    return dict(status_lines(body, "somewhere"))


def test_a_waiting_gang_shows_position_and_the_planners_reason() -> None:
    lines = _lines("third")
    assert lines["state"] == "Pending"
    assert lines["position"] == "2 in queue a"
    assert lines["admitted"] == "-"
    reason = reasons.quota_exhausted("a", "cpu", 1000, 0)
    assert lines["reason"] == f"QuotaExhausted: {reason.message}"
    assert lines["source"] == "somewhere"


def test_a_running_gang_shows_its_admission() -> None:
    lines = _lines("first")
    assert lines["state"] == "Running"
    assert lines["admitted"].endswith("at 4 pods") and lines["admitted"].startswith("2027-")
    assert "position" not in lines and "reason" not in lines
    assert lines["pods"] == "4 ready, 4 bound to nodes, 0 not scheduled yet"


def test_a_rejected_gang_says_it_never_fits() -> None:
    lines = _lines("huge")
    assert lines["reason"].startswith("NeverFits: never fits: needs 20 cpu")
    assert lines["rejected"].startswith("yes")


def test_gang_label_names_an_elastic_minimum() -> None:
    assert gang_label({"kind": "MiniCluster", "size": 64, "min": 48}) == (
        "MiniCluster, 64 pods (min 48)"
    )
    assert gang_label({"kind": "Job", "size": 4, "min": 4}) == "Job, 4 pods"


def test_render_aligns_fields() -> None:
    assert render([("gang", "ns/a"), ("position", "1")]).splitlines() == [
        "gang:     ns/a",
        "position: 1",
    ]


def test_status_yaml_output(capsys: pytest.CaptureFixture[str]) -> None:
    with served(plan_listing(listing(), now=NOW).cache) as url:
        assert cli.main(["status", "ns/lost", "--status-url", url, "-o", "yaml"]) == 0
    body = yaml.safe_load(capsys.readouterr().out)
    assert body["reason"]["code"] == "QueueNotFound"
    assert body["queue"] == "nope"


def test_bad_gang_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["status", "Bad_Name", "--status-url", "http://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("muster status: gang 'Bad_Name'") and err.count("\n") == 1
