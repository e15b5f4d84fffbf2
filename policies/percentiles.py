"""The one percentile rule of every figure muster prints: the simulator's reports, every bench,
and the wait-time estimator's runtime spread.

The rule is linear interpolation between order statistics (Hyndman and Fan's definition 7,
numpy's default, ``statistics.quantiles(method="inclusive")``, a spreadsheet's
PERCENTILE.INC): for ``n`` sorted values, the q-th percentile sits at position
``(n - 1) * q / 100``, between the two values around it in proportion. Why this one:

- it is the rule the simulator's reports always used, so their summaries did not change when
  the benches' copies (nearest rank, rounded or floored) were replaced by it;
- p0 is the minimum, p100 the maximum and p50 the median (``statistics.median`` gives the same
  value: a bench's median and its percentiles are one rule);
- it moves smoothly with the data: a p99 over a hundred samples is not simply the largest or
  the second largest, and anyone can check a figure with numpy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (q from 0 to 100) of ``values``, in any order; None for none."""
    ordered = sorted(values)
    if not ordered:
        return None
    return percentile_of_sorted(ordered, q)


def percentile_of_sorted(ordered: Sequence[float], q: float) -> float:
    """`percentile` of values already sorted, at least one (for a caller that asks several
    percentiles of one sample, or sorted it anyway)."""
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
