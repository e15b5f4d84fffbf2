"""Credentials like kubectl's, against the real control plane (kubeport/credentials.py).

`muster queues`, `muster status` and `muster run` work with a kubeconfig whose user is an `exec`
plugin (a script printing an ExecCredential with a ServiceAccount token from the TokenRequest
API), with a `tokenFile` user, and with `KUBECONFIG` naming two files that only together make a
context. The controller keeps working when its token file is replaced and the old token stops
being accepted (the token is bound to a Secret; deleting the Secret revokes it), and so does
kopf, whose peering keep-alive must log in again. The errors admins hit first (no such context,
revoked credentials, a server that does not answer or is not the one the CA vouches for) are one
line that names the cause; the 403 is in test_cli.py.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import socketserver
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.launcher import free_port
from kubeport.credentials import Credentials, InClusterSource, KubeconfigSource
from kubeport.kubeapi import ApiError, KubeClient
from simulator.controlplane.minicluster import apply_crd
from tests import builders
from tests.cluster.test_cli import muster_cli
from tests.conftest import REPO, MusterProcess, start_muster
from tests.controller_helpers import admitted, create_queue, delete_queue, jobs_path
from tests.kube import wait_for, wait_webhook_stamps

pytestmark = [pytest.mark.cluster]

RBAC = "/apis/rbac.authorization.k8s.io/v1"
PEERINGS = "/apis/kopf.dev/v1/clusterkopfpeerings"


@dataclass
class Account:
    """A ServiceAccount bound to cluster-admin (`muster run --local` registers a webhook
    configuration, more than muster's ClusterRole grants), and its tokens."""

    kube: KubeClient
    namespace: str
    name: str

    def token(self, bound_to: str) -> str:
        """A token from the TokenRequest API, valid while the Secret `bound_to` exists."""
        secret = self.kube.create(
            f"/api/v1/namespaces/{self.namespace}/secrets", {"metadata": {"name": bound_to}}
        )
        ref = {"kind": "Secret", "apiVersion": "v1", "name": bound_to}
        spec = {
            "expirationSeconds": 3600,
            "boundObjectRef": {**ref, "uid": secret["metadata"]["uid"]},
        }
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        path = f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{self.name}/token"
        return str(self.kube.create(path, request)["status"]["token"])

    def revoke(self, bound_to: str, token: str) -> None:
        """Delete the Secret the token is bound to; wait until the apiserver refuses the token
        (it caches accepted tokens for some seconds)."""
        self.kube.delete(f"/api/v1/namespaces/{self.namespace}/secrets/{bound_to}")
        fixed = self.kube.credentials
        with KubeClient(Credentials(fixed.server, fixed.ca_file, None, None, token=token)) as old:

            def refused() -> bool:
                try:
                    old.get("/api/v1/namespaces/default")
                except ApiError as exc:
                    return exc.status == 401
                return False

            wait_for(refused, timeout=60, what=f"the token bound to {bound_to} to be refused")


@pytest.fixture
def account(kube: KubeClient, namespace: str) -> Iterator[Account]:
    name = "muster-user"
    kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}})
    binding = f"{namespace}-admin"
    kube.create(
        f"{RBAC}/clusterrolebindings",
        {
            "metadata": {"name": binding},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )
    try:
        yield Account(kube, namespace, name)
    finally:
        kube.delete(f"{RBAC}/clusterrolebindings/{binding}")


def cluster_entry(kubeconfig: Path) -> dict[str, Any]:
    """The admin kubeconfig's cluster (server and certificate-authority)."""
    doc = yaml.safe_load(kubeconfig.read_text())
    context = next(c for c in doc["contexts"] if c["name"] == doc["current-context"])
    cluster = next(c for c in doc["clusters"] if c["name"] == context["context"]["cluster"])
    return dict(cluster)


def write_config(
    path: Path, cluster: dict[str, Any] | None, user: dict[str, Any] | None, context: bool
) -> Path:
    """A kubeconfig with some of: the cluster, user `muster-user`, context `work` (current)."""
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Config"}
    if cluster is not None:
        doc["clusters"] = [{"name": "local", "cluster": cluster}]
    if user is not None:
        doc["users"] = [{"name": "muster-user", "user": user}]
    if context:
        doc["contexts"] = [{"name": "work", "context": {"cluster": "local", "user": "muster-user"}}]
        doc["current-context"] = "work"
    path.write_text(yaml.safe_dump(doc))
    return path


def replace_file(path: Path, text: str) -> None:
    """Write `text` into `path` at once, as the kubelet swaps a projected token."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(text)
    os.replace(fresh, path)


@dataclass
class Logins:
    """The three kinds of kubeconfig the issue names, for one ServiceAccount."""

    exec_config: Path
    exec_runs: Path
    token_file: Path
    token_config: Path
    merged: str

    def variants(self) -> dict[str, tuple[list[str], dict[str, str]]]:
        """How each is given to `muster`: (arguments, environment)."""
        return {
            "exec plugin": (["--kubeconfig", str(self.exec_config)], {}),
            "tokenFile": (["--kubeconfig", str(self.token_config)], {}),
            "KUBECONFIG=a:b": ([], {"KUBECONFIG": self.merged}),
        }


def make_logins(account: Account, kubeconfig: Path, where: Path, secret: str) -> Logins:
    cluster = cluster_entry(kubeconfig)["cluster"]
    token = account.token(secret)
    # exec: a plugin that prints an ExecCredential (what cloud CLIs print) and counts its runs.
    plugin_dir = where / "plugin"
    plugin_dir.mkdir()
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": token},
    }
    (plugin_dir / "credential.json").write_text(json.dumps(credential))
    plugin = plugin_dir / "print-credential"
    plugin.write_text(
        "#!/bin/sh\n"
        'echo run >> "$(dirname "$0")/runs"\n'
        'exec cat "$(dirname "$0")/credential.json"\n'
    )
    plugin.chmod(0o755)
    exec_user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": str(plugin),
            "interactiveMode": "Never",
        }
    }
    exec_config = write_config(where / "exec.kubeconfig", cluster, exec_user, context=True)
    # tokenFile, relative to the kubeconfig.
    (where / "token").write_text(token)
    token_config = write_config(where / "token.kubeconfig", cluster, {"tokenFile": "token"}, True)
    # Two files: the cluster and user in one, the context in the other.
    first = write_config(where / "cluster-and-user", cluster, {"token": token}, context=False)
    second = write_config(where / "context", None, None, context=True)
    return Logins(
        exec_config, plugin_dir / "runs", where / "token", token_config, f"{first}:{second}"
    )


# -- the CLI ----------------------------------------------------------------------------------


def test_queues_and_status_read_with_exec_token_file_and_merged_kubeconfigs(
    kube: KubeClient,
    namespace: str,
    muster: MusterProcess,
    kubeconfig: Path,
    account: Account,
    tmp_path: Path,
) -> None:
    logins = make_logins(account, kubeconfig, tmp_path, "cli-token")
    queue = f"{namespace}-q"
    create_queue(kube, queue, {"nominal": {"cpu": "4"}})
    try:
        kube.create(jobs_path(namespace), builders.job("gang", queue, pods=2, runtime="600s"))
        wait_for(
            lambda: admitted(kube.get(f"{jobs_path(namespace)}/gang")),
            timeout=60,
            what="the gang to be admitted",
        )
        for how, (args, env) in logins.variants().items():
            done = muster_cli("queues", *args, "-o", "json", env=env)
            assert done.returncode == 0, f"{how}: {done.stderr}"
            body = json.loads(done.stdout)
            row = next(q for q in body["queues"] if q["name"] == queue)
            assert (row["admitted"], row["usage"]) == (1, {"cpu": "2"}), how
            assert "context work, user muster-user" in body["source"]["where"], how

            done = muster_cli("status", f"{namespace}/gang", *args, "-o", "json", env=env)
            assert done.returncode == 0, f"{how}: {done.stderr}"
            status = json.loads(done.stdout)
            assert status["queue"] == queue and status["state"] != "Pending", how
        assert logins.exec_runs.read_text().count("run") == 2, "one plugin run per command"
    finally:
        delete_queue(kube, queue)


# -- the controller ---------------------------------------------------------------------------


def submit_and_wait_admitted(
    kube: KubeClient, namespace: str, queue: str, name: str, running: MusterProcess
) -> None:
    body = builders.job(name, queue, pods=1, runtime="1s")
    wait_webhook_stamps(kube, jobs_path(namespace), body)
    kube.create(jobs_path(namespace), body)
    try:
        wait_for(
            lambda: admitted(kube.get(f"{jobs_path(namespace)}/{name}")),
            timeout=90,
            what=f"gang {name} to be admitted",
        )
    except AssertionError as exc:
        # What muster logged says why (a paused peering, a refused login, ...).
        raise AssertionError(f"{exc}\nmuster's last output:\n{running.text()[-4000:]}") from None


def last_keepalive(kube: KubeClient, peering: str) -> datetime | None:
    status = kube.get(f"{PEERINGS}/{peering}").get("status") or {}
    seen = [datetime.fromisoformat(p["lastseen"]) for p in status.values() if "lastseen" in p]
    return max(seen) if seen else None


def drop_peering(kube: KubeClient, peering: str) -> None:
    try:
        kube.patch(f"{PEERINGS}/{peering}", {"metadata": {"finalizers": None}})
        kube.delete(f"{PEERINGS}/{peering}")
    except ApiError as exc:
        if exc.status != 404:
            raise


def test_muster_run_logs_in_with_each_and_outlives_a_revoked_token(
    kube: KubeClient,
    namespace: str,
    muster: MusterProcess,
    kubeconfig: Path,
    account: Account,
    tmp_path: Path,
) -> None:
    """The session's muster is stopped meanwhile: one muster serves the webhook at a time."""
    logins = make_logins(account, kubeconfig, tmp_path, "run-token")
    apply_crd(
        kube, yaml.safe_load((REPO / "manifests/crd/clusterkopfpeerings.kopf.dev.yaml").read_text())
    )
    queue = f"{namespace}-q"
    peering = f"{namespace}-peering"
    create_queue(kube, queue, {"nominal": {"cpu": "4"}})
    muster.stop()
    running: MusterProcess | None = None
    try:
        for how, (args, env) in logins.variants().items():
            if how == "tokenFile":
                continue  # below, with the token replaced under it
            config = Path(args[1]) if args else None
            running = start_muster(config, env=env)
            submit_and_wait_admitted(
                kube, namespace, queue, f"by-{how.split()[0].lower()[:4]}", running
            )
            running.stop()
            running = None
        assert logins.exec_runs.read_text().count("run") >= 2, "the controller and the webhook"

        # tokenFile, with kopf peering: kopf's keep-alive patches the peering object every few
        # seconds, so kopf too must log in again once the old token is refused.
        running = start_muster(
            logins.token_config,
            "--peering", peering, "--peering-lifetime", "15", "--priority", "1",
        )  # fmt: skip
        submit_and_wait_admitted(kube, namespace, queue, "before", running)
        old = logins.token_file.read_text()
        replace_file(logins.token_file, account.token("run-token-2"))
        account.revoke("run-token", old)
        revoked = datetime.now(UTC)
        submit_and_wait_admitted(kube, namespace, queue, "after", running)
        wait_for(
            lambda: (seen := last_keepalive(kube, peering)) is not None and seen > revoked,
            timeout=60,
            what="kopf's peering keep-alive with the new token",
        )
        assert running.proc.poll() is None, running.text()[-3000:]
        assert "LoginError" not in running.text()
    finally:
        if running is not None:
            running.stop()
        drop_peering(kube, peering)
        delete_queue(kube, queue)
        muster.restart(signal.SIGTERM)


# -- the client, and what it says when it cannot -------------------------------------------------


def test_a_client_reads_its_token_file_again_when_the_old_token_is_refused(
    kube: KubeClient, namespace: str, kubeconfig: Path, account: Account, tmp_path: Path
) -> None:
    logins = make_logins(account, kubeconfig, tmp_path, "client-token")
    # The pod's view: a token file and the CA, mounted; the apiserver's address in the env.
    mounted = tmp_path / "serviceaccount"
    mounted.mkdir()
    shutil.copy(logins.token_file, mounted / "token")
    shutil.copy(kube.credentials.ca_file or "", mounted / "ca.crt")
    host, port = kube.credentials.server.removeprefix("https://").rsplit(":", 1)
    environ = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
    clients = {
        "tokenFile": KubeClient(Credentials.load(KubeconfigSource((logins.token_config,)))),
        "in-cluster": KubeClient(Credentials.load(InClusterSource(mounted, environ))),
    }
    pods = f"/api/v1/namespaces/{namespace}/pods"
    for client in clients.values():
        client.get(pods)
    old_token = logins.token_file.read_text()
    new_token = account.token("client-token-2")
    replace_file(logins.token_file, new_token)
    replace_file(mounted / "token", new_token)
    account.revoke("client-token", old_token)
    for how, client in clients.items():
        version = client.credentials.version
        assert client.get(pods)["items"] == [], how
        assert client.credentials.version > version, f"{how}: renewed after a 401"
        # A watch opened now authenticates with the new token too.
        stream = client.watch(pods, {}, timeout_seconds=1)
        assert list(stream) == [], how
        client.close()


def one_line_error(done: Any) -> str:
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    return str(done.stderr.strip())


def test_what_admins_get_wrong_first_is_one_line_naming_the_cause(
    kube: KubeClient, namespace: str, kubeconfig: Path, account: Account, tmp_path: Path
) -> None:
    cluster = cluster_entry(kubeconfig)["cluster"]
    contexts = [c["name"] for c in yaml.safe_load(kubeconfig.read_text())["contexts"]]

    # A context that does not exist: named, with the ones that do.
    said = one_line_error(
        muster_cli("queues", "--kubeconfig", str(kubeconfig), "--context", "prod")
    )
    assert said == (
        f'muster queues: kubeconfig {kubeconfig} has no context "prod" (one of: '
        f"{', '.join(contexts)}; `kubectl config get-contexts` lists them)"
    )
    done = muster_cli("run", "--local", "--kubeconfig", str(kubeconfig), "--context", "prod")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert 'has no context "prod"' in done.stderr

    # Credentials the apiserver no longer accepts (a revoked token).
    token = account.token("revoked")
    account.revoke("revoked", token)
    revoked = write_config(tmp_path / "revoked", cluster, {"token": token}, context=True)
    said = one_line_error(muster_cli("queues", "--kubeconfig", str(revoked)))
    assert said.startswith(
        f"muster queues: unauthorized: the API server {cluster['server']} refused the "
        f"credentials of kubeconfig {revoked}, context work, user muster-user (HTTP 401 on GET "
    )
    assert "expired, revoked, or not for this cluster" in said

    # Nothing listening where the kubeconfig points.
    port = free_port()
    gone = write_config(
        tmp_path / "gone", {**cluster, "server": f"https://127.0.0.1:{port}"}, {"token": "t"}, True
    )
    said = one_line_error(muster_cli("status", f"{namespace}/x", "--kubeconfig", str(gone)))
    assert said.startswith(
        f"muster status: cannot reach the API server https://127.0.0.1:{port} (kubeconfig {gone}, "
        "context work, user muster-user): Connection refused; is the cluster up"
    )

    # A server the kubeconfig's CA does not vouch for.
    from webhook.tls import create_webhook_tls

    other = create_webhook_tls(tmp_path / "other-ca", ["127.0.0.1"])
    (tmp_path / "other-ca.crt").write_bytes(other.ca_bundle)
    stranger = write_config(
        tmp_path / "stranger",
        {"server": cluster["server"], "certificate-authority": str(tmp_path / "other-ca.crt")},
        {"token": "t"},
        True,
    )
    said = one_line_error(muster_cli("queues", "--kubeconfig", str(stranger)))
    assert said.startswith(f"muster queues: cannot trust the API server {cluster['server']}")
    assert "certificate-authority does not match" in said


# -- proxy-url ----------------------------------------------------------------------------------


class ConnectProxy(socketserver.ThreadingTCPServer):
    """An HTTP CONNECT proxy on loopback that records where it tunnels to."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Tunnel)
        self.tunnels: list[str] = []


class _Tunnel(socketserver.StreamRequestHandler):
    server: ConnectProxy

    def handle(self) -> None:
        method, target, _ = self.rfile.readline().decode().split()
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
            pass
        if method != "CONNECT":
            self.wfile.write(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            return
        self.server.tunnels.append(target)
        host, port = target.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as upstream:
            self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            self.wfile.flush()
            ends = [self.connection, upstream]
            while True:
                ready, _, _ = select.select(ends, [], [], 30)
                if not ready:
                    return
                for end in ready:
                    data = end.recv(65536)
                    if not data:
                        return
                    (upstream if end is self.connection else self.connection).sendall(data)


def test_a_proxy_url_tunnels_every_request(kubeconfig: Path, tmp_path: Path) -> None:
    proxy = ConnectProxy()
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        admin = yaml.safe_load(kubeconfig.read_text())
        for entry in admin["clusters"]:
            entry["cluster"]["proxy-url"] = f"http://127.0.0.1:{proxy.server_address[1]}"
        proxied = tmp_path / "proxied"
        proxied.write_text(yaml.safe_dump(admin))
        done = muster_cli("queues", "--kubeconfig", str(proxied), "-o", "json")
        assert done.returncode == 0, done.stderr
        server = cluster_entry(kubeconfig)["cluster"]["server"].removeprefix("https://")
        assert proxy.tunnels and set(proxy.tunnels) == {server}
    finally:
        proxy.shutdown()
        proxy.server_close()
        thread.join(timeout=10)
