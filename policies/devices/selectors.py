"""The part of CEL that muster reads in device selectors: conjunctions of equalities on a
device's driver and attributes.

A DeviceClass selects devices with CEL expressions (`spec.selectors[].cel.expression`). muster
must know which devices of a node a class admits to count them, and it understands only:

    device.driver == "gpu.example.com"
    device.attributes["gpu.example.com"].model == "H100"      (or ["model"])
    ... && ...                                                 (parentheses allowed)

with string, integer and boolean literals on either side. Anything else (other operators,
functions, capacities, `||`, `!`) is refused with `SelectorError` naming the expression,
rather than guessed (docs/devices.md). Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

AttrValue = str | int | bool


@dataclass(frozen=True, slots=True)
class Version:
    """A device attribute of type version (semver): CEL compares it only through semver(),
    which muster does not read, so no literal equals it."""

    text: str


Attributes = Mapping[tuple[str, str], "AttrValue | Version"]
"""A device's attributes by (domain, name): `gpu.example.com/model` is
("gpu.example.com", "model"); an attribute written without a domain has its driver's."""

MAX_EXPRESSION: Final = 10 * 1024
"""Kubernetes' own bound on a selector's CEL expression (10 KiB)."""


class SelectorError(ValueError):
    """A selector muster does not understand; the message says what it reads instead."""


@dataclass(frozen=True, slots=True)
class Clause:
    """One equality: the device's driver (`name` ""), or its attribute (`domain`, `name`)."""

    domain: str
    name: str
    value: AttrValue
    driver: bool = False

    def holds(self, driver: str, attributes: Attributes) -> bool:
        found: object = driver if self.driver else attributes.get((self.domain, self.name))
        # CEL compares like types only: 1 == true is an error there, not true.
        return type(found) is type(self.value) and found == self.value


@dataclass(frozen=True, slots=True)
class DeviceFilter:
    """Devices for which every clause holds (no clause: every device)."""

    clauses: tuple[Clause, ...] = ()

    def admits(self, driver: str, attributes: Attributes) -> bool:
        return all(clause.holds(driver, attributes) for clause in self.clauses)

    def __and__(self, other: DeviceFilter) -> DeviceFilter:
        return DeviceFilter((*self.clauses, *other.clauses))


EVERY_DEVICE: Final = DeviceFilter()

UNDERSTOOD: Final = (
    'muster reads only conjunctions (&&) of device.driver == "..." and '
    'device.attributes["domain"].name == "..." (a string, integer or boolean)'
)

_TOKEN: Final = re.compile(
    r"""\s*(?:(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|(?P<int>-?[0-9]+)"""
    r"""|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>&&|==|[()\[\].]))"""
)


def _tokens(expression: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    position = 0
    text = expression.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise SelectorError(f"{text[position : position + 20]!r} is not understood")
        kind = match.lastgroup
        assert kind is not None
        out.append((kind, match.group(kind)))
        position = match.end()
    return out


def _unquote(token: str) -> str:
    body = token[1:-1]
    return re.sub(r"\\(.)", r"\1", body)


class _Parser:
    """A recursive descent over `_tokens`: expr := term ('&&' term)*; term := '(' expr ')' |
    operand '==' operand."""

    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.at = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, value: str | None = None, kind: str | None = None) -> str:
        token = self.peek()
        if token is None or (value is not None and token[1] != value):
            raise SelectorError(
                f"expected {value or kind!r} at the end"
                if token is None
                else (f"expected {value!r}, found {token[1]!r}")
            )
        if kind is not None and token[0] != kind:
            raise SelectorError(f"expected a {kind}, found {token[1]!r}")
        self.at += 1
        return token[1]

    def expression(self) -> list[Clause]:
        clauses = self.term()
        while (token := self.peek()) is not None and token[1] == "&&":
            self.at += 1
            clauses += self.term()
        return clauses

    def term(self) -> list[Clause]:
        token = self.peek()
        if token is not None and token[1] == "(":
            self.at += 1
            clauses = self.expression()
            self.take(")")
            return clauses
        left = self.operand()
        self.take("==")
        right = self.operand()
        if isinstance(left, Clause) == isinstance(right, Clause):
            raise SelectorError(
                "an equality needs a device field on one side, a literal on the other"
            )
        clause, value = (left, right) if isinstance(left, Clause) else (right, left)
        assert isinstance(clause, Clause) and not isinstance(value, Clause)
        return [Clause(clause.domain, clause.name, value, clause.driver)]

    def operand(self) -> Clause | AttrValue:
        token = self.peek()
        if token is None:
            raise SelectorError("the expression ends too early")
        kind, text = token
        self.at += 1
        if kind == "string":
            return _unquote(text)
        if kind == "int":
            return int(text)
        if kind == "ident" and text in ("true", "false"):
            return text == "true"
        if kind == "ident" and text == "device":
            return self.device_field()
        raise SelectorError(f"{text!r} is not understood")

    def device_field(self) -> Clause:
        self.take(".")
        field_name = self.take(kind="ident")
        if field_name == "driver":
            return Clause("", "", "", driver=True)
        if field_name != "attributes":
            raise SelectorError(f"device.{field_name} is not understood")
        self.take("[")
        domain = _unquote(self.take(kind="string"))
        self.take("]")
        token = self.peek()
        if token is not None and token[1] == "[":
            self.at += 1
            name = _unquote(self.take(kind="string"))
            self.take("]")
        else:
            self.take(".")
            name = self.take(kind="ident")
        return Clause(domain, name, "")


def parse_selector(expression: str) -> DeviceFilter:
    """The devices a selector's CEL expression admits; SelectorError if muster does not read
    it (the message ends with what it reads)."""
    if not isinstance(expression, str) or not expression.strip():
        raise SelectorError(f"the expression is empty; {UNDERSTOOD}")
    if len(expression) > MAX_EXPRESSION:
        raise SelectorError(f"the expression is longer than {MAX_EXPRESSION} characters")
    try:
        parser = _Parser(_tokens(expression))
        clauses = parser.expression()
        if parser.peek() is not None:
            raise SelectorError(f"{parser.peek()[1]!r} is not understood")  # type: ignore[index]
    except SelectorError as exc:
        raise SelectorError(f"{exc}; {UNDERSTOOD}") from None
    return DeviceFilter(tuple(clauses))
