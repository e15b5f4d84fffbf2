"""What the benches share (`muster.bench.harness`): their Job bodies, the cluster given to a
bench, and latencies as printed. Starting a cluster is run by the cluster tests of the benches
(tests/cluster/test_cli.py)."""

from __future__ import annotations

from pathlib import Path

from muster.bench.harness import KWOK_TOLERATION, bench_cluster, job_body, latency_ms
from policies.kinds import JOB
from policies.phase import is_managed


def test_a_job_body_is_a_kwok_job_of_its_pods_labelled_for_its_queue() -> None:
    body = job_body("j", "q", pods=3)
    spec = body["spec"]
    assert (body["apiVersion"], body["kind"]) == ("batch/v1", "Job")
    assert body["metadata"] == {"name": "j", "labels": {"muster.dev/queue": "q"}}
    assert (spec["parallelism"], spec["completions"], spec["suspend"]) == (3, 3, False)
    pod = spec["template"]["spec"]
    assert pod["tolerations"] == [KWOK_TOLERATION] and pod["restartPolicy"] == "Never"
    assert pod["containers"][0]["resources"] == {"requests": {"cpu": "100m"}}
    assert spec["template"]["metadata"] == {"annotations": {"muster.dev/runtime": "2s"}}
    assert JOB.queue(body) == "q" and JOB.gang_fields(body)[0] == 3


def test_a_job_body_without_queue_requests_runtime_and_with_stamps() -> None:
    bare = job_body("raw", None, cpu=None, suspend=True, runtime=None)
    assert bare["metadata"] == {"name": "raw", "labels": {}}
    assert JOB.queue(bare) == ""
    assert "resources" not in bare["spec"]["template"]["spec"]["containers"][0]
    assert bare["spec"]["template"]["metadata"] == {} and bare["spec"]["suspend"] is True
    assert "tolerations" not in job_body("n", "q", kwok=False)["spec"]["template"]["spec"]
    stamped = job_body("s", "q", annotations={"muster.dev/submitted": "x"})
    assert stamped["metadata"]["annotations"] == {"muster.dev/submitted": "x"}
    assert is_managed(stamped) and not is_managed(job_body("s", "q"))
    # Each body is its own: changing one changes no other.
    stamped["spec"]["template"]["spec"]["tolerations"][0]["key"] = "changed"
    assert job_body("j", "q")["spec"]["template"]["spec"]["tolerations"] == [KWOK_TOLERATION]


def test_a_cluster_given_by_kubeconfig_is_used_and_left_running(tmp_path: Path) -> None:
    said: list[str] = []
    elsewhere = tmp_path / "kubeconfig"
    with bench_cluster(str(elsewhere), name="unused", log=said.append) as cluster:
        assert (cluster.kubeconfig, cluster.local, cluster.started) == (elsewhere, None, False)
    # A kubeconfig `muster cluster up` wrote names its local cluster, whose processes a bench
    # reads CPU from.
    state = tmp_path / "clusters" / "mine"
    state.mkdir(parents=True)
    (state / "processes.json").write_text("[]")
    with bench_cluster(state / "kubeconfig", name="unused", log=said.append) as cluster:
        assert cluster.local is not None and cluster.local.name == "mine"
        assert not cluster.started
    assert said == [] and not (tmp_path / "clusters" / "unused").exists()


def test_latencies_print_in_milliseconds_to_a_hundredth() -> None:
    assert latency_ms([], 99) is None
    assert latency_ms([0.001, 0.002, 0.004], 50) == 2.0
    assert latency_ms([0.0, 0.0123456], 100) == 12.35
    assert latency_ms([0.0, 0.01], 99) == 9.9
