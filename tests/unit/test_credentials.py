"""Credentials from the official `kubernetes` loaders (kubeport/credentials.py), without a
cluster: which kubeconfig and context are used, token files and exec plugins and their renewal,
the in-cluster service account, kopf's login, and the messages for what admins get wrong.

Talking to an apiserver with them (401 renewal, 403, unreachable) is in
tests/cluster/test_credentials.py.
"""

from __future__ import annotations

import stat
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubeport import credentials as credentials_module
from kubeport.access import ROLE_GRANTS, forbidden, granting_role, target_of
from kubeport.credentials import (
    Credentials,
    InClusterSource,
    KubeconfigError,
    KubeconfigSource,
    kopf_login,
    source_for,
)

REPO = Path(__file__).resolve().parents[2]


def write_kubeconfig(
    path: Path,
    *,
    clusters: dict[str, dict[str, Any]] | None = None,
    users: dict[str, dict[str, Any]] | None = None,
    contexts: dict[str, tuple[str, str]] | None = None,
    current: str | None = None,
) -> Path:
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Config"}
    if clusters is not None:
        doc["clusters"] = [{"name": n, "cluster": c} for n, c in clusters.items()]
    if users is not None:
        doc["users"] = [{"name": n, "user": u} for n, u in users.items()]
    if contexts is not None:
        doc["contexts"] = [
            {"name": n, "context": {"cluster": c, "user": u}} for n, (c, u) in contexts.items()
        ]
    if current is not None:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return path


def one_user(tmp_path: Path, user: dict[str, Any], name: str = "kc") -> Path:
    (tmp_path / "ca.crt").write_text("not parsed until a connection is made\n")
    return write_kubeconfig(
        tmp_path / name,
        clusters={"c": {"server": "https://127.0.0.1:6443", "certificate-authority": "ca.crt"}},
        users={"u": user},
        contexts={"main": ("c", "u")},
        current="main",
    )


# -- which kubeconfig, which context -----------------------------------------------------------


def test_a_missing_file_a_missing_context_and_no_current_context_are_named(
    tmp_path: Path,
) -> None:
    with pytest.raises(KubeconfigError, match=r"cannot read kubeconfig .*absent: no such file"):
        Credentials.load(KubeconfigSource((tmp_path / "absent",)))
    path = one_user(tmp_path, {"token": "t"})
    with pytest.raises(KubeconfigError) as missing:
        Credentials.load(KubeconfigSource((path,), "staging"))
    assert f'kubeconfig {path} has no context "staging" (one of: main;' in str(missing.value)
    write_kubeconfig(
        path,
        clusters={"c": {"server": "https://127.0.0.1:6443"}},
        users={"u": {"token": "t"}},
        contexts={"a": ("c", "u"), "b": ("c", "u")},
    )
    with pytest.raises(
        KubeconfigError, match=r"has no current-context: pass --context \(one of: a, b"
    ):
        Credentials.load(KubeconfigSource((path,)))
    assert Credentials.load(KubeconfigSource((path,), "b")).authorization() == "Bearer t"


def test_only_https_servers_and_http_proxies(tmp_path: Path) -> None:
    plain = write_kubeconfig(
        tmp_path / "plain",
        clusters={"c": {"server": "http://127.0.0.1:8080"}},
        users={"u": {"token": "t"}},
        contexts={"x": ("c", "u")},
        current="x",
    )
    with pytest.raises(KubeconfigError, match="is not an https URL"):
        Credentials.load(KubeconfigSource((plain,)))
    for proxy, works in (("http://proxy.example:3128", True), ("socks5://127.0.0.1:1080", False)):
        path = write_kubeconfig(
            tmp_path / "proxied",
            clusters={"c": {"server": "https://10.0.0.1", "proxy-url": proxy}},
            users={"u": {"token": "t"}},
            contexts={"x": ("c", "u")},
            current="x",
        )
        if works:
            assert Credentials.load(KubeconfigSource((path,))).proxy == proxy
        else:
            with pytest.raises(KubeconfigError, match="only http:// proxies"):
                Credentials.load(KubeconfigSource((path,)))


def test_two_files_together_make_a_context_as_kubectl_merges_them(tmp_path: Path) -> None:
    """The cluster and user in one file, the context in another; relative paths are read
    from the file that names them; the first file's current-context wins (kubectl's rule)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "token").write_text("from-a")
    (tmp_path / "a" / "ca.crt").write_text("ca")
    first = write_kubeconfig(
        tmp_path / "a" / "config",
        clusters={"prod": {"server": "https://10.1.2.3:6443", "certificate-authority": "ca.crt"}},
        users={"ops": {"tokenFile": "token"}},
    )
    second = write_kubeconfig(
        tmp_path / "contexts",
        contexts={"prod": ("prod", "ops"), "other": ("prod", "ops")},
        current="prod",
    )
    third = write_kubeconfig(tmp_path / "late", contexts={}, current="other")
    env = {"KUBECONFIG": f"{first}:{tmp_path / 'missing'}:{second}:{third}"}
    source = source_for(None, None, env)
    assert isinstance(source, KubeconfigSource)
    credentials = Credentials.load(source)
    assert credentials.server == "https://10.1.2.3:6443"
    assert credentials.ca_file == str(tmp_path / "a" / "ca.crt")
    assert credentials.authorization() == "Bearer from-a"
    assert credentials.describe() == f"kubeconfig {env['KUBECONFIG']}, context prod, user ops"
    assert Credentials.load(source_for(None, "other", env)).server == "https://10.1.2.3:6443"
    # Either file alone makes no context.
    with pytest.raises(KubeconfigError, match="has no current-context"):
        Credentials.load(source_for(None, None, {"KUBECONFIG": str(first)}))
    with pytest.raises(KubeconfigError, match="prod"):
        Credentials.load(source_for(None, None, {"KUBECONFIG": str(second)}))


def test_source_for_follows_kubectls_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    given = source_for("~/given", "ctx", {"KUBECONFIG": "/a:/b"})
    assert given == KubeconfigSource((tmp_path / "given",), "ctx")
    assert source_for(None, None, {"KUBECONFIG": "/a:/b"}) == KubeconfigSource(
        (Path("/a"), Path("/b"))
    )
    assert isinstance(source_for(None, None, {}), InClusterSource)
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("{}")
    assert source_for(None, None, {}) == KubeconfigSource((tmp_path / ".kube" / "config",))


# -- token files and exec plugins, and their renewal ----------------------------------------------


def test_a_token_file_is_read_again_when_the_apiserver_refuses_the_old_token(
    tmp_path: Path,
) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    credentials = Credentials.load(KubeconfigSource((one_user(tmp_path, {"tokenFile": "token"}),)))
    assert credentials.authorization() == "Bearer one"
    rejected = credentials.version
    token.write_text("two")
    assert credentials.authorization() == "Bearer one", "read once, until refused"
    assert credentials.renew(rejected) is True
    assert credentials.authorization() == "Bearer two"
    # Another thread that sent the old token too just retries with the new one.
    assert credentials.renew(rejected) is True
    # Refused again with nothing new: no retry (and no reload storm).
    assert credentials.renew(credentials.version) is False


def exec_plugin(tmp_path: Path, *, fail: str | None = None, expires_in: float = 3600) -> Path:
    """A kubeconfig whose user is an exec plugin: a script that prints an ExecCredential with
    token `tok-N` for its N-th run (counted in a file) and an expiry `expires_in` from now."""
    calls = tmp_path / "calls"
    script = tmp_path / "plugin.py"
    expiry = (datetime.now(UTC) + timedelta(seconds=expires_in)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = f"""
import json, pathlib, sys
calls = pathlib.Path({str(calls)!r})
n = len(calls.read_text()) + 1 if calls.exists() else 1
calls.write_text("x" * n)
if {fail!r}:
    print({fail!r}, file=sys.stderr)
    sys.exit(1)
print(json.dumps({{
    "apiVersion": "client.authentication.k8s.io/v1",
    "kind": "ExecCredential",
    "status": {{"token": f"tok-{{n}}", "expirationTimestamp": {expiry!r}}},
}}))
"""
    script.write_text(f"#!{sys.executable}\n{body}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return one_user(
        tmp_path,
        {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": str(script),
                "interactiveMode": "Never",
            }
        },
    )


def plugin_runs(tmp_path: Path) -> int:
    return len((tmp_path / "calls").read_text())


def test_an_exec_plugins_token_is_used_and_renewed_before_it_expires(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials = Credentials.load(KubeconfigSource((exec_plugin(tmp_path, expires_in=3600),)))
    assert credentials.authorization() == "Bearer tok-1"
    assert credentials.expiry is not None and credentials.expiry > datetime.now(UTC)
    monkeypatch.setattr(credentials_module, "HOOK_INTERVAL", 0.0)
    credentials.authorization()
    assert plugin_runs(tmp_path) == 1, "a token far from its expiry is kept"

    # Within the loader's five-minute margin of its expiry, the token is asked for again.
    soon = tmp_path / "soon"
    soon.mkdir()
    credentials = Credentials.load(KubeconfigSource((exec_plugin(soon, expires_in=120),)))
    assert plugin_runs(soon) == 2, "loaded, then renewed by the loader's refresh hook"
    assert credentials.authorization() == "Bearer tok-3"
    assert credentials.authorization() == "Bearer tok-4"


def test_a_failing_exec_plugin_is_named_with_what_it_printed(tmp_path: Path) -> None:
    path = exec_plugin(tmp_path, fail="error: you must log in: run `cloud auth login`")
    with pytest.raises(KubeconfigError) as failed:
        Credentials.load(KubeconfigSource((path,)))
    message = str(failed.value)
    assert "user u: the exec credential plugin" in message and "plugin.py" in message
    assert "you must log in: run `cloud auth login`" in message


def test_in_cluster_credentials_reread_the_rotated_token(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("first")
    (tmp_path / "ca.crt").write_text("ca")
    (tmp_path / "namespace").write_text("muster-system")
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    credentials = Credentials.load(InClusterSource(tmp_path, environ))
    assert credentials.server == "https://10.96.0.1:443"
    assert credentials.ca_file == str(tmp_path / "ca.crt")
    assert credentials.authorization() == "bearer first"
    assert credentials.describe() == (
        f"the pod's service account ({tmp_path}), namespace muster-system"
    )
    assert kopf_login(credentials)().default_namespace == "muster-system"
    (tmp_path / "token").write_text("second")
    assert credentials.renew(credentials.version) is True
    assert credentials.authorization() == "bearer second"
    with pytest.raises(KubeconfigError, match="not in a pod with a service account"):
        Credentials.load(InClusterSource(tmp_path, {}))


def test_kopf_logs_in_with_the_same_credentials_and_reloads_them_on_relogin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(credentials_module, "RELOAD_INTERVAL", 0.0)
    token = tmp_path / "token"
    token.write_text("one")
    credentials = Credentials.load(KubeconfigSource((one_user(tmp_path, {"tokenFile": "token"}),)))
    login = kopf_login(credentials)
    info = login()
    assert (info.server, info.scheme, info.token) == ("https://127.0.0.1:6443", "Bearer", "one")
    assert info.ca_path == str(tmp_path / "ca.crt")
    # kopf logs in again only after a 401: the file is read again then.
    token.write_text("two")
    assert login().token == "two"
    # A KubeClient sharing the credentials renewed them first: kopf gets those, no reload.
    token.write_text("three")
    assert credentials.renew(credentials.version)
    token.write_text("four")
    assert login().token == "three"


# -- what the API refused ----------------------------------------------------------------------


def test_request_targets_in_rbac_terms() -> None:
    cases = [
        ("GET", "/api/v1/nodes", None, ("list", "", "nodes", None, None)),
        ("GET", "/api/v1/pods", {"watch": "1"}, ("watch", "", "pods", None, None)),
        ("GET", "/api/v1/namespaces", None, ("list", "", "namespaces", None, None)),
        ("DELETE", "/api/v1/namespaces/x", None, ("delete", "", "namespaces", None, "x")),
        ("GET", "/apis/batch/v1/namespaces/ns/jobs/j", None, ("get", "batch", "jobs", "ns", "j")),
        (
            "PATCH",
            "/apis/muster.dev/v1alpha1/queues/q/status",
            None,
            ("patch", "muster.dev", "queues/status", None, "q"),
        ),
        ("POST", "/api/v1/namespaces/ns/events", None, ("create", "", "events", "ns", None)),
    ]
    for method, path, params, want in cases:
        target = target_of(method, path, params)
        assert target is not None
        got = (target.verb, target.group, target.resource, target.namespace, target.name)
        assert got == want, (method, path)
    assert target_of("GET", "/version") is None


def test_a_forbidden_request_names_verb_resource_and_the_granting_cluster_role() -> None:
    message = (
        'queues.muster.dev is forbidden: User "system:serviceaccount:team:viewer" cannot list '
        'resource "queues" in API group "muster.dev" at the cluster scope'
    )
    said = forbidden("GET", "/apis/muster.dev/v1alpha1/queues", None, message)
    assert said is not None
    assert said.startswith(
        'forbidden: user "system:serviceaccount:team:viewer" may not list queues.muster.dev '
        "cluster-wide (HTTP 403 on GET /apis/muster.dev/v1alpha1/queues); "
        'the ClusterRole "muster" in manifests/base/rbac.yaml grants it'
    )
    assert said.endswith(
        "kubectl create clusterrolebinding muster-viewer --clusterrole=muster "
        "--serviceaccount=team:viewer"
    )
    # Something muster never needs: no role of ours is offered.
    message = 'User "jane" cannot delete resource "nodes" in API group "" at the cluster scope'
    said = forbidden("DELETE", "/api/v1/nodes/n1", None, message)
    assert said is not None and "no ClusterRole in manifests/ grants it" in said
    assert 'user "jane" may not delete nodes cluster-wide' in said
    # Not RBAC's refusal (Pod Security, a terminating namespace): the server's words stand.
    assert forbidden("POST", "/api/v1/namespaces/x/pods", None, 'violates PodSecurity "x"') is None


def test_role_grants_are_what_the_manifests_grant() -> None:
    granted: set[tuple[str, str, str, str | None, str]] = set()
    for doc in yaml.safe_load_all((REPO / "manifests/base/rbac.yaml").read_text()):
        if doc["kind"] != "ClusterRole":
            continue
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames") or [None]:
                            granted.add((group, resource, verb, name, doc["metadata"]["name"]))
    table = {
        (group, resource, verb, name, role)
        for role, rules in ROLE_GRANTS.items()
        for group, resource, verbs, name in rules
        for verb in verbs.split()
    }
    assert table == granted
    assert granting_role("kopf.dev", "clusterkopfpeerings", "patch", "muster") == "muster"
    assert granting_role("kopf.dev", "clusterkopfpeerings", "patch", "other") is None
