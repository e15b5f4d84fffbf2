"""The kwok gang runner's rules on pods as it sees them (no API call is made: its patches are
only collected by `_advance`)."""

from __future__ import annotations

from typing import Any

from kubeport.kubeapi import Credentials, KubeClient
from simulator.controlplane.gangrun import GangRunner

KEY = ("ns", "g")


def pod(name: str, phase: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": name,
            "labels": {"muster.dev/gang": "g", "batch.kubernetes.io/job-name": "g"},
            "annotations": {"muster.dev/gang-runtime": "30s"},
        },
        "status": {"phase": phase},
    }


def runner() -> GangRunner:
    client = KubeClient(Credentials("https://127.0.0.1:1", None, None, None))
    job = {"metadata": {"annotations": {"muster.dev/min-members": "2"}}, "spec": {"parallelism": 4}}
    return GangRunner(client, job_lookup=lambda namespace, name: job)


def test_a_gang_runs_once_its_minimum_runs_and_a_second_wave_gets_the_runtime_at_once() -> None:
    gangs = runner()
    gangs._advance(KEY, [pod("a", "Running"), pod("b", "Pending")], now=100.0)
    assert gangs.runs == 0 and not gangs._patches  # one of two: the gang waits
    gangs._advance(KEY, [pod("a", "Running"), pod("b", "Running")], now=101.0)
    assert gangs.runs == 1 and gangs.started[KEY] == 131.0
    assert [p[0] for p in gangs._patches] == ["a", "b"]
    # The run completes: every member is gone from the live set (a live-only LIST shows none).
    gangs._advance(KEY, [], now=131.0)
    assert KEY not in gangs.started and KEY in gangs.completed
    # A second wave of one pod (below the minimum) would wait forever as a gang: it is given
    # the runtime at once, and counted.
    gangs._patches = []
    gangs._advance(KEY, [pod("a", "Succeeded"), pod("c", "Running")], now=140.0)
    assert gangs.started[KEY] == 170.0 and gangs.stragglers == {KEY: 1}
    assert [p[0] for p in gangs._patches] == ["c"]
    assert gangs.runs == 1  # not a gang run


def test_an_evicted_gang_starts_afresh_and_is_no_second_wave() -> None:
    gangs = runner()
    gangs._advance(KEY, [pod("a", "Running"), pod("b", "Running")], now=100.0)
    # Evicted: its pods are deleted (none succeeded), so the next admission is a new run.
    gangs._advance(KEY, [], now=110.0)
    assert KEY not in gangs.completed
    gangs._advance(KEY, [pod("c", "Running")], now=120.0)
    assert KEY not in gangs.started and not gangs.stragglers
