"""`muster bench plan`: time `policies.plan` on a synthetic burst.

The snapshot is built deterministically from ``--seed``: a mixed cluster (cpu, high-memory and
tainted gpu nodes, some capacity held by system pods), a running load of admitted gangs, leaf
queues in cohorts of ten with nominal quotas, borrowing and lending limits and a few StrictFIFO
queues, and pending gangs of 1..64 pods (some one-pod-per-node, some elastic, some gpu). Quotas
are set so that many but not all pending gangs fit. Only ``plan`` is timed; then, apart,
reading every waiting gang's reason (``reasons_ms_median``: they are built on first read) and
``Planner.plan`` on a planner already holding the snapshot (``planner_plan_ms_median``).

Then what the controller pays per admit cycle (``cycle_*``): the same gangs, nodes and queues in
a controller `Cache` (records made from the snapshot's gangs, as `job_record` would read them;
pods bound where the admitted gangs run), and a `PlanFeed` kept from cycle to cycle. Between
timed cycles a little changes, as between two cycles of a busy controller: the last plan's
first admission is assumed (`Cache.assume_admitted`), one running gang finishes and one gang is
created. A timed cycle is the controller's steps 2 and 3: the refusals, the reservations
released, ``PlanFeed.sync`` (``cycle_sync_ms_median``) and ``Planner.plan``
(``cycle_plan_ms_median``); ``cycle_ms_median`` is their sum per cycle.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace

from admission.cache import Cache
from admission.gangs import JobRecord
from admission.planfeed import PlanFeed
from muster.bench import bench_main
from policies import (
    AdmittedGang,
    Decisions,
    Gang,
    Node,
    Planner,
    Queue,
    QueueTree,
    Resources,
    Snapshot,
    SubmitStamp,
    Taint,
    Toleration,
    plan,
)
from policies.percentiles import percentile_of_sorted

GIB = 2**30
_CPU_NODE = Resources({"cpu": 32_000, "memory": 128 * GIB, "pods": 110})
_MEM_NODE = Resources({"cpu": 64_000, "memory": 512 * GIB, "pods": 110})
_GPU_NODE = Resources({"cpu": 48_000, "memory": 384 * GIB, "pods": 110, "nvidia.com/gpu": 8})
_GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
_GPU_TOLERATION = Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule")
_POD_SHAPES = (
    Resources({"cpu": 500, "memory": 1 * GIB}),
    Resources({"cpu": 1_000, "memory": 2 * GIB}),
    Resources({"cpu": 2_000, "memory": 4 * GIB}),
    Resources({"cpu": 4_000, "memory": 16 * GIB}),
    Resources({"cpu": 8_000, "memory": 32 * GIB}),
)
_GPU_POD = Resources({"cpu": 8_000, "memory": 64 * GIB, "nvidia.com/gpu": 1})
_SIZES = (1, 1, 2, 2, 4, 4, 8, 8, 16, 16, 32, 64)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pending", type=int, default=10_000, help="pending gangs (10000)")
    parser.add_argument("--nodes", type=int, default=1_000, help="nodes (1000)")
    parser.add_argument("--queues", type=int, default=100, help="leaf queues (100)")
    parser.add_argument("--runs", type=int, default=7, help="timed plans; median reported (7)")
    parser.add_argument("--seed", type=int, default=1, help="random seed of the snapshot (1)")
    parser.add_argument("--policy", default="drf", help="admission policy (drf)")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one plan")
    parser.epilog = (
        "examples:\n"
        "  muster bench plan\n"
        "  muster bench plan --pending 1000 --nodes 1000 --queues 100 --runs 7 --json\n"
        "  muster bench plan --pending 2000 --policy fifo --profile"
    )


def build_snapshot(pending: int, nodes: int, queues: int, seed: int) -> Snapshot:
    """A deterministic synthetic snapshot (see the module docstring)."""
    rng = random.Random(seed)
    node_list = _synthetic_nodes(rng, nodes)
    tree = QueueTree.build(_synthetic_queues(rng, queues, node_list))
    admitted = _running_gangs(node_list, queues)
    gangs = _pending_gangs(rng, pending, queues)
    return Snapshot(node_list, tree, admitted, gangs, now=3600.0)


def _synthetic_nodes(rng: random.Random, nodes: int) -> list[Node]:
    """gpu (10%), mem (20%) and cpu nodes; a fifth of them with pods muster does not manage."""
    node_list: list[Node] = []
    for i in range(nodes):
        draw = rng.random()
        used = Resources()
        if rng.random() < 0.2:  # daemon and system pods not managed by muster
            used = Resources({"cpu": rng.choice((1_000, 2_000)), "memory": 4 * GIB, "pods": 4})
        if draw < 0.1:
            node_list.append(
                Node(
                    f"gpu-{i:05d}",
                    _GPU_NODE,
                    labels={"accelerator": "a100", "pool": "gpu"},
                    taints=(_GPU_TAINT,),
                    used=used,
                )
            )
        elif draw < 0.3:
            node_list.append(Node(f"mem-{i:05d}", _MEM_NODE, {"pool": "mem"}, used=used))
        else:
            node_list.append(Node(f"cpu-{i:05d}", _CPU_NODE, {"pool": "cpu"}, used=used))
    return node_list


def _synthetic_queues(rng: random.Random, queues: int, node_list: Sequence[Node]) -> list[Queue]:
    """`queues` leaf queues in cohorts of ten, their quotas drawn around the cluster's share."""
    cluster_cpu = sum(node.allocatable["cpu"] for node in node_list)
    cluster_memory = sum(node.allocatable["memory"] for node in node_list)
    gpus = sum(node.allocatable["nvidia.com/gpu"] for node in node_list)

    cohorts = max(1, queues // 10)
    queue_list = [Queue(f"cohort-{c}") for c in range(cohorts)]
    # Nominal quotas add up to about the cluster; half the queues may borrow without bound.
    share = 1.0 / queues
    for q in range(queues):
        nominal = Resources(
            {
                "cpu": int(cluster_cpu * share * rng.uniform(0.6, 1.2)),
                "memory": int(cluster_memory * share * rng.uniform(0.6, 1.2)),
                "nvidia.com/gpu": int(gpus * share * rng.uniform(0.5, 1.5)),
            }
        )
        borrowing = None
        if q % 2:
            borrowing = Resources({"cpu": nominal["cpu"] // 2, "memory": nominal["memory"] // 2})
        lending = Resources({"cpu": nominal["cpu"] // 2}) if q % 3 == 0 else None
        queue_list.append(
            Queue(
                f"q{q:03d}",
                parent=f"cohort-{q % cohorts}",
                weight=rng.choice((1.0, 1.0, 2.0, 3.0)),
                nominal=nominal,
                borrowing_limit=borrowing,
                lending_limit=lending,
                strategy="StrictFIFO" if q % 10 == 9 else "BestEffortFIFO",
            )
        )
    return queue_list


def _running_gangs(node_list: Sequence[Node], queues: int) -> list[AdmittedGang]:
    """A running load on about a third of the cpu nodes: one 8-pod gang per 4 nodes."""
    admitted: list[AdmittedGang] = []
    cpu_nodes = [node.name for node in node_list if node.name.startswith("cpu-")]
    for j in range(len(cpu_nodes) // 12):
        request = _POD_SHAPES[2]
        gang = Gang(
            f"running/g{j}",
            f"q{j % queues:03d}",
            request,
            8,
            submitted=SubmitStamp(-7200.0 + j, 0, f"g{j}"),
        )
        chosen = cpu_nodes[j * 4 : j * 4 + 4]
        admitted.append(AdmittedGang(gang, 8, {n: 2 for n in chosen}, -3600.0, running=True))

    return admitted


def _pending_gangs(rng: random.Random, pending: int, queues: int) -> list[Gang]:
    """`pending` gangs of drawn queues, sizes and shapes; 5% gpu gangs, 20% one pod per node."""
    gangs: list[Gang] = []
    for k in range(pending):
        queue = f"q{rng.randrange(queues):03d}"
        size = rng.choice(_SIZES)
        kind = rng.random()
        selector: dict[str, str] = {}
        tolerations: tuple[Toleration, ...] = ()
        if kind < 0.05:
            request = _GPU_POD
            selector = {"accelerator": "a100"}
            tolerations = (_GPU_TOLERATION,)
            size = min(size, 16)
        else:
            request = rng.choice(_POD_SHAPES)
        one_pod_per_node = rng.random() < 0.2
        minimum = max(1, size // 2) if rng.random() < 0.1 else None
        t = float(rng.randrange(3600))  # whole seconds: many gangs share a second
        gangs.append(
            Gang(
                f"ns{k % 50}/gang-{k:06d}",
                queue,
                request,
                size,
                min_size=minimum,
                priority=10 if rng.random() < 0.05 else 0,
                submitted=SubmitStamp(t, k, f"gang-{k:06d}"),
                one_pod_per_node=one_pod_per_node,
                node_selector=selector,
                tolerations=tolerations,
                elastic_after=rng.choice((0.0, 600.0)),
                kind="MiniCluster" if one_pod_per_node else "Job",
            )
        )
    return gangs


def controller_cache(snapshot: Snapshot) -> Cache:
    """A controller's cache holding what ``snapshot`` holds: its nodes (with the capacity other
    pods use), its queue tree, a suspended Job per pending gang and an admitted one, its pods
    bound as placed, per admitted gang."""
    cache = Cache()
    for node in snapshot.nodes:
        cache.nodes[node.name] = replace(node, used=Resources())
        if node.used:
            cache.pods.used_by_others[node.name] = node.used
    cache.queues.tree = snapshot.queues
    for gang in snapshot.pending:
        _put(cache, gang, None)
    for admitted in snapshot.admitted:
        _put(cache, admitted.gang, admitted)
    return cache


def _put(cache: Cache, gang: Gang, admitted: AdmittedGang | None) -> JobRecord:
    namespace, _, name = gang.id.partition("/")
    record = JobRecord(
        namespace=namespace,
        name=name,
        uid=f"uid-{gang.id}",
        resource_version="1",
        gang=gang,
        queue=gang.queue,
        suspended=admitted is None,
        admitted_at=admitted.admitted_at if admitted is not None else None,
        admitted_size=admitted.size if admitted is not None else 0,
        evictions=0,
        failed_state=False,
        finished=False,
        ready=admitted.size if admitted is not None and admitted.running else 0,
        succeeded=0,
        clog_timeout=None,
        requeue_at=0.0,
        kind=gang.kind,
        gang_label=name,
        reached_min=admitted is not None and admitted.running,
    )
    cache.jobs[record.key] = record
    if admitted is not None:
        cache.pods.gang_bound[f"{namespace}/{name}"] = dict(admitted.placement)
    return record


def controller_cycles(
    snapshot: Snapshot, policy: str, runs: int
) -> tuple[Decisions, list[float], list[float], list[float]]:
    """The first cycle's decisions, then per timed cycle the milliseconds of sync (refusals,
    reservations, `PlanFeed.sync`) and of `Planner.plan`, and the CPU milliseconds of both
    (see the module docstring)."""
    cache = controller_cache(snapshot)
    feed = PlanFeed(policy)
    now = snapshot.now
    first = feed.plan(cache, now)  # the planner's state is built once, at the first cycle
    decisions = first
    running = [a.gang.id for a in snapshot.admitted if a.running]
    syncs: list[float] = []
    plans: list[float] = []
    cpu: list[float] = []
    for k in range(runs):
        now += 1.0
        # What changed since the last cycle: its first admission, a finish, a create.
        if decisions.admitted:
            admission = decisions.admitted[0]
            record = cache.jobs[admission.gang_id]
            placements = record.gang.placements(admission.placement, admission.other_placements)
            cache.assume_admitted(record, now, admission.size, placements)
        if running:
            done = cache.jobs[running.pop()]
            done.finished = True
            cache.pods.gang_bound.pop(f"{done.namespace}/{done.gang_label}", None)
        template = snapshot.pending[k % len(snapshot.pending)]
        name = f"again-{k}"
        created = SubmitStamp(now, len(snapshot.pending) + k, name)
        _put(cache, replace(template, id=f"ns0/{name}", submitted=created), None)
        began, began_cpu = time.perf_counter(), time.process_time()
        refused = cache.refusals()
        cache.reservations.release(now)
        planner = feed.sync(cache, now, refused)
        synced = time.perf_counter()
        decisions = planner.plan(now)
        cpu.append((time.process_time() - began_cpu) * 1000.0)
        syncs.append((synced - began) * 1000.0)
        plans.append((time.perf_counter() - synced) * 1000.0)
    return first, syncs, plans, cpu


def run(args: argparse.Namespace) -> int:
    if min(args.pending, args.nodes, args.queues, args.runs) < 1:
        print(
            "muster bench plan: --pending, --nodes, --queues and --runs must be >= 1",
            file=sys.stderr,
        )
        return 2
    snapshot = build_snapshot(args.pending, args.nodes, args.queues, args.seed)
    if args.profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.runcall(plan, snapshot, args.policy)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    samples: list[float] = []
    cpu: list[float] = []  # CPU time of the same calls: steadier when other work shares the CPU
    reasons: list[float] = []  # then reading every waiting gang's reason (built on first read)
    decisions = None
    for _ in range(args.runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        decisions = plan(snapshot, args.policy)
        samples.append((time.perf_counter() - start) * 1000.0)
        cpu.append((time.process_time() - start_cpu) * 1000.0)
        start = time.perf_counter()
        dict(decisions.pending.items())
        reasons.append((time.perf_counter() - start) * 1000.0)
    assert decisions is not None
    # The same decisions from a Planner that already holds the snapshot (as a controller or
    # the simulator keeps one between cycles): only the plan itself is timed.
    planner = Planner(snapshot.nodes, snapshot.queues, args.policy)
    for admitted in snapshot.admitted:
        planner.add_admitted(admitted)
    for gang in snapshot.pending:
        planner.add_pending(gang)
    planner.plan(snapshot.now)  # builds the planner's state
    kept: list[float] = []
    for _ in range(args.runs):
        start = time.perf_counter()
        planner.plan(snapshot.now)
        kept.append((time.perf_counter() - start) * 1000.0)
    first, syncs, plans, cycle_cpu = controller_cycles(snapshot, args.policy, args.runs)
    cycles = [a + b for a, b in zip(syncs, plans, strict=True)]
    admitted_pods = sum(a.size for a in decisions.admitted)
    result = {
        "pending": args.pending,
        "nodes": args.nodes,
        "queues": args.queues,
        "policy": args.policy,
        "seed": args.seed,
        "runs": args.runs,
        "admitted": len(decisions.admitted),
        "admitted_pods": admitted_pods,
        "waiting": len(decisions.pending),
        "rejected": len(decisions.rejected),
        "plan_ms_median": round(statistics.median(samples), 3),
        "plan_ms_p90": round(percentile_of_sorted(sorted(samples), 90), 3),
        "plan_ms_min": round(min(samples), 3),
        "plan_cpu_ms_median": round(statistics.median(cpu), 3),
        "reasons_ms_median": round(statistics.median(reasons), 3),
        "planner_plan_ms_median": round(statistics.median(kept), 3),
        "cycle_ms_median": round(statistics.median(cycles), 3),
        "cycle_sync_ms_median": round(statistics.median(syncs), 3),
        "cycle_plan_ms_median": round(statistics.median(plans), 3),
        "cycle_cpu_ms_median": round(statistics.median(cycle_cpu), 3),
        "cycle_admitted_first": len(first.admitted),
    }
    if args.json:
        print(json.dumps(result))
        return 0
    width = max(len(key) for key in result)
    print("policies.plan on a synthetic snapshot, then the controller's cycle")
    for key, value in result.items():
        print(f"  {key:<{width}}  {value}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return bench_main("muster bench plan", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
