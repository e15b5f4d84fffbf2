"""One kwok replay (`Replay`): the whole trace once, with one admission (`none`, `muster` or
`external`), on the session's cluster. Fresh namespaces and gang objects come from its
`Submitter`; the gang runner (a gang's pods work only once its minimum members run, so a
node-blind or absent gang admission clogs for real) and a loop that reads the replay's Jobs
(and JobSets, and muster's records of its pod groups) and live Pods from watch caches and
records what it sees (`simulator.kwok_timeline`), until every gang finished, nothing can change
any more (then the rest is stuck), or the horizon. The result is an `EngineResult` like the
in-process engine's, in trace time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from policies.kinds import JOB
from policies.kinds.members import RECORDS
from policies.kinds.registry import kinds_named, pod_gang
from policies.vocabulary import GANG_RECORD
from simulator.controlplane.gangrun import GangRunner
from simulator.kwok_devices import namespace_templates, pod_claims
from simulator.kwok_figures import cpu_seconds, difference, replay_figures
from simulator.kwok_objects import SIM_RUN
from simulator.kwok_session import KwokSession
from simulator.kwok_settings import KwokError, Progress, ProgressFn
from simulator.kwok_submit import Submitter, replay_namespaces
from simulator.kwok_timeline import Timeline
from simulator.kwok_watch import WatchCache
from simulator.records import FAILED, FINISHED, Admission, EngineResult
from simulator.trace import SubmittedGang, expand

LIVE_PODS: Final = "status.phase!=Succeeded,status.phase!=Failed"
GANG_RECORDS: Final = kubeapi.Resource(RECORDS.group, RECORDS.version, RECORDS.plural).path()


def gang_object_watches(
    kinds: Iterable[str], mine: str, admission: Admission
) -> list[tuple[str, dict[str, str], str]]:
    """(path, parameters, name) of the watches a replay of gangs of ``kinds`` needs besides its
    Jobs and Pods (``mine``: the replay's label selector)."""
    watches: list[tuple[str, dict[str, str], str]] = []
    for kind in kinds_named(kinds):
        if kind.holds_itself and kind.name != JOB.name:
            api = kind.api
            path = kubeapi.Resource(api.group, api.version, api.plural).path()
            watches.append((path, {"labelSelector": mine}, f"watch-{api.plural}"))
        elif pod_gang(kind) is not None and admission == "muster":
            watches.append((GANG_RECORDS, {"labelSelector": GANG_RECORD}, "watch-records"))
    return watches


class Replay:
    """One replay with one admission; `run` it once."""

    def __init__(
        self, session: KwokSession, admission: Admission, progress: ProgressFn | None
    ) -> None:
        self.session = session
        self.admission = admission
        self.progress = progress
        settings = session.settings
        self.settings = settings
        trace = session.trace
        self.trace = trace
        self.client = session.api()
        self.arrivals: list[SubmittedGang] = expand(trace, seed=settings.seed)
        self.run_id = f"{session.run}-{admission}"
        self.namespaces = replay_namespaces(self.run_id, self.arrivals)
        self.timeline = Timeline(
            trace,
            self.arrivals,
            admission,
            settings.time_scale,
            self.namespaces,
            settings.seed,
            settings.min_clog_timeout,
        )
        self.submitter = Submitter(
            self.client,
            settings,
            admission,
            self.run_id,
            self.arrivals,
            self.namespaces,
            self.timeline,
            namespace_objects=session.namespace_objects,
            node_selector={SIM_RUN: session.run} if session.node_prefix else None,
            flux_operator=session.flux_operator,
            claims=pod_claims(trace),
            templates=namespace_templates(trace, self.namespaces),
        )
        horizon = settings.horizon if settings.horizon is not None else trace.horizon
        self.horizon = horizon if horizon is not None else trace.default_horizon()
        self.looks = 0
        self.look_seconds = 0.0
        self.jobs_by_name: dict[tuple[str, str], dict[str, Any]] = {}
        mine = f"{SIM_RUN}={self.run_id}"
        credentials = self.client.credentials
        self.pods = WatchCache(
            KubeClient(credentials),
            kubeapi.PODS.path(),
            {"labelSelector": mine, "fieldSelector": LIVE_PODS},
            name="watch-pods",
        )
        self.jobs = WatchCache(
            KubeClient(credentials),
            kubeapi.JOBS.path(),
            {"labelSelector": mine},
            name="watch-jobs",
        )
        # The gang objects besides Jobs: those of the trace's kinds that hold themselves (a
        # JobSet), and the records muster keeps of pod groups (with admission muster: what it
        # decided of each is there).
        self.gang_objects = [
            WatchCache(KubeClient(credentials), path, params, name=name)
            for path, params, name in gang_object_watches(
                {group.kind for group in trace.jobs}, mine, admission
            )
        ]

    def run(self, clean_up: bool = True) -> EngineResult:
        """Replay the whole trace; its namespaces are deleted afterwards (so the next replay
        finds every node free) unless not ``clean_up`` (the cluster goes anyway)."""
        try:
            return self._run(clean_up)
        except BaseException:
            # On a cluster we did not bring up, leave none of the replay's objects behind.
            self.submitter.delete_namespaces()
            raise

    def _run(self, clean_up: bool) -> EngineResult:
        began = time.perf_counter()
        session = self.session
        cpu_before = self._cpu_seconds()
        writes_before = self._write_figures()
        self.submitter.create_namespaces()
        runner = GangRunner(
            KubeClient(self.client.credentials),
            None,
            selector=f"{SIM_RUN}={self.run_id}",
            live_only=True,
            on_start=self.timeline.run_started,
            patch_workers=8,
            job_lookup=lambda namespace, name: self.jobs_by_name.get((namespace, name)),
        )
        horizon_reached, end_wall = self._drive(runner)
        reasons = self._stuck_reasons(horizon_reached)
        muster = session.muster
        plan_calls, plan_seconds = muster.plan_figures() if muster is not None else (0, 0.0)
        self._warn_problems(runner)
        result = self.timeline.result(
            stuck_reasons=reasons,
            horizon_reached=horizon_reached,
            end_wall=end_wall,
            wall_seconds=time.perf_counter() - began,
            plan_calls=plan_calls,
            plan_seconds=plan_seconds,
        )
        cpu_after = self._cpu_seconds()
        for gone in sorted(set(cpu_before) - set(cpu_after)):
            session.log(f"warning: {gone} exited during the replay: its CPU is not counted")
        writes = difference(self._write_figures(), writes_before)
        if self.admission == "muster" and muster is not None:
            ended = sum(1 for r in result.gangs if r.state in (FINISHED, FAILED))
            muster.save_history(list(self.namespaces.values()), ended, self.settings, session.log)
        if self.admission == "external":
            result.controller = self.settings.external.name
        if clean_up:
            self.submitter.clean_up(session.log)
        session.figures[self.admission] = replay_figures(
            looks=self.looks,
            look_seconds=self.look_seconds,
            lags=self.timeline.lags,
            runs=runner.runs,
            second_wave_pods=sum(runner.stragglers.values()),
            latency=self.timeline.latency_figures(),
            wall_seconds=result.wall_seconds,
            cpu_before=cpu_before,
            cpu_after=cpu_after,
            writes=writes,
        )
        self._log_start_latency()
        return result

    def _drive(self, runner: GangRunner) -> tuple[bool, float]:
        """Start the watches, the gang runner, the reconcilers and the submitters, look until
        the replay is over, and stop them all; (horizon reached, wall end)."""
        submitter = self.submitter
        gang_runner = threading.Thread(target=self._run_gangs, args=(runner,), name="gang-runner")
        pool = ThreadPoolExecutor(self.settings.submitters, thread_name_prefix="submit")
        dispatcher = threading.Thread(target=submitter.dispatch, args=(pool,), name="dispatch")
        try:
            caches = [self.pods, self.jobs, *self.gang_objects]
            for cache in caches:
                cache.start()
            if not all(cache.wait_synced(60) for cache in caches):
                raise KwokError(
                    "cannot list the replay's pods and gang objects: "
                    + "; ".join(error for cache in caches for error in cache.errors[-1:])
                )
            gang_runner.start()
            submitter.start_reconcilers()
            # A short lead so the first submissions are not already late when the loop begins.
            self.timeline.start(time.time() + 0.2)
            dispatcher.start()
            return self._watch()
        finally:
            submitter.stop.set()
            if dispatcher.is_alive():
                dispatcher.join()
            pool.shutdown(wait=True, cancel_futures=True)
            if gang_runner.is_alive():
                gang_runner.join()
            runner.stop()
            runner.client.close()
            submitter.stop_reconcilers()
            self.pods.stop()
            self.jobs.stop()
            for cache in self.gang_objects:
                cache.stop()

    def _run_gangs(self, runner: GangRunner) -> None:
        """The gang runner, fed from the pod watch (no LIST of its own), every 50 ms or, when
        a pass over many pods takes longer, twice its cost (it shares two cores)."""
        pause = 0.05
        while not self.submitter.stop.wait(pause):
            began = time.perf_counter()
            try:
                self.jobs_by_name = {
                    ((j["metadata"].get("namespace") or ""), j["metadata"].get("name") or ""): j
                    for j in self.jobs.snapshot()
                }
                runner.observe(self.pods.snapshot())
            except (ApiError, OSError) as exc:
                runner.errors.append(str(exc))
            pause = max(0.05, 2 * (time.perf_counter() - began))

    def _watch(self) -> tuple[bool, float]:
        """Look until done, stalled or past the horizon; (horizon reached, wall end)."""
        timeline = self.timeline
        settings = self.settings
        submitter = self.submitter
        horizon_wall = timeline.wall_time(self.horizon)
        # An outside controller may wait out a long requeue backoff the engine cannot see.
        stall = settings.external.stall if self.admission == "external" else settings.stall
        last_change = time.time()
        while True:
            began = time.time()
            jobs, pods = self.jobs.snapshot(), self.pods.snapshot()
            for cache in self.gang_objects:
                jobs.extend(cache.snapshot())
            now = time.time()
            self.looks += 1
            self.look_seconds += now - began
            if timeline.observe(now, jobs, pods):
                last_change = now
            if not submitter.errors.empty():
                raise KwokError(submitter.errors.get())
            if self.session.muster is not None:
                self.session.muster.check_alive()
            self._show_progress(now)
            if timeline.finished():
                return False, now
            if now >= horizon_wall:
                return True, now
            if submitter.dispatched.is_set() and now - last_change >= stall and timeline.quiet(now):
                return False, now
            # A look over thousands of pods takes tens of ms of a shared core: at most a
            # quarter of one goes to looking.
            cost = time.time() - began
            time.sleep(max(settings.poll - cost, 3 * cost))

    def _show_progress(self, now: float) -> None:
        if self.progress is None:
            return
        timeline = self.timeline
        done, running, bound = timeline.counts()
        self.progress(
            Progress(
                self.admission,
                max(timeline.trace_time(now), timeline.origin),
                done,
                len(timeline.gangs),
                running,
                bound,
                self.looks,
            )
        )

    def _stuck_reasons(self, horizon_reached: bool) -> dict[int, str]:
        """Why muster did not admit each gang still pending, as its status service says."""
        reasons: dict[int, str] = {}
        muster = self.session.muster
        if self.admission != "muster" or muster is None:
            return reasons
        for record in self.timeline.pending():
            namespace, name = record.gang.id.split("/", 1)
            reason = muster.gang_reason(self.namespaces[namespace], name)
            if reason is not None:
                when = "at the horizon" if horizon_reached else "with nothing left to change"
                reasons[record.index] = (
                    reason if reason.startswith("rejected:") else f"{reason} ({when})"
                )
        return reasons

    # -- figures and warnings -------------------------------------------------------

    def _cpu_seconds(self) -> dict[str, float]:
        session = self.session
        return cpu_seconds(session.muster, session.controllers, session.cluster)

    def _write_figures(self) -> dict[str, float]:
        muster = self.session.muster
        return muster.write_figures() if muster is not None else {}

    def _warn_problems(self, runner: GangRunner) -> None:
        """Log the first errors of the runner, reconcilers and watches, and any second wave."""
        problems = [
            *runner.errors[:3],
            *(e for r in self.submitter.reconcilers.values() for e in r.errors[:3]),
            *self.pods.errors[:3],
            *self.jobs.errors[:3],
            *(e for cache in self.gang_objects for e in cache.errors[:3]),
        ]
        if runner.stragglers:
            waves = ", ".join(
                f"{ns}/{gang} ({n})" for (ns, gang), n in sorted(runner.stragglers.items())[:3]
            )
            problems.append(
                f"{sum(runner.stragglers.values())} pods of {len(runner.stragglers)} gangs "
                "started after their gang's run was over (a second wave; given the runtime at "
                f"once): {waves}"
            )
        for problem in problems:
            self.session.log(f"warning: {problem}")

    def _log_start_latency(self) -> None:
        """Say how long admitted gangs took to run, in wall and in trace time."""
        started = self.timeline.latency_figures().get("admitted_to_started")
        if started is not None:
            in_trace = started["p50"] * self.settings.time_scale
            self.session.log(
                f"kwok engine: gangs ran {started['p50']:.1f}s (median; p95 {started['p95']:.1f}s)"
                f" of wall time after their admission, {in_trace:.0f}s of trace time at "
                f"--time-scale {self.settings.time_scale:g} (the in-process engine models "
                f"{self.trace.pod_start_delay:g}s): waits and makespan include it; a smaller "
                "--time-scale weighs it less (docs/simulator.md, 'The kwok engine')"
            )
