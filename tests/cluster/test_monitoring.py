"""The apiserver's metrics the Grafana dashboard and the alerts name (muster's webhook as the
apiserver sees it: latency, call errors) exist in a real kube-apiserver, with the labels used.

The session's webhook is called once to allow a Job and once to refuse one (a bad
muster.dev/min-members), so the apiserver has made the series, then its /metrics are read and every
`apiserver_*` selector, matcher and `by` label of manifests/overlays/monitoring/ is checked
against them by the reader of tests/unit/test_monitoring.py (which checks muster's own).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from kubeport.kubeapi import ApiError, KubeClient
from policies.vocabulary import MIN_MEMBERS
from simulator.controlplane.build import Binaries
from tests import builders
from tests.conftest import MusterProcess
from tests.controller_helpers import create_queue, delete_queue, jobs_path
from tests.kube import create_through_webhook
from tests.unit.test_monitoring import EXTERNAL_PREFIX, problems, read, shipped_expressions

pytestmark = [pytest.mark.cluster]


def apiserver_series(kubeconfig: Path) -> dict[str, frozenset[str]]:
    done = subprocess.run(
        [str(Binaries.at().kubectl), "--kubeconfig", str(kubeconfig), "get", "--raw", "/metrics"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    # Read as written: prometheus_client's parser would rename a counter without _total
    # (apiserver_admission_webhook_rejection_count) to one with it.
    series: dict[str, set[str]] = {}
    for line in done.stdout.splitlines():
        if line and not line.startswith("#"):
            name = re.split(r"[{ ]", line, maxsplit=1)[0]
            labels = re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="', line.split("}", 1)[0])
            series.setdefault(name, set()).update(labels)
    return {name: frozenset(labels) for name, labels in series.items()}


def test_the_apiserver_metrics_of_the_dashboard_and_alerts_exist_with_their_labels(
    muster: MusterProcess, kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    queue = f"{namespace}-q"
    create_queue(kube, queue, {"nominal": {"cpu": "4"}})
    try:
        create_through_webhook(
            kube,
            jobs_path(namespace),
            builders.job("allowed", queue, pods=1),
        )
        bad = builders.job("refused", queue, pods=2)
        bad["metadata"]["annotations"] = {MIN_MEMBERS: "many"}
        with pytest.raises(ApiError) as refused:
            kube.create(jobs_path(namespace), bad)
        assert refused.value.status == 400
    finally:
        delete_queue(kube, queue)
    expressions = shipped_expressions()
    named = {
        s.metric
        for e in expressions
        for s in read(e.promql).selectors
        if s.metric.startswith(EXTERNAL_PREFIX)
    }
    assert named == {
        "apiserver_admission_webhook_admission_duration_seconds_bucket",
        "apiserver_admission_webhook_rejection_count",
    }
    assert problems(expressions, apiserver_series(kubeconfig), external=True) == []
