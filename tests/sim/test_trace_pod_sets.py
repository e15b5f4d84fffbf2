"""Gangs of several pod sets in traces (issue 27): the `podSets` field of a trace job, its
errors, and its round trips through the trace writer, gangs.csv and CSV job lists."""

from __future__ import annotations

import copy
import csv
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from policies import PodSet, Resources, Toleration
from policies.history import COLUMNS
from simulator.engine import EngineConfig, simulate
from simulator.report import write_outputs
from simulator.trace import (
    POD_SETS_COLUMN,
    TraceError,
    dump_yaml,
    expand,
    from_dict,
    load,
    loads,
    pod_sets_document,
    read_jobs_csv,
    with_jobs,
)
from tests.sim.strategies import pod_set_trace_documents

CPU = 1000
GIB = 2**30


def mpi_document(**job: Any) -> dict[str, Any]:
    """A login node and two compute nodes; one job of a launcher and its workers."""
    fields: dict[str, Any] = {
        "name": "mpi",
        "count": 2,
        "queue": "a",
        "size": 3,
        "runtime": "60s",
        "podSets": [
            {
                "name": "launcher",
                "count": 1,
                "podRequests": {"cpu": "1"},
                "nodeSelector": {"pool": "login"},
            },
            {"name": "worker", "podRequests": {"cpu": "4", "memory": "8Gi"}},
        ],
    }
    fields.update(job)
    return {
        "name": "mpi",
        "cluster": {
            "nodes": [
                {"name": "login", "allocatable": {"cpu": "2"}, "labels": {"pool": "login"}},
                {"name": "compute", "count": 2, "allocatable": {"cpu": "8", "memory": "32Gi"}},
            ]
        },
        "queues": [{"name": "a", "sizeRatio": None}],
        "jobs": [fields],
    }


def test_a_job_without_pod_sets_is_one_pod_set_as_before() -> None:
    for group in load("blog-burst").jobs:
        assert group.others == () and group.set_name == ""
        assert group.pod_sets == (group.main,) and group.main.count == group.size


def test_pod_sets_make_one_gang_whose_size_counts_every_pod() -> None:
    trace = from_dict(mpi_document())
    (group,) = trace.jobs
    # The set without count is the main (elastic) one; it takes the rest of size.
    assert group.set_name == "worker" and group.main.count == 2
    assert group.pod_requests == Resources(cpu=4 * CPU, memory=8 * GIB)
    assert group.others == (PodSet("launcher", 1, Resources(cpu=CPU), False, {"pool": "login"}),)
    assert trace.pod_count == 6  # two gangs of 3 pods
    gang = expand(trace)[0].gang
    assert gang.size == 3 and gang.fixed == 1 and gang.set_name == "worker"
    assert [pod_set.name for pod_set in gang.pod_sets] == ["worker", "launcher"]
    assert gang.demand(3) == Resources(cpu=9 * CPU, memory=16 * GIB)


def test_the_main_set_is_the_largest_when_every_set_has_a_count() -> None:
    sets = [
        {"name": "driver", "count": 1, "podRequests": {"cpu": "1"}},
        {"name": "ps", "count": 2, "podRequests": {"cpu": "2"}},
        {"name": "worker", "count": 2, "podRequests": {"cpu": "4"}},
    ]
    (group,) = from_dict(mpi_document(size=5, podSets=sets)).jobs
    # ps and worker tie: the first of the largest is the main set.
    assert group.set_name == "ps" and group.main.count == 2
    assert [other.name for other in group.others] == ["driver", "worker"]


def test_min_size_counts_every_pod_and_shrinks_only_the_main_set() -> None:
    trace = from_dict(mpi_document(size=5, minSize=3, elasticAfter="10s"))
    gang = expand(trace)[0].gang
    assert gang.min == 3 and gang.elastic and gang.fixed == 1


def _bad(path: str, value: Any) -> dict[str, Any]:
    """The mpi document with one field of its job (a dotted path) set to ``value``."""
    document = copy.deepcopy(mpi_document())
    target: Any = document["jobs"][0]
    *parents, last = path.split(".")
    for key in parents:
        target = target[int(key)] if key.isdigit() else target[key]
    if value is _DELETE:
        del target[last]
    else:
        target[last] = value
    return document


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            "podRequests",
            {"cpu": "1"},
            r"jobs[0] (mpi).podRequests: a job with podSets has no podRequests of its own",
        ),
        (
            "nodeSelector",
            {"pool": "login"},
            r"jobs[0] (mpi).nodeSelector: a job with podSets has no nodeSelector of its own",
        ),
        ("podSets", [], r"jobs[0] (mpi).podSets: must not be empty"),
        ("podSets", {"name": "x"}, r"jobs[0] (mpi).podSets: expected a list, got dict"),
        ("podSets.0.replicas", 2, r"jobs[0] (mpi).podSets[0] (launcher): unknown field 'replicas'"),
        ("podSets.0.name", "Launcher", r"jobs[0] (mpi).podSets[0] (Launcher).name: 'Launcher'"),
        ("podSets.1.name", "launcher", r"podSets[1] (launcher).name: duplicate pod set name"),
        (
            "podSets.0.count",
            0,
            r"jobs[0] (mpi).podSets[0] (launcher).count: 0 is below the minimum 1",
        ),
        ("podSets.0.count", _DELETE, r"jobs[0] (mpi).podSets[1] (worker).count: missing; only"),
        ("podSets.1.count", 5, r"jobs[0] (mpi).size: 3 is not the 6 pods of its pod sets"),
        ("podSets.1.podRequests", _DELETE, r"jobs[0] (mpi).podSets[1] (worker).podRequests: expe"),
        (
            "podSets.1.podRequests",
            {"cpu": "0"},
            r"jobs[0] (mpi).podSets[1] (worker).podRequests: every request is zero",
        ),
        (
            "podSets.0.podRequests",
            {"cpu": "-1"},
            r'jobs[0] (mpi).podSets[0] (launcher).podRequests.cpu: "-1" is negative',
        ),
        (
            "podSets.0.tolerations",
            [{"key": "k", "operator": "In"}],
            r"jobs[0] (mpi).podSets[0] (launcher).tolerations[0].operator: 'In' is not Equal",
        ),
        ("size", 1, r"jobs[0] (mpi).size: 1 leaves no pod for the main pod set worker: its "),
        ("minSize", 1, r"jobs[0] (mpi).minSize: 1 leaves no pod of the main pod set worker"),
        (
            "kind",
            "Workload",
            r"jobs[0] (mpi).kind: 'Workload' is not Job, MiniCluster, JobSet or PodGroup",
        ),
    ],
)
def test_bad_pod_sets_name_the_job_the_set_and_the_field(
    path: str, value: Any, message: str
) -> None:
    with pytest.raises(TraceError) as error:
        from_dict(_bad(path, value))
    assert message in str(error.value), str(error.value)


def test_the_trace_writer_round_trips_pod_sets() -> None:
    document = mpi_document(minSize=2)
    document["jobs"][0]["podSets"][0]["tolerations"] = [
        {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}
    ]
    text = dump_yaml(document)
    assert "podSets: [{name: launcher, count: 1," in text  # one job per line, as shipped
    assert loads(text) == from_dict(document, default_name="trace")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod_set_trace_documents())
def test_pod_sets_written_back_read_as_they_were(document: dict[str, Any]) -> None:
    """`pod_sets_document` writes a job's pod sets as `podSets`; read again, they are the same
    job (quantities exact, the main set the same, the others in order)."""
    trace = from_dict(document)
    again = copy.deepcopy(document)
    for item, group in zip(again["jobs"], trace.jobs, strict=True):
        item["podSets"] = pod_sets_document(group.main, group.others)
    assert from_dict(again) == trace
    assert loads(dump_yaml(again), default_name="pod-sets") == trace


def test_pod_sets_document_spells_quantities_exactly() -> None:
    odd = PodSet("x", 1, Resources(cpu=1_250, memory=GIB + 1), tolerations=(Toleration("k"),))
    (item,) = pod_sets_document(odd, ())
    assert item == {
        "name": "x",
        "podRequests": {"cpu": "1250m", "memory": str(GIB + 1)},
        "tolerations": [{"key": "k", "operator": "Equal"}],
    }


def test_gangs_csv_carries_pod_sets_and_replays_them(tmp_path: Path) -> None:
    trace = from_dict(mpi_document(minSize=2))
    result = simulate(trace, EngineConfig(admission="muster", check=True))
    write_outputs(trace, [result], tmp_path, policy="drf")
    with (tmp_path / "gangs.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == [*COLUMNS, POD_SETS_COLUMN]
    assert rows[0]["requests"] == "cpu=4;memory=8Gi"  # the main set's pod, as before
    assert rows[0][POD_SETS_COLUMN] == (
        '[{"name":"worker","podRequests":{"cpu":"4","memory":"8Gi"}},'
        '{"name":"launcher","count":1,"podRequests":{"cpu":"1"},"nodeSelector":{"pool":"login"}}]'
    )
    replayed = read_jobs_csv(tmp_path / "gangs.csv").jobs
    (group,) = trace.jobs
    assert [(g.size, g.min_size, g.main, g.others) for g in replayed] == [
        (group.size, group.min_size, group.main, group.others)
    ] * 2
    with_jobs(trace, replayed, "gangs.csv")


def test_gangs_csv_without_pod_sets_has_the_history_columns_only(tmp_path: Path) -> None:
    trace = load("two-queues")
    result = simulate(trace, EngineConfig(admission="none", horizon=60.0))
    write_outputs(trace, [result], tmp_path, policy="drf")
    header = (tmp_path / "gangs.csv").read_text().splitlines()[0]
    assert header == ",".join(COLUMNS)


def _job_list(tmp_path: Path, requests: str, pod_sets: str, flag: str = "") -> Path:
    path = tmp_path / "jobs.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["submit", "queue", "size", "requests", "runtime", "one_pod_per_node"])
        writer.writerow(["0", "a", "3", requests, "60s", flag])
    rows = path.read_text().splitlines()
    # pod_sets last, quoted as the csv module quotes JSON.
    cell = '"' + pod_sets.replace('"', '""') + '"'
    path.write_text(f"{rows[0]},{POD_SETS_COLUMN}\n{rows[1]},{cell}\n")
    return path


SETS = (
    '[{"name":"worker","podRequests":{"cpu":"4"}},'
    '{"name":"launcher","count":1,"podRequests":{"cpu":"1"}}]'
)


def test_a_job_list_takes_pod_sets(tmp_path: Path) -> None:
    (group,) = read_jobs_csv(_job_list(tmp_path, "", SETS)).jobs
    assert group.set_name == "worker" and group.main.count == 2
    assert group.others == (PodSet("launcher", 1, Resources(cpu=CPU)),)
    (same,) = read_jobs_csv(_job_list(tmp_path, "cpu=4", SETS, "false")).jobs
    assert same == group


@pytest.mark.parametrize(
    ("requests", "pod_sets", "flag", "message"),
    [
        ("", "[{name", "", "jobs.csv:2: pod_sets: not JSON (Expecting property name"),
        ("cpu=2", SETS, "", "jobs.csv:2: requests: 'cpu=2' is not 'cpu=4', the main pod set"),
        ("", SETS, "true", "jobs.csv:2: one_pod_per_node: true is not false, the main pod set"),
        ("", SETS.replace('"4"', '"x"'), "", "jobs.csv:2: jobs[0] (job-1).podSets[0] (worker)."),
        ("", '{"name":"worker"}', "", "jobs.csv:2: jobs[0] (job-1).podSets: expected a list"),
    ],
)
def test_job_list_pod_set_errors_name_the_line_and_field(
    tmp_path: Path, requests: str, pod_sets: str, flag: str, message: str
) -> None:
    with pytest.raises(TraceError, match=re.escape(message)):
        read_jobs_csv(_job_list(tmp_path, requests, pod_sets, flag))
