"""`--admission external`: its options are checked before anything is created (exit 2, a message
that says what was wrong), and the pure parts read labels and namespace manifests right."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from muster import cli
from simulator.engine import EngineConfig, simulate
from simulator.kwok_external import (
    ExternalError,
    controller_process,
    in_namespace,
    load_namespace_manifest,
    parse_label,
    parse_labels,
)
from simulator.trace import load


def test_labels_are_kubernetes_labels() -> None:
    assert parse_label("kueue.x-k8s.io/queue-name=sim") == ("kueue.x-k8s.io/queue-name", "sim")
    assert parse_label("team=") == ("team", "")
    assert parse_labels(["a=1", "b=2", "a=1"]) == {"a": "1", "b": "2"}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("queue", "expected KEY=VALUE"),
        ("=x", "expected KEY=VALUE"),
        ("Kueue.X/name=x", "is not a DNS subdomain"),
        ("/name=x", "is not a DNS subdomain"),
        ("a/-name=x", "is not a label name"),
        ("a=" + "v" * 64, "is not a label value"),
        ("a=x y", "is not a label value"),
        ("muster.dev/queue=q", "muster's own label"),
        ("muster.dev/sim-run=r", "muster's own label"),
    ],
)
def test_a_bad_label_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ExternalError, match=says):
        parse_label(text)


def test_a_label_given_twice_with_two_values_is_refused() -> None:
    with pytest.raises(ExternalError, match="given twice"):
        parse_labels(["a=1", "a=2"])


def test_a_namespace_manifest_of_several_documents(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\n"
        "metadata: {name: sim, namespace: elsewhere, resourceVersion: '7'}\n"
        "spec: {clusterQueue: cq}\n---\n"
        '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}\n'
    )
    local_queue, config_map = load_namespace_manifest(path)
    assert local_queue["kind"] == "LocalQueue" and config_map["kind"] == "ConfigMap"
    placed = in_namespace(local_queue, "sim-abc-default")
    assert placed["metadata"] == {"name": "sim", "namespace": "sim-abc-default"}
    assert placed["spec"] == {"clusterQueue": "cq"}
    assert local_queue["metadata"]["namespace"] == "elsewhere"  # the loaded one is unchanged


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "holds no object"),
        ("a: [", "not YAML or JSON"),
        ("- 1\n", "expected an object"),
        ("kind: ConfigMap\nmetadata: {name: c}\n", "apiVersion is missing"),
        ("apiVersion: v1\nmetadata: {name: c}\n", "kind is missing"),
        ("apiVersion: v1\nkind: ConfigMap\n", "needs metadata.name"),
        ("apiVersion: v1\nkind: Namespace\nmetadata: {name: n}\n", "kind Namespace"),
        ("apiVersion: v1\nkind: List\nitems: []\n", "one per document"),
    ],
)
def test_a_bad_namespace_manifest_says_what_is_wrong(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(ExternalError, match=says):
        load_namespace_manifest(path)
    with pytest.raises(ExternalError, match="cannot read it"):
        load_namespace_manifest(tmp_path / "missing.yaml")


def test_a_controller_process_is_named_by_its_command() -> None:
    me = controller_process(os.getpid())
    assert me.pid == os.getpid() and me.label == f"{me.command} (pid {os.getpid()})"
    with pytest.raises(ExternalError, match="no such process"):
        controller_process(2**22 + 1)  # above Linux's pid_max
    with pytest.raises(ExternalError, match="positive"):
        controller_process(0)


def test_the_in_process_engine_has_no_outside_controller() -> None:
    with pytest.raises(ValueError, match="--engine kwok --admission external"):
        simulate(load("two-queues"), EngineConfig(admission="external"))


# --------------------------------------------------------------------- the command line


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig file: the options are refused before anything reads it."""
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\n")
    return path


def _sim(tmp_path: Path, *args: str) -> int:
    return cli.main(["sim", "two-queues", "--quiet", "--out", str(tmp_path / "out"), *args])


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--admission", "external"], "needs --engine kwok"),
        (["--engine", "kwok", "--admission", "external"], "needs --kubeconfig"),
        (["--engine", "kwok", "--label", "a=b", "@K"], "applies only to --admission external"),
        (
            ["--engine", "kwok", "--admission", "both", "--external-stall", "5", "@K"],
            "applies only to --admission external",
        ),
        (
            ["--engine", "kwok", "--admission", "muster", "--external-name", "kueue", "@K"],
            "--external-name applies only",
        ),
        (["--engine", "kwok", "--controller-pid", "@PID", "@K"], "--controller-pid attributes"),
        (["--engine", "kwok", "--admission", "external", "--label", "a", "@K"], "KEY=VALUE"),
        (
            ["--engine", "kwok", "--admission", "external", "--external-stall", "0", "@K"],
            "--external-stall must be positive",
        ),
        (
            ["--engine", "kwok", "--admission", "external", "--controller-pid", "4194305", "@K"],
            "no such process",
        ),
        (
            ["--engine", "kwok", "--admission", "muster,external", "@K"]
            + ["--namespace-manifest", "@MISSING"],
            "cannot read it",
        ),
    ],
)
def test_bad_external_options_exit_2_and_create_nothing(
    tmp_path: Path,
    kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    says: str,
) -> None:
    values = {"@PID": str(os.getpid()), "@MISSING": str(tmp_path / "missing.yaml")}
    argv: list[str] = []
    for arg in args:
        argv.extend(["--kubeconfig", str(kubeconfig)] if arg == "@K" else [values.get(arg, arg)])
    assert _sim(tmp_path, *argv) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("muster,muster", "names muster twice"),
        ("both,none", "names none twice"),
        ("kueue", "not one"),
    ],
)
def test_bad_admission_lists_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, says: str
) -> None:
    with pytest.raises(SystemExit) as info:
        _sim(tmp_path, "--admission", value)
    assert info.value.code == 2 and says in capsys.readouterr().err


def test_an_admission_list_runs_in_the_order_given(tmp_path: Path) -> None:
    import json

    assert _sim(tmp_path, "--admission", "muster,none") == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [k for k in summary if k in ("muster", "none")] == ["muster", "none"]
