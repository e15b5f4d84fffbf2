"""Label selectors (a Queue's namespaceSelector): parsing, matching, and the cache's refusals."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from admission.cache import Cache
from policies import PolicyError
from policies.selectors import LabelSelector, parse_label_selector
from tests.unit.test_admission_units import job

FIELD = 'queue "q": spec.namespaceSelector'


def test_empty_selector_matches_everything() -> None:
    values: list[dict[str, Any] | None] = [None, {}, {"matchLabels": {}}]
    for value in values:
        selector = parse_label_selector(value, FIELD)
        assert selector.matches({}) and selector.matches({"a": "b"})
        assert selector.describe() == "everything"


def test_match_labels_and_expressions() -> None:
    selector = parse_label_selector(
        {
            "matchLabels": {"team": "a"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["gold", "silver"]},
                {"key": "frozen", "operator": "DoesNotExist"},
                {"key": "env", "operator": "NotIn", "values": ["test"]},
                {"key": "billing", "operator": "Exists"},
            ],
        },
        FIELD,
    )
    ok = {"team": "a", "tier": "gold", "billing": "x"}
    assert selector.matches(ok)
    assert selector.matches({**ok, "env": "prod"})
    assert not selector.matches({**ok, "env": "test"})
    assert not selector.matches({**ok, "team": "b"})
    assert not selector.matches({**ok, "tier": "bronze"})
    assert not selector.matches({**ok, "frozen": "yes"})
    assert not selector.matches({"team": "a", "tier": "gold"})
    assert selector.describe() == ("team=a,tier in (gold,silver),!frozen,env notin (test),billing")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("team=a", "must be a label selector"),
        ({"matchLabel": {}}, "unknown field(s) matchLabel"),
        ({"matchLabels": ["a"]}, "matchLabels: must be a map"),
        ({"matchLabels": {"a": 1}}, "keys and values must be strings"),
        ({"matchExpressions": {}}, "matchExpressions: must be a list"),
        ({"matchExpressions": [{"operator": "In"}]}, "[0]: needs a key"),
        ({"matchExpressions": [{"key": "a", "operator": "Is"}]}, "'Is' is not one of"),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "In needs at least one value"),
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            "Exists takes no values",
        ),
    ],
)
def test_bad_selectors_name_the_field(value: Any, message: str) -> None:
    with pytest.raises(PolicyError) as error:
        parse_label_selector(value, FIELD)
    assert str(error.value).startswith(FIELD)
    assert message in str(error.value)


labels = st.dictionaries(st.sampled_from("abcd"), st.sampled_from("xyz"), max_size=4)


@given(labels, labels)
def test_match_labels_is_a_subset_test(wanted: dict[str, str], have: dict[str, str]) -> None:
    selector = parse_label_selector({"matchLabels": wanted}, FIELD)
    assert selector.matches(have) == (wanted.items() <= have.items())


@given(st.sampled_from("abcd"), st.lists(st.sampled_from("xyz"), min_size=1), labels)
def test_in_and_notin_are_complements(key: str, values: list[str], have: dict[str, str]) -> None:
    inside = parse_label_selector(
        {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}, FIELD
    )
    outside = parse_label_selector(
        {"matchExpressions": [{"key": key, "operator": "NotIn", "values": values}]}, FIELD
    )
    assert inside.matches(have) != outside.matches(have)


def queue(name: str, selector: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if selector is not None:
        spec["namespaceSelector"] = selector
    return {"metadata": {"name": name, "resourceVersion": "1"}, "spec": spec}


def namespace(name: str, labels: dict[str, str], rv: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels, "resourceVersion": rv}}


def test_cache_refuses_gangs_from_namespaces_the_queue_does_not_take() -> None:
    cache = Cache()
    cache.apply_queue("ADDED", queue("q", {"matchLabels": {"team": "a"}}))
    cache.apply_namespace("ADDED", namespace("ns", {"team": "b"}))
    cache.apply_job("ADDED", job("g"))
    refused = cache.namespace_refusals()
    assert refused["ns/g"].code == "NamespaceNotAllowed"
    assert 'namespace "ns" does not match' in refused["ns/g"].message
    assert "team=a" in refused["ns/g"].message
    assert cache.jobs.pending(0.0, refused) == []
    # Relabel the namespace: the gang may use the queue now.
    cache.apply_namespace("MODIFIED", namespace("ns", {"team": "a"}, rv="2"))
    assert cache.namespace_refusals() == {}
    assert [g.id for g in cache.jobs.pending(0.0, {})] == ["ns/g"]


def test_queue_without_selector_takes_every_namespace() -> None:
    cache = Cache()
    cache.apply_queue("ADDED", queue("q", None))
    cache.apply_job("ADDED", job("g"))
    assert cache.namespace_refusals() == {}
    assert cache.queues["q"].namespace_selector is None


def test_bad_selector_makes_the_queue_unusable_with_the_reason() -> None:
    cache = Cache()
    cache.apply_queue("ADDED", queue("q", {"matchExpressions": [{"key": "a", "operator": "X"}]}))
    view = cache.queues["q"]
    assert view.queue is None and view.error is not None
    assert "spec.namespaceSelector.matchExpressions[0].operator" in view.error


def test_label_selector_is_hashable_and_comparable() -> None:
    a = parse_label_selector({"matchLabels": {"x": "y"}}, FIELD)
    b = parse_label_selector({"matchLabels": {"x": "y"}}, FIELD)
    assert a == b and hash(a) == hash(b)
    assert a != LabelSelector()
