"""`admission.metrics.api_figures`: the benches and the kwok engine read the controller's API
calls and admissions from its own metrics text, as a scrape of `/metrics` returns it."""

from __future__ import annotations

from admission.metrics import ControllerMetrics, api_figures


def test_requests_writes_by_kind_and_admissions_from_the_exposition() -> None:
    metrics = ControllerMetrics()
    metrics.track_requests(lambda: 7)
    metrics.writes.labels("admit").inc(3)
    metrics.writes.labels("event").inc(2)
    metrics.admitted.labels("a").inc(2)
    metrics.admitted.labels("b").inc()
    figures = api_figures(metrics.exposition().decode())
    assert figures == {
        "requests": 7.0,
        "writes": 5.0,
        "writes:admit": 3.0,
        "writes:event": 2.0,
        "admitted": 3.0,
    }


def test_a_controller_that_did_nothing_yet_reads_as_zeros() -> None:
    assert api_figures(ControllerMetrics().exposition().decode()) == {
        "requests": 0.0,
        "writes": 0.0,
        "admitted": 0.0,
    }
