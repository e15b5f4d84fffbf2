"""Every number and duration muster reads is bounded (issue 28): whatever text a user writes in
a `muster.dev/*` field, a Queue's spec or a trace, the reading is either a value within what
Kubernetes itself holds or a refusal that names the field, never another exception (a value of
90 digits and an `h` was taken as 1e93 seconds; one of thousands of digits made `int()` raise)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from admission.gangs import job_record
from policies.durations import MAX_INT64, MAX_SECONDS, DurationError, parse_duration
from policies.fields import integer
from policies.kinds import FieldError
from policies.kinds.fields import parse_min_members, read_gang_fields
from policies.kinds.jobset import replicated_jobs
from policies.kinds.pinning import Original, PinError
from policies.model import PolicyError, parse_priority
from policies.resources import MAX_AMOUNT, QuantityError, parse_quantity
from policies.vocabulary import (
    CLOG_TIMEOUT,
    ELASTIC_AFTER,
    EVICTIONS,
    MAX_INT32,
    MIN_MEMBERS,
    PREEMPTIONS,
    PRIORITY,
    PRIORITY_MAX,
    RESTORE,
)
from tests import builders
from tests.strategies import absurd_numbers

BOUNDED = settings(max_examples=300, deadline=None)


@BOUNDED
@given(text=absurd_numbers())
def test_a_duration_is_within_kubernetes_range_or_refused_naming_the_field(text: str) -> None:
    try:
        seconds = parse_duration(text, field="spec.clogTimeout")
    except DurationError as exc:
        assert str(exc).startswith("spec.clogTimeout: "), exc
        assert len(str(exc)) < 300, "the refusal quotes the value cut short"
    else:
        assert 0 <= seconds <= MAX_SECONDS


def test_ninety_digits_and_an_h_is_refused() -> None:
    """The issue's own example: accepted at create before, as 1e93 seconds."""
    try:
        parse_duration("9" * 90 + "h", field="annotation muster.dev/clog-timeout")
    except DurationError as exc:
        assert "annotation muster.dev/clog-timeout" in str(exc)
    else:
        raise AssertionError("a clog timeout of 90 digits and an h was accepted")
    for huge in (10**30, "9" * 50 + "s", float("inf")):
        try:
            parse_duration(huge, field="f")
        except DurationError as exc:
            assert "out of range" in str(exc) or "characters long" in str(exc), exc
        else:
            raise AssertionError(f"{huge!r} accepted")


@BOUNDED
@given(
    key=st.sampled_from([MIN_MEMBERS, PRIORITY, ELASTIC_AFTER, CLOG_TIMEOUT]),
    where=st.sampled_from(["annotation", "label"]),
    text=absurd_numbers(),
)
def test_a_gang_field_is_read_within_range_or_refused_naming_it(
    key: str, where: str, text: str
) -> None:
    labels, annotations = ({}, {key: text}) if where == "annotation" else ({key: text}, {})
    try:
        fields = read_gang_fields(labels, annotations, 8)
    except FieldError as exc:
        assert str(exc).startswith(f"{where} {key}: "), exc
        assert len(str(exc)) < 400
    else:
        assert 1 <= fields.minimum <= 8
        assert 0 <= fields.priority <= PRIORITY_MAX
        assert 0 <= fields.elastic_after <= MAX_SECONDS
        assert fields.clog_timeout is None or 0 <= fields.clog_timeout <= MAX_SECONDS


@BOUNDED
@given(text=absurd_numbers())
def test_priority_and_minimum_read_within_range_or_refuse(text: str) -> None:
    try:
        assert 0 <= parse_priority(text, "p") <= PRIORITY_MAX
    except PolicyError as exc:
        assert str(exc).startswith("p: ")
    try:
        assert 1 <= parse_min_members(text, 5, "m") <= 5
    except FieldError as exc:
        assert str(exc).startswith("m: ")


@BOUNDED
@given(
    replicas=st.one_of(absurd_numbers(), st.integers(min_value=-(10**40), max_value=10**40)),
    parallelism=st.one_of(st.none(), st.integers(min_value=-(10**40), max_value=10**40)),
)
def test_a_jobsets_counts_are_kubernetes_int32s_or_refused(
    replicas: object, parallelism: int | None
) -> None:
    spec = {
        "replicatedJobs": [
            {
                "name": "w",
                "replicas": replicas,
                "template": {"spec": {"parallelism": parallelism, "template": {}}},
            }
        ]
    }
    try:
        found = replicated_jobs(spec)
    except FieldError as exc:
        assert str(exc).startswith("spec.replicatedJobs"), exc
    else:
        assert 1 <= found[0][1] <= 100_000


@BOUNDED
@given(
    value=st.one_of(
        absurd_numbers(),
        st.integers(min_value=-(10**40), max_value=10**40),
        st.floats(allow_nan=True, allow_infinity=True),
    ),
    resource=st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]),
)
def test_a_quantity_is_an_int64_or_refused_naming_the_field(value: object, resource: str) -> None:
    try:
        amount = parse_quantity(value, field="nominal.x", resource=resource)  # type: ignore[arg-type]
    except QuantityError as exc:
        assert str(exc).startswith("nominal.x: "), exc
        assert len(str(exc)) < 300
    else:
        assert 0 <= amount <= MAX_AMOUNT


@BOUNDED
@given(value=st.one_of(st.integers(min_value=-(10**40), max_value=10**40), st.floats()))
def test_a_spec_integer_is_an_int32_or_refused(value: float) -> None:
    try:
        number = integer(value, "backoff.limit", minimum=0)
    except PolicyError as exc:
        assert str(exc).startswith("backoff.limit: ")
    else:
        assert 0 <= number <= MAX_INT32


@BOUNDED
@given(
    number=st.one_of(
        st.from_regex(r"-?[1-9][0-9]{0,5000}", fullmatch=True),
        absurd_numbers().map(json.dumps),
    )
)
def test_a_saved_original_with_any_number_reads_or_is_refused(number: str) -> None:
    """`muster.dev/restore` is JSON a user can edit: a number of thousands of digits (which
    Python's JSON reader refuses with a plain ValueError) or any string."""
    try:
        original = Original.decode(f'{{"parallelism": {number}, "completions": 2}}', "r")
    except PinError as exc:
        assert str(exc).startswith("r: ")
    else:
        assert 0 <= (original.fields["parallelism"] or 0) <= MAX_INT32


@BOUNDED
@given(
    key=st.sampled_from(
        [MIN_MEMBERS, PRIORITY, ELASTIC_AFTER, CLOG_TIMEOUT, PREEMPTIONS, EVICTIONS, RESTORE]
    ),
    text=absurd_numbers(),
    deadline=st.one_of(st.none(), st.integers(min_value=-5, max_value=2**70)),
)
def test_the_controller_reads_any_stored_value_without_raising(
    key: str, text: str, deadline: int | None
) -> None:
    """A stored object with any value in a muster field (or a runtime limit past int64) is
    read into a record that waits with the reason; the controller never raises on it."""
    body = builders.job("a", "q", annotations={key: text}, deadline=deadline, resource_version=1)
    record = job_record(body)
    if deadline is not None and not 1 <= deadline <= MAX_INT64:
        assert record.parse_error is not None  # the last malformed field read says why
    assert record.evictions >= 0 and record.gang.preemptions >= 0
