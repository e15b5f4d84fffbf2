"""The one percentile rule (`policies.percentiles`): linear interpolation between order
statistics, pinned on small inputs, so that a bench's p99 and a report's p95 mean the same."""

from __future__ import annotations

import statistics

import pytest

from policies.percentiles import percentile, percentile_of_sorted


def test_no_values_have_no_percentile() -> None:
    assert percentile([], 50) is None
    assert percentile((), 0) is None


@pytest.mark.parametrize("q", [0, 1, 50, 95, 99, 100])
def test_one_value_is_every_percentile(q: float) -> None:
    assert percentile([3.0], q) == 3.0


def test_q0_is_the_minimum_and_q100_the_maximum_in_any_order() -> None:
    values = [7.0, 1.0, 4.0, 10.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 10.0


def test_between_order_statistics_it_interpolates() -> None:
    # Position (n - 1) * q / 100: 1.5 for the median of four, 0.95 for p95 of two.
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([0.0, 10.0], 95) == 9.5
    assert percentile([0.0, 10.0, 20.0], 25) == 5.0
    # Not the nearest rank: p99 of 1..100 lies 1% short of the largest value.
    assert percentile([float(v) for v in range(1, 101)], 99) == pytest.approx(99.01)
    assert percentile([float(v) for v in range(1, 101)], 90) == pytest.approx(90.1)


def test_the_median_is_the_statistics_median() -> None:
    for values in ([5.0], [2.0, 9.0], [1.0, 8.0, 3.0], [4.0, 1.0, 7.0, 2.0, 9.0, 6.0]):
        assert percentile(values, 50) == statistics.median(values)


def test_it_is_numpys_default_rule() -> None:
    # statistics.quantiles(method="inclusive") is the same definition (numpy's "linear").
    values = [0.3, 1.7, 2.2, 5.0, 5.1, 8.9, 13.0]
    cuts = statistics.quantiles(values, n=20, method="inclusive")
    for i, cut in enumerate(cuts, start=1):
        assert percentile(values, 5 * i) == pytest.approx(cut)


def test_of_sorted_values_is_the_same_without_sorting_again() -> None:
    ordered = [1.0, 2.0, 4.0, 8.0]
    for q in (0, 10, 33, 50, 90, 100):
        assert percentile_of_sorted(ordered, q) == percentile(list(reversed(ordered)), q)
