"""`muster sim`: replay a trace in the in-process simulator (or on kwok) and write a report.

With no TRACE it replays the shipped blog-burst trace, once without gang admission (a pod-level
scheduler, the baseline) and once with muster's planner, and writes both into one report.
`--engine kwok` replays it on a real local control plane instead (simulator/kwok_engine.py),
where `--admission external` hands the replay to a controller muster does not run (Kueue, say)
for a comparison on identical objects.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from muster.commands.packingargs import add_packing_arguments, packing_from
from muster.commands.simfamily import add_family_arguments
from policies.packing import PackingError

if TYPE_CHECKING:
    from simulator.engine import Admission, EngineConfig, EngineResult
    from simulator.kwok_external import ExternalController
    from simulator.trace import Trace

EPILOG = """\
examples:
  muster sim                                   # the shipped blog-burst trace, none vs muster
  muster sim two-queues --admission muster     # another shipped trace, muster only
  muster sim my-trace.yaml --seed 7 --out out/mine
  muster sim cluster.yaml --jobs-csv jobs.csv  # cluster and queues from a trace, jobs from CSV
  muster sim cluster.yaml --jobs-csv history.csv   # replay `muster history -o csv`
  muster sim two-queues --placement scheduler  # what-if: admitted gangs not pinned to the plan
  muster sim --engine kwok                     # the blog burst on a real control plane, 25x
  muster sim two-queues --engine kwok --admission muster --time-scale 50
  muster sim --engine kwok --kubeconfig ~/.cache/muster/clusters/muster/kubeconfig
  muster sim --engine kwok --kubeconfig K --admission muster,external --label team=a
  muster trace family --seed-range 1-50 --out out/family
  muster sim --family out/family               # every trace, none and muster, one table

Trace format, CSV columns and every output: docs/simulator.md
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "trace",
        nargs="?",
        metavar="TRACE",
        help="trace file (YAML/JSON) or the name of a shipped trace (default: blog-burst)",
    )
    parser.add_argument(
        "--admission",
        type=_admissions,
        default="both",
        metavar="{muster,none,both,external}",
        help="muster = gang admission by policies.plan; none = pod-level scheduler only "
        "(the baseline); both = none and muster into one report (default); external = "
        "--engine kwok only: the objects are created suspended for a controller muster does "
        "not run (see --label); a comma list runs several into one report, e.g. "
        "muster,external",
    )
    parser.add_argument("--seed", type=int, default=0, help="orders same-instant submissions")
    parser.add_argument("--out", type=Path, help="output folder (default: out/sim-<trace name>)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no table")
    parser.add_argument("--policy", default="drf", help="admission policy (default: drf)")
    _add_jobs_csv_arguments(parser)
    parser.add_argument(
        "--lookahead",
        type=int,
        default=1000,
        metavar="N",
        help="pending gangs per queue the planner sees each cycle, in queue order (0 = all; "
        "default 1000)",
    )
    parser.add_argument(
        "--admit-interval",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="seconds between admission cycles (default 0: plan at every decision point)",
    )
    parser.add_argument(
        "--horizon",
        type=float,
        metavar="SECONDS",
        help="stop at this simulated time; unfinished gangs are reported stuck",
    )
    parser.add_argument(
        "--placement",
        choices=("pinned", "scheduler"),
        default=None,
        help="in-process only: where admitted gangs' pods go. pinned = on the nodes the plan "
        "chose, as the controller pins them (default); scheduler = not pinned: the pod-level "
        "scheduler places each pod by kube-scheduler's default scoring (spreading), so what "
        "runs can diverge from the plan (a what-if of an unpinned cluster)",
    )
    parser.add_argument(
        "--topology-blind",
        action="store_true",
        help="in-process only: muster plans without the trace's cluster.topology levels "
        "(nodes keep their labels and spread gangs still run slower): what topology-aware "
        "placement is measured against",
    )
    parser.add_argument(
        "--engine",
        choices=("in-process", "kwok"),
        default="in-process",
        help="in-process = discrete-event model (default); kwok = real control plane with kwok "
        "nodes, muster's webhook and controller (see the kwok options below)",
    )
    add_packing_arguments(parser, "the trace's cluster.packing, else lexicographic")
    add_family_arguments(parser)
    _add_kwok_arguments(parser)


def _admissions(text: str) -> list[Admission]:
    """`--admission`: one of muster, none, both (none and muster), external, or a comma list
    of them, in the order given."""
    words: dict[str, list[Admission]] = {
        "muster": ["muster"],
        "none": ["none"],
        "both": ["none", "muster"],
        "external": ["external"],
    }
    out: list[Admission] = []
    for word in text.split(","):
        if word not in words:
            raise argparse.ArgumentTypeError(
                f"{word!r} is not one of muster, none, both, external (or a comma list of them)"
            )
        for name in words[word]:
            if name in out:
                raise argparse.ArgumentTypeError(f"{text!r} names {name} twice")
            out.append(name)
    return out


def _add_jobs_csv_arguments(parser: argparse.ArgumentParser) -> None:
    """--jobs-csv and the options that adapt a job list (or a history) to the trace."""
    parser.add_argument(
        "--jobs-csv",
        type=Path,
        metavar="FILE",
        help="replace the trace's jobs with a CSV job list (columns in docs/simulator.md)",
    )
    parser.add_argument(
        "--csv-time-scale",
        type=float,
        default=1.0,
        metavar="X",
        help="multiply the --jobs-csv times (submissions, runtimes) by X: a history taken from "
        "a kwok replay at --time-scale X is in wall seconds, X brings it back to trace seconds "
        "(default 1)",
    )
    parser.add_argument(
        "--pod-start-delay",
        type=float,
        default=None,
        metavar="SECONDS",
        help="in-process: seconds from a pod's binding to it running (default: the trace's "
        "podStartDelay; with a history as --jobs-csv, the history's median admission-to-start "
        "time)",
    )


def _add_kwok_arguments(parser: argparse.ArgumentParser) -> None:
    """The "kwok engine" argument group: options that only --engine kwok reads."""
    kwok = parser.add_argument_group(
        "kwok engine", "options of --engine kwok (docs/simulator.md, section 'The kwok engine')"
    )
    kwok.add_argument(
        "--time-scale",
        type=float,
        default=25.0,
        metavar="X",
        help="trace seconds per wall second; runtimes, clog timeouts and backoffs are "
        "compressed alike (default 25: 100 s of trace time take 4 s)",
    )
    kwok.add_argument(
        "--kubeconfig",
        type=Path,
        metavar="FILE",
        help="replay on this running control plane (one from `muster cluster up`); default: "
        "bring one up with the trace's nodes and take it down afterwards",
    )
    kwok.add_argument(
        "--cluster-name",
        default="muster-sim",
        metavar="NAME",
        help="name of the control plane to bring up (default muster-sim)",
    )
    kwok.add_argument(
        "--external-muster",
        action="store_true",
        help="muster already runs against --kubeconfig: replay through it instead of "
        "starting `muster run --local` (existing queues of the trace's names are used as is)",
    )
    kwok.add_argument(
        "--keep-cluster",
        action="store_true",
        help="leave the control plane it brought up running (inspect with kubectl)",
    )
    kwok.add_argument(
        "--muster-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="pass ARG to the `muster run --local` the replay starts (repeat for more), e.g. "
        "--muster-arg=--no-pin to replay without pinning admitted gangs",
    )
    kwok.add_argument(
        "--min-clog-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="least wall seconds a queue's compressed clog timeout is set to, so gangs the "
        "control plane is still starting are not evicted as clogs (default 30; 0 = none); "
        "in-process with --csv-time-scale X, the queues' clog timeouts are raised to X times "
        "it, as the replayed kwok history had them",
    )
    kwok.add_argument(
        "--stall",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="wall seconds without any change, with nothing running or backing off, after "
        "which unfinished gangs are reported stuck (default 5)",
    )
    _add_external_arguments(parser)


def _add_external_arguments(parser: argparse.ArgumentParser) -> None:
    """The "outside controller" argument group: options of `--admission external`."""
    from simulator.kwok_external import DEFAULT_STALL

    group = parser.add_argument_group(
        "outside controller",
        "options of --engine kwok --admission external (docs/simulator.md, section 'Side by "
        "side with another controller'); it needs --kubeconfig of the cluster that controller "
        "runs against",
    )
    group.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="label every replayed Job and MiniCluster (and a MiniCluster's Job) with it, so "
        "the other controller takes them, e.g. kueue.x-k8s.io/queue-name=sim (repeat for more)",
    )
    group.add_argument(
        "--namespace-manifest",
        type=Path,
        metavar="FILE",
        help="YAML/JSON objects (one or more documents) created in each replay namespace "
        "before any gang is submitted into it, e.g. a Kueue LocalQueue; their namespace is "
        "the replay's",
    )
    group.add_argument(
        "--external-stall",
        type=float,
        default=None,
        metavar="SECONDS",
        help="wall seconds without any change after which the external replay's unfinished "
        f"gangs are reported stuck (default {DEFAULT_STALL:g}: the other controller may wait "
        "out a requeue backoff the engine cannot see); --stall applies to muster and none",
    )
    group.add_argument(
        "--external-name",
        metavar="NAME",
        help="what the report calls the other controller, e.g. kueue (default: external); "
        "its rows and JSON key stay `external`",
    )
    group.add_argument(
        "--controller-pid",
        type=int,
        action="append",
        default=[],
        metavar="PID",
        help="attribute this process's CPU seconds (with its children's) in each replay's "
        "figures, next to the control plane's: the other controller, or a muster run "
        "outside (--external-muster); repeat for more",
    )


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from simulator.engine import simulate
    from simulator.trace import TraceError, load, read_jobs_csv, with_jobs

    if args.family is not None:
        from muster.commands.simfamily import run_family

        return run_family(args, policy_known=_policy_known)
    try:
        trace = load(args.trace)
        if args.jobs_csv is not None:
            read = read_jobs_csv(args.jobs_csv, scale=args.csv_time_scale)
            trace = with_jobs(trace, read.jobs, str(args.jobs_csv))
            if read.engine or read.skipped or read.start_latency is not None:
                _history_note(read, trace.pod_start_delay, args)
            if read.start_latency is not None and args.pod_start_delay is None:
                # The cluster's own start latency, as the history measured it.
                trace = dataclasses.replace(trace, pod_start_delay=read.start_latency)
            if args.csv_time_scale != 1.0 and args.engine == "in-process":
                trace = _kwok_clog_floor(trace, args)
    except TraceError as exc:
        print(f"muster sim: {exc}", file=sys.stderr)
        return 2
    if args.pod_start_delay is not None:
        if args.pod_start_delay < 0:
            print("muster sim: --pod-start-delay must not be negative", file=sys.stderr)
            return 2
        trace = dataclasses.replace(trace, pod_start_delay=args.pod_start_delay)
    if args.lookahead < 0:
        print("muster sim: --lookahead must be 0 (all) or positive", file=sys.stderr)
        return 2
    if args.admit_interval < 0 or (args.horizon is not None and args.horizon <= 0):
        print("muster sim: --admit-interval must be >= 0 and --horizon > 0", file=sys.stderr)
        return 2
    if not _policy_known(args.policy) or not _packing_known(args):
        return 2
    engines: list[Admission] = args.admission
    if "external" in engines and args.engine != "kwok":
        print(
            "muster sim: --admission external needs --engine kwok: the other controller "
            "admits on a real cluster",
            file=sys.stderr,
        )
        return 2
    if args.engine == "kwok":
        refusal = _in_process_only(args)
        if refusal:
            print(f"muster sim: {refusal}", file=sys.stderr)
            return 2
        return _run_kwok(trace, engines, args)
    out_dir: Path = args.out or Path("out") / f"sim-{trace.name}"
    results: list[EngineResult] = []
    show_progress = not args.quiet and sys.stderr.isatty()
    for admission in engines:
        config = _engine_config(admission, args)
        if show_progress:
            results.append(_with_progress(trace, config))
        else:
            results.append(simulate(trace, config))
    return _finish(trace, results, out_dir, args)


def _engine_config(admission: Admission, args: argparse.Namespace) -> EngineConfig:
    """One in-process engine's configuration from the command's options."""
    from simulator.engine import EngineConfig

    return EngineConfig(
        admission=admission,
        seed=args.seed,
        policy=args.policy,
        lookahead=args.lookahead,
        admit_interval=args.admit_interval,
        horizon=args.horizon,
        placement=args.placement or "pinned",
        topology_blind=args.topology_blind,
        packing=packing_from(args),
    )


def _packing_known(args: argparse.Namespace) -> bool:
    """Whether the packing options hold (else say why)."""
    try:
        packing_from(args)
    except PackingError as exc:
        print(f"muster sim: {exc}", file=sys.stderr)
        return False
    return True


def _in_process_only(args: argparse.Namespace) -> str | None:
    """Why an in-process option given with --engine kwok is refused; None if none is given."""
    if args.pod_start_delay is not None:
        return (
            "--pod-start-delay is an in-process option; on kwok the control plane takes the "
            "time it takes (the replay prints it)"
        )
    if args.placement is not None:
        return (
            "--placement is an in-process option; on kwok, kube-scheduler places the pods and "
            "the controller decides whether they are pinned"
        )
    if args.topology_blind:
        return (
            "--topology-blind is an in-process option; on kwok, muster runs with the trace's "
            "cluster.topology levels"
        )
    if args.packing is not None:
        return (
            "--packing is an in-process option; on kwok give the controller its own "
            "`muster run --packing`"
        )
    return None


def _run_kwok(trace: Trace, engines: list[Admission], args: argparse.Namespace) -> int:
    """Replay on a real control plane with kwok nodes, then write the same report."""
    from simulator.kwok_engine import replay
    from simulator.kwok_settings import KwokError, KwokSettings

    if args.lookahead != 1000 or args.admit_interval != 0:
        print(
            "muster sim: --lookahead and --admit-interval are in-process options; on kwok the "
            "controller decides its own cycles",
            file=sys.stderr,
        )
        return 2
    if args.time_scale <= 0 or args.stall <= 0 or args.min_clog_timeout < 0:
        print(
            "muster sim: --time-scale and --stall must be positive, --min-clog-timeout not "
            "negative",
            file=sys.stderr,
        )
        return 2
    if args.kubeconfig is not None and not args.kubeconfig.expanduser().is_file():
        print(f"muster sim: --kubeconfig {args.kubeconfig} does not exist", file=sys.stderr)
        return 2
    if args.external_muster and args.kubeconfig is None:
        print(
            "muster sim: --external-muster needs --kubeconfig of the cluster it runs against",
            file=sys.stderr,
        )
        return 2
    external = _external_controller(engines, args)
    if external is None:
        return 2
    out_dir: Path = args.out or Path("out") / f"sim-{trace.name}-kwok"
    settings = KwokSettings(
        time_scale=args.time_scale,
        kubeconfig=args.kubeconfig.expanduser() if args.kubeconfig else None,
        cluster_name=args.cluster_name,
        external_muster=args.external_muster,
        keep_cluster=args.keep_cluster,
        policy=args.policy,
        seed=args.seed,
        horizon=args.horizon,
        stall=args.stall,
        min_clog_timeout=args.min_clog_timeout,
        out_dir=out_dir,
        muster_args=tuple(args.muster_arg),
        external=external,
        controller_pids=tuple(args.controller_pid),
    )
    show_progress = not args.quiet and sys.stderr.isatty()
    figures: dict[str, dict[str, Any]] = {}
    try:
        results = replay(
            trace,
            engines,
            settings,
            log=(lambda _m: None) if args.quiet else _stderr,
            progress=_kwok_progress if show_progress else None,
            figures=figures,
        )
    except KwokError as exc:
        print(f"muster sim: {exc}", file=sys.stderr)
        return 1
    code = _finish(trace, results, out_dir, args, figures)
    if code == 0:
        _add_engine_section(out_dir, settings, figures)
    return code


def _external_controller(
    engines: list[Admission], args: argparse.Namespace
) -> ExternalController | None:
    """The `external` admission's settings from its options, or None after saying on stderr
    what is wrong: before anything is created."""
    from simulator.kwok_external import (
        DEFAULT_STALL,
        ExternalController,
        ExternalError,
        controller_process,
        load_namespace_manifest,
        parse_labels,
    )

    given = [
        name
        for name, value in (
            ("--label", args.label),
            ("--namespace-manifest", args.namespace_manifest),
            ("--external-stall", args.external_stall),
            ("--external-name", args.external_name),
        )
        if value is not None and value != []
    ]
    if "external" not in engines:
        if given:
            verb = "applies" if len(given) == 1 else "apply"
            _stderr(f"muster sim: {', '.join(given)} {verb} only to --admission external")
            return None
        if args.controller_pid and not args.external_muster:
            _stderr(
                "muster sim: --controller-pid attributes CPU to a controller muster does not "
                "start: use it with --admission external or --external-muster"
            )
            return None
    elif args.kubeconfig is None:
        _stderr(
            "muster sim: --admission external needs --kubeconfig of the cluster the other "
            "controller runs against (docs/simulator.md, 'Side by side with another controller')"
        )
        return None
    stall = DEFAULT_STALL if args.external_stall is None else args.external_stall
    try:
        if stall <= 0:
            raise ExternalError("--external-stall must be positive")
        for pid in args.controller_pid:
            controller_process(pid)
        labels = parse_labels(args.label)
        objects = (
            load_namespace_manifest(args.namespace_manifest)
            if args.namespace_manifest is not None
            else ()
        )
    except ExternalError as exc:
        _stderr(f"muster sim: {exc}")
        return None
    return ExternalController(
        labels=labels, namespace_objects=objects, stall=stall, name=args.external_name
    )


def _kwok_clog_floor(trace: Trace, args: argparse.Namespace) -> Trace:
    """A kwok replay's history (--csv-time-scale X) replayed with the clog timeouts its
    controller had: none below --min-clog-timeout wall seconds, X times that in trace time
    (simulator/kwok_objects.queue_body); a start delay that long is not a clog there."""
    import dataclasses

    floor = args.min_clog_timeout * args.csv_time_scale
    raised = [q.name for q in trace.queues if q.clog_timeout < floor]
    if not raised:
        return trace
    if not args.quiet:
        print(
            f"muster sim: clog timeouts of {', '.join(raised)} raised to {floor:g}s "
            f"(--min-clog-timeout {args.min_clog_timeout:g} x --csv-time-scale "
            f"{args.csv_time_scale:g}), as the kwok replay had them",
            file=sys.stderr,
        )
    queues = tuple(
        dataclasses.replace(q, clog_timeout=max(q.clog_timeout, floor)) for q in trace.queues
    )
    return dataclasses.replace(trace, queues=queues)


def _history_note(read: Any, trace_delay: float, args: argparse.Namespace) -> None:
    """What replaying a history left out, and which pod start delay the model uses."""
    if args.quiet:
        return
    parts = [f"{len(read.jobs)} gangs" + (f" (engine {read.engine})" if read.engine else "")]
    if read.skipped:
        parts.append(f"{read.skipped} that never ran left out")
    if args.pod_start_delay is not None:
        parts.append(f"pod start delay {args.pod_start_delay:g}s (--pod-start-delay)")
    elif read.start_latency is not None:
        parts.append(
            f"pod start delay {read.start_latency:.1f}s: the history's median admission-to-start "
            f"(the trace's: {trace_delay:g}s; --pod-start-delay sets another)"
        )
    print(f"muster sim: history {args.jobs_csv}: {'; '.join(parts)}", file=sys.stderr)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _add_engine_section(out_dir: Path, settings: Any, figures: dict[str, dict[str, Any]]) -> None:
    """summary.json gets an `engine` key: which engine, its time scale and replay figures."""
    import json

    path = out_dir / "summary.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    document["engine"] = {
        "name": "kwok",
        "time_scale": settings.time_scale,
        "cluster": str(settings.kubeconfig) if settings.kubeconfig else settings.cluster_name,
        **figures,
    }
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


@contextlib.contextmanager
def _kwok_progress(admission: str) -> Iterator[Callable[[Any], None]]:
    """A rich progress bar for one kwok replay: gangs done, trace time, running gangs, pods."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn(f"[bold]kwok {admission}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} gangs"),
        TextColumn("trace t={task.fields[sim]}"),
        TextColumn("{task.fields[running]} running, {task.fields[pods]} pods bound"),
        TimeElapsedColumn(),
        transient=True,
    ) as bar:
        task = bar.add_task(admission, total=None, sim="0s", running=0, pods=0)

        def update(p: Any) -> None:
            bar.update(
                task,
                total=p.total,
                completed=p.done,
                sim=f"{p.trace_time:,.0f}s",
                running=p.running,
                pods=p.pods_bound,
            )

        yield update


def _controller_cpu_rows(
    admissions: list[str], figures: dict[str, dict[str, Any]], args: argparse.Namespace
) -> list[list[str]]:
    """kwok: one row per controller process (muster, each --controller-pid), its CPU seconds
    in each replay; every process is in summary.json's engine.<admission>.cpu_s."""
    cpu = {name: figures.get(name, {}).get("cpu_s") or {} for name in admissions}
    keys = sorted(
        {k for c in cpu.values() for k in c if k == "muster" or "(pid " in k},
        key=lambda k: (k != "muster", k),
    )
    rows = []
    for key in keys:
        cells = [f"{cpu[name][key]:.1f}" if key in cpu[name] else "" for name in admissions]
        rows.append([f"CPU s: {key}", *cells])
    return rows


def _policy_known(name: str) -> bool:
    from policies import get_policy

    try:
        get_policy(name)
    except (KeyError, ValueError) as exc:
        message = exc.args[0] if exc.args else str(exc)
        print(f"muster sim: --policy {name}: {message}", file=sys.stderr)
        return False
    return True


def _with_progress(trace: Trace, config: EngineConfig) -> EngineResult:
    """Run one engine under a rich progress bar: gangs done, simulated time, events/s, ETA."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from simulator.engine import simulate

    total = trace.gang_count
    began = time.perf_counter()
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} gangs"),
        TextColumn("sim t={task.fields[sim]}"),
        TextColumn("{task.fields[rate]} events/s"),
        TimeRemainingColumn(),
        transient=True,
    ) as progress:
        task = progress.add_task(config.admission, total=total, sim="0s", rate="–")

        def update(now: float, events: int, done: int) -> None:
            elapsed = max(time.perf_counter() - began, 1e-9)
            progress.update(
                task, completed=done, sim=f"{now:,.0f}s", rate=f"{events / elapsed:,.0f}"
            )

        return simulate(trace, config, update)


def _finish(
    trace: Trace,
    results: list[EngineResult],
    out_dir: Path,
    args: argparse.Namespace,
    figures: dict[str, dict[str, Any]] | None = None,
) -> int:
    from simulator.report import (
        engine_label,
        queue_rows,
        summarize,
        summary_rows,
        write_outputs,
    )

    try:
        report = write_outputs(trace, results, out_dir, policy=args.policy)
    except OSError as exc:
        print(f"muster sim: cannot write outputs to {out_dir}: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        from rich.console import Console
        from rich.table import Table

        classes = trace.classes()
        summaries: dict[str, dict[str, Any]] = {r.admission: summarize(r, classes) for r in results}
        placement = args.placement
        table = Table(
            title=f"muster sim: {trace.name} ({trace.gang_count} gangs, "
            f"{trace.node_count} nodes, seed {args.seed}"
            + (f", placement {placement})" if placement else ")")
        )
        table.add_column("metric")
        for result in results:
            table.add_column(engine_label(result), justify="right")
        for row in summary_rows(summaries):
            table.add_row(*row)
        for row in _controller_cpu_rows(list(summaries), figures or {}, args):
            table.add_row(*row)
        queues = queue_rows(summaries)
        if len(queues) > 1:
            table.add_section()
            for row in queues:
                table.add_row(*row)
        console = Console()
        console.print(table)
    print(f"report: {report}")
    return 0
