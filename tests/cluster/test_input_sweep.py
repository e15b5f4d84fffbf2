"""Hypothesis-made objects through the real apiserver and muster's webhook (issue 15, section 1).

Queue specs are drawn from the CRD's own openAPIV3Schema (every field, valid and invalid values
mixed); Jobs and MiniClusters carry every `muster.dev/*` label and annotation muster reads, set
to text, negatives, huge numbers, empty and valid values, next to the spec fields muster reads.
Each create either

- is refused with a 4xx whose message names the field and the value (and, where muster wrote
  the message, what to do), and nothing is stored; or
- is stored whole (what was sent is what is stored, plus defaults and muster's stamps), while
  `muster run` stays alive; a Queue then gets a `Ready` condition, a Job or a MiniCluster's Job
  is suspended and stamped, and the controller reads the gang as the webhook did (found, not
  Invalid, same size and minimum): no gang the webhook accepted is dropped by the controller.

Jobs and MiniClusters go through both webhook servers (muster's lean endpoint and kopf's
handlers, the `webhook_server` fixture). Creates go with `fieldValidation=Strict`, as kubectl
sends them. Bounded: a fixed number of derandomized examples per kind plus explicit ones for
the traps found so far, so the sweep is the same in every CI run.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from admission.crd import queue_crd
from kubeport.kubeapi import ApiError, KubeClient
from policies.kinds import FieldError, job_fields, job_gang_size, minicluster_fields
from policies.vocabulary import (
    ADMITTED,
    CLOG_TIMEOUT,
    ELASTIC_AFTER,
    EVICTED_REASON,
    EVICTIONS,
    FAILED_REASON,
    GANG_KIND,
    MIN_MEMBERS,
    PLACEMENT,
    PREEMPTED_BY,
    PREEMPTIONS,
    PRIORITY,
    QUEUE,
    REQUEUE_AT,
    RESTORE,
    STATE,
    SUBMITTED,
)
from simulator.controlplane.minicluster import job_maker
from tests import builders
from tests.conftest import MusterProcess
from tests.controller_helpers import QUEUES, create_queue, delete_queue, jobs_path
from tests.kube import wait_for

pytestmark = [pytest.mark.cluster]

EXAMPLES = 40
SWEEP = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
STRICT = {"fieldValidation": "Strict"}
MUSTER_SAYS = 'admission webhook "'
"""How the apiserver prefixes a refusal by muster's webhook."""
FIX_WORDS = (
    "set ",
    "use ",
    "give ",
    "remove",
    "must",
    "should",
    "supported values",
    "e.g.",
    "create it",
    "lower ",
    "raise ",
)


@dataclass(frozen=True)
class Pick:
    """One field the example set: where (as a message names it), the value, whether it is one a
    user may rightly expect to be accepted."""

    where: str
    value: Any
    valid: bool


@dataclass
class Outcome:
    """What the sweep stored, for the checks after it."""

    stored: list[str] = field(default_factory=list)
    refused: int = 0


def spellings(value: Any) -> set[str]:
    """How a message may quote `value`."""
    text = value if isinstance(value, str) else json.dumps(value)
    out = {text, repr(value), json.dumps(value), text.strip()}
    with contextlib.suppress(ValueError):
        out.add(str(int(text.strip())))
    return {s for s in out if s}


def assert_refusal_names_a_pick(error: ApiError, picks: list[Pick]) -> None:
    """A 4xx naming one of the fields that were not plainly valid, with its value; with what to
    do when muster wrote the message."""
    message = error.message
    assert 400 <= error.status < 500, (error.status, message)
    # The apiserver names the field of a value over a maxLength or of the wrong type (and
    # the type it wants), but not the value itself.
    quoted = "Too long:" not in message and "must be of type" not in message
    doubtful = [p for p in picks if not p.valid]
    assert doubtful, f"a plainly valid object was refused: {picks}: {message}"
    named = [
        p
        for p in doubtful
        if any(part in message for part in p.where.split("|"))
        and (not quoted or p.value in ("", None) or any(s in message for s in spellings(p.value)))
    ]
    assert named, f"the refusal names none of {doubtful}: {message}"
    if MUSTER_SAYS in message:
        assert any(word in message for word in FIX_WORDS), f"says not what to do: {message}"


def missing(sent: Any, stored: Any, path: str) -> Iterator[str]:
    """What of `sent` is not in `stored` (extra fields in `stored`, such as defaults, are fine)."""
    if isinstance(sent, dict) and isinstance(stored, dict):
        for key, value in sent.items():
            if key not in stored:
                yield f"{path}.{key}"
            else:
                yield from missing(value, stored[key], f"{path}.{key}")
    elif isinstance(sent, list) and isinstance(stored, list) and len(sent) == len(stored):
        for i, (a, b) in enumerate(zip(sent, stored, strict=True)):
            yield from missing(a, b, f"{path}[{i}]")
    elif sent != stored:
        yield f"{path}: {sent!r} stored as {stored!r}"


def create_or_refusal(
    kube: KubeClient, path: str, body: dict[str, Any]
) -> dict[str, Any] | ApiError:
    try:
        return kube.request("POST", path, body, params=STRICT)
    except ApiError as exc:
        if exc.status >= 500:
            raise AssertionError(
                f"a server error, not a refusal: {exc.status} {exc.message}"
            ) from exc
        return exc


def assert_nothing_stored(kube: KubeClient, path: str) -> None:
    with pytest.raises(ApiError) as gone:
        kube.get(path)
    assert gone.value.status == 404, gone.value.message


def gang_status(muster: MusterProcess, key: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"{muster.status_url}/v1/gangs/{key}", timeout=10) as answer:
            body: dict[str, Any] = json.load(answer)
            return body
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


# -- Queues, from the CRD's schema ---------------------------------------------------------------

QUANTITIES_VALID = ["0", "4", "500m", "1Gi", "2", 8, "1e3", "0.5"]
QUANTITIES_DOUBTFUL = ["-5", -1, "lots", "", "1e400", "9" * 40, "1.5.5", "-0.1", " 4"]
DURATIONS_VALID = ["5m", "10s", "1h30m", "0s", "250ms", "2d"]
DURATIONS_DOUBTFUL = ["soon", "-5m", "", "5 m", "1e3s", "5", "99999999999999999999h"]
RESOURCES = ["cpu", "memory", "pods", "nvidia.com/gpu"]
LENDING_RULE = "lendingLimit must not exceed nominal for any resource (and needs a nominal"


def values_for(schema: Mapping[str, Any], where: str) -> st.SearchStrategy[tuple[Any, Pick]]:
    """(value, pick) for one field of the CRD's schema: valid ones drawn from what the schema
    allows, doubtful ones from what it may not."""

    def pick(value: Any, valid: bool) -> tuple[Any, Pick]:
        return value, Pick(where, value, valid)

    kind = schema.get("type")
    if "enum" in schema:
        valid = st.sampled_from(schema["enum"]).map(lambda v: pick(v, True))
        bad = st.sampled_from(["", "sometimes", str(schema["enum"][0]).lower(), 3])
        return valid | bad.map(lambda v: pick(v, False))
    if kind == "string" and "pattern" in schema:
        return st.sampled_from(DURATIONS_VALID).map(lambda v: pick(v, True)) | st.sampled_from(
            DURATIONS_DOUBTFUL
        ).map(lambda v: pick(v, False))
    if kind == "string":
        return st.sampled_from(["", "x", "a-b", "no-such-queue"]).map(lambda v: pick(v, False))
    if kind == "number":
        return st.sampled_from([1, 0.5, 0.1, 1.0]).map(lambda v: pick(v, True)) | st.sampled_from(
            [0, -1, 1e308, "1", True]
        ).map(lambda v: pick(v, False))
    if kind == "integer":
        low = int(schema.get("minimum", 0))
        return st.sampled_from([low, low + 1, 7]).map(lambda v: pick(v, True)) | st.sampled_from(
            [low - 1, 2**40, "3", 1.5, -(2**40)]
        ).map(lambda v: pick(v, False))
    if kind == "boolean":
        return st.booleans().map(lambda v: pick(v, True)) | st.sampled_from(["yes", 1]).map(
            lambda v: pick(v, False)
        )
    if kind == "object" and isinstance(schema.get("additionalProperties"), Mapping):
        inner = schema["additionalProperties"]
        if inner.get("type") == "string":  # matchLabels
            return st.sampled_from([{"team": "a"}, {}, {"bad key!": "x"}, {"team": "-x"}]).map(
                lambda v: pick(v, v in ({"team": "a"}, {}))
            )
        return resources(where)
    if kind == "object" and "properties" in schema:
        return objects(schema, where)
    if kind == "array":  # matchExpressions: a refusal names the operator
        fine: list[list[dict[str, Any]]] = [[], [{"key": "t", "operator": "In", "values": ["a"]}]]
        wrong: list[list[dict[str, Any]]] = [
            [{"key": "t", "operator": "In"}],
            [{"key": "t", "operator": "Exists", "values": ["a"]}],
        ]
        return st.sampled_from(fine).map(lambda v: pick(v, True)) | st.sampled_from(wrong).map(
            lambda v: (v, Pick(where, v[0]["operator"], False))
        )
    raise AssertionError(f"no strategy for {where}: {schema}")


def resources(where: str) -> st.SearchStrategy[tuple[Any, Pick]]:
    valid = st.tuples(st.sampled_from(RESOURCES), st.sampled_from(QUANTITIES_VALID))
    bad = st.tuples(st.sampled_from(RESOURCES), st.sampled_from(QUANTITIES_DOUBTFUL))

    def build(entries: list[tuple[str, Any]], doubtful: tuple[str, Any] | None) -> tuple[Any, Pick]:
        amounts = dict(entries)
        if doubtful is None:
            return amounts, Pick(where, amounts, True)
        amounts[doubtful[0]] = doubtful[1]
        return amounts, Pick(f"{where}|{where.rsplit('.', 1)[-1]}", doubtful[1], False)

    return st.builds(build, st.lists(valid, max_size=3), st.none() | bad)


def objects(schema: Mapping[str, Any], where: str) -> st.SearchStrategy[tuple[Any, Pick]]:
    """An object of some of the schema's properties; at most one of them doubtful (the pick that
    names the object is then that one)."""
    props = schema["properties"]

    @st.composite
    def build(draw: st.DrawFn) -> tuple[Any, Pick]:
        names = draw(st.lists(st.sampled_from(sorted(props)), unique=True, max_size=4))
        body: dict[str, Any] = {}
        doubtful: Pick | None = None
        for name in names:
            value, pick = draw(values_for(props[name], f"{where}.{name}"))
            if not pick.valid:
                if doubtful is not None:
                    continue
                doubtful = pick
            body[name] = value
        if draw(st.integers(0, 9)) == 0 and doubtful is None:
            body["unknownField"] = 1
            doubtful = Pick(f"{where}.unknownField|unknown field", 1, False)
        return body, doubtful or Pick(where, body, True)

    return build()


def queue_spec_schema() -> Mapping[str, Any]:
    version = queue_crd()["spec"]["versions"][0]
    spec: Mapping[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec


def condition(queue: Mapping[str, Any]) -> dict[str, Any] | None:
    conditions = (queue.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Ready"), None)


def test_queue_specs_from_the_crd_schema(
    kube: KubeClient, muster: MusterProcess, namespace: str
) -> None:
    outcome = Outcome()
    counter = iter(range(10**6))
    spec_schema = queue_spec_schema()

    @SWEEP
    @given(objects(spec_schema, "spec"))
    @example(({"nominal": {"cpu": "-5"}}, Pick("spec.nominal|nominal", "-5", False)))
    @example(({"parent": "x"}, Pick("spec.parent", "x", False)))  # a cycle of one
    @example(({"backoff": {"base": "10m", "max": "1s"}}, Pick("spec.backoff", "1s", False)))
    @example(({"lendingLimit": {"cpu": "1"}}, Pick("spec", {}, True)))  # no nominal to lend
    @example(({"nominal": {"cpu": "1e400"}}, Pick("spec.nominal", "1e400", False)))
    def sweep(drawn: tuple[dict[str, Any], Pick]) -> None:
        spec, pick = drawn
        name = f"{namespace}-q{next(counter)}"
        if spec.get("parent") == "x":
            spec["parent"] = name  # itself: a cycle of one
        body = {"apiVersion": "muster.dev/v1alpha1", "kind": "Queue", "metadata": {"name": name}}
        got = create_or_refusal(kube, QUEUES, {**body, "spec": spec})
        if isinstance(got, ApiError):
            outcome.refused += 1
            if not ("lendingLimit" in spec and LENDING_RULE in got.message):
                # (The one rule across two fields names both and what to do, not the amounts:
                # a CEL message listing them costs more than the apiserver allows, resource
                # names being of unbounded length.)
                assert_refusal_names_a_pick(got, [pick])
            assert_nothing_stored(kube, f"{QUEUES}/{name}")
        else:
            outcome.stored.append(name)
            assert list(missing(spec, got["spec"], "spec")) == []
        assert muster.proc.poll() is None, muster.text()[-3000:]

    try:
        sweep()
        for name in outcome.stored:
            path = f"{QUEUES}/{name}"
            ready = wait_for(
                lambda: condition(kube.get(path)),  # noqa: B023 (called before the next)
                timeout=60,
                what=f"a Ready condition on queue {name}",
            )
            if ready["reason"] == "InvalidSpec":
                # The CRD let it through; muster says which field and what to do.
                assert "spec." in ready["message"], ready
        assert outcome.stored and outcome.refused, outcome
    finally:
        for name in outcome.stored:
            delete_queue(kube, name)


# -- Jobs ------------------------------------------------------------------------------------------

GANG_VALUES: dict[str, tuple[list[str], list[str]]] = {
    # field: (valid values, doubtful values)
    MIN_MEMBERS: (
        ["1", "2", "4"],
        ["0", "-3", "99999999999999999999", "", "many", "²", " 2", "2.5"],
    ),
    PRIORITY: (
        ["0", "5", "1000000000"],
        ["1000000001", "-1", "urgent", "", "²", "99999999999999999999"],
    ),
    ELASTIC_AFTER: (
        ["0s", "30s", "5m", "1h30m"],
        ["-5m", "later", "", "1e400", "nan", "inf", "10"],
    ),
    CLOG_TIMEOUT: (["30s", "5m", "2h"], ["-1s", "soon", "", "1e400", "nan", "0"]),
}
CONTROLLER_VALUES: dict[str, list[str]] = {
    ADMITTED: ["2026-01-02T03:04:05.000000Z/4", "junk", ""],
    EVICTIONS: ["2", "-1", "x"],
    REQUEUE_AT: ["2099-01-01T00:00:00Z", "junk"],
    STATE: ["Failed", "x"],
    PLACEMENT: ["node-0=4", "junk"],
    RESTORE: ["{}", "junk"],
    PREEMPTIONS: ["1", "-1"],
    EVICTED_REASON: ["Clogged"],
    PREEMPTED_BY: ["someone"],
    FAILED_REASON: ["NeverFits: too big"],
    GANG_KIND: ["MiniCluster", "Job"],
}


@dataclass
class JobCase:
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: dict[str, Any]
    picks: list[Pick]


EVERY_FIELD: Mapping[str, str] = {
    MIN_MEMBERS: "2",
    PRIORITY: "5",
    ELASTIC_AFTER: "30s",
    CLOG_TIMEOUT: "5m",
}
ELASTIC_INDEXED: Mapping[str, Any] = {
    "parallelism": 4,
    "completions": 4,
    "completionMode": "Indexed",
    "activeDeadlineSeconds": 3600,
}


def job_case(
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
) -> JobCase:
    """An explicit example: every field given counts as doubtful (a refusal may name any)."""
    spec = dict(spec or {"parallelism": 4, "completions": 4})
    picks = [Pick(f"label {k}|metadata.labels", v, False) for k, v in (labels or {}).items()]
    picks += [Pick(f"annotation {k}", v, False) for k, v in (annotations or {}).items()]
    picks += [Pick(f"spec.{k}", v, False) for k, v in spec.items() if k != "containers"]
    return JobCase(dict(labels or {}), dict(annotations or {}), spec, picks)


@st.composite
def gang_fields(draw: st.DrawFn) -> tuple[dict[str, str], dict[str, str], list[Pick]]:
    """Some of the gang fields, each as a label or an annotation."""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    picks: list[Pick] = []
    for key in draw(st.lists(st.sampled_from(sorted(GANG_VALUES)), unique=True, max_size=3)):
        valid, doubtful = GANG_VALUES[key]
        good = draw(st.integers(0, 3)) > 0  # mostly valid: most examples are then stored
        if good:
            value = draw(st.sampled_from(valid))
        else:
            value = draw(st.sampled_from(doubtful) | st.text(max_size=6))
        as_label = draw(st.booleans())
        (labels if as_label else annotations)[key] = value
        where = f"label {key}|metadata.labels" if as_label else f"annotation {key}"
        picks.append(Pick(where, value, good))
    return labels, annotations, picks


@st.composite
def job_cases(draw: st.DrawFn) -> JobCase:
    labels, annotations, picks = draw(gang_fields())
    if draw(st.integers(0, 3)) == 0:
        key = draw(st.sampled_from(sorted(CONTROLLER_VALUES)))
        value = draw(st.sampled_from(CONTROLLER_VALUES[key]))
        annotations[key] = value
        picks.append(Pick(f"annotation {key}", value, False))
    spec: dict[str, Any] = {}
    parallelism = draw(st.sampled_from([4, 4, 4, 4, 1, 8, 0, -1, 2**31 - 1, 100_001]))
    spec["parallelism"] = parallelism
    picks.append(Pick("spec.parallelism", parallelism, 1 <= parallelism <= 8))
    completions = draw(st.sampled_from(["same"] * 5 + [None, None, 2, 0, -1, 2**31 - 1]))
    spec["completions"] = parallelism if completions == "same" else completions
    picks.append(Pick("spec.completions", spec["completions"], completions in ("same", None)))
    mode = draw(st.sampled_from([None, None, "Indexed", "Indexed", "NonIndexed", "Weird"]))
    if mode is not None:
        spec["completionMode"] = mode
        picks.append(Pick("spec.completionMode", mode, mode != "Weird"))
    deadline = draw(st.sampled_from([None] * 5 + [3600, 1, 0, -5, 2**62]))
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
        picks.append(Pick("spec.activeDeadlineSeconds", deadline, deadline in (3600, 1)))
    case = JobCase(labels, annotations, spec, picks)
    elastic_ok = mode == "Indexed" or spec.get("completions") is None
    return with_minimum_judged(case, job_gang_size(spec), elastic_ok)


def with_minimum_judged(case: JobCase, size: object, elastic_ok: bool) -> JobCase:
    """`case` with its min-members pick valid only when the gang's size allows it: from 1 to the
    size, and below the size only where the kind can be admitted smaller (`elastic_ok`)."""
    picks = []
    for pick in case.picks:
        if pick.valid and MIN_MEMBERS in pick.where and isinstance(size, int):
            minimum = int(pick.value)
            fine = minimum == size or (1 <= minimum < size and elastic_ok)
            pick = replace(pick, valid=fine)
        picks.append(pick)
    return replace(case, picks=picks)


def plainly_valid(case: JobCase) -> bool:
    return all(p.valid for p in case.picks)


@pytest.fixture
def sweep_queue(kube: KubeClient, namespace: str) -> Iterator[str]:
    # 1 millicpu: nothing is ever admitted (the webhook warns that the gangs never fit), so the
    # stored Jobs stay as the webhook made them while the controller reads them.
    name = f"{namespace}-sweep"
    create_queue(kube, name, {"nominal": {"cpu": "1m"}})
    yield name
    delete_queue(kube, name)


def job_body(name: str, queue: str, case: JobCase) -> dict[str, Any]:
    """The case's Job: its labels and annotations, and the gang fields of its spec (those it
    leaves None left out, parallelism and completions too)."""
    body = builders.job(
        name,
        queue,
        pods=None,
        completions=None,
        runtime=None,
        labels=case.labels,
        annotations=case.annotations or None,
    )
    body["spec"].update({k: v for k, v in case.spec.items() if v is not None})
    return body


def expected_gang(case: JobCase) -> tuple[int, int]:
    """(size, minimum) as the webhook reads the Job."""
    size = job_gang_size(case.spec)
    return size, job_fields(case.spec, case.labels, case.annotations, size).minimum


def check_controller_reads(muster: MusterProcess, key: str, size: int, minimum: int) -> None:
    """The controller found the gang the webhook stored, reads it as the webhook did (not
    Invalid, same size and minimum) and as the new gang it is: waiting (in a queue of 1
    millicpu it never fits, and after the controller's grace it is marked Failed for that),
    nothing on it saying admitted, evicted or failed."""
    status = wait_for(
        lambda: gang_status(muster, key), timeout=60, what=f"the controller to see {key}"
    )
    reason = status.get("reason") or {}
    disagree = f"the webhook stored {key} as a new gang, the controller reads: {status}"
    assert reason.get("code") != "Invalid", disagree
    assert status["state"] == "Pending" or (
        status["state"] == "Failed" and reason.get("code") == "NeverFits"
    ), disagree
    assert (status["size"], status["min"]) == (size, minimum), disagree


@pytest.mark.usefixtures("webhook_server")
def test_jobs_with_every_gang_field(
    kube: KubeClient, muster: MusterProcess, namespace: str, sweep_queue: str
) -> None:
    outcome = Outcome()
    expected: dict[str, tuple[int, int]] = {}
    counter = iter(range(10**6))
    path = jobs_path(namespace)

    @SWEEP
    @given(job_cases())
    @example(job_case(annotations={ADMITTED: "2026-01-02T03:04:05.000000Z/4"}))
    @example(job_case(annotations={GANG_KIND: "MiniCluster"}))
    @example(job_case(annotations={MIN_MEMBERS: "²"}))
    @example(job_case(labels={PRIORITY: "-1"}))
    @example(job_case(spec={"parallelism": -1, "completions": 4}))
    @example(job_case(spec={"parallelism": 4, "completions": 4, "activeDeadlineSeconds": -5}))
    @example(job_case(annotations=EVERY_FIELD, spec=ELASTIC_INDEXED))  # stored, elastic
    @example(job_case(labels={MIN_MEMBERS: "4", PRIORITY: "1000000000", CLOG_TIMEOUT: "2h"}))
    @example(job_case(spec={"parallelism": 2**31 - 1, "completionMode": "NonIndexed"}))
    def sweep(case: JobCase) -> None:
        name = f"j{next(counter)}"
        body = job_body(name, sweep_queue, case)
        got = create_or_refusal(kube, path, body)
        if isinstance(got, ApiError):
            outcome.refused += 1
            assert not plainly_valid(case), f"refused: {case}: {got.message}"
            assert_refusal_names_a_pick(got, case.picks)
            assert_nothing_stored(kube, f"{path}/{name}")
        else:
            outcome.stored.append(name)
            sent = {k: v for k, v in body["metadata"].items() if k == "labels"}
            sent["annotations"] = {k: v for k, v in case.annotations.items() if k != SUBMITTED}
            assert list(missing(sent, got["metadata"], "metadata")) == []
            sent_spec = {k: v for k, v in case.spec.items() if v is not None}
            assert list(missing(sent_spec, got["spec"], "spec")) == []
            assert got["spec"]["suspend"] is True
            assert SUBMITTED in got["metadata"]["annotations"]
            expected[name] = expected_gang(case)
        assert muster.proc.poll() is None, muster.text()[-3000:]

    sweep()
    for name, (size, minimum) in expected.items():
        check_controller_reads(muster, f"{namespace}/{name}", size, minimum)
    assert outcome.stored and outcome.refused, outcome


# -- MiniClusters ----------------------------------------------------------------------------------

MINICLUSTERS = "/apis/flux-framework.org/v1alpha2/namespaces/{}/miniclusters"
MINICLUSTER_SPEC: Mapping[str, Any] = {
    "containers": [{"image": "lammps", "resources": {"requests": {"cpu": "1"}}}]
}


@st.composite
def minicluster_cases(draw: st.DrawFn) -> JobCase:
    labels, annotations, picks = draw(gang_fields())
    spec: dict[str, Any] = dict(MINICLUSTER_SPEC)
    size = draw(st.sampled_from([4, 4, 4, 4, 1, 8, 0, -1, 2**31 - 1, 200_000, "4"]))
    spec["size"] = size
    picks.append(Pick("spec.size", size, size in (1, 4, 8)))
    min_size = draw(st.sampled_from([None] * 4 + [2, 4, 0, -1, 9, 2**31 - 1]))
    if min_size is not None:
        spec["minSize"] = min_size
        picks.append(
            Pick("spec.minSize", min_size, isinstance(size, int) and 1 <= min_size <= size)
        )
    deadline = draw(st.sampled_from([None] * 5 + [3600, 1, 0, -5, 2**62]))
    if deadline is not None:
        spec["deadlineSeconds"] = deadline
        picks.append(Pick("spec.deadlineSeconds", deadline, deadline in (3600, 1)))
    return with_minimum_judged(JobCase(labels, annotations, spec, picks), size, True)


def minicluster_plainly_valid(case: JobCase) -> bool:
    if not all(p.valid for p in case.picks):
        return False
    size = case.spec["size"]
    minimum = case.labels.get(MIN_MEMBERS) or case.annotations.get(MIN_MEMBERS)
    return minimum is None or 1 <= int(minimum) <= size


@pytest.mark.usefixtures("webhook_server")
def test_miniclusters_with_every_gang_field(
    kube: KubeClient,
    muster: MusterProcess,
    namespace: str,
    sweep_queue: str,
    flux_operator: bool,
) -> None:
    outcome = Outcome()
    expected: dict[str, tuple[int, int]] = {}
    counter = iter(range(10**6))
    path = MINICLUSTERS.format(namespace)

    @SWEEP
    @given(minicluster_cases())
    @example(job_case(spec={**MINICLUSTER_SPEC, "size": 200_000}))
    @example(job_case(spec={**MINICLUSTER_SPEC, "size": -1}))
    @example(job_case(spec={**MINICLUSTER_SPEC, "size": 4, "deadlineSeconds": -5}))
    @example(job_case(spec={**MINICLUSTER_SPEC, "size": 4, "minSize": 9}))
    @example(job_case(annotations=EVERY_FIELD, spec={**MINICLUSTER_SPEC, "size": 4}))
    @example(job_case(labels=EVERY_FIELD, spec={**MINICLUSTER_SPEC, "size": 8, "minSize": 4}))
    @example(job_case(spec={**MINICLUSTER_SPEC, "size": 100_000, "deadlineSeconds": 2**62}))
    def sweep(case: JobCase) -> None:
        name = f"m{next(counter)}"
        body: dict[str, Any] = {
            "apiVersion": "flux-framework.org/v1alpha2",
            "kind": "MiniCluster",
            "metadata": {"name": name, "labels": {QUEUE: sweep_queue, **case.labels}},
            "spec": case.spec,
        }
        if case.annotations:
            body["metadata"]["annotations"] = dict(case.annotations)
        got = create_or_refusal(kube, path, body)
        if isinstance(got, ApiError):
            outcome.refused += 1
            assert not plainly_valid(case), f"refused: {case}: {got.message}"
            assert_refusal_names_a_pick(got, case.picks)
            assert_nothing_stored(kube, f"{path}/{name}")
        else:
            outcome.stored.append(name)
            assert (
                list(missing(body["metadata"]["labels"], got["metadata"]["labels"], "labels")) == []
            )
            assert list(missing(case.spec, got["spec"], "spec")) == []
            assert SUBMITTED in got["metadata"]["annotations"]
            assert got["spec"]["jobLabels"][QUEUE] == sweep_queue
            try:
                size, fields = minicluster_fields(case.spec, case.labels, case.annotations)
            except FieldError as exc:
                raise AssertionError(f"stored, yet muster cannot read it: {exc}") from None
            expected[name] = (size, fields.minimum)
        assert muster.proc.poll() is None, muster.text()[-3000:]

    sweep()
    # The Flux Operator's part: each stored MiniCluster's Job, made through the webhook.
    reconciler = job_maker(kube, namespace, real=flux_operator).start()
    try:
        wait_for(
            lambda: (
                len(kube.get(jobs_path(namespace))["items"]) >= len(expected) or reconciler.errors
            ),
            timeout=60,
            what="a Job for every stored MiniCluster",
        )
    finally:
        reconciler.stop()
    assert reconciler.errors == [], reconciler.errors
    for name, (size, minimum) in expected.items():
        job = kube.get(f"{jobs_path(namespace)}/{name}")
        assert job["spec"]["suspend"] is True
        check_controller_reads(muster, f"{namespace}/{name}", size, minimum)
    assert outcome.stored and outcome.refused, outcome
