"""The fairness error (simulator/fairness.py, simulator/sampling.figures) and the utilization
curve a family compares runs over (simulator/sampling.UtilizationCurve)."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.fairness import FairnessMeter, error_of, fair_shares, over_share, water_fill
from simulator.kwok_samples import ReplaySamples
from simulator.records import Sample
from simulator.sampling import UtilizationCurve, figures, main_resource
from simulator.trace import loads

CPU, GPU = 0, 1

amounts = st.integers(0, 1_000)


@settings(max_examples=200, deadline=None)
@given(
    queues=st.lists(st.tuples(amounts, amounts, amounts, st.integers(1, 3)), min_size=1, max_size=4)
)
def test_with_one_resource_the_error_is_the_measure_before_issue_33(
    queues: list[tuple[int, int, int, int]],
) -> None:
    # running, held beyond it (bound, not running yet), waiting, weight; one resource: the
    # per-resource split is the old split of dominant shares.
    running = [[r] for r, _, _, _ in queues]
    held = [[r + h] for r, h, _, _ in queues]
    waiting = [[w] for _, _, w, _ in queues]
    weights = [float(w) for _, _, _, w in queues]
    capacity = [sum(r + h + w for r, h, w, _ in queues) + 1]
    got = figures(running, held, waiting, capacity, 0, weights)
    assert got.fairness_error == pytest.approx(got.dominant_error, abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(
    demands=st.lists(
        st.lists(st.floats(0, 1, allow_nan=False), min_size=2, max_size=2), min_size=1, max_size=4
    ),
    data=st.data(),
)
def test_fair_shares_split_what_runs_and_give_no_queue_more_than_its_demand(
    demands: list[list[float]], data: st.DataObject
) -> None:
    weights = data.draw(st.lists(st.integers(1, 3), min_size=len(demands), max_size=len(demands)))
    running = [[data.draw(st.floats(0, d, allow_nan=False)) for d in row] for row in demands]
    fair = fair_shares(demands, [float(w) for w in weights], running)
    for r in range(2):
        in_use = sum(row[r] for row in running)
        assert sum(row[r] for row in fair) <= in_use + 1e-9
        for q, row in enumerate(fair):
            assert -1e-12 <= row[r] <= demands[q][r] + 1e-9
    assert error_of(running, fair) >= 0.0
    # Shares exactly at the fair split: no error.
    assert error_of(fair, fair) == 0.0


def test_a_gang_waiting_for_busy_gpus_is_owed_gpus_not_cpu() -> None:
    # Queue g holds every GPU (and the CPU its pods need) and waits with more GPU pods; queue
    # c runs CPU jobs and waits with more while 30 cpu are idle (a utilization matter). Nobody
    # could give g more GPUs, and no queue holds CPU c is owed.
    capacity = [100, 8]
    running = [[10, 8], [60, 0]]  # g: 10 cpu, 8 gpu; c: 60 cpu
    held = [list(row) for row in running]
    waiting = [[40, 32], [30, 0]]  # g's waiting pods: 4 gangs of 8 GPUs (and 10 cpu each)
    main = [[0, 32], [30, 0]]  # their dominant resources: the GPU, the CPU
    got = figures(running, held, waiting, capacity, CPU, [1.0, 1.0], main)
    assert got.fairness_error == 0.0
    # The measure before issue 33 added g's GPU share (1.0) to c's CPU share (0.6) and split
    # that total: c owed 0.8 of it, short by 0.2.
    assert got.dominant_error == pytest.approx(0.2)
    assert main_resource(((CPU, 10), (GPU, 8)), capacity) == GPU
    assert main_resource(((CPU, 4),), capacity) == CPU


def test_a_cpu_queue_held_off_the_cpu_is_short_of_its_cpu_share() -> None:
    capacity = [100]
    running = [[80], [10]]  # a holds 80 of the 90 in use; b, same weight, wants 50
    got = figures(running, running, [[0], [40]], capacity, CPU, [1.0, 1.0])
    assert got.fair == pytest.approx((0.45, 0.45))
    assert got.fairness_error == pytest.approx(0.35)
    assert got.shares == pytest.approx((0.8, 0.1))


def test_the_meter_averages_the_error_over_time() -> None:
    meter = FairnessMeter()
    meter.advance(10.0, [[0.5], [0.0]], [[0.25], [0.25]], 0.25)
    meter.advance(30.0, [[0.25], [0.25]], [[0.25], [0.25]], 0.0)
    assert meter.integrals() == pytest.approx((2.5, 2.5))
    assert water_fill([0.1, 1.0, 1.0], [1, 1, 2], 0.7) == pytest.approx([0.1, 0.2, 0.4])
    # The other side: queue 0 ran 0.25 above its share for 10 s, queue 1 never above.
    assert meter.excess == pytest.approx([2.5, 0.0])
    # ...over the 40 s each queue ran or was owed a share: 2.5 / 40.
    assert meter.over_fair_share() == pytest.approx((2.5 / 40, 0.0))
    idle = FairnessMeter()
    idle.advance(10.0, [[0.5], [0.0]], [[0.5], [0.0]], 0.0)  # queue 1 neither ran nor was owed
    assert idle.active == [10.0, 0.0] and idle.over_fair_share() == (0.0, 0.0)


def test_a_queue_over_its_share_is_measured_where_it_is_most_over() -> None:
    # 0.3 above in cpu, 0.1 below in gpu: 0.3; a queue below everywhere: 0, never negative.
    assert over_share([0.6, 0.1], [0.3, 0.2]) == pytest.approx(0.3)
    assert over_share([0.1, 0.1], [0.3, 0.2]) == 0.0
    assert over_share([], []) == 0.0


@settings(max_examples=100, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.floats(0.1, 100, allow_nan=False), st.floats(0, 1, allow_nan=False)),
        min_size=1,
        max_size=12,
    ),
    cut=st.floats(0, 1, allow_nan=False),
)
def test_the_utilization_curve_gives_the_mean_of_any_stretch(
    steps: list[tuple[float, float]], cut: float
) -> None:
    # Each step: how long the share held, and the share.
    curve = UtilizationCurve(["cpu"])
    time, total = 0.0, 0.0
    curve.add(0.0, [0.0])
    for span, share in steps:
        time += span
        total += span * share
        curve.add(time, [total])
    assert curve.mean(0.0, time)["cpu"] == pytest.approx(total / time)
    # Up to any instant: the integral of the steps before it, and part of the one it cuts.
    end = cut * time
    expected, at = 0.0, 0.0
    for span, share in steps:
        expected += share * max(0.0, min(span, end - at))
        at += span
    # A subnormal end (cut=5e-324) has no relative precision left: 0.75 * end rounds to end,
    # so the reference itself says 1.0 where the share is 0.75. Normal floats keep it.
    if end >= sys.float_info.min:
        assert curve.mean(0.0, end)["cpu"] == pytest.approx(expected / end, abs=1e-9)
    assert curve.mean(5.0, 5.0) == {"cpu": 0.0}


def test_the_kwok_replay_takes_each_queues_excess_from_its_samples() -> None:
    # The kwok engine's time means (simulator.kwok_samples) come from the same meter as the
    # in-process engine's: a queue 0.25 above its share for 10 s of a 20 s run is 0.125 above
    # on average; the other ran below, never above.
    trace = loads(
        "name: two\n"
        "cluster: {nodes: [{count: 1, name: n, allocatable: {cpu: '4', memory: 8Gi}}]}\n"
        "queues: [{name: a}, {name: b}]\n"
        "jobs: [{name: j, count: 1, kind: Job, queue: a, size: 1,"
        " podRequests: {cpu: '1', memory: 1Gi}, runtime: 10s}]\n"
    )
    samples = ReplaySamples(trace, none=False)

    def at(time: float, a: float, b: float, fair: float) -> Sample:
        return Sample(
            time=time,
            utilization=a + b,
            allocation=a + b,
            fairness_error=0.0,
            pending=(0, 0),
            holding=(0, 0),
            running=(1, 1),
            usage=(a, b),
            share=(a, b),
            fair_share=(fair, fair),
            running_by_resource=((a,), (b,)),
            fair_by_resource=((fair,), (fair,)),
        )

    samples.samples = [at(0.0, 0.75, 0.25, 0.5), at(10.0, 0.5, 0.5, 0.5)]
    means = samples.means(0.0, 20.0)
    assert means.over_fair_share == pytest.approx((0.125, 0.0))
    assert means.fairness_error == pytest.approx(0.125)
    assert samples.means(5.0, 5.0).over_fair_share == ()
