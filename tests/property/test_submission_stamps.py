"""Submission stamps give a strict total order, even from many threads at once."""

from __future__ import annotations

import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.submitted import SubmissionClock, format_stamp, parse_stamp, stamp_time_ns


@given(st.integers(min_value=0, max_value=4_000_000_000 * 10**9), st.integers(0, 10**11))
def test_format_and_parse_round_trip(time_ns: int, seq: int) -> None:
    text = format_stamp(time_ns, seq)
    assert stamp_time_ns(text) == time_ns
    assert parse_stamp(text).seq == seq


@given(
    st.lists(st.tuples(st.integers(0, 4 * 10**18), st.integers(0, 10**11)), min_size=2, max_size=50)
)
def test_string_order_is_value_order(pairs: list[tuple[int, int]]) -> None:
    stamps = [format_stamp(t, s) for t, s in pairs]
    assert sorted(stamps) == [format_stamp(t, s) for t, s in sorted(pairs)]


@settings(max_examples=20, deadline=None)
@given(threads=st.integers(8, 16), per_thread=st.integers(25, 80))  # >= 200 stamps, >= 8 threads
def test_concurrent_stamps_are_unique_and_follow_each_thread(threads: int, per_thread: int) -> None:
    clock = SubmissionClock()
    results: list[list[str]] = [[] for _ in range(threads)]

    def work(i: int) -> None:
        for _ in range(per_thread):
            results[i].append(clock.stamp())

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    every = [s for r in results for s in r]
    assert len(set(every)) == len(every)
    for r in results:
        assert r == sorted(r)  # each thread's later call got a later stamp
    parsed = sorted(parse_stamp(s) for s in every)
    assert [p.seq for p in parsed] == sorted(p.seq for p in parsed)
