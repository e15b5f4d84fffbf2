"""policies.estimate: runtimes from deadlines and history, and the fast-forward's answers."""

from __future__ import annotations

from policies import AdmittedGang, Gang, Node, Queue, QueueTree, Resources, Snapshot, SubmitStamp
from policies.estimate import RuntimeHistory, estimate, size_class

CPU = Resources({"cpu": 8_000})
TREE = QueueTree.build([Queue("q", size_ratio=None)])
NODES = [Node(f"n{i}", Resources({"cpu": 8_000, "pods": 110})) for i in range(4)]


def _gang(name: str, size: int, at: float, limit: float | None = None) -> Gang:
    return Gang(f"ns/{name}", "q", CPU, size, submitted=SubmitStamp(at), runtime_limit=limit)


def _running(gang: Gang, since: float) -> AdmittedGang:
    return AdmittedGang(gang, gang.size, {f"n{i}": 1 for i in range(gang.size)}, since, True)


def test_size_classes_are_powers_of_two() -> None:
    assert [size_class(n) for n in (1, 2, 3, 4, 7, 8, 15, 16)] == [
        (1, 1),
        (2, 3),
        (2, 3),
        (4, 7),
        (4, 7),
        (8, 15),
        (8, 15),
        (16, 31),
    ]


def test_runtime_from_deadline_only_is_an_upper_bound() -> None:
    runtime = RuntimeHistory().runtime(_gang("a", 2, 0, limit=600))
    assert (runtime.low, runtime.expected, runtime.high) == (0.0, 600, 600)


def test_runtime_from_history_is_the_median_capped_by_the_deadline() -> None:
    history = RuntimeHistory()
    for seconds in (100, 200, 300, 400, 500):
        history.record("q", 3, seconds)  # size class 2-3
    runtime = history.runtime(_gang("a", 2, 0))
    assert runtime.expected == 300
    assert runtime.low is not None and runtime.high is not None
    assert 100 <= runtime.low < 300 < runtime.high <= 500
    capped = history.runtime(_gang("b", 2, 0, limit=250))
    assert (capped.expected, capped.high) == (250, 250)
    # Conditioned on what it ran already: only longer samples count.
    assert history.runtime(_gang("c", 2, 0), elapsed=350).expected == 450


def test_runtime_unknown_says_why() -> None:
    runtime = RuntimeHistory().runtime(_gang("a", 8, 0))
    assert not runtime.known
    assert "no deadline" in runtime.why and "queue q size class 8\u201315" in runtime.why


def test_history_keeps_the_last_samples_only() -> None:
    history = RuntimeHistory(limit=3)
    for seconds in range(10):
        history.record("q", 1, float(seconds))
    assert history.samples("q", 1) == (7.0, 8.0, 9.0)
    assert len(history.copy()) == 3


def test_gang_that_fits_now_starts_now() -> None:
    snapshot = Snapshot(NODES, TREE, [], [_gang("a", 2, 10)], 100.0)
    found = estimate(snapshot, RuntimeHistory())["ns/a"]
    assert (found.start, found.earliest, found.latest) == (100.0, 100.0, 100.0)


def test_gangs_queue_behind_a_running_gang_with_a_deadline() -> None:
    running = _running(_gang("run", 4, 0, limit=600), 1000.0)
    pending = [_gang(f"p{i}", 4, 1100 + i, limit=300) for i in range(3)]
    found = estimate(Snapshot(NODES, TREE, [running], pending, 1200.0), RuntimeHistory())
    assert found["ns/p0"].start == 1600.0  # the running gang's deadline
    assert found["ns/p1"].start == 1900.0
    assert found["ns/p2"].start == 2200.0
    # Deadline only: the range runs from now (everything may end at once) to the latest.
    assert found["ns/p0"].earliest == 1200.0 and found["ns/p0"].latest == 1600.0


def test_history_tightens_the_estimate() -> None:
    history = RuntimeHistory()
    for seconds in (250, 300, 350):
        history.record("q", 4, seconds)
    running = _running(_gang("run", 4, 0, limit=600), 1000.0)
    found = estimate(
        Snapshot(NODES, TREE, [running], [_gang("p", 4, 1100, limit=600)], 1200.0), history
    )["ns/p"]
    # Ran 200 s: its remaining samples are 250..350 s, median 300 s.
    assert found.start == 1300.0
    assert found.earliest is not None and found.latest is not None
    assert found.earliest <= 1300.0 <= found.latest == 1600.0


def test_unknown_when_a_blocking_runtime_is_unknown() -> None:
    running = _running(_gang("run", 4, 0), 1000.0)
    found = estimate(
        Snapshot(NODES, TREE, [running], [_gang("p", 2, 1100, limit=60)], 1200.0),
        RuntimeHistory(),
    )["ns/p"]
    assert found.start is None
    assert found.waits_for == ("ns/run",)
    assert found.unknown.startswith("running gang ns/run has no deadline")


def test_gang_that_never_fits_is_unknown_with_the_planners_reason() -> None:
    found = estimate(Snapshot(NODES, TREE, [], [_gang("huge", 5, 0)], 10.0), RuntimeHistory())
    assert found["ns/huge"].start is None
    assert "never be admitted" in found["ns/huge"].unknown


def test_backing_off_gang_starts_no_sooner_than_its_requeue() -> None:
    later = [(_gang("back", 1, 0), 500.0)]
    found = estimate(Snapshot(NODES, TREE, [], [], 100.0), RuntimeHistory(), later=later)
    assert found["ns/back"].start == 500.0


def test_only_answers_the_gangs_asked() -> None:
    pending = [_gang("a", 1, 0), _gang("b", 1, 1)]
    found = estimate(Snapshot(NODES, TREE, [], pending, 5.0), RuntimeHistory(), only=["ns/b"])
    assert set(found) == {"ns/b"}


def test_a_gang_ahead_without_a_runtime_is_named() -> None:
    # p0 (no deadline) takes the whole cluster first; p1 needs it after p0 ends: unknown.
    pending = [_gang("p0", 4, 1), _gang("p1", 4, 2, limit=60)]
    found = estimate(Snapshot(NODES, TREE, [], pending, 10.0), RuntimeHistory())
    assert found["ns/p0"].start == 10.0
    assert found["ns/p1"].start is None
    assert found["ns/p1"].unknown.startswith("gang ns/p0, ahead of it, has no deadline")


def test_an_admitted_gang_still_starting_counts_as_running() -> None:
    tree = QueueTree.build([Queue("q")])  # size ratio on: big gangs go one at a time
    starting = AdmittedGang(_gang("big", 2, 0, limit=100), 2, {"n0": 1, "n1": 1}, 0.0, False)
    found = estimate(
        Snapshot(NODES, tree, [starting], [_gang("next", 2, 1, limit=100)], 10.0),
        RuntimeHistory(),
    )
    assert found["ns/next"].start == 10.0


def test_a_gang_that_would_start_sooner_if_an_unknown_gang_ended_is_unknown() -> None:
    # ns/a (no runtime known) and ns/b (ends by 600) hold two nodes each; ns/p needs two. It
    # would start at 600, but sooner if ns/a ended first: when is not known.
    a = AdmittedGang(_gang("a", 2, 0), 2, {"n0": 1, "n1": 1}, 0.0, True)
    b = AdmittedGang(_gang("b", 2, 0, limit=600), 2, {"n2": 1, "n3": 1}, 0.0, True)
    found = estimate(
        Snapshot(NODES, TREE, [a, b], [_gang("p", 2, 1, limit=60)], 10.0), RuntimeHistory()
    )["ns/p"]
    assert found.start is None
    assert found.waits_for == ("ns/a",)
    assert found.unknown.startswith("running gang ns/a has no deadline")
