"""`muster bench kueue-perf` without a cluster: what the runner reads from a Job, what it writes
to finish one, Kueue's figures from what it saw, and the generator's pace."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from muster.bench.kueue_perf import Pacer, job_body, quota_node
from muster.bench.kueue_runner import Recorder, complete_status, figures, job_look, latencies
from muster.cli import main
from policies.vocabulary import ADMITTED, PRIORITY, QUEUE
from simulator.kueueperf import PerfQueue, PerfWorkload, load_generator, queues

TINY = Path(__file__).resolve().parents[1] / "data" / "kueue-generator-tiny.yaml"


def workload(name: str, queue: str = "q", cls: str = "small", request: str = "1") -> PerfWorkload:
    return PerfWorkload(queue, name, cls, 200, 50, request, stream=0, interval_ms=100, due_ms=100)


def job(name: str, *, admitted: str | None = None, suspend: bool = False, done: str = "") -> Any:
    annotations = {ADMITTED: admitted} if admitted else {}
    conditions = [{"type": done, "status": "True"}] if done else []
    return {
        "metadata": {"namespace": "q", "name": name, "annotations": annotations},
        "spec": {"suspend": suspend},
        "status": {"conditions": conditions},
    }


def test_a_job_is_admitted_while_it_carries_the_admission_and_is_not_suspended() -> None:
    assert job_look(job("a", admitted="t1")) == (("q", "a"), "t1", False)
    assert job_look(job("a", admitted="t1", suspend=True)) == (("q", "a"), None, False)
    assert job_look(job("a")) == (("q", "a"), None, False)
    assert job_look(job("a", admitted="t1", done="Complete")) == (("q", "a"), "t1", True)
    assert job_look(job("a", done="Failed"))[2] is True


def test_recorder_times_the_last_admission_and_counts_evictions_and_quota_held() -> None:
    recorder = Recorder([workload("a", request="2")])
    key = ("q", "a")
    recorder.created(key, 10.0)
    assert recorder.observe(key, None, False, 10.5) is None  # seen pending
    assert recorder.observe(key, "t1", False, 12.0) == ("t1", 12.0)
    assert recorder.observe(key, "t1", False, 12.1) is None  # the same admission, again
    assert recorder.counts() == (1, 1, 0)  # created, admitted now, finished
    assert recorder.holds(key, "t1")
    assert recorder.observe(key, None, False, 13.0) is None  # preempted
    assert not recorder.holds(key, "t1")
    assert recorder.observe(key, "t2", False, 15.0) == ("t2", 15.0)
    assert recorder.observe(key, "t2", True, 15.5) is None
    state = recorder.seen[key]
    assert (state.admissions, state.evictions, state.admitted_at, state.finished) == (
        2, 1, 15.0, 15.5,
    )  # fmt: skip
    # 2 cpu held from 12 to 13 and from 15 to 15.5.
    assert state.held_milli_s == pytest.approx(2000 * 1.5)
    assert recorder.counts() == (1, 0, 1)
    # A finished workload is done: later looks change nothing.
    assert recorder.observe(key, "t3", False, 20.0) is None
    assert recorder.seen[key].admissions == 2


def test_an_admission_replaced_without_a_look_in_between_is_an_eviction() -> None:
    recorder = Recorder([workload("a")])
    key = ("q", "a")
    recorder.observe(key, "t1", False, 1.0)
    assert recorder.observe(key, "t2", False, 5.0) == ("t2", 5.0)
    assert recorder.seen[key].evictions == recorder.evictions == 1


def test_the_first_event_is_the_earlier_of_the_create_and_the_watch() -> None:
    recorder = Recorder([workload("a")])
    key = ("q", "a")
    recorder.observe(key, None, False, 4.0)  # the watch saw it before the create returned
    recorder.created(key, 4.2)
    assert recorder.seen[key].created == 4.0


def test_figures_are_kueues_per_class_and_per_queue_class() -> None:
    items = [workload("s1"), workload("s2"), workload("m1", cls="medium", request="5")]
    items.append(workload("x", queue="r"))
    recorder = Recorder(items)
    for key, created, admitted, finished in [
        (("q", "s1"), 0.0, 2.0, 3.0),
        (("q", "s2"), 1.0, 5.0, 6.0),
        (("q", "m1"), 0.0, 1.0, 9.0),
        (("r", "x"), 0.0, 0.0, 4.0),
    ]:
        recorder.created(key, created)
        recorder.observe(key, "t", False, admitted)
        recorder.observe(key, "t", True, finished)
    leaves = [
        PerfQueue("q", "c", "cq", {}, nominal_milli=10_000),
        PerfQueue("r", "c", "cq", {}, nominal_milli=10_000),
    ]
    result = figures(recorder.seen.values(), leaves, began=0.0)
    assert result["classes"]["small"] == {
        "count": 3,
        "finished": 3,
        "avg_time_to_admission_s": round((2 + 4 + 0) / 3, 2),
        "avg_time_to_finish_s": round((3 + 5 + 4) / 3, 2),
        "evictions": 0,
    }
    assert result["classes"]["medium"]["avg_time_to_admission_s"] == 1.0
    # q: 1 cpu × 1 s + 1 × 1 + 5 × 8 = 42 cpu·s over 10 cpu × 9 s; r: 1 × 4 over 10 × 4.
    cq = result["queue_classes"]["cq"]
    assert cq["min_queue_usage_pct"] == 10.0
    assert cq["mean_queue_usage_pct"] == round((42 / 90 * 100 + 10.0) / 2, 1)
    # The class as Kueue's checker reads it: all held over all nominal, first to last event.
    assert cq["usage_pct"] == round(100 * 46 / (20 * 9), 1)


def test_latencies_split_the_time_held_beyond_the_runtime() -> None:
    recorder = Recorder([workload("a"), workload("b")])  # runtime 200 ms
    decided = "1970-01-01T00:00:10.000000Z/1"  # muster's decision at 10 s
    recorder.observe(("q", "a"), decided, False, 10.5)
    recorder.patched(("q", "a"), 10.9)  # 0.2 s after the runtime ended at 10.7
    recorder.observe(("q", "a"), decided, True, 11.0)
    recorder.observe(("q", "b"), decided, False, 10.1)  # never finished: not counted
    assert latencies(recorder.seen.values()) == {
        "admission_seen_s": {"p50": 0.5, "p90": 0.5},
        "finish_written_s": {"p50": 0.2, "p90": 0.2},
        "finish_seen_s": {"p50": 0.1, "p90": 0.1},
    }


def test_complete_status_is_what_the_apiserver_asks_of_a_complete_job() -> None:
    status = complete_status(100.0, 105.5)["status"]
    assert status["startTime"] == "1970-01-01T00:01:40Z"
    assert status["completionTime"] == "1970-01-01T00:01:45Z"
    assert status["succeeded"] == 1
    assert [c["type"] for c in status["conditions"]] == ["SuccessCriteriaMet", "Complete"]
    assert all(c["status"] == "True" for c in status["conditions"])


def test_job_body_is_a_one_pod_job_for_the_queue_at_the_priority() -> None:
    body = job_body(workload("small-0-3-0", queue="cq-0-1-cohort-0", request="500m"))
    assert body["metadata"]["labels"][QUEUE] == "cq-0-1-cohort-0"
    assert body["metadata"]["annotations"] == {PRIORITY: "50"}
    assert (body["spec"]["parallelism"], body["spec"]["completions"]) == (1, 1)
    assert "suspend" not in body["spec"]  # the webhook suspends it
    [container] = body["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["requests"] == {"cpu": "500m"}


def test_quota_node_holds_every_queues_nominal_cpu() -> None:
    generator = load_generator(TINY)
    node = quota_node(generator)
    assert node["status"]["allocatable"] == {"cpu": "80"}
    assert sum(q.nominal_milli for q in queues(generator)) == 80_000


class FakeClock:
    """Time moves only when the pacer waits or a create takes time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Waiting(threading.Condition):
    """The pacer's condition, for a test: a timed wait moves the fake clock by the time asked
    for and returns at once (no real time passes, so no thread timing is involved)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock

    def wait(self, timeout: float | None = None) -> bool:
        self.clock.now += timeout or 0.0
        return True


class InlinePool:
    """Runs each create at once, on the pacer's thread: one deterministic order."""

    def submit(self, fn: Any, *args: Any) -> None:
        fn(*args)


def test_pacer_waits_the_interval_after_each_create_returned_per_stream() -> None:
    clock = FakeClock()
    made: list[tuple[str, float]] = []

    def create(w: PerfWorkload) -> None:
        made.append((w.name, clock()))
        clock.now += 0.05  # each create takes 50 ms

    items = [
        PerfWorkload("q", f"a{i}", "a", 10, 0, "1", stream=0, interval_ms=100, due_ms=100 * (i + 1))
        for i in range(3)
    ] + [PerfWorkload("r", "b0", "b", 10, 0, "1", stream=1, interval_ms=1000, due_ms=1000)]
    pacer = Pacer(sorted(items, key=lambda w: w.due_ms), create, clock=clock)
    pacer._wake = Waiting(clock)
    pacer.run(InlinePool())  # type: ignore[arg-type]
    # a0 at 0.1; a1 0.1 after a0's create returned (0.15), so at 0.25; a2 at 0.40; b0 on its
    # own loop at 1.0.
    assert [name for name, _ in made] == ["a0", "a1", "a2", "b0"]
    assert [at for _, at in made] == pytest.approx([0.1, 0.25, 0.4, 1.0])
    assert (pacer.first, pacer.last) == pytest.approx((0.15, 1.05))
    assert pacer.errors == []


def test_a_stopped_pacer_creates_nothing_more() -> None:
    clock = FakeClock()
    made: list[str] = []
    items = [
        PerfWorkload("q", f"a{i}", "a", 10, 0, "1", stream=0, interval_ms=100, due_ms=100 * (i + 1))
        for i in range(3)
    ]

    def create(w: PerfWorkload) -> None:
        made.append(w.name)
        if w.name == "a0":
            pacer.stop()  # e.g. the run timed out while a0 was being created

    pacer = Pacer(items, create, clock=clock)
    pacer._wake = Waiting(clock)
    pacer.run(InlinePool())  # type: ignore[arg-type]
    assert made == ["a0"]


def test_bad_options_and_a_bad_generator_are_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "generator.yaml"
    bad.write_text("cohorts: [{className: c, count: 1, queuesSets: []}]\n", encoding="utf-8")
    assert main(["bench", "kueue-perf", "--generator", str(bad), "--json"]) == 2
    assert "cohorts[0].queuesSets: must not be empty" in capsys.readouterr().err
    assert main(["bench", "kueue-perf", "--generator", str(TINY), "--creators", "0"]) == 2
    assert "--creators and --patchers must be at least 1" in capsys.readouterr().err
