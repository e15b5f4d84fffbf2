"""Where `muster queues`, `muster status`, `muster explain` and `muster history` read what
they show.

Two sources, one shape. With `--status-url` (or `$MUSTER_STATUS_URL`) the controller's status
service answers: what the running controller knows, at no cost to the apiserver. Without it, the
user's kubeconfig: one read-only LIST each of Queues, Nodes, Pods and muster-managed Jobs, loaded
into the controller's own cache (`admission.listing.list_everything` and `apply_listing`) and
planned once with `policies.plan`, as one admit cycle would. So `muster explain` works from a
laptop with only a kubeconfig and gives the reason the controller would give. Both sources return
the status service's JSON (`admission.status.gang_status`, the `/v1/queues` body), so the
commands format one thing. Nothing here writes to the cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Protocol

import yaml

from admission.cache import Cache
from admission.estimates import refresh_now
from admission.listing import apply_listing, list_everything
from admission.status import (
    gang_status,
    history_body,
    queue_listing,
    queue_positions,
    queue_status,
)
from kubeport import kubeapi
from kubeport.credentials import Credentials, InClusterSource, source_for
from kubeport.kubeapi import ApiError, KubeClient, KubeconfigError
from policies import Decisions, PolicyError, format_quantity, gangstate, plan
from policies.vocabulary import QUEUE, SUBMITTED

STATUS_URL_ENV = "MUSTER_STATUS_URL"

Listing = list[tuple[str, list[Any], int]]
"""What admission.listing.list_everything returns: (kind, items, collection version)."""

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class ViewError(Exception):
    """Why a command cannot answer, in one line; `exit_code` is what the command returns."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def not_found(namespace: str, name: str, why: str) -> ViewError:
    return ViewError(
        f"gang {namespace}/{name} not found: {why}; list muster's gangs there with "
        f"`kubectl get jobs -n {namespace} -l {QUEUE}`"
    )


# -- arguments -----------------------------------------------------------------------------


def add_source_arguments(parser: argparse.ArgumentParser, *, plans: bool) -> None:
    """--status-url, --kubeconfig, --context (and --policy where the API source plans)."""
    source = parser.add_argument_group("where to read from")
    source.add_argument(
        "--status-url",
        default=None,
        metavar="URL",
        help="the controller's status service, e.g. http://localhost:8081 "
        f"(default: ${STATUS_URL_ENV}); without it, read the API with your kubeconfig",
    )
    source.add_argument(
        "--kubeconfig",
        default=None,
        help="kubeconfig for read-only access (default: $KUBECONFIG, else ~/.kube/config, "
        "else the pod's service account); an explicit --kubeconfig beats "
        f"${STATUS_URL_ENV}",
    )
    source.add_argument("--context", default=None, help="kubeconfig context (default: current)")
    if plans:
        source.add_argument(
            "--policy",
            default="drf",
            help="admission policy to plan with when reading the API; use the controller's "
            "`muster run --policy` (default: drf)",
        )
    source.add_argument(
        "--timeout", type=float, default=30.0, help="seconds per request (default: 30)"
    )


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output",
        "-o",
        choices=("table", "json", "yaml"),
        default="table",
        help="table (for people, default), json or yaml (for scripts)",
    )


def parse_gang(text: str, namespace: str | None) -> tuple[str, str]:
    """(namespace, name) from NS/NAME, or NAME with -n NS (default namespace: "default")."""
    ns, sep, name = text.partition("/")
    if not sep:
        ns, name = namespace or "default", text
    elif namespace is not None and namespace != ns:
        raise ViewError(f"gang {text!r}: namespace {ns!r} differs from -n {namespace!r}", 2)
    if not _DNS_LABEL.match(ns) or len(ns) > 63:
        raise ViewError(
            f"gang {text!r}: {ns!r} is not a namespace name; expected NAMESPACE/NAME, "
            "e.g. team-a/train-64",
            2,
        )
    if not _DNS_SUBDOMAIN.match(name) or len(name) > 253:
        raise ViewError(
            f"gang {text!r}: {name!r} is not a Job name; expected NAMESPACE/NAME, "
            "e.g. team-a/train-64",
            2,
        )
    return ns, name


# -- sources -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """Where an answer came from: shown by every command, so users know what they trust."""

    kind: str  # "statusService" or "api"
    where: str
    detail: str = ""

    def describe(self) -> str:
        if self.kind == "statusService":
            return f"the controller's status service at {self.where}"
        detail = f"; {self.detail}" if self.detail else ""
        return (
            f"the API, read with {self.where} and planned here by the controller's "
            f"cache and planner{detail}"
        )

    def as_dict(self) -> dict[str, str]:
        out = {"from": self.kind, "where": self.where}
        if self.detail:
            out["detail"] = self.detail
        return out


class View(Protocol):
    source: Source

    def gang(self, namespace: str, name: str) -> dict[str, Any]:
        """The status service's gang body; raise ViewError if there is no such gang."""
        ...

    def queues(self) -> dict[str, dict[str, Any]]:
        """The status service's /v1/queues body: queue name -> status and spec."""
        ...

    def history(self, since: float | None) -> dict[str, Any]:
        """The status service's /v1/history body (gangs that ended in the last `since` s)."""
        ...


class ServiceView:
    """The running controller's status service (GET only; it makes no API calls)."""

    def __init__(self, url: str, timeout: float = 30.0, authorization: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.authorization = authorization
        """`Bearer TOKEN` sent with every request (a service run with --status-auth
        kubernetes wants one); None: none sent."""
        if not re.match(r"^https?://", self.url):
            raise ViewError(
                f"--status-url {url!r}: expected an http(s) URL, e.g. http://localhost:8081", 2
            )
        self.timeout = timeout
        self.source = Source("statusService", self.url)

    def _get(self, path: str) -> tuple[int, Any]:
        try:
            headers = {"Authorization": self.authorization} if self.authorization else {}
            request = urllib.request.Request(self.url + path, headers=headers)
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return int(response.status), json.load(response)
        except urllib.error.HTTPError as exc:
            try:
                body = json.load(exc)
            except ValueError:
                body = {}
            return exc.code, body
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ViewError(
                f"status service at {self.url} unreachable ({reason}): check that `muster run` "
                f"serves it (--status-port), or drop --status-url/${STATUS_URL_ENV} to read the "
                "API with your kubeconfig"
            ) from None

    def _not_serving(self, status: int, body: Any) -> None:
        if status in (401, 403):
            why = body.get("error") if isinstance(body, dict) else None
            sent = "with" if self.authorization else "without"
            raise ViewError(
                f"status service at {self.url} refused the request sent {sent} a bearer token "
                f"(HTTP {status}): {why or 'no reason given'}; use a kubeconfig whose user has a "
                "token (--kubeconfig/--context), or drop --status-url to read the API"
            )
        if status == 503:
            why = body.get("error") if isinstance(body, dict) else None
            raise ViewError(
                f"status service at {self.url}: {why or 'HTTP 503'}; or drop "
                f"--status-url/${STATUS_URL_ENV} to read the API with your kubeconfig"
            )

    def gang(self, namespace: str, name: str) -> dict[str, Any]:
        status, body = self._get(f"/v1/gangs/{namespace}/{name}")
        self._not_serving(status, body)
        if status == 404 and "version" in body:
            raise not_found(
                namespace, name, "the controller holds no Job by that name labelled " + QUEUE
            )
        if status != 200 or not isinstance(body, dict) or "state" not in body:
            raise ViewError(f"status service at {self.url}: HTTP {status}: {body}")
        return body

    def queues(self) -> dict[str, dict[str, Any]]:
        status, body = self._get("/v1/queues")
        self._not_serving(status, body)
        if status != 200 or not isinstance(body, dict) or "queues" not in body:
            raise ViewError(f"status service at {self.url}: HTTP {status}: {body}")
        return dict(body["queues"])

    def history(self, since: float | None) -> dict[str, Any]:
        status, body = self._get("/v1/history" + ("" if since is None else f"?since={since:g}"))
        self._not_serving(status, body)
        if status != 200 or not isinstance(body, dict) or "gangs" not in body:
            raise ViewError(f"status service at {self.url}: HTTP {status}: {body}")
        return body


class ApiView:
    """The controller's view, rebuilt here from one LIST of each kind and one plan (read-only).

    What differs from the live controller: reservations of gangs admitted in the last seconds
    (held only in the controller's memory) are not known, so right after an admission the two
    may disagree about free node room for a few seconds.
    """

    def __init__(self, client: KubeClient, where: str, policy: str = "drf") -> None:
        self.client = client
        self.policy = policy
        self.where = where
        self.source = Source("api", where)
        self._cache: Cache | None = None
        self.admit_now: dict[str, int] = {}
        self.now = 0.0

    @classmethod
    def open(
        cls,
        kubeconfig: str | None,
        context: str | None,
        policy: str = "drf",
        timeout: float = 30.0,
    ) -> ApiView:
        source = source_for(kubeconfig, context)
        try:
            client = KubeClient(Credentials.load(source))
        except KubeconfigError as exc:
            if isinstance(source, InClusterSource):
                raise ViewError(
                    "no kubeconfig: pass --kubeconfig or set KUBECONFIG (read access is "
                    f"enough), or point --status-url/${STATUS_URL_ENV} at muster's status service"
                ) from None
            raise ViewError(str(exc)) from None
        where = client.credentials.describe()
        client.timeout = timeout
        client.user_agent = "muster-cli"
        return cls(client, where, policy)

    def close(self) -> None:
        self.client.close()

    def _load(self) -> Cache:
        """LIST everything into a fresh controller cache and plan once (first use only)."""
        if self._cache is not None:
            return self._cache
        try:
            listing = list_everything(self.client)
        except (ApiError, OSError) as exc:
            # 401, RBAC 403 and an unreachable server each say what to do (kubeport/access.py).
            raise ViewError(str(exc)) from None
        # Estimates are computed per gang asked (see `gang`): cheaper than all of them.
        planned = plan_listing(listing, self.policy, estimate=False)
        self.admit_now, self.now = planned.admit_now, planned.now
        self.source = Source("api", self.where, planned.detail)
        self._cache = planned.cache
        return planned.cache

    def gang(self, namespace: str, name: str) -> dict[str, Any]:
        cache = self._load()
        key = f"{namespace}/{name}"
        record = cache.jobs.get(key)
        if record is not None and record.admission is None and not record.finished:
            refresh_now(cache, self.now, self.policy, only=[key])
        body = gang_status(cache, key, self.now)
        if body is None:
            raise not_found(namespace, name, self._why_unmanaged(namespace, name))
        if key in self.admit_now:
            body["admitNow"] = self.admit_now[key]
        return body

    def _why_unmanaged(self, namespace: str, name: str) -> str:
        """One GET of the Job, only to say why muster does not hold it."""
        try:
            job = self.client.get(kubeapi.JOBS.path(namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return f"no Job {name} in namespace {namespace}"
            return f"no muster-managed Job by that name (reading the Job: HTTP {exc.status})"
        meta = job.get("metadata") or {}
        if QUEUE not in (meta.get("labels") or {}):
            return (
                f"Job {namespace}/{name} has no {QUEUE} label, so muster does not manage it "
                "(label Jobs when you create them)"
            )
        if SUBMITTED not in (meta.get("annotations") or {}):
            return (
                f"Job {namespace}/{name} has no {SUBMITTED} stamp: it was created while muster's "
                "webhook was not running; delete and create it again"
            )
        return "the Job is labelled but could not be read as a gang"

    def queues(self) -> dict[str, dict[str, Any]]:
        cache = self._load()
        return queue_listing(cache, queue_status(cache))

    def history(self, since: float | None) -> dict[str, Any]:
        """The history a restarted controller would rebuild from the Jobs in the cluster."""
        return history_body(self._load(), since, self.now)

    def holders(self, queue: str) -> list[dict[str, Any]]:
        """Admitted, unfinished gangs of `queue` and what they hold, oldest first."""
        cache = self._load()
        out = []
        for record in cache.jobs.values():
            adm = record.admission
            if record.queue != queue or adm is None or record.finished:
                continue
            demand = record.gang.demand(adm[1])
            out.append(
                {
                    "gang": record.key,
                    "since": adm[0],
                    "holds": {r: format_quantity(r, a) for r, a in sorted(demand.items()) if a},
                }
            )
        return sorted(out, key=lambda h: (h["since"], h["gang"]))


@dataclass
class Planned:
    """The controller's view of one LIST of everything, planned once."""

    cache: Cache
    admit_now: dict[str, int]
    """Gangs the plan admits now, and at how many pods."""
    now: float
    detail: str


def plan_listing(
    listing: Listing, policy: str = "drf", now: float | None = None, *, estimate: bool = True
) -> Planned:
    """Load a listing into a fresh controller cache and record one plan's reasons and positions
    there, as one admit cycle does (admission.loop.Controller.cycle, steps 1-3 and 6), and
    (``estimate``) every waiting gang's wait-time estimate, as the controller's background
    refresh does."""
    cache = Cache()
    apply_listing(cache, listing)
    cache.synced = True  # the whole listing is loaded, as after the controller's first LIST
    now = time.time() if now is None else now
    for record in cache.jobs.values():
        # What the clog detector would have recorded: who reached their minimum of ready pods.
        record.reached_min = record.admission is not None and record.state(now) == gangstate.RUNNING
    refused = cache.refusals()
    snapshot = cache.snapshot(now, refused)
    try:
        decisions = plan(snapshot, policy) if snapshot.pending else Decisions()
    except PolicyError as exc:
        raise ViewError(f"--policy: {exc}", 2) from None
    # As admission.loop.Controller._record_reasons keeps them for the status service.
    cache.status.show_reasons(
        {**decisions.pending, **decisions.rejected, **refused}, decisions.rejected
    )
    cache.status.show_positions(queue_positions(cache))
    if estimate:
        # Wait-time estimates, as the controller's background refresh computes them.
        refresh_now(cache, now, policy)
    kinds = {kind for kind, _, _ in listing}
    detail = f"{len(cache.nodes)} nodes, {len(cache.queues)} queues, {len(cache.jobs)} gangs" + (
        "" if "queue" in kinds else "; the Queue CRD is not installed"
    )
    return Planned(cache, {a.gang_id: a.size for a in decisions.admitted}, now, detail)


def open_view(args: argparse.Namespace) -> View:
    """The source the flags and environment choose: explicit flags first, then the env."""
    url = args.status_url
    if url is None and args.kubeconfig is None:
        url = os.environ.get(STATUS_URL_ENV) or None
    if url:
        return ServiceView(url, args.timeout, bearer_of(args.kubeconfig, args.context))
    return ApiView.open(args.kubeconfig, args.context, getattr(args, "policy", "drf"), args.timeout)


def bearer_of(kubeconfig: str | None, context: str | None) -> str | None:
    """The `Bearer TOKEN` of the credentials kubectl would use (kubeconfig token, tokenFile,
    exec plugin, or a pod's ServiceAccount token), for a status service that authenticates;
    None when those credentials have no token (client certificates) or there are none."""
    try:
        authorization = Credentials.load(source_for(kubeconfig, context)).authorization()
    except (KubeconfigError, OSError, ValueError):
        return None
    return authorization if authorization and authorization.startswith("Bearer ") else None


def close_view(view: View) -> None:
    if isinstance(view, ApiView):
        view.close()


# -- output --------------------------------------------------------------------------------


def dump(data: object, output: str) -> str:
    """JSON or YAML text of `data` (for --output json|yaml)."""
    if output == "json":
        return json.dumps(data, indent=2, sort_keys=False)
    return str(yaml.safe_dump(data, sort_keys=False, default_flow_style=False)).rstrip("\n")


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell, kubectl style (two spaces between columns)."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
        for cells in [headers, *rows]
    ]
    return "\n".join(lines)
