"""Trace loading and validation, CSV import, and the burst generator."""

from __future__ import annotations

import copy
import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from muster.cli import main
from simulator.trace import (
    TraceError,
    dump_yaml,
    expand,
    from_dict,
    load,
    load_jobs_csv,
    loads,
    parse_duration,
    shipped_traces,
    with_jobs,
)

SHARED_BLOG_BURST = Path(__file__).resolve().parents[3] / "shared" / "traces" / "blog-burst.yaml"
SHIPPED = Path(__file__).resolve().parents[2] / "simulator" / "traces"


def blog_document() -> dict[str, Any]:
    data = yaml.safe_load((SHIPPED / "blog-burst.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_shipped_blog_burst_is_the_default_and_loads() -> None:
    trace = load()
    assert trace.name == "blog-burst"
    assert trace.node_count == 149
    assert trace.gang_count == 106
    assert trace.pod_count == 1424
    assert [g.name for g in trace.jobs] == ["mc64", "mc32", "mc16", "mc8", "mc4"]
    mc64 = trace.jobs[0]
    assert mc64.kind == "MiniCluster" and mc64.one_pod_per_node and mc64.runtime == 300.0
    assert mc64.pod_requests["cpu"] == 6000
    assert mc64.pod_requests["memory"] == 20 * 2**30


# sha256 of ../shared/traces/blog-burst.yaml when it was copied into simulator/traces/.
SHARED_BLOG_BURST_SHA256 = "991b995efe31bc35617e1545d01ae0720f944c2cc0a9a7df139becf86083e0f0"


def test_shared_blog_burst_loads_as_it_is() -> None:
    """The shared trace loads unchanged. Without shared/ beside the clone, the shipped copy is
    checked to be that very file, byte for byte, so the test never silently skips."""
    shipped_path = SHIPPED / "blog-burst.yaml"
    assert hashlib.sha256(shipped_path.read_bytes()).hexdigest() == SHARED_BLOG_BURST_SHA256
    if SHARED_BLOG_BURST.is_file():
        shared = load(str(SHARED_BLOG_BURST))
        shipped = load(str(shipped_path))
        assert shared.jobs == shipped.jobs
        assert shared.node_groups == shipped.node_groups


def test_every_shipped_trace_loads() -> None:
    names = shipped_traces()
    assert {"blog-burst", "two-queues", "gpu-mixed"} <= set(names)
    for name in names:
        trace = load(name)
        assert trace.gang_count > 0
        trace.queue_tree()


def test_json_trace(tmp_path: Path) -> None:
    import json

    path = tmp_path / "burst.json"
    path.write_text(json.dumps(blog_document()), encoding="utf-8")
    assert load(str(path)).gang_count == 106


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: d["jobs"][2]["podRequests"].update(cpu="-1"),
            'jobs[2] (mc16).podRequests.cpu: "-1" is negative',
        ),
        (
            lambda d: d["jobs"][2]["podRequests"].update(cpu="six"),
            "jobs[2] (mc16).podRequests.cpu:",
        ),
        (lambda d: d["jobs"][1].update(minSize=33), "jobs[1] (mc32).minSize: 33 is larger"),
        (lambda d: d["jobs"][0].update(queue="gpu"), "jobs[0] (mc64).queue: queue 'gpu' not found"),
        (lambda d: d["jobs"][3].update(runtime="2 minutes"), "jobs[3] (mc8).runtime:"),
        (lambda d: d["jobs"][3].update(runtimeLimit="soon"), "jobs[3] (mc8).runtimeLimit:"),
        (lambda d: d["jobs"][3].update(runtimeLimit="-5m"), "jobs[3] (mc8).runtimeLimit:"),
        (
            lambda d: d["jobs"][3].update(runtimeLimit="0s"),
            "jobs[3] (mc8).runtimeLimit: must be positive",
        ),
        (lambda d: d["jobs"][4].update(sise=4), "jobs[4] (mc4): unknown field 'sise'"),
        (lambda d: d["jobs"][4].update(kind="Pod"), "jobs[4] (mc4).kind: 'Pod' is not"),
        (lambda d: d["jobs"][0].update(count=0), "jobs[0] (mc64).count: 0 is below"),
        (lambda d: d["jobs"][0]["submit"].update(at="-5s"), "jobs[0] (mc64).submit.at:"),
        (lambda d: d["jobs"].append(dict(d["jobs"][0])), "jobs[5] (mc64).name: duplicate"),
        (lambda d: d["cluster"]["nodes"][0].pop("allocatable"), "cluster.nodes[0].allocatable"),
        (lambda d: d["queues"][0].update(weight=0), "queues[0] (lammps).weight"),
        (lambda d: d["queues"].append({"name": "x", "parent": "nope"}), 'spec.parent "nope"'),
        (lambda d: d.update(jobs=[]), "jobs: must not be empty"),
    ],
)
def test_bad_trace_names_the_group_and_field(mutate: Any, message: str) -> None:
    document = copy.deepcopy(blog_document())
    mutate(document)
    with pytest.raises(TraceError) as error:
        from_dict(document, source="bad.yaml")
    assert message in str(error.value)


def test_runtime_limit_reaches_every_gang_of_its_group() -> None:
    document = copy.deepcopy(blog_document())
    document["jobs"][0]["runtimeLimit"] = "6m"
    trace = from_dict(document)
    assert trace.jobs[0].runtime_limit == 360.0
    assert trace.jobs[1].runtime_limit is None
    limits = {g.gang.runtime_limit for g in expand(trace) if g.group == "mc64"}
    assert limits == {360.0}
    assert {g.gang.runtime_limit for g in expand(trace) if g.group == "mc32"} == {None}


def test_bad_trace_runs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = blog_document()
    document["jobs"][2]["podRequests"]["cpu"] = "-1"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["sim", str(path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "jobs[2] (mc16).podRequests.cpu" in err
    assert not out.exists()


def test_not_yaml_and_missing_file() -> None:
    with pytest.raises(TraceError, match="not valid YAML"):
        loads("jobs: [", source="x.yaml")
    with pytest.raises(TraceError, match="not found"):
        load("no-such-trace")


def test_cohort_queue_cannot_take_gangs() -> None:
    document = blog_document()
    document["queues"].append({"name": "child", "parent": "lammps"})
    with pytest.raises(TraceError, match=r"jobs\[0\] \(mc64\)\.queue: 'lammps' is a cohort"):
        from_dict(document)


def test_durations() -> None:
    assert parse_duration("300s", "f") == 300
    assert parse_duration("1h30m", "f") == 5400
    assert parse_duration("250ms", "f") == 0.25
    assert parse_duration(12, "f") == 12
    assert parse_duration("1.5m", "f") == 90
    for bad in ("", "5 m", "m", "-1s", "1x", True):
        with pytest.raises(TraceError):
            parse_duration(bad, "f")
    # Spellings are remembered once parsed; a refused one is refused again, naming each field.
    assert parse_duration("300s", "g") == 300
    for where in ("jobs[1].runtime", "jobs[2].runtime"):
        with pytest.raises(TraceError, match=re.escape(where)):
            parse_duration("-1s", where)


def test_expand_orders_same_instant_submissions_by_seed() -> None:
    trace = load()
    first = [g.gang.id for g in expand(trace, seed=1)]
    again = [g.gang.id for g in expand(trace, seed=1)]
    other = [g.gang.id for g in expand(trace, seed=2)]
    assert first == again
    assert first != other
    assert sorted(first) == sorted(other)
    stamps = [g.gang.submitted for g in expand(trace, seed=1)]
    assert stamps == sorted(stamps)
    assert [s.seq for s in stamps] == list(range(len(stamps)))


def test_csv_job_list() -> None:
    jobs = load_jobs_csv(SHIPPED / "jobs-example.csv")
    assert len(jobs) == 6
    assert jobs[3].submit_at == 5 and jobs[3].runtime == 180
    assert jobs[5].min_size == 2 and jobs[5].kind == "Job" and not jobs[5].one_pod_per_node
    trace = with_jobs(load(), jobs, "jobs-example.csv")
    assert trace.gang_count == 6


def test_csv_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(
        "submit,queue,size,requests,runtime\n0,lammps,4,cpu=6,60s\n0,lammps,x,cpu=1,1s\n"
    )
    with pytest.raises(TraceError, match=r"jobs.csv:3: size: 'x' is not an integer"):
        load_jobs_csv(path)
    path.write_text("submit,queue,size,runtime\n0,lammps,4,60s\n")
    with pytest.raises(TraceError, match="missing column"):
        load_jobs_csv(path)
    path.write_text("submit,queue,size,requests,runtime\n0,gpu,4,cpu=1,60s\n")
    with pytest.raises(TraceError, match="queue 'gpu' not found"):
        with_jobs(load(), load_jobs_csv(path), str(path))


def test_the_trace_writer_writes_null_as_yaml_null() -> None:
    # A queue's `sizeRatio: null` turns the size-ratio rule off; written as the string None it
    # would no longer load.
    document = blog_document()
    document["queues"][0]["sizeRatio"] = None
    assert loads(dump_yaml(document), default_name="blog-burst") == from_dict(
        document, default_name="blog-burst"
    )


def test_trace_burst_generator(tmp_path: Path) -> None:
    out = tmp_path / "burst.yaml"
    argv = ["trace", "burst", "--jobs", "40", "--sizes", "1,8,64", "--queues", "a,b,c"]
    argv += ["--nodes", "149", "--window", "2m", "--seed", "3", "--out", str(out)]
    assert main(argv) == 0
    trace = load(str(out))
    assert trace.gang_count == 40 and trace.node_count == 149
    assert {q.name for q in trace.queues} == {"a", "b", "c"}
    assert {g.size for g in trace.jobs} <= {1, 8, 64}
    assert all(g.submit_at <= 120 for g in trace.jobs)
    first = out.read_text()
    assert main(argv) == 0
    assert out.read_text() == first
    json_out = tmp_path / "burst.json"
    assert main([*argv[:-1], str(json_out)]) == 0
    assert load(str(json_out)).jobs == trace.jobs


def test_trace_burst_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "burst", "--sizes", "1,x", "--out", "-"]) == 2
    assert "--sizes" in capsys.readouterr().err


def test_shipped_trace_files_are_package_data() -> None:
    # The blog burst in the package is the shared file, byte for byte.
    if SHARED_BLOG_BURST.is_file():
        assert (SHIPPED / "blog-burst.yaml").read_bytes() == SHARED_BLOG_BURST.read_bytes()
