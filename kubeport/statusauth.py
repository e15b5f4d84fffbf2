"""Who calls the status service and the metrics, and what they may read.

`--status-auth kubernetes` (the installed default): a caller sends `Authorization: Bearer
TOKEN` (its ServiceAccount token, or any token the apiserver accepts). muster asks the
apiserver who that is (TokenReview, authentication.k8s.io/v1) and what they may do
(SubjectAccessReview, authorization.k8s.io/v1), as kube-rbac-proxy does:

- a gang of namespace N, and names of N's objects in any answer: `get` `jobs.batch` in N;
- `/v1/queues` and `/v1/history`: any authenticated caller (queue rows are aggregates that
  name no gang; history rows and names are filtered by the rule above);
- `/metrics`: `get` on the non-resource URL `/metrics` (Prometheus' usual ClusterRole).

Both answers are cached for `ttl` seconds (60), at most `size` entries each, and concurrent
misses for the same question share one review: a pod polling its gang costs the apiserver two
reviews a minute, not two per poll. A revoked token or a removed RoleBinding is honoured within
`ttl`. `--status-auth none` (the default of `muster run --local`) lets every caller read
everything, as before.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from kubeport import kubeapi
from kubeport.kubeapi import KubeClient

__all__ = [
    "ANONYMOUS",
    "Access",
    "Caller",
    "KubernetesAccess",
    "OpenAccess",
    "TtlCache",
    "bearer_token",
]

StatusAuth = Literal["kubernetes", "none"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated user as the TokenReview named them."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


ANONYMOUS = Caller("system:anonymous")
"""The caller of a service that does not authenticate (`--status-auth none`)."""


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header; None when there is none."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class TtlCache(Generic[K, V]):
    """A bounded map whose entries expire `ttl` seconds after they were put (least recently
    used first out when full). `clock` is injectable for tests."""

    def __init__(self, ttl: float, size: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.size = size
        self.clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> tuple[bool, V | None]:
        """(True, value) when `key` holds a value that has not expired, else (False, None)."""
        entry = self._entries.get(key)
        if entry is None:
            return False, None
        if entry[0] <= self.clock():
            del self._entries[key]
            return False, None
        self._entries.move_to_end(key)
        return True, entry[1]

    def put(self, key: K, value: V, ttl: float | None = None) -> None:
        self._entries[key] = (self.clock() + (self.ttl if ttl is None else ttl), value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)


class Access(Protocol):
    """Answers the status service's three questions about a request."""

    enabled: bool
    reviews: int
    """TokenReviews and SubjectAccessReviews sent so far (cache misses)."""

    async def caller(self, authorization: str | None) -> Caller | None:
        """Who sent the request (its Authorization header); None: not authenticated (401)."""
        ...

    async def may_read(self, caller: Caller, namespace: str) -> bool:
        """May `caller` see the gangs of `namespace` (get jobs.batch there)?"""
        ...

    async def may_scrape(self, caller: Caller, path: str) -> bool:
        """May `caller` GET the non-resource URL `path` (`/metrics`)?"""
        ...


class OpenAccess:
    """`--status-auth none`: no authentication, everyone reads everything."""

    enabled = False
    reviews = 0

    async def caller(self, authorization: str | None) -> Caller | None:
        return ANONYMOUS

    async def may_read(self, caller: Caller, namespace: str) -> bool:
        return True

    async def may_scrape(self, caller: Caller, path: str) -> bool:
        return True


class KubernetesAccess:
    """TokenReview and SubjectAccessReview through `client`, cached (see the module docstring).
    An apiserver error propagates (the service answers 503): nothing is cached for it."""

    enabled = True

    def __init__(
        self,
        client: KubeClient,
        *,
        ttl: float = 60.0,
        denied_ttl: float = 10.0,
        size: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.denied_ttl = denied_ttl
        self.tokens: TtlCache[str, Caller | None] = TtlCache(ttl, size, clock)
        self.decisions: TtlCache[tuple[Caller, str, str], bool] = TtlCache(ttl, size, clock)
        self.reviews = 0
        """TokenReviews and SubjectAccessReviews sent (cache misses)."""
        self._inflight: dict[Hashable, asyncio.Future[Any]] = {}

    async def caller(self, authorization: str | None) -> Caller | None:
        token = bearer_token(authorization)
        if token is None:
            return None
        key = hashlib.sha256(token.encode()).hexdigest()  # the cache keeps no token
        hit, found = self.tokens.get(key)
        if hit:
            return found
        user: Caller | None = await self._once(("token", key), lambda: self._token_review(token))
        self.tokens.put(key, user, None if user is not None else self.denied_ttl)
        return user

    async def may_read(self, caller: Caller, namespace: str) -> bool:
        return await self._decide(caller, "jobs", namespace)

    async def may_scrape(self, caller: Caller, path: str) -> bool:
        return await self._decide(caller, "url", path)

    async def _decide(self, caller: Caller, kind: str, target: str) -> bool:
        key = (caller, kind, target)
        hit, allowed = self.decisions.get(key)
        if hit:
            return bool(allowed)
        decided: bool = await self._once(key, lambda: self._access_review(caller, kind, target))
        self.decisions.put(key, decided)
        return decided

    async def _once(self, key: Hashable, review: Callable[[], Awaitable[V]]) -> V:
        """One review per question at a time: concurrent misses wait for the first one."""
        pending = self._inflight.get(key)
        if pending is not None:
            result: V = await asyncio.shield(pending)
            return result
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            value = await review()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        else:
            future.set_result(value)
            return value
        finally:
            del self._inflight[key]

    async def _token_review(self, token: str) -> Caller | None:
        self.reviews += 1
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        answer = await asyncio.to_thread(self.client.create, kubeapi.TOKEN_REVIEWS.path(), body)
        status = answer.get("status") or {}
        user = status.get("user") or {}
        if not status.get("authenticated") or not user.get("username"):
            return None
        extra = tuple(sorted((k, tuple(v)) for k, v in (user.get("extra") or {}).items()))
        return Caller(
            str(user["username"]), str(user.get("uid", "")), tuple(user.get("groups") or ()), extra
        )

    async def _access_review(self, caller: Caller, kind: str, target: str) -> bool:
        self.reviews += 1
        spec: dict[str, Any] = {
            "user": caller.username,
            "groups": list(caller.groups),
            "extra": {k: list(v) for k, v in caller.extra},
        }
        if caller.uid:
            spec["uid"] = caller.uid
        if kind == "jobs":
            spec["resourceAttributes"] = {
                "namespace": target,
                "verb": "get",
                "group": "batch",
                "resource": "jobs",
            }
        else:
            spec["nonResourceAttributes"] = {"path": target, "verb": "get"}
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        answer = await asyncio.to_thread(
            self.client.create, kubeapi.SUBJECT_ACCESS_REVIEWS.path(), body
        )
        return bool((answer.get("status") or {}).get("allowed"))


def access_for(mode: StatusAuth, client: KubeClient) -> Access:
    """The Access of `--status-auth MODE`."""
    return KubernetesAccess(client) if mode == "kubernetes" else OpenAccess()
