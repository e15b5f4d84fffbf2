"""Where every connection to the Kubernetes API gets its credentials: the official `kubernetes`
client's loaders, found the way kubectl finds them.

A kubeconfig (`--kubeconfig FILE`, else the files `$KUBECONFIG` lists, merged, else
~/.kube/config) is read by `kubernetes.config.kube_config.KubeConfigLoader`: client certificates,
`token` and `tokenFile`, `exec` credential plugins (what GKE, EKS and AKS kubeconfigs use), the
gcp and oidc auth-providers, basic auth, contexts and `proxy-url`. Without any kubeconfig, the
pod's service account, by `InClusterConfigLoader`.

`Credentials` is what a request needs, taken from the loader's `Configuration`, together with its
refresh: the loader's own hook renews an exec token before it expires and re-reads the in-cluster
token file every minute (the kubelet rotates it); and when the apiserver answers 401 the whole
source is loaded again (a rotated tokenFile, a new exec token, a replaced certificate) and the
request is sent once more with what that gives. `KubeClient` (kubeport/kubeapi.py) and kopf's
login (`kopf_login`) both take their credentials from here, so the controller, the webhook, the
CLI, the benches and the kwok engine all log in the same way.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where Kubernetes mounts a pod's service-account token and CA."""

HOOK_INTERVAL = 1.0
"""Seconds between two calls of the loader's refresh hook (it checks an exec token's expiry and
the age of the in-cluster token file; calling it on every request would cost a lock each)."""

RELOAD_INTERVAL = 1.0
"""After a 401, the source is loaded again at most this often: credentials the apiserver keeps
refusing must not run an exec plugin for every request."""


class KubeconfigError(ValueError):
    """Credentials we cannot load; the message says which file or context and what is wrong."""


class Source(Protocol):
    """Where credentials are loaded from (again, when the apiserver refuses them)."""

    def load(self) -> Loaded: ...

    def describe(self) -> str:
        """Where, for messages: `kubeconfig ~/.kube/config`."""
        ...


@dataclass(frozen=True)
class Loaded:
    """One run of an official loader: its `kubernetes.client.Configuration` and who it is."""

    configuration: Any
    user: str
    """Who these credentials are, for messages: `context prod, user ops`, or the service
    account's `namespace muster-system`."""
    expiry: datetime | None = None
    """When an exec plugin's token expires, if it said."""
    namespace: str | None = None
    """The context's namespace, or the service account's: where kopf posts Events about
    cluster-scoped objects."""


def _kubernetes_config() -> Any:
    # Imported on first use: about 0.3 s, which commands that never connect need not pay.
    import kubernetes.config

    return kubernetes.config


@contextmanager
def _loader_errors() -> Iterator[list[str]]:
    """What the kubeconfig loader logs (instead of raising) while it runs on this thread.

    `KubeConfigLoader` logs a failed exec plugin with `logging.error` and goes on without
    credentials; the message is the only place that says why, so it is caught for ours (and a
    CLI without logging configured does not print it as a stray line).
    """
    caught: list[str] = []
    me = threading.get_ident()

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.thread == me and record.levelno >= logging.ERROR:
                caught.append(record.getMessage())

    handler = Catch()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield caught
    finally:
        root.removeHandler(handler)


@dataclass(frozen=True)
class KubeconfigSource:
    """One kubeconfig, or several merged as kubectl merges `KUBECONFIG=a:b`, and a context."""

    paths: tuple[Path, ...]
    context: str | None = None
    """The context to use; None: the current-context of the first file that sets one."""

    def describe(self) -> str:
        return "kubeconfig " + ":".join(str(p) for p in self.paths)

    def load(self) -> Loaded:
        where = ":".join(str(p) for p in self.paths)
        merged, present = self._merge(where)
        wanted = self._context_name(merged, present, where)
        configuration, loader, errors = _run_loader(merged.config, wanted, where)
        context = loader.current_context.get("context") or {}
        user_name = str(context.get("user") or "")
        user = _user_entry(_plain(merged.config).get("users") or [], user_name)
        _check_loaded(configuration, user, user_name, errors, where)
        who = f"context {wanted}, user {user_name}"
        namespace = context.get("namespace") or None
        return Loaded(configuration, who, getattr(loader, "expiry", None), namespace)

    def _merge(self, where: str) -> tuple[Any, list[Path]]:
        """The files that exist, merged by the client library's `KubeConfigMerger`."""
        config = _kubernetes_config()
        present = [p for p in self.paths if p.is_file()]
        if not present:
            missing = "no such file" if len(self.paths) == 1 else "none of these files exists"
            raise KubeconfigError(f"cannot read kubeconfig {where}: {missing}")
        try:
            merged = config.kube_config.KubeConfigMerger(
                config.kube_config.ENV_KUBECONFIG_PATH_SEPARATOR.join(str(p) for p in present)
            )
        except OSError as exc:
            raise KubeconfigError(
                f"cannot read kubeconfig {exc.filename}: {exc.strerror}"
            ) from None
        except Exception as exc:  # ConfigException, or YAML that does not parse
            raise KubeconfigError(f"kubeconfig {where} is not a kubeconfig: {exc}") from None
        if merged.config is None:
            raise KubeconfigError(f"kubeconfig {where} holds no configuration")
        return merged, present

    def _context_name(self, merged: Any, present: Sequence[Path], where: str) -> str:
        """The context to load: ours, else kubectl's current-context; one the files define."""
        # kubectl's rule for merged files: the first file that names a current-context wins (the
        # client library's merger lets the last one win, so the context is chosen here).
        wanted = self.context or next(
            (
                merged.config_files[str(p)].get("current-context")
                for p in present
                if isinstance(merged.config_files.get(str(p)), dict)
                and merged.config_files[str(p)].get("current-context")
            ),
            None,
        )
        contexts = [str(_plain(c).get("name")) for c in _plain(merged.config).get("contexts") or []]
        choose = f"one of: {', '.join(contexts)}" if contexts else "it defines no context"
        if not wanted:
            raise KubeconfigError(
                f"kubeconfig {where} has no current-context: pass --context ({choose})"
            )
        if wanted not in contexts:
            raise KubeconfigError(
                f'kubeconfig {where} has no context "{wanted}" ({choose}; '
                "`kubectl config get-contexts` lists them)"
            )
        return str(wanted)


def _run_loader(merged_config: Any, wanted: str, where: str) -> tuple[Any, Any, list[str]]:
    """(Configuration, loader, what it logged) of `KubeConfigLoader` on context `wanted`."""
    config = _kubernetes_config()
    from kubernetes.client import Configuration

    configuration = Configuration()
    with _loader_errors() as errors:
        try:
            loader = config.kube_config.KubeConfigLoader(
                config_dict=merged_config, active_context=wanted, config_base_path=None
            )
            loader.load_and_set(configuration)
        except OSError as exc:
            raise KubeconfigError(
                f"kubeconfig {where}, context {wanted}: cannot read {exc.filename}: {exc.strerror}"
            ) from None
        except Exception as exc:  # ConfigException: a missing key, file or field
            raise KubeconfigError(f"kubeconfig {where}, context {wanted}: {exc}") from None
    return configuration, loader, errors


def _check_loaded(
    configuration: Any, user: Mapping[str, Any], user_name: str, errors: list[str], where: str
) -> None:
    """Refuse what the loader accepted but no request can use (it logs instead of raising)."""
    given = configuration.api_key.get("BearerToken") or configuration.api_key.get(
        "authorization"
    )  # read directly: the refresh hook would run the plugin once more
    if "exec" in user and not (given or configuration.cert_file):
        command = (user.get("exec") or {}).get("command")
        why = "; ".join(errors) or "it printed no token and no client certificate"
        raise KubeconfigError(
            f"kubeconfig {where}, user {user_name}: the exec credential plugin "
            f"{command!r} gave no credentials: {why}"
        )
    host = str(configuration.host or "")
    if not host.startswith("https://"):
        raise KubeconfigError(f"kubeconfig {where}: server {host!r} is not an https URL")
    proxy = configuration.proxy
    if proxy and urlsplit(str(proxy)).scheme != "http":
        raise KubeconfigError(
            f"kubeconfig {where}: proxy-url {proxy} is not supported: only http:// proxies "
            "(HTTP CONNECT) are"
        )


def _plain(node: Any) -> Any:
    """The dict or list inside the merger's `ConfigNode` wrappers (or the value itself)."""
    return getattr(node, "value", node)


def _user_entry(users: Sequence[Any], name: str) -> Mapping[str, Any]:
    for entry in users:
        if _plain(entry).get("name") == name:
            return dict(_plain(_plain(entry).get("user")) or {})
    return {}


@dataclass(frozen=True)
class InClusterSource:
    """The pod's service account: its token (re-read, as the kubelet rotates it) and CA."""

    directory: Path = SERVICE_ACCOUNT
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)

    def describe(self) -> str:
        return f"the pod's service account ({self.directory})"

    def load(self) -> Loaded:
        config = _kubernetes_config()
        from kubernetes.client import Configuration

        loader = config.incluster_config.InClusterConfigLoader(
            token_filename=str(self.directory / "token"),
            cert_filename=str(self.directory / "ca.crt"),
            try_refresh_token=True,
            environ=self.environ,
        )
        configuration = Configuration()
        try:
            loader.load_and_set(configuration)
        except Exception as exc:  # ConfigException: not in a pod, or no token mounted
            raise KubeconfigError(
                f"no kubeconfig, and not in a pod with a service account ({exc}): pass "
                "--kubeconfig, or set KUBECONFIG"
            ) from None
        path = self.directory / "namespace"
        namespace = path.read_text().strip() if path.is_file() else None
        return Loaded(configuration, f"namespace {namespace}" if namespace else "", None, namespace)


def source_for(
    kubeconfig: str | os.PathLike[str] | None,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Source:
    """kubectl's order: --kubeconfig FILE; else every file `$KUBECONFIG` lists, merged; else
    ~/.kube/config if it exists; else the pod's service account."""
    env = os.environ if environ is None else environ
    if kubeconfig:
        return KubeconfigSource((Path(kubeconfig).expanduser(),), context)
    listed = [Path(p).expanduser() for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        return KubeconfigSource(tuple(listed), context)
    home = Path("~/.kube/config").expanduser()
    if home.is_file() or context:
        return KubeconfigSource((home,), context)
    return InClusterSource(environ=env)


def _authorization(configuration: Any) -> str | None:
    """The Authorization header the configuration gives (running its refresh hook).

    kubernetes>=36 keeps it under `BearerToken`, older releases under `authorization`.
    """
    header = configuration.get_api_key_with_prefix("BearerToken")
    if not header:
        header = configuration.get_api_key_with_prefix("authorization")
    return str(header).strip() if header else None


@dataclass(eq=False)
class Credentials:
    """What a request needs to authenticate, and (when loaded from a `Source`) its refresh.

    Shared by every client made from it (`KubeClient(client.credentials)`), so a renewal is
    done once for all of them. Built by hand (`Credentials(server, ca_file, cert, key)`), it is
    fixed: nothing renews it.
    """

    server: str
    ca_file: str | None
    cert_file: str | None
    key_file: str | None
    token: str | None = None
    insecure: bool = False
    proxy: str | None = None
    """An http:// proxy to tunnel through (HTTP CONNECT), from the kubeconfig's proxy-url."""
    tls_server_name: str | None = None
    user: str = ""
    """Who these credentials are, for messages."""
    source: Source | None = None
    expiry: datetime | None = None
    namespace: str | None = None
    version: int = 0
    """Bumped on every change (a renewed token, new certificates)."""
    tls_version: int = 0
    """Bumped when what a TLS connection is made with changes: connections are then remade."""
    _configuration: Any = field(default=None, repr=False)
    _authorization: str | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _hook_due: float = field(default=0.0, repr=False)
    _reloaded_at: float = field(default=-math.inf, repr=False)

    def __post_init__(self) -> None:
        if self.token and self._authorization is None:
            self._authorization = f"Bearer {self.token}"

    @classmethod
    def load(cls, source: Source) -> Credentials:
        """Run `source`'s loader once (raises KubeconfigError with what is wrong)."""
        credentials = cls("", None, None, None, source=source)
        credentials._take(source.load())
        return credentials

    def describe(self) -> str:
        """Where these credentials come from and who they are, for messages."""
        if self.source is None:
            return self.user or "the given credentials"
        who = f", {self.user}" if self.user else ""
        return f"{self.source.describe()}{who}"

    def authorization(self) -> str | None:
        """The Authorization header to send now (None: client certificates only)."""
        if self._configuration is not None and time.monotonic() >= self._hook_due:
            with self._lock:
                if time.monotonic() >= self._hook_due:
                    self._run_hook()
        return self._authorization

    def authorize(self, headers: dict[str, str]) -> dict[str, str]:
        """`headers` with the Authorization header to send now, if there is one."""
        if authorization := self.authorization():
            headers["Authorization"] = authorization
        return headers

    def renew(self, rejected: int) -> bool:
        """After a 401 to a request sent with `version` `rejected`: load the source again.

        True if there is something new to retry with (perhaps renewed by another thread).
        """
        with self._lock:
            if self.version != rejected:
                return True
            if self.source is None or time.monotonic() - self._reloaded_at < RELOAD_INTERVAL:
                return False
            return self._reload()

    def reload(self) -> bool:
        """Load the source again now (kopf's re-login); True if anything changed."""
        with self._lock:
            return self.source is not None and self._reload()

    def _reload(self) -> bool:
        assert self.source is not None
        self._reloaded_at = time.monotonic()
        before = self.version
        try:
            loaded = self.source.load()
        except KubeconfigError as exc:
            log.warning("cannot renew the credentials of %s: %s", self.describe(), exc)
            return False
        self._take(loaded)
        return self.version != before

    def _run_hook(self) -> None:
        before = self._snapshot()
        try:
            header = _authorization(self._configuration)
        except Exception as exc:  # an exec plugin or token file that fails now: keep the old
            log.warning("cannot refresh the credentials of %s: %s", self.describe(), exc)
            header = self._authorization
        self._authorization = header
        self._copy_tls(self._configuration)
        self._hook_due = time.monotonic() + HOOK_INTERVAL
        self._count_change(before)

    def _take(self, loaded: Loaded) -> None:
        before = self._snapshot()
        self._configuration = loaded.configuration
        self.user = loaded.user
        self.expiry = loaded.expiry
        self.namespace = loaded.namespace
        self._authorization = _authorization(loaded.configuration)
        self.token = None
        self._copy_tls(loaded.configuration)
        self._hook_due = time.monotonic() + HOOK_INTERVAL
        self._count_change(before)

    def _copy_tls(self, configuration: Any) -> None:
        self.server = str(configuration.host)
        self.ca_file = configuration.ssl_ca_cert or None
        self.cert_file = configuration.cert_file or None
        self.key_file = configuration.key_file or None
        self.insecure = not configuration.verify_ssl
        self.proxy = configuration.proxy or None
        self.tls_server_name = getattr(configuration, "tls_server_name", None) or None

    def _snapshot(self) -> tuple[tuple[Any, ...], str | None]:
        tls = (
            self.server,
            self.ca_file,
            self.cert_file,
            self.key_file,
            self.insecure,
            self.proxy,
            self.tls_server_name,
        )
        return tls, self._authorization

    def _count_change(self, before: tuple[tuple[Any, ...], str | None]) -> None:
        after = self._snapshot()
        if after[0] != before[0]:
            self.tls_version += 1
        if after != before:
            self.version += 1


def kopf_login(credentials: Credentials) -> Callable[..., Any]:
    """A `@kopf.on.login` handler that gives kopf these credentials.

    kopf calls it at start, and again when the apiserver answered one of its requests with 401
    (or the token it was given has expired): then the source is loaded again, unless a
    `KubeClient` sharing these credentials has already renewed them since kopf last asked.
    """
    given: list[int] = []  # the version kopf was given last

    def login(**_: Any) -> Any:
        import kopf

        if given == [credentials.version]:
            credentials.reload()
        header = credentials.authorization()
        scheme, _space, token = (header or "").partition(" ")
        given[:] = [credentials.version]
        return kopf.ConnectionInfo(
            server=credentials.server,
            ca_path=credentials.ca_file,
            insecure=credentials.insecure,
            scheme=scheme or None,
            token=token or None,
            certificate_path=credentials.cert_file,
            private_key_path=credentials.key_file,
            proxy_url=credentials.proxy,
            expiration=credentials.expiry,
            default_namespace=credentials.namespace,
        )

    return login
