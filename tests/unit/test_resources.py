"""Quantities and resource vectors."""

from __future__ import annotations

import pytest

from policies import QuantityError, Resources, format_quantity, parse_quantity

GIB = 2**30


@pytest.mark.parametrize(
    ("text", "resource", "expected"),
    [
        ("500m", "cpu", 500),
        ("1.5", "cpu", 1500),
        ("2", "cpu", 2000),
        ("0.1", "cpu", 100),
        ("1e3", "cpu", 1_000_000),
        ("1k", "cpu", 1_000_000),
        ("2Gi", "memory", 2 * GIB),
        ("1.5Gi", "memory", 3 * 2**29),
        ("100M", "memory", 100_000_000),
        ("1e3", "memory", 1000),
        ("1E3", "memory", 1000),
        ("1k", "memory", 1000),
        ("1Ki", "memory", 1024),
        ("1.5", "memory", 2),  # a fractional base unit rounds up
        ("100m", "memory", 1),
        ("1u", "cpu", 1),  # 0.001m rounds up to 1m
        (".5", "nvidia.com/gpu", 1),
        ("+3", "pods", 3),
        ("0", "cpu", 0),
        (" 4 ", "pods", 4),
        (2, "cpu", 2000),
        (0.25, "cpu", 250),
        (1.1, "cpu", 1100),  # the decimal 1.1, not the binary float
    ],
)
def test_parse_quantity(text: str | int | float, resource: str, expected: int) -> None:
    assert parse_quantity(text, field="f", resource=resource) == expected


@pytest.mark.parametrize(
    "text", ["abc", "1.2.3", "", "1Ki5", "Gi", "1 Gi", "1e", "0x10", "1KB", "inf"]
)
def test_malformed_quantity_names_the_field(text: str) -> None:
    with pytest.raises(QuantityError) as error:
        parse_quantity(text, field="queues[2].nominal.cpu", resource="cpu")
    assert str(error.value) == (
        f'queues[2].nominal.cpu: "{text.strip()}" is not a Kubernetes quantity; use a number with '
        "an optional suffix such as 500m, 1.5, 2Gi, 1e3 or 1k"
    )


@pytest.mark.parametrize("value", ["-1", "-500m", -2, -0.5])
def test_negative_quantity_is_rejected(value: str | int | float) -> None:
    with pytest.raises(QuantityError) as error:
        parse_quantity(value, field="queues[2].nominal.cpu", resource="cpu")
    assert str(error.value) == (
        f'queues[2].nominal.cpu: "{value}" is negative; use a non-negative quantity such as '
        "500m or 2"
    )


@pytest.mark.parametrize("value", [True, float("nan"), float("inf"), None, [1]])
def test_non_quantities_are_rejected(value: object) -> None:
    with pytest.raises(QuantityError, match=r"^spec\.x: "):
        parse_quantity(value, field="spec.x")  # type: ignore[arg-type]


def test_huge_exponent_is_rejected() -> None:
    with pytest.raises(QuantityError, match="exponent out of range"):
        parse_quantity("1e999999", field="f")


def test_resources_parse_names_each_resource_field() -> None:
    parsed = Resources.parse({"cpu": "500m", "memory": "2Gi", "nvidia.com/gpu": 1}, field="q")
    assert parsed == Resources({"cpu": 500, "memory": 2 * GIB, "nvidia.com/gpu": 1})
    with pytest.raises(QuantityError, match=r'^queues\[0\]\.nominal\.memory: "-2Gi" is negative'):
        Resources.parse({"cpu": "1", "memory": "-2Gi"}, field="queues[0].nominal")
    with pytest.raises(QuantityError, match="expected a mapping"):
        Resources.parse(["cpu"], field="q")  # type: ignore[arg-type]
    assert Resources.parse(None, field="q") == Resources()


def test_resources_arithmetic() -> None:
    a = Resources(cpu=1000, memory=GIB)
    b = Resources({"cpu": 500, "nvidia.com/gpu": 1})
    assert a + b == Resources({"cpu": 1500, "memory": GIB, "nvidia.com/gpu": 1})
    assert a - Resources(cpu=1000) == Resources(memory=GIB)
    assert (b - b).is_zero()
    assert a.scale(3) == Resources(cpu=3000, memory=3 * GIB)
    assert a.scale(0).is_zero()
    assert a["nvidia.com/gpu"] == 0  # missing = 0
    assert "nvidia.com/gpu" not in a
    assert Resources(cpu=0) == Resources()
    assert a.fits_in(Resources(cpu=1000, memory=GIB, pods=3))
    assert not b.fits_in(a)
    assert Resources(cpu=-1).fits_in(Resources())
    assert hash(a) == hash(Resources(memory=GIB, cpu=1000))
    assert a == {"cpu": 1000, "memory": GIB}
    assert sorted(a) == ["cpu", "memory"] and len(a) == 2
    assert a.describe() == "1 cpu, 1Gi memory"
    assert Resources().describe() == "nothing"
    assert repr(b) == "Resources(cpu=500m, nvidia.com/gpu=1)"


def test_resources_reject_non_integers() -> None:
    with pytest.raises(TypeError, match=r"use Resources\.parse"):
        Resources(cpu="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Resources({"cpu": 1.5})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("resource", "amount", "text"),
    [
        ("cpu", 6000, "6"),
        ("cpu", 500, "500m"),
        ("cpu", 1500, "1500m"),
        ("cpu", 12_500, "12.5"),
        ("memory", 20 * GIB, "20Gi"),
        ("memory", 3 * 2**29, "1.5Gi"),
        ("memory", 512, "512"),
        ("ephemeral-storage", 2**20, "1Mi"),
        ("nvidia.com/gpu", 4, "4"),
        ("cpu", -2000, "-2"),
    ],
)
def test_format_quantity(resource: str, amount: int, text: str) -> None:
    assert format_quantity(resource, amount) == text


def test_parse_shares_one_object_per_spelling_and_still_refuses() -> None:
    first = Resources.parse({"cpu": "4", "memory": "16Gi"}, field="a")
    again = Resources.parse({"cpu": "4", "memory": "16Gi"}, field="b")
    assert first is again  # shared: immutable, and the planner then finds it by identity
    assert Resources.parse({"cpu": 1}, field="x") == Resources({"cpu": 1000})
    # True == 1 and hashes alike, but a bool is not a quantity: the shared result is not used.
    with pytest.raises(QuantityError, match=r"jobs\[3\]\.podRequests\.cpu"):
        Resources.parse({"cpu": True}, field="jobs[3].podRequests")
    # A spelling refused once is refused again, naming the field of each call.
    for where in ("one", "two"):
        with pytest.raises(QuantityError, match=f"{where}.cpu"):
            Resources.parse({"cpu": "lots"}, field=where)
