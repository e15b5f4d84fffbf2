"""Kueue's scheduler-benchmark generator read as muster's trace (`simulator.kueueperf`,
`muster trace from-kueue-perf`), and the per-class figures `muster sim` gives for it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from muster.cli import main
from policies import Resources
from simulator.engine import EngineConfig, simulate
from simulator.kueueperf import (
    KueuePerfError,
    cohort_names,
    load_generator,
    queues,
    read_generator,
    trace_document,
    workloads,
)
from simulator.report import summarize
from simulator.trace import TraceError, from_dict, loads

TINY = Path(__file__).resolve().parents[1] / "data" / "kueue-generator-tiny.yaml"


def tiny() -> dict[str, Any]:
    data = yaml.safe_load(TINY.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def two_templates() -> dict[str, Any]:
    """One queue whose one workloads set alternates two templates."""
    return {
        "cohorts": [
            {
                "className": "co",
                "count": 1,
                "queuesSets": [
                    {
                        "className": "q",
                        "count": 1,
                        "nominalQuota": "500m",
                        "workloadsSets": [
                            {
                                "count": 3,
                                "creationIntervalMs": 100,
                                "workloads": [
                                    {"className": "a", "runtimeMs": 10, "request": "100m"},
                                    {"className": "b", "runtimeMs": 20, "request": 1},
                                ],
                            }
                        ],
                    }
                ],
            }
        ]
    }


def test_queues_are_kueues_cluster_queues_with_the_same_quota_and_preemption() -> None:
    generator = read_generator(tiny())
    assert cohort_names(generator) == ["cohort-0", "cohort-1"]
    made = queues(generator)
    # Kueue's generator names a ClusterQueue <class>-<queue set>-<index>-<cohort>.
    assert [q.name for q in made] == [
        "cq-0-0-cohort-0", "cq-0-1-cohort-0", "cq-0-0-cohort-1", "cq-0-1-cohort-1",
    ]  # fmt: skip
    assert made[2].spec == {
        "parent": "cohort-1",
        "nominal": {"cpu": "20"},
        "borrowingLimit": {"cpu": "100"},
        "nodeFit": False,
        "sizeRatio": {"ratio": 1.0},
        "preemption": {"reclaimWithinCohort": "Any", "withinQueue": "LowerPriority"},
    }
    assert made[0].nominal_milli == 20_000


def test_preemption_left_out_is_never_and_no_borrowing_limit_is_unbounded() -> None:
    data = two_templates()
    [queue] = queues(read_generator(data))
    assert queue.spec == {
        "parent": "co-0",
        "nominal": {"cpu": "500m"},
        "nodeFit": False,
        "sizeRatio": {"ratio": 1.0},
    }


def test_workloads_come_at_the_pace_of_kueues_creation_loops() -> None:
    # One loop per queue and workloads set; it waits creationIntervalMs before each create,
    # going through the set's templates in turn, `count` rounds.
    made = workloads(read_generator(two_templates()))
    assert [(w.name, w.class_name, w.due_ms) for w in made] == [
        ("a-0-0-0", "a", 100), ("b-0-0-1", "b", 200), ("a-0-1-0", "a", 300),
        ("b-0-1-1", "b", 400), ("a-0-2-0", "a", 500), ("b-0-2-1", "b", 600),
    ]  # fmt: skip
    assert {(w.queue, w.stream, w.interval_ms) for w in made} == {("q-0-0-co-0", 0, 100)}
    assert [(w.runtime_ms, w.request, w.priority) for w in made[:2]] == [
        (10, "100m", 0),
        (20, "1", 0),
    ]


def test_the_tiny_generator_makes_240_workloads_in_12_streams() -> None:
    made = workloads(load_generator(TINY))
    assert len(made) == 240
    assert len({w.stream for w in made}) == 12
    assert [w.due_ms for w in made] == sorted(w.due_ms for w in made)
    by_class = {c: [w for w in made if w.class_name == c] for c in ("small", "medium", "large")}
    assert {c: len(ws) for c, ws in by_class.items()} == {"small": 160, "medium": 60, "large": 20}
    assert max(w.due_ms for w in by_class["large"]) == 5 * 500


def test_trace_has_the_same_queues_jobs_and_pace() -> None:
    generator = read_generator(two_templates())
    document = trace_document(generator, "t")
    trace = from_dict(document)
    assert [q.name for q in trace.queues] == ["co-0", "q-0-0-co-0"]
    cohort, leaf = trace.queues
    assert cohort.parent is None and cohort.nominal is None
    assert leaf.parent == "co-0" and not leaf.node_fit and leaf.size_ratio is not None
    assert leaf.nominal == Resources.parse({"cpu": "500m"}, field="t")
    assert trace.pod_start_delay == 0.0
    # One node holding every queue's nominal cpu: node-blind admission never lacks room.
    assert [(g.count, g.allocatable) for g in trace.node_groups] == [
        (1, Resources.parse({"cpu": "500m"}, field="t"))
    ]
    a, b = trace.jobs
    assert (a.class_name, a.count, a.submit_at, a.submit_interval, a.runtime) == (
        "a", 3, 0.1, 0.2, 0.01,
    )  # fmt: skip
    assert (b.class_name, b.submit_at, b.submit_interval, b.runtime) == ("b", 0.2, 0.2, 0.02)
    assert (a.namespace, a.queue, a.size, a.pod_requests) == (
        "q-0-0-co-0", "q-0-0-co-0", 1, Resources.parse({"cpu": "100m"}, field="t"),
    )  # fmt: skip
    assert trace.classes() == {"q-0-0-co-0-a-0-0": "a", "q-0-0-co-0-b-0-1": "b"}


def test_sim_of_the_tiny_generator_sums_up_each_class() -> None:
    trace = from_dict(trace_document(load_generator(TINY), "tiny"))
    result = simulate(trace, EngineConfig(admission="muster"))
    summary = summarize(result, trace.classes())
    assert summary["finished"] == 240 and summary["stuck_gangs"] == 0
    classes = summary["classes"]
    assert sorted(classes) == ["large", "medium", "small"]
    assert [classes[c]["gangs"] for c in ("small", "medium", "large")] == [160, 60, 20]
    for figures in classes.values():
        # Finish = admission + runtime (pods run at once), so to finish exceeds to admission.
        assert figures["finish_mean_s"] > figures["admission_mean_s"] >= 0
    # Without `classes`, the summary is what it always was.
    assert "classes" not in summarize(result)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d["cohorts"][0]["queuesSets"][0].pop("nominalQuota"),
            "cohorts[0].queuesSets[0].nominalQuota: expected a cpu quantity",
        ),
        (
            lambda d: d["cohorts"][0]["queuesSets"][0].update(
                withinClusterQueue="LowerOrNewerEqualPriority"
            ),
            "cohorts[0].queuesSets[0].withinClusterQueue: 'LowerOrNewerEqualPriority' is not",
        ),
        (
            lambda d: d["cohorts"][0]["queuesSets"][0].update(reclaimWithinCohort="Sometimes"),
            "cohorts[0].queuesSets[0].reclaimWithinCohort: 'Sometimes' is not one of",
        ),
        (
            lambda d: d["cohorts"][0]["queuesSets"][0]["workloadsSets"][1]["workloads"][0].update(
                podCount=4
            ),
            "cohorts[0].queuesSets[0].workloadsSets[1].workloads[0].podCount: Topology Aware",
        ),
        (
            lambda d: d.update(topology={"levels": []}),
            "generator.topology: Topology Aware Scheduling",
        ),
        (
            lambda d: d["cohorts"][0]["queuesSets"][0].update(nominalQouta=1),
            "cohorts[0].queuesSets[0]: unknown field 'nominalQouta'",
        ),
        (
            lambda d: d["cohorts"][0]["queuesSets"][0]["workloadsSets"][0]["workloads"][0].update(
                priority=-1
            ),
            "workloads[0].priority: -1 is below the minimum 0",
        ),
        (
            lambda d: d["cohorts"][0]["queuesSets"][0]["workloadsSets"][0]["workloads"][0].update(
                request="one"
            ),
            'workloads[0].request: "one" is not a Kubernetes quantity',
        ),
        (
            lambda d: d["cohorts"][0]["queuesSets"][0]["workloadsSets"][0]["workloads"][0].update(
                request=0
            ),
            "workloads[0].request: must be more than 0 cpu",
        ),
        (
            lambda d: d["cohorts"][0]["queuesSets"][0]["workloadsSets"][0]["workloads"][0].update(
                runtimeMs=0
            ),
            "workloads[0].runtimeMs: 0 is below the minimum 1",
        ),
        (
            lambda d: d["cohorts"][0]["queuesSets"][0]["workloadsSets"][2].update(count=0),
            "cohorts[0].queuesSets[0].workloadsSets[2].count: 0 is below the minimum 1",
        ),
        (
            lambda d: d["cohorts"][0].update(className="Cohort_A"),
            "cohorts[0].className: 'Cohort_A' is not a valid name",
        ),
        (lambda d: d.update(cohorts=[]), "cohorts: must not be empty"),
        (
            lambda d: d["cohorts"].append(copy.deepcopy(d["cohorts"][0])),
            "cohorts: cohort 'cohort-0' is made twice",
        ),
    ],
)
def test_bad_input_is_refused_naming_the_field(change: Any, message: str) -> None:
    data = tiny()
    change(data)
    with pytest.raises(KueuePerfError) as info:
        read_generator(data)
    assert message in str(info.value)
    assert isinstance(info.value, TraceError)  # what `muster trace` reports as bad input


def test_command_writes_a_trace_sim_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "kueue.yaml"
    assert main(["trace", "from-kueue-perf", str(TINY), "--out", str(out)]) == 0
    assert "240 one-pod Jobs in 12 job groups, 4 queues in 2 cohorts" in capsys.readouterr().out
    trace = loads(out.read_text(encoding="utf-8"), source=str(out))
    assert trace.name == "kueue-kueue-generator-tiny"
    assert trace.gang_count == 240
    assert set(trace.classes().values()) == {"small", "medium", "large"}
    # JSON when the file says so, with the name asked for; YAML on standard output.
    as_json = tmp_path / "kueue.json"
    assert main(["trace", "from-kueue-perf", str(TINY), "--name", "k", "--out", str(as_json)]) == 0
    assert json.loads(as_json.read_text(encoding="utf-8"))["name"] == "k"
    capsys.readouterr()
    assert main(["trace", "from-kueue-perf", str(TINY)]) == 0
    assert loads(capsys.readouterr().out).gang_count == 240


def test_command_refuses_a_bad_file_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tiny()
    data["cohorts"][0]["queuesSets"][0]["borrowingLimit"] = "lots"
    bad = tmp_path / "generator.yaml"
    bad.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main(["trace", "from-kueue-perf", str(bad), "--out", str(tmp_path / "t.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: cohorts[0].queuesSets[0].borrowingLimit" in err
    assert not (tmp_path / "t.yaml").exists()


def test_a_trace_class_must_be_a_string() -> None:
    document = trace_document(read_generator(two_templates()), "t")
    document["jobs"][0]["class"] = 7
    with pytest.raises(
        TraceError, match=r"jobs\[0\] \(q-0-0-co-0-a-0-0\)\.class: expected a string"
    ):
        from_dict(document)
