"""Faults on the real control plane, each during a burst of one-pod gangs (tests/faults.py):
kube-apiserver killed -9 and restarted, etcd killed -9 and restarted, the webhook process killed
-9, and a 30-second partition between muster and the apiserver.

muster recovers without a restart of its own (its pid is unchanged, and but for the webhook
test its webhook child's too); every Job is stored suspended and stamped by the webhook,
admitted exactly once and run once; the quota is never exceeded at any version the test's
watch saw. Each test prints its figures (`FAULT {...}`, with pytest -s): docs/reliability.md
quotes them.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from admission.launcher import is_ready
from kubeport.kubeapi import ApiError, KubeClient
from simulator.controlplane.cluster import LocalCluster
from tests import builders
from tests.conftest import MusterProcess
from tests.controller_helpers import jobs_path
from tests.faults import WEBHOOK_DOWN, Burst, LoopbackPartition, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

BURST_TIMEOUT = 1200.0
QUOTA_CPU = 200
"""Room for 200 one-cpu gangs at a time: the quota binds (the burst outruns it), and is wide
enough that the control plane, not the quota, sets the pace (at 100 the quota did)."""


def local_cluster(kubeconfig: Path) -> LocalCluster:
    cluster = LocalCluster.of_kubeconfig(kubeconfig)
    if cluster is None:
        pytest.skip("restarts control-plane processes: needs a cluster of `muster cluster up`")
    return cluster


def child_pids(pid: int) -> list[int]:
    """The live children of process `pid` (muster's webhook child, for a split muster run)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def webhook_pid(muster: MusterProcess) -> int:
    children = child_pids(muster.run.pid)
    assert len(children) == 1, f"muster run {muster.run.pid} has children {children}"
    return children[0]


def restart_mid_burst(
    kube: KubeClient, kubeconfig: Path, namespace: str, muster: MusterProcess, component: str
) -> None:
    """Kill -9 `component` a quarter into a 2,000-Job burst, leave it down 5 s, start it again
    with the same command line and data; muster must carry on by itself."""
    cluster = local_cluster(kubeconfig)
    pids = (muster.run.pid, webhook_pid(muster))
    # A gang whose pod kwok never reports on (its update cut by the kill) is evicted as Clogged
    # once the clog clock gives up waiting on the control plane for it, NOT_STARTED_LIMIT clog
    # timeouts after its admission (policies.lifecycle): with 30 s, 5 minutes, well inside
    # BURST_TIMEOUT (see Burst.check), rather than the default's 50. (At 60 s the etcd test
    # waited 10 minutes for one such Job on every CI run.)
    spec = {"clogTimeout": "30s"}
    with Burst(kube, namespace, jobs=2000, quota_cpu=QUOTA_CPU, queue_spec=spec) as burst:
        burst.start()
        burst.wait_created(500)
        at = burst.created
        killed = time.monotonic()
        back = cluster.restart(component, down_for=5.0)
        burst.finish(BURST_TIMEOUT)
        burst.check(control_plane_faulted=True)
    assert muster.run.alive() and (muster.run.pid, webhook_pid(muster)) == pids, (
        "muster was restarted; it must recover by itself"
    )
    admitted = burst.ledger.admitted_after(killed + back)
    burst.report(
        f"{component} kill -9",
        injected=f"kill -9 at {at} Jobs created, down 5 s, restarted in place",
        down_seconds=round(back, 1),
        recover_seconds=round(admitted - killed, 1) if admitted else None,
    )


def test_kube_apiserver_killed_mid_burst(
    kube: KubeClient, kubeconfig: Path, namespace: str, muster: MusterProcess
) -> None:
    restart_mid_burst(kube, kubeconfig, namespace, muster, "kube-apiserver")


def test_etcd_killed_mid_burst(
    kube: KubeClient, kubeconfig: Path, namespace: str, muster: MusterProcess
) -> None:
    restart_mid_burst(kube, kubeconfig, namespace, muster, "etcd")


def test_webhook_killed_mid_burst_refuses_creates_then_serves_again(
    kube: KubeClient, namespace: str, muster: MusterProcess
) -> None:
    """While the webhook is down the apiserver refuses creates in managed namespaces
    (failurePolicy Fail) and stores nothing; `muster run` starts its webhook again by itself."""
    parent = muster.run.pid
    # Pods of 20 s, not the burst's 1 s: 600 Jobs of 1 s ran at most 199 at a time on CI's
    # machine, so the quota never bound and "never exceeded" had nothing to check. At 20 s the
    # quota binds once muster admits 10 gangs a second for 20 s (it admits hundreds a cycle).
    with Burst(kube, namespace, jobs=600, quota_cpu=QUOTA_CPU, runtime="20s") as burst:
        burst.start()
        burst.wait_created(150)
        child = webhook_pid(muster)
        at = burst.created
        killed = time.monotonic()
        os.kill(child, signal.SIGKILL)
        wait_until(lambda: not Path(f"/proc/{child}").exists(), 30, "the webhook child gone")
        probe = builders.job("probe", burst.queue, pods=1, runtime="2s")
        with pytest.raises(ApiError) as refused:
            kube.create(jobs_path(namespace), probe)
        assert WEBHOOK_DOWN in refused.value.message, refused.value.message
        refusing = time.monotonic()  # any create stored from here on went to a new webhook
        with pytest.raises(ApiError) as missing:
            kube.get(f"{jobs_path(namespace)}/probe")
        assert missing.value.status == 404
        url = muster.webhook_metrics_url
        assert url is not None
        back = wait_until(lambda: is_ready(url, True), 120, "the webhook serving again")
        burst.finish(BURST_TIMEOUT)
        burst.check()
    assert muster.run.alive() and muster.run.pid == parent
    assert webhook_pid(muster) != child
    assert "the webhook process exited (-9); starting it again" in muster.text()
    stored = burst.stored_after(refusing)
    burst.report(
        "webhook kill -9",
        injected=f"kill -9 of the webhook child at {at} Jobs created",
        probe_refusal=refused.value.message[:300],
        down_seconds=round(back, 1),
        recover_seconds=round(stored - killed, 1) if stored else None,
    )


def proxied_kubeconfig(kubeconfig: Path, port: int, where: Path) -> Path:
    """A copy of `kubeconfig` whose clusters' server is 127.0.0.1:`port` (the partition's
    pass-through; the apiserver's certificate names 127.0.0.1, so TLS checks still pass)."""
    doc = yaml.safe_load(kubeconfig.read_text())
    for cluster in doc["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{port}"
    path = where / "kubeconfig-through-proxy"
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


def test_a_30s_partition_from_the_apiserver_loses_no_decision(
    kube: KubeClient, kubeconfig: Path, namespace: str, muster: MusterProcess, tmp_path: Path
) -> None:
    """muster (controller and webhook) reaches the apiserver only through a pass-through that
    cuts every connection and refuses new ones for 30 s mid-burst; the apiserver still calls
    the webhook, so creates go on. No admission is lost or doubled."""
    server = urlparse(kube.credentials.server)
    proxy = LoopbackPartition((server.hostname or "127.0.0.1", server.port or 443))
    saved = muster.kubeconfig
    muster.kubeconfig = proxied_kubeconfig(kubeconfig, proxy.port, tmp_path)
    try:
        muster.restart(signal.SIGTERM)
        pids = (muster.run.pid, webhook_pid(muster))
        with Burst(kube, namespace, jobs=500, quota_cpu=QUOTA_CPU // 2) as burst:
            burst.start()
            burst.wait_created(100)
            assert proxy.connections > 0, "muster does not go through the pass-through"
            at = burst.created
            cut_at = time.monotonic()
            proxy.partition(30)
            burst.finish(BURST_TIMEOUT)
            burst.check()
        assert muster.run.alive() and (muster.run.pid, webhook_pid(muster)) == pids
        # The cut held: nothing was admitted in its second half (the first leaves room for
        # writes that landed just before it and for the test's own watch lagging).
        cut_off = burst.ledger.admitted_between(cut_at + 15, cut_at + 30)
        assert cut_off == 0, f"{cut_off} admissions while muster was cut off"
        admitted = burst.ledger.admitted_after(cut_at + 30)
        burst.report(
            "partition 30 s",
            injected=f"muster cut off from the apiserver 30 s at {at} Jobs created "
            f"({proxy.cut} live connections cut)",
            down_seconds=30,
            recover_seconds=round(admitted - cut_at, 1) if admitted else None,
        )
    finally:
        muster.kubeconfig = saved
        muster.restart(signal.SIGTERM)
        proxy.close()
