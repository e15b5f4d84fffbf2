"""What one caller of the status service may see: pure functions, no I/O.

Every answer names gangs as `namespace/name` (the `gang` field, reasons, `waitingFor`, the
preemptor, an estimate's `waitsFor`, history rows). A caller who may not read Jobs in a
namespace must not learn the names of its objects, so a body is first searched for the
namespaces it names (`namespaces_named`), the service asks the apiserver which of those the
caller may read (kubeport/statusauth.py, cached), and `redact` rewrites every reference to
another one as "a gang in another namespace". Whole rows about such gangs (history, listings)
are dropped instead (`readable_rows`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable
from typing import Any, TypeVar

__all__ = ["HIDDEN", "namespace_of", "namespaces_named", "readable_rows", "redact", "redact_text"]

HIDDEN = "in another namespace"
"""What stands for a gang the caller may not read (after `gang ` or `head `)."""

# namespace/name: a namespace is a DNS label (no dots), a name a DNS subdomain. Not preceded by
# a word character, dot, slash or dash, so `nvidia.com/gpu` or `muster.dev/queue` never match.
_GANG_REF = re.compile(
    r"(?<![\w./-])(?:(gang|head) )?"
    r"([a-z0-9](?:[-a-z0-9]*[a-z0-9])?)/([a-z0-9](?:[-a-z0-9.]*[a-z0-9])?)(?![\w/-])"
)

T = TypeVar("T")


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def namespaces_named(value: Any, known: Collection[str]) -> set[str]:
    """The namespaces among `known` that some `namespace/name` in `value` (a JSON body: dicts,
    lists, strings, numbers) refers to."""
    found: set[str] = set()
    for text in _strings(value):
        if "/" not in text:
            continue
        for match in _GANG_REF.finditer(text):
            if match.group(2) in known:
                found.add(match.group(2))
    return found


def redact_text(text: str, hidden: Collection[str]) -> str:
    """`text` with every `namespace/name` of a namespace in `hidden` replaced: "big gang ns/x"
    becomes "big gang in another namespace", "preempted by ns/x" "preempted by a gang in another
    namespace"."""
    if not hidden or "/" not in text:
        return text

    def replace(match: re.Match[str]) -> str:
        if match.group(2) not in hidden:
            return match.group(0)
        noun = match.group(1)
        return f"{noun} {HIDDEN}" if noun else f"a gang {HIDDEN}"

    return _GANG_REF.sub(replace, text)


def redact(value: T, hidden: Collection[str]) -> T:
    """A copy of the JSON body `value` with `redact_text` applied to every string in it (keys
    included); list items that become the same string are kept once."""
    if not hidden:
        return value
    result: Any
    if isinstance(value, str):
        result = redact_text(value, hidden)
    elif isinstance(value, dict):
        result = {redact_text(k, hidden): redact(v, hidden) for k, v in value.items()}
    elif isinstance(value, list):
        result, seen = [], set()
        for item in value:
            item = redact(item, hidden)
            if isinstance(item, str):
                if item in seen:
                    continue
                seen.add(item)
            result.append(item)
    else:
        result = value
    return result  # type: ignore[no-any-return]


def readable_rows(
    rows: Iterable[dict[str, Any]], may_read: Callable[[str], bool], field: str = "gang"
) -> list[dict[str, Any]]:
    """The rows whose `field` (`namespace/name`) lies in a namespace the caller may read."""
    return [row for row in rows if may_read(str(row.get(field, "")).partition("/")[0])]


def namespace_of(key: str) -> str:
    """The namespace of a gang key `namespace/name`."""
    return key.partition("/")[0]
