"""Prometheus metrics of the controller (prefix muster_, base units, no per-gang labels).

One private `CollectorRegistry` per controller, so several controllers in one process (tests,
benchmarks) do not collide. Documented in docs/metrics.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from policies import Resources

WAIT_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, float("inf"))
CYCLE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, float("inf"))


def _base_unit(resource: str, amount: int) -> float:
    # cpu is kept in millicores internally; export cores.
    return amount / 1000 if resource == "cpu" else float(amount)


def api_figures(text: str) -> dict[str, float]:
    """From a controller's metrics text: `requests` (every request its API client sent,
    watches excluded), `writes` (all writes), `writes:KIND` by what they do (admit, place-pod,
    queue-status, event, ...) and `admitted` (gangs admitted): what the benches and the kwok
    engine divide by the gangs served."""
    out: dict[str, float] = {"requests": 0.0, "writes": 0.0, "admitted": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "muster_api_requests_total":
                out["requests"] += sample.value
            elif sample.name == "muster_api_writes_total":
                kind = f"writes:{sample.labels.get('write', '')}"
                out[kind] = out.get(kind, 0.0) + sample.value
                out["writes"] += sample.value
            elif sample.name == "muster_admitted_gangs_total":
                out["admitted"] += sample.value
    return out


class ControllerMetrics:
    def __init__(self) -> None:
        """Every metric of the controller, in one registry. Long because it is one flat list
        of declarations, each read on its own (docs/metrics.md lists them)."""
        self.registry = CollectorRegistry()
        r = self.registry
        self.pending = Gauge(
            "muster_pending_gangs", "Gangs waiting for admission.", ["queue"], registry=r
        )
        self.admitted_gangs = Gauge(
            "muster_active_gangs", "Admitted gangs not finished yet.", ["queue"], registry=r
        )
        self.admitted = Counter(
            "muster_admitted_gangs_total", "Gangs admitted.", ["queue"], registry=r
        )
        self.gangs = Gauge(
            "muster_gangs",
            "Gangs not ended yet, by kind (Job, MiniCluster, JobSet, PodGroup) and state "
            "(Pending, BackingOff, Admitted, Running).",
            ["kind", "state"],
            registry=r,
        )
        self._gang_keys: set[tuple[str, str]] = set()
        self.evictions = Counter(
            "muster_evictions_total", "Gangs evicted, by reason.", ["reason"], registry=r
        )
        self.preemptions = Counter(
            "muster_preemptions_total",
            "Admitted gangs preempted (suspended and requeued without backoff), by their queue.",
            ["queue"],
            registry=r,
        )
        self.failed = Counter(
            "muster_failed_gangs_total", "Gangs marked Failed (backoff limit).", registry=r
        )
        self.clogs = Counter("muster_clogs_detected_total", "Clogged gangs detected.", registry=r)
        self.deadlocks = Counter(
            "muster_deadlocks_broken_total", "Wait-for cycles broken.", registry=r
        )
        self.resuspended = Counter(
            "muster_resuspended_total",
            "Managed Jobs unsuspended without admission and suspended again.",
            registry=r,
        )
        self.undone = Counter(
            "muster_admissions_undone_total",
            "Admissions the controller undid because the gang no longer ran as admitted, by "
            "reason: Outgrown (it asked for or ran more pods than admitted: evicted), Suspended "
            "(suspended while admitted: requeued), LeftQueue (its queue label or stamp removed: "
            "suspended and let go).",
            ["reason"],
            registry=r,
        )
        self.preemptions_held = Counter(
            "muster_preemptions_held_total",
            "Plans whose admissions were held because a preemption victim's suspension was "
            "refused (its write, or the backoff after a refusal).",
            registry=r,
        )
        self.api_retries = Counter(
            "muster_api_retries_total", "API writes retried, by HTTP status.", ["code"], registry=r
        )
        self.writes = Counter(
            "muster_api_writes_total",
            "API writes sent, by what they do (admit, place-pod, evict, restore, ...); retries "
            "not counted.",
            ["write"],
            registry=r,
        )
        self.wait = Histogram(
            "muster_admission_wait_seconds",
            "From submission to admission.",
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.cycle = Histogram(
            "muster_plan_cycle_duration_seconds",
            "One admit cycle: snapshot and plan.",
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.share = Gauge(
            "muster_queue_dominant_share",
            "Weighted dominant share of each queue (0..1 of cluster capacity).",
            ["queue"],
            registry=r,
        )
        self.usage = Gauge(
            "muster_queue_usage",
            "Quota held by admitted gangs, in base units (cpu cores, bytes, counts).",
            ["queue", "resource"],
            registry=r,
        )
        self.nominal = Gauge(
            "muster_queue_nominal",
            "Each queue's nominal quota (spec.nominal), in base units: what muster_queue_usage "
            "is held against.",
            ["queue", "resource"],
            registry=r,
        )
        self.capacity = Gauge(
            "muster_cluster_capacity",
            "Allocatable capacity of all nodes, in base units.",
            ["resource"],
            registry=r,
        )
        self._usage_keys: set[tuple[str, str]] = set()
        self.events_dropped = Counter(
            "muster_events_dropped_total",
            "Kubernetes Events not sent because the event backlog was full.",
            registry=r,
        )

    def track_requests(self, count: Callable[[], int]) -> None:
        """Export `muster_api_requests_total` from the API client's own request counter."""

        class _Requests(Collector):
            def collect(self) -> Iterator[CounterMetricFamily]:
                yield CounterMetricFamily(
                    "muster_api_requests",
                    "Requests the controller's API client sent (watches excluded).",
                    value=count(),
                )

        self.registry.register(_Requests())

    def track_reviews(self, count: Callable[[], int]) -> None:
        """Export `muster_status_auth_reviews_total`: TokenReviews and SubjectAccessReviews
        the status service sent (its cache's misses; kubeport/statusauth.py)."""

        class _Reviews(Collector):
            def collect(self) -> Iterator[CounterMetricFamily]:
                yield CounterMetricFamily(
                    "muster_status_auth_reviews",
                    "TokenReviews and SubjectAccessReviews the status service and the metrics "
                    "sent to authenticate and authorize callers (cache misses).",
                    value=count(),
                )

        self.registry.register(_Reviews())

    def set_usage(
        self,
        usage: Mapping[str, Resources],
        capacity: Resources,
        nominal: Mapping[str, Resources] | None = None,
    ) -> None:
        """Usage, capacity and nominal quota. A (queue, resource) in a nominal quota or used
        before reads 0 when nothing holds it now, not its last figure: dashboards and alerts
        divide usage by nominal, and a queue whose gangs all finished has quota free."""
        now: dict[tuple[str, str], float] = {}
        for queue, amounts in (nominal or {}).items():
            for resource, amount in amounts.items():
                self.nominal.labels(queue, resource).set(_base_unit(resource, amount))
                now[(queue, resource)] = 0.0
        for key in self._usage_keys:
            now.setdefault(key, 0.0)
        for queue, amounts in usage.items():
            for resource, amount in amounts.items():
                now[(queue, resource)] = _base_unit(resource, amount)
        for (queue, resource), value in now.items():
            self.usage.labels(queue, resource).set(value)
        self._usage_keys = set(now)
        for resource, amount in capacity.items():
            self.capacity.labels(resource).set(_base_unit(resource, amount))

    def set_gangs(self, counts: Mapping[tuple[str, str], int]) -> None:
        """`muster_gangs`: (kind, state) -> gangs; one counted before and none now reads 0."""
        for key in self._gang_keys - set(counts):
            self.gangs.labels(*key).set(0.0)
        for key, count in counts.items():
            self.gangs.labels(*key).set(float(count))
        self._gang_keys |= set(counts)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
