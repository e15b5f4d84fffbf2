"""The kwok engine: replays a trace on a real local control plane with kwok nodes.

Where the in-process engine models the cluster, this one drives it: etcd, kube-apiserver,
kube-controller-manager (the Job controller), kube-scheduler and kwok, with muster's real
webhook and controller (`muster run --local`, a subprocess) in front. For one `replay`:

1. a session (`simulator.kwok_session`): a control plane (the one `--kubeconfig` names, or a
   `LocalCluster` brought up for the replay and taken down after it); the trace's node groups
   as kwok nodes (allocatable, labels, taints as the trace says), muster's CRDs and the
   MiniCluster CRD (the Flux Operator's from ../shared/crds beside the repository, else
   muster's stand-in: `minicluster_crd`), the trace's queues as Queue objects (durations
   compressed by the time scale), and muster (`simulator.kwok_muster`, unless one is running
   already: `external_muster`);
2. per admission (`none`, then `muster`, or `external`), one replay (`simulator.kwok_replay`):
   fresh namespaces and each gang's object at its trace time ÷ time scale
   (`simulator.kwok_submit`), the gang runner, and a loop that records what it sees
   (`simulator.kwok_timeline`);
3. everything it started is stopped and everything it created is deleted, also on Ctrl-C.

The result of each admission is an `EngineResult` like the in-process engine's, in trace time,
so `simulator.report` writes the same outputs. The options are `simulator.kwok_settings`'s.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from simulator.controlplane.build import Binaries
from simulator.kwok_devices import refuse as refuse_devices
from simulator.kwok_replay import Replay
from simulator.kwok_session import KwokSession, not_built
from simulator.kwok_settings import (
    KwokError,
    KwokSettings,
    Log,
    ProgressFn,
    check_trace,
    refuse_pod_sets,
)
from simulator.records import Admission, EngineResult
from simulator.trace import Trace


def replay(
    trace: Trace,
    admissions: Sequence[Admission],
    settings: KwokSettings,
    *,
    log: Log = lambda message: print(message, file=sys.stderr, flush=True),
    progress: Callable[[Admission], contextlib.AbstractContextManager[ProgressFn | None]]
    | None = None,
    figures: dict[str, dict[str, Any]] | None = None,
) -> list[EngineResult]:
    """Replay the trace on kwok once per admission (in the order given); tear down after.

    `figures`, if given, receives per admission the replay's own figures (looks at the cluster,
    submission lag, gang runs, wall time)."""
    # A trace no cluster replays is refused before anything else, even unbuilt binaries.
    refuse_pod_sets(trace, admissions)
    refuse_devices(trace)
    missing = Binaries.at().missing() if settings.kubeconfig is None else []
    if missing:
        # Before anything else is said: nothing else matters until they are built.
        raise KwokError(not_built(missing))
    check_trace(trace, settings, log)
    results: list[EngineResult] = []
    with KwokSession(trace, settings, log, admissions) as session:
        for i, admission in enumerate(admissions):
            with progress(admission) if progress else _no_progress() as show:
                session.prepare(admission)
                # The last replay on a cluster that is about to go leaves its namespaces.
                last = i == len(admissions) - 1
                clean_up = not (last and session.discards_cluster)
                results.append(Replay(session, admission, show).run(clean_up=clean_up))
            if figures is not None:
                figures.update(session.figures)
    return results


@contextlib.contextmanager
def _no_progress() -> Iterator[ProgressFn | None]:
    yield None
