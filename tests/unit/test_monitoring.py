"""The Grafana dashboard and the alerts name only metrics muster exports, with their labels.

Every PromQL expression of manifests/overlays/monitoring/ (each panel's targets, the dashboard's
variable queries, each alert's expr) is read by a small PromQL reader: the metric selectors and
the labels their matchers use, and the labels of by/without/on/ignoring/group_* clauses, legends
(`{{queue}}`) and alert annotations (`{{ $labels.queue }}`). Each muster_* metric must be a
series the controller's registry (admission/metrics.py) or the webhook's (webhook/metrics.py)
exposes, each label one those series carry (or one Prometheus adds to every scraped series).
The apiserver_* metrics (the webhook as kube-apiserver sees it) are checked against a real
kube-apiserver's /metrics by tests/cluster/test_monitoring.py, with the same reader.

Renaming a metric or a label in the code without the dashboard or the alerts fails here, and
the checker is shown to catch exactly that.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from admission.metrics import ControllerMetrics
from policies import Resources
from webhook.metrics import registry_for
from webhook.review import WebhookState

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "manifests" / "overlays" / "monitoring"
EXTERNAL_PREFIX = "apiserver_"
"""kube-apiserver's metrics: muster's webhook as the apiserver sees it (latency, call errors)."""
TARGET_LABELS = frozenset(
    {"job", "instance", "namespace", "pod", "service", "endpoint", "container"}
)
"""Labels the Prometheus Operator puts on every series it scrapes through a ServiceMonitor."""

_TOKEN = re.compile(
    r"""(?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
    |(?P<range>\[[^\]]*\])
    |(?P<duration>(?:\d+(?:ms|[smhdwy]))+\b)
    |(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
    |(?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
    |(?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=(){},])
    |(?P<space>\s+)""",
    re.VERBOSE,
)
_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2"}
_AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count"}
_AGGREGATIONS |= {"count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}


@dataclass(frozen=True)
class Selector:
    metric: str
    labels: frozenset[str]


@dataclass(frozen=True)
class Expression:
    """One PromQL expression, where it is shipped, and the labels its output must carry
    (legend placeholders, alert annotations)."""

    where: str
    promql: str
    shown_labels: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Read:
    selectors: tuple[Selector, ...]
    grouping: frozenset[str]
    """Every label a by/without/on/ignoring/group_left/group_right clause names."""
    aggregated: tuple[tuple[frozenset[str], tuple[Selector, ...]], ...]
    """Each `AGG by (labels) (...)`: its labels and the selectors it aggregates, which must all
    carry them."""


Tokens = list[tuple[str, str]]


def _tokens(promql: str) -> Tokens:
    out: Tokens = []
    at = 0
    while at < len(promql):
        match = _TOKEN.match(promql, at)
        if match is None:
            raise ValueError(f"cannot read PromQL at {promql[at : at + 20]!r} in {promql!r}")
        at = match.end()
        kind = match.lastgroup or ""
        if kind != "space":
            out.append((kind, match.group()))
    return out


def _closing(tokens: Tokens, at: int) -> int:
    """The index of the `)` that closes the `(` at `at`."""
    depth = 0
    for j in range(at, len(tokens)):
        depth += {"(": 1, ")": -1}.get(tokens[j][1], 0)
        if depth == 0:
            return j
    raise ValueError(f"unbalanced parentheses in {' '.join(t for _, t in tokens)}")


def _labels(tokens: Tokens, at: int) -> frozenset[str]:
    """The label names of the list `(a, b)` that starts at `at`."""
    return frozenset(t for k, t in tokens[at + 1 : _closing(tokens, at)] if k == "ident")


def _aggregation_scope(tokens: Tokens, at: int) -> tuple[frozenset[str], int, int] | None:
    """For the aggregation at `at` (`sum by (q) (x)` or `sum (x) by (q)`): its by-labels and
    the token range of its argument; None for `without` or no clause."""
    if tokens[at + 1][1] in ("by", "without"):
        clause, labels = tokens[at + 1][1], _labels(tokens, at + 2)
        start = _closing(tokens, at + 2) + 1
    else:
        start = at + 1
        after = _closing(tokens, start) + 1
        if after + 1 >= len(tokens) or tokens[after][1] not in ("by", "without"):
            return None
        clause, labels = tokens[after][1], _labels(tokens, after + 1)
    return (labels, start, _closing(tokens, start)) if clause == "by" else None


def _selector(tokens: Tokens, at: int) -> tuple[Selector, int]:
    """The selector whose metric name is at `at`, and the index after it."""
    if at + 1 < len(tokens) and tokens[at + 1][1] == "{":
        end = next(j for j in range(at + 1, len(tokens)) if tokens[j][1] == "}")
        matchers = tokens[at + 2 : end]  # label op value, comma-separated
        labels = {t for j, (k, t) in enumerate(matchers) if k == "ident" and j % 4 == 0}
        return Selector(tokens[at][1], frozenset(labels)), end + 1
    return Selector(tokens[at][1], frozenset()), at + 1


def read(promql: str) -> Read:
    """The metric selectors of `promql` with the labels their matchers use, the labels of its
    grouping clauses, and what each `by` aggregation aggregates."""
    tokens = _tokens(promql)
    found: list[tuple[int, Selector]] = []
    grouping: set[str] = set()
    scopes: list[tuple[frozenset[str], int, int]] = []
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        following = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if kind == "op" and text == "{":
            raise ValueError(f"a selector without a metric name in {promql!r}")
        if kind != "ident" or text in _KEYWORDS:
            i += 1
        elif text in _GROUPING:
            if following == "(":
                grouping |= _labels(tokens, i + 1)
                i = _closing(tokens, i + 1)
            i += 1
        elif text in _AGGREGATIONS and following in ("(", "by", "without"):
            if scope := _aggregation_scope(tokens, i):
                scopes.append(scope)
            i += 1
        elif following == "(":  # a function
            i += 1
        else:
            selector, after = _selector(tokens, i)
            found.append((i, selector))
            i = after
    aggregated = tuple(
        (labels, tuple(s for at, s in found if start < at < end)) for labels, start, end in scopes
    )
    return Read(tuple(s for _, s in found), frozenset(grouping), aggregated)


_LEGEND = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_ANNOTATION = re.compile(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)")
_LABEL_VALUES = re.compile(r"^label_values\(\s*(.+?)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)$")


def dashboard_expressions(dashboard: dict[str, Any]) -> Iterator[Expression]:
    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    for panel in panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            shown = frozenset(_LEGEND.findall(target.get("legendFormat", "")))
            yield Expression(f"panel {panel['title']!r}", target["expr"], shown)
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            match = _LABEL_VALUES.match(query)
            assert match, f"variable {variable['name']}: expected label_values(...), not {query}"
            yield Expression(f"variable {variable['name']!r}", match[1], frozenset({match[2]}))


def rule_expressions(rule_file: dict[str, Any]) -> Iterator[Expression]:
    for group in rule_file["spec"]["groups"]:
        for rule in group["rules"]:
            shown = frozenset(
                label
                for text in rule.get("annotations", {}).values()
                for label in _ANNOTATION.findall(text)
            )
            yield Expression(f"alert {rule['alert']!r}", rule["expr"], shown)


def shipped_expressions() -> list[Expression]:
    dashboard = json.loads((MONITORING / "muster-dashboard.json").read_text())
    rules = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return [*dashboard_expressions(dashboard), *rule_expressions(rules)]


def _series(registry: CollectorRegistry) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for family in registry.collect():
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
        if not family.samples:  # a collector's family with nothing to count yet
            name = f"{family.name}_total" if family.type == "counter" else family.name
            out[name] = set(getattr(family, "_labelnames", ()))
    return out


def exported_series() -> dict[str, frozenset[str]]:
    """Every series name the controller and the webhook expose, with its label names."""
    controller = ControllerMetrics()
    controller.track_requests(lambda: 0)
    controller.track_reviews(lambda: 0)
    for metric in vars(controller).values():
        if isinstance(metric, MetricWrapperBase) and metric._labelnames:
            metric.labels(*["x"] * len(metric._labelnames))  # a child, so it is exposed
    series = _series(controller.registry)
    series.update(_series(registry_for(WebhookState())))
    return {name: frozenset(labels) for name, labels in series.items()}


def problems(
    expressions: list[Expression], exported: dict[str, frozenset[str]], external: bool = False
) -> list[str]:
    """What the expressions name that the exported series lack. `external`: check the
    apiserver_* metrics (against the apiserver's series) instead of muster's."""
    found: list[str] = []
    for expression in expressions:
        parsed = read(expression.promql)
        mine = [s for s in parsed.selectors if s.metric.startswith(EXTERNAL_PREFIX) == external]
        available = set(TARGET_LABELS)
        for selector in mine:
            labels = exported.get(selector.metric)
            if labels is None:
                found.append(f"{expression.where}: {selector.metric} is not exported")
                continue
            available |= labels
            if extra := selector.labels - labels - TARGET_LABELS:
                found.append(
                    f"{expression.where}: {selector.metric} has no label {', '.join(sorted(extra))}"
                )
        for labels, aggregated in parsed.aggregated:
            for selector in aggregated:
                if selector in mine and selector.metric in exported:
                    for label in sorted(labels - exported[selector.metric] - TARGET_LABELS):
                        found.append(
                            f"{expression.where}: {selector.metric} has no label {label} "
                            "to aggregate by"
                        )
        if not mine or len(mine) != len(parsed.selectors):
            continue  # labels of mixed expressions are checked where all their series are known
        for label in sorted((parsed.grouping | expression.shown_labels) - available):
            found.append(f"{expression.where}: no series of {expression.promql!r} has {label}")
    return found


def test_every_metric_the_dashboard_and_the_alerts_name_is_exported_with_its_labels() -> None:
    expressions = shipped_expressions()
    assert len(expressions) >= 30
    assert problems(expressions, exported_series()) == []


def test_the_dashboard_and_the_alerts_cover_what_admins_watch() -> None:
    named = {s.metric for e in shipped_expressions() for s in read(e.promql).selectors}
    wanted = {
        "muster_pending_gangs",
        "muster_active_gangs",
        "muster_queue_usage",
        "muster_queue_nominal",
        "muster_queue_dominant_share",
        "muster_admission_wait_seconds_bucket",
        "muster_clogs_detected_total",
        "muster_evictions_total",
        "muster_preemptions_total",
        "muster_admitted_gangs_total",
        "apiserver_admission_webhook_admission_duration_seconds_bucket",
    }
    assert wanted <= named, wanted - named
    rules = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    alerts = {r["alert"] for g in rules["spec"]["groups"] for r in g["rules"]}
    assert alerts == {
        "MusterQueueStuck",
        "MusterRepeatedClogs",
        "MusterWebhookErrors",
        "MusterWebhookSlow",
        "MusterControllerNotActive",
    }


def test_a_renamed_metric_or_label_is_caught() -> None:
    exported = exported_series()
    renamed = dict(exported)
    renamed["muster_clogs_detected"] = renamed.pop("muster_clogs_detected_total")
    assert problems(shipped_expressions(), renamed) == [
        "panel 'Clogs and deadlocks': muster_clogs_detected_total is not exported",
        "alert 'MusterRepeatedClogs': muster_clogs_detected_total is not exported",
    ]
    relabelled = {**exported, "muster_pending_gangs": frozenset({"queue_name"})}
    found = problems(shipped_expressions(), relabelled)
    assert "panel 'Pending gangs': muster_pending_gangs has no label queue" in found
    assert (
        "alert 'MusterQueueStuck': muster_pending_gangs has no label queue to aggregate by" in found
    )
    assert "variable 'queue': no series of 'muster_pending_gangs' has queue" in found


@pytest.mark.parametrize(
    ("promql", "selectors", "grouping"),
    [
        (
            'sum by (le, name) (rate(x_bucket{name=~"a\\\\.b", type="v"}[$__rate_interval]))',
            {("x_bucket", frozenset({"name", "type"}))},
            {"le", "name"},
        ),
        (
            "a / on (q) group_left (r) b unless absent(c offset 5m) > bool 1",
            {("a", frozenset()), ("b", frozenset()), ("c", frozenset())},
            {"q", "r"},
        ),
        ('histogram_quantile(0.99, m{l!~"x,y"})', {("m", frozenset({"l"}))}, set()),
    ],
)
def test_the_reader_finds_selectors_and_grouping_labels(
    promql: str, selectors: set[tuple[str, frozenset[str]]], grouping: set[str]
) -> None:
    parsed = read(promql)
    assert {(s.metric, s.labels) for s in parsed.selectors} == selectors
    assert parsed.grouping == grouping
    with pytest.raises(ValueError, match="without a metric name"):
        read('sum({__name__="x"})')


def test_usage_reads_zero_once_nothing_holds_it_and_nominal_is_exported() -> None:
    metrics = ControllerMetrics()
    nominal = {"a": Resources({"cpu": 8000, "memory": 2**30})}
    metrics.set_usage({"a": Resources({"cpu": 2000})}, Resources({"cpu": 64000}), nominal)
    text = metrics.exposition().decode()
    assert 'muster_queue_nominal{queue="a",resource="cpu"} 8.0' in text
    assert 'muster_queue_usage{queue="a",resource="cpu"} 2.0' in text
    assert 'muster_queue_usage{queue="a",resource="memory"} 0.0' in text
    metrics.set_usage({"b": Resources({"cpu": 1000})}, Resources({"cpu": 64000}), nominal)
    text = metrics.exposition().decode()
    assert 'muster_queue_usage{queue="a",resource="cpu"} 0.0' in text  # its gangs finished
    assert 'muster_queue_usage{queue="b",resource="cpu"} 1.0' in text
