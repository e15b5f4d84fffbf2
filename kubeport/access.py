"""What an admin needs to hear when the API says no: one line that names the cause.

- unreachable server: which server, from which kubeconfig and context;
- 401: the apiserver refused these credentials (expired, revoked, or for another cluster);
- 403: who may not do which verb on which resource, and the ClusterRole in `manifests/` that
  grants it, with the command that binds it.

`ROLE_GRANTS` is what `manifests/base/rbac.yaml` grants; tests/unit/test_access.py fails when the
two differ.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from kubeport.credentials import Credentials

RBAC_MANIFEST = "manifests/base/rbac.yaml"

ROLE_GRANTS: Mapping[str, tuple[tuple[str, str, str, str | None], ...]] = {
    # ClusterRole name -> (API group, resource, verbs, the only object name or None)
    "muster": (
        ("batch", "jobs", "get list watch patch", None),
        ("batch", "jobs/status", "patch", None),
        ("jobset.x-k8s.io", "jobsets", "get list watch patch", None),
        ("scheduling.k8s.io", "podgroups", "list create patch", None),
        ("", "pods", "list watch patch delete", None),
        ("muster.dev", "gangrecords", "get list watch create patch", None),
        ("resource.k8s.io", "deviceclasses", "get list watch", None),
        ("resource.k8s.io", "resourceslices", "get list watch", None),
        ("resource.k8s.io", "resourceclaims", "get list watch", None),
        ("resource.k8s.io", "resourceclaimtemplates", "get list watch", None),
        ("", "nodes", "list watch", None),
        ("", "namespaces", "list watch", None),
        ("", "events", "create", None),
        ("muster.dev", "queues", "list watch", None),
        ("muster.dev", "queues/status", "patch", None),
        ("flux-framework.org", "miniclusters", "list watch patch", None),
        ("kopf.dev", "clusterkopfpeerings", "list watch create", None),
        ("kopf.dev", "clusterkopfpeerings", "patch", "muster"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "list watch", None),
        ("authentication.k8s.io", "tokenreviews", "create", None),
        ("authorization.k8s.io", "subjectaccessreviews", "create", None),
    ),
}


def granting_role(group: str, resource: str, verb: str, name: str | None = None) -> str | None:
    """The ClusterRole in manifests/ that grants `verb` on `resource` (of `group`), if one does."""
    for role, rules in ROLE_GRANTS.items():
        for rule_group, rule_resource, verbs, only in rules:
            if (rule_group, rule_resource) != (group, resource) or verb not in verbs.split():
                continue
            if only is None or only == name:
                return role
    return None


@dataclass(frozen=True)
class Target:
    """What a request asks to do, in RBAC's terms."""

    verb: str
    group: str
    resource: str  # with "/subresource" where there is one
    namespace: str | None
    name: str | None

    def resource_name(self) -> str:
        """`jobs.batch`, `pods`, `queues.muster.dev/status`: as kubectl names them."""
        base, _, sub = self.resource.partition("/")
        full = f"{base}.{self.group}" if self.group else base
        return f"{full}/{sub}" if sub else full

    def scope(self) -> str:
        return f"in namespace {self.namespace}" if self.namespace else "cluster-wide"


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def target_of(method: str, path: str, params: Mapping[str, str] | None = None) -> Target | None:
    """Parse an API path (`/api/v1/...`, `/apis/GROUP/VERSION/...`) into its RBAC target."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return None
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) >= 3 else "")
    name = rest[1] if len(rest) >= 2 else None
    if method == "GET":
        verb = "get" if name else "watch" if (params or {}).get("watch") else "list"
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = _VERBS.get(method, method.lower())
    return Target(verb, group, resource, namespace, name)


# The RBAC authorizer's words: `User "x" cannot list resource "queues" in API group "muster.dev"`.
_REFUSED = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>\S+) resource "(?P<resource>[^"]+)"'
    r'(?: in API group "(?P<group>[^"]*)")?'
)


def forbidden(method: str, path: str, params: Mapping[str, str] | None, message: str) -> str | None:
    """The explanation of an RBAC 403, or None when the 403 is not RBAC's (an admission
    webhook's or Pod Security's refusal already says what it means)."""
    refused = _REFUSED.search(message)
    if refused is None:
        return None
    parsed = target_of(method, path, params)
    target = Target(
        refused["verb"],
        refused["group"] or "",
        refused["resource"],
        parsed.namespace if parsed else None,
        parsed.name if parsed else None,
    )
    user = refused["user"]
    where = f"HTTP 403 on {method} {path}"
    what = f"{target.verb} {target.resource_name()} {target.scope()}"
    role = granting_role(target.group, target.resource, target.verb, target.name)
    if role is None:
        grant = (
            "no ClusterRole in manifests/ grants it (muster itself never needs it): run this "
            "with credentials that may, e.g. a cluster admin's"
        )
    else:
        grant = (
            f'the ClusterRole "{role}" in {RBAC_MANIFEST} grants it: '
            f"kubectl create clusterrolebinding {_binding_name(user)} --clusterrole={role} "
            f"{_subject_flag(user)}"
        )
    return f'forbidden: user "{user}" may not {what} ({where}); {grant}'


def _subject_flag(user: str) -> str:
    if user.startswith("system:serviceaccount:") and user.count(":") == 3:
        _, _, namespace, name = user.split(":")
        return f"--serviceaccount={namespace}:{name}"
    return f"--user={user}"


def _binding_name(user: str) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", user.rsplit(":", 1)[-1].lower()).strip("-")
    return f"muster-{slug or 'user'}"


def unauthorized(method: str, path: str, credentials: Credentials) -> str:
    """The explanation of a 401: the apiserver does not accept who we say we are."""
    return (
        f"unauthorized: the API server {credentials.server} refused the credentials of "
        f"{credentials.describe()} (HTTP 401 on {method} {path}): they are expired, revoked, or "
        "not for this cluster; log in again (a fresh token, or the exec plugin's login) and retry"
    )


def unreachable(credentials: Credentials, exc: BaseException) -> str:
    """The explanation of a request that got no answer at all."""
    where = f"the API server {credentials.server} ({credentials.describe()})"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (
            f"cannot trust {where}: {exc.verify_message}; its certificate-authority does not "
            "match the server's certificate (is the kubeconfig for this cluster?)"
        )
    if isinstance(exc, TimeoutError):
        reason = "no answer in time"
    else:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return f"cannot reach {where}: {reason}; is the cluster up, and is this the kubeconfig meant?"
