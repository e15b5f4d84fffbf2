"""`muster cluster up --feature-gates`: parsed, checked against the components before anything
starts, passed to each component that knows the gate, remembered for `status`. The components
are stand-ins here (shell scripts that answer `--help` and `--feature-gates=... --version` as
the v1.37 binaries do); tests/cluster/test_controlplane.py starts the real ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from muster.cli import main
from simulator.controlplane import features
from simulator.controlplane.build import Binaries
from simulator.controlplane.cluster import LocalCluster
from simulator.controlplane.components import ComponentArgs
from simulator.controlplane.errors import ClusterError
from simulator.controlplane.pki import ClusterPki
from webhook.tls import KeyPair

# As kube-scheduler v1.37.2 prints them (one line of each kind), after a `kube:` prefix.
HELP = """      --feature-gates colonSeparatedMultimapStringString   Comma-separated list ...
                kube:AllAlpha=true|false (ALPHA - default=false)
                kube:GenericWorkload=true|false (BETA - default=false)
                kube:WorkloadWithJob=true|false (ALPHA - default=false)
                kube:TopologyAwareWorkloadScheduling=true|false (ALPHA - default=false)
"""


def _component(folder: Path, name: str, listed: list[str], refuse: dict[str, str]) -> Path:
    """A stand-in binary: `--help` lists `listed`; `--feature-gates=S --version` fails with the
    klog line of the real one when S contains a key of `refuse`, else prints the version."""
    lines = "\n".join(f"                kube:{g}=true|false (BETA - default=false)" for g in listed)
    cases = "\n".join(
        f'  *{key}*) echo \'E1127 run.go:72] "command failed" err="{words}"\' >&2; exit 1;;'
        for key, words in refuse.items()
    )
    script = folder / name
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = --help ]; then cat <<"EOF"\n{lines}\nEOF\nexit 0; fi\n'
        f'case "$1" in\n{cases}\nesac\necho "Kubernetes v1.37.2"\n'
    )
    script.chmod(0o755)
    return script


def _binaries(tmp_path: Path) -> dict[str, Path]:
    unknown = "unrecognized feature gate: "
    refuse = {
        "GenericWorklod": unknown + "GenericWorklod",
        "JobManagedBy=false": "cannot set feature gate JobManagedBy to false, feature is "
        "locked to true",
        "WorkloadWithJob=true": "WorkloadWithJob is enabled, but depends on features that are "
        "disabled: [GenericWorkload]",
    }
    gates = ["GenericWorkload", "WorkloadWithJob", "CompositePodGroup"]
    return {
        "kube-apiserver": _component(tmp_path, "kube-apiserver", [*gates, "APIOnly"], refuse),
        "kube-controller-manager": _component(tmp_path, "kcm", [*gates, "APIOnly"], refuse),
        "kube-scheduler": _component(
            tmp_path, "kube-scheduler", gates, {**refuse, "APIOnly": unknown + "APIOnly"}
        ),
    }


def test_the_flag_is_gate_equals_true_or_false_repeatable_last_wins() -> None:
    assert features.parse_feature_gates(["GenericWorkload=true,A=False", " B=true ", "A=true"]) == {
        "GenericWorkload": True,
        "A": True,
        "B": True,
    }
    with pytest.raises(ClusterError, match=r"'GenericWorkload': expected GATE=true"):
        features.parse_feature_gates(["GenericWorkload"])
    with pytest.raises(ClusterError, match=r"must be true or false, not 'yes'"):
        features.parse_feature_gates(["GenericWorkload=yes"])


def test_the_gates_a_component_lists_are_read_from_its_help() -> None:
    assert features.gates_in_help(HELP) == {
        "AllAlpha",
        "GenericWorkload",
        "WorkloadWithJob",
        "TopologyAwareWorkloadScheduling",
    }


def test_each_component_gets_the_gates_it_knows_and_the_apiserver_the_api_versions(
    tmp_path: Path,
) -> None:
    asked = {"GenericWorkload": True, "APIOnly": True, "CompositePodGroup": False}
    gates = features.check_gates(asked, _binaries(tmp_path), "v1.37.2")
    assert gates.takers["APIOnly"] == ("kube-apiserver", "kube-controller-manager")
    assert gates.flag("kube-scheduler") == [
        "--feature-gates=CompositePodGroup=false,GenericWorkload=true"
    ]
    assert gates.flag("kube-apiserver") == [
        "--feature-gates=APIOnly=true,CompositePodGroup=false,GenericWorkload=true"
    ]
    # A gate turned off needs no API version; GenericWorkload's objects are in the beta one.
    assert gates.runtime_config() == ["--runtime-config=scheduling.k8s.io/v1beta1=true"]
    assert features.FeatureGates({"CompositePodGroup": True}, {}).runtime_config() == [
        "--runtime-config=scheduling.k8s.io/v1alpha3=true"
    ]
    assert features.NONE.flag("kube-apiserver") == [] and features.NONE.runtime_config() == []


def test_a_misspelt_gate_is_refused_with_the_closest_name(tmp_path: Path) -> None:
    with pytest.raises(ClusterError) as refused:
        features.check_gates({"GenericWorklod": True}, _binaries(tmp_path), "v1.37.2")
    assert str(refused.value).startswith(
        "--feature-gates GenericWorklod=true: no component of Kubernetes v1.37.2 accepts it "
        "(kube-apiserver, kube-controller-manager, kube-scheduler: unrecognized feature gate: "
        "GenericWorklod); did you mean GenericWorkload?"
    )


def test_settings_a_component_refuses_are_refused_in_its_words(tmp_path: Path) -> None:
    binaries = _binaries(tmp_path)
    with pytest.raises(ClusterError, match="feature is locked to true"):
        features.check_gates({"JobManagedBy": False}, binaries, "v1.37.2")
    with pytest.raises(
        ClusterError,
        match=r"WorkloadWithJob=true: kube-apiserver v1\.37\.2 refuses them: WorkloadWithJob "
        r"is enabled, but depends on features that are disabled: \[GenericWorkload\]",
    ):
        features.check_gates({"WorkloadWithJob": True}, binaries, "v1.37.2")


def test_an_unlisted_gate_a_component_accepts_goes_to_it(tmp_path: Path) -> None:
    """GA gates are not in `--help` but still settable (JobManagedBy=true in v1.37)."""
    gates = features.check_gates({"JobManagedBy": True}, _binaries(tmp_path), "v1.37.2")
    assert len(gates.takers["JobManagedBy"]) == 3


def test_the_components_command_lines_carry_the_gates(tmp_path: Path) -> None:
    gates = features.FeatureGates(
        {"GenericWorkload": True, "APIOnly": True},
        {
            "GenericWorkload": features.GATED_COMPONENTS,
            "APIOnly": ("kube-apiserver",),
        },
    )
    pair = KeyPair(tmp_path / "x.crt", tmp_path / "x.key")
    pki = ClusterPki(pair, pair, pair, tmp_path / "sa.key", tmp_path / "sa.pub", pair)
    args = ComponentArgs("c", tmp_path, tmp_path / "kubeconfig", Binaries.at(tmp_path), pki, gates)
    apiserver = args.apiserver(6443, 2379)
    assert "--feature-gates=APIOnly=true,GenericWorkload=true" in apiserver
    assert "--runtime-config=scheduling.k8s.io/v1beta1=true" in apiserver
    assert "--feature-gates=GenericWorkload=true" in args.controller_manager(10257)
    assert "--feature-gates=GenericWorkload=true" in args.scheduler(10259)
    plain = ComponentArgs("c", tmp_path, tmp_path / "kubeconfig", Binaries.at(tmp_path), pki)
    assert not any(
        a.startswith(("--feature-gates", "--runtime-config")) for a in plain.apiserver(1, 2)
    )


def test_status_shows_the_gates_the_cluster_was_started_with(tmp_path: Path) -> None:
    cluster = LocalCluster(name="gated", root=tmp_path, log=lambda _: None)
    cluster.state_dir.mkdir(parents=True)
    gates = features.FeatureGates(
        {"GenericWorkload": True}, {"GenericWorkload": ("kube-apiserver",)}
    )
    features.write_state(cluster.state_dir, gates)
    status = cluster.status()
    assert status["featureGates"] == {"GenericWorkload": True}
    assert status["runtimeConfig"] == ["--runtime-config=scheduling.k8s.io/v1beta1=true"]
    assert json.loads((cluster.state_dir / "features.json").read_text())["featureGates"] == {
        "GenericWorkload": True
    }
    assert cluster.features == gates
    assert LocalCluster(name="other", root=tmp_path).features == features.NONE


def test_a_bad_gate_stops_up_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    binaries = _binaries(tmp_path)
    built = Binaries.at(tmp_path)
    fake = Binaries(
        etcd=built.etcd,
        kube_apiserver=binaries["kube-apiserver"],
        kube_controller_manager=binaries["kube-controller-manager"],
        kube_scheduler=binaries["kube-scheduler"],
        kubectl=built.kubectl,
        kwok=built.kwok,
    )
    monkeypatch.setenv("MUSTER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("simulator.controlplane.cluster.ensure_built", lambda *a, **k: fake)
    rc = main(["cluster", "up", "--name", "bad", "--feature-gates", "GenericWorklod=true"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "muster cluster up: --feature-gates GenericWorklod=true: no component" in err
    assert "did you mean GenericWorkload?" in err
    assert not (tmp_path / "cache" / "clusters" / "bad").exists()  # nothing was started
    assert main(["cluster", "up", "--name", "bad", "--feature-gates", "GenericWorkload"]) == 1
    assert "expected GATE=true or GATE=false" in capsys.readouterr().err


def test_up_on_a_running_cluster_with_other_gates_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    cluster = LocalCluster(name="gated", root=tmp_path, log=said.append)
    cluster.state_dir.mkdir(parents=True)
    features.write_state(
        cluster.state_dir,
        features.FeatureGates({"GenericWorkload": True}, {"GenericWorkload": ("kube-apiserver",)}),
    )
    monkeypatch.setattr(LocalCluster, "is_healthy", lambda self: True)
    cluster.up()  # no gates asked: whatever it runs with
    cluster.up(feature_gates={"GenericWorkload": True})
    assert said == [f"cluster 'gated' is already running; KUBECONFIG={cluster.kubeconfig}"] * 2
    with pytest.raises(
        ClusterError,
        match=r"running with feature gates GenericWorkload=true, not none: stop it first "
        r"\(muster cluster down --name gated\)",
    ):
        cluster.up(feature_gates={})
