"""The muster a kwok replay runs through: `muster run --local` (webhook + controller) started
for the replay and stopped after it, and what the replay asks it: whether it still runs, its
admit cycles and API writes (its metrics), why a gang waits and the replay's history (its
status service).
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from admission.launcher import LaunchError, MusterRun, launch
from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from policies.history import to_csv
from policies.topology import NO_TOPOLOGY, Topology
from simulator.controlplane.cluster import controller_kubeconfig
from simulator.kwok_settings import KwokError, KwokSettings, Log
from webhook.configuration import NAME as WEBHOOK_CONFIGURATION

WEBHOOK_CONFIG: Final = kubeapi.WEBHOOK_CONFIGURATIONS.path(name=WEBHOOK_CONFIGURATION)


class KwokMuster:
    """One running `muster run --local`, and the figures and reasons the replay reads from it."""

    def __init__(self, run: MusterRun) -> None:
        self.run = run

    @classmethod
    def start(
        cls,
        client: KubeClient,
        kubeconfig: Path,
        settings: KwokSettings,
        log: Log,
        topology: Topology = NO_TOPOLOGY,
        device_flags: tuple[str, ...] = (),
    ) -> KwokMuster:
        """Start muster against the cluster, its log in the output folder, with the trace's
        ``topology`` levels; refused when a muster webhook is registered already (two would
        fight over the cluster)."""
        try:
            client.get(WEBHOOK_CONFIG)
        except ApiError as exc:
            if exc.status != 404:
                raise
        else:
            raise KwokError(
                "a muster webhook is already registered on this cluster (another `muster run`?): "
                "stop it, or pass --external-muster to replay through it"
            )
        out = settings.out_dir or Path(".")
        out.mkdir(parents=True, exist_ok=True)
        log_path = out / "muster-run.log"
        log_path.write_text("", encoding="utf-8")
        log("kwok engine: starting muster (webhook + controller)")
        try:
            # Its own session: Ctrl-C reaches only us, and we stop it in order.
            run = launch(
                controller_kubeconfig(kubeconfig),
                "--no-admit-events",
                "--policy",
                settings.policy,
                *topology_flags(topology),
                *device_flags,
                *settings.muster_args,
                timeout=120,
                log_path=log_path,
                keep_lines=200,
                new_session=True,
            )
        except LaunchError as exc:
            raise KwokError(f"{exc}\n(its log: {log_path})") from exc
        return cls(run)

    @property
    def pid(self) -> int:
        return self.run.proc.pid

    def stop(self, client: KubeClient | None) -> None:
        if self.run.stop(timeout=30) and client is not None:
            # Killed before its cleanup: its webhook configuration would refuse every
            # labelled create on this cluster from now on.
            with contextlib.suppress(ApiError, OSError):
                client.delete(WEBHOOK_CONFIG)

    def check_alive(self) -> None:
        """Raise if muster exited during the replay, with the end of its log."""
        run = self.run
        if run.proc.poll() is not None:
            raise KwokError(
                f"muster run --local exited ({run.proc.returncode}) during the replay; its log "
                f"{run.log_path}:\n{run.tail(15)}"
            )

    # ------------------------------------------------------------------ its metrics

    def _metrics(self) -> str:
        """muster's metrics text ("" when it does not answer)."""
        if self.run.metrics_url is None:
            return ""
        try:
            with urllib.request.urlopen(f"{self.run.metrics_url}/metrics", timeout=5) as response:
                return str(response.read().decode())
        except (OSError, urllib.error.URLError):
            return ""

    def write_figures(self) -> dict[str, float]:
        """muster's API writes so far by kind (`muster_api_writes_total`), and its admissions
        (`admitted`): the replay's writes per admitted gang are the difference of two."""
        figures = self.run.api_figures()
        out = {k.removeprefix("writes:"): v for k, v in figures.items() if k.startswith("writes:")}
        if "admitted" in figures:
            out["admitted"] = figures["admitted"]
        return out

    def plan_figures(self) -> tuple[int, float]:
        """(admit cycles, seconds in them) from muster's metrics."""
        text = self._metrics()
        if not text:
            return 0, 0.0
        count, total = 0, 0.0
        for line in text.splitlines():
            if line.startswith("muster_plan_cycle_duration_seconds_count"):
                count = int(float(line.rsplit(" ", 1)[1]))
            elif line.startswith("muster_plan_cycle_duration_seconds_sum"):
                total = float(line.rsplit(" ", 1)[1])
        return count, total

    # ------------------------------------------------------------------ its status service

    def gang_reason(self, namespace: str, name: str) -> str | None:
        """Why muster does not admit a gang, from its status service ("rejected: ..." when the
        planner can never admit it)."""
        if self.run.status_url is None:
            return None
        url = f"{self.run.status_url}/v1/gangs/{namespace}/{name}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = json.load(response)
        except (OSError, urllib.error.URLError, ValueError):
            return None
        reason = body.get("reason") or {}
        if not reason:
            return None
        text = f"{reason.get('code')}: {reason.get('message')}"
        return f"rejected: {text}" if body.get("rejected") else text

    def save_history(
        self, namespaces: Sequence[str], expected: int, settings: KwokSettings, log: Log
    ) -> Path | None:
        """Write muster's history of this replay's gangs (`/v1/history`, as `muster history -o
        csv` prints it) to history.csv in the output folder; wall-clock seconds, so
        `muster sim TRACE --jobs-csv history.csv --csv-time-scale X` replays it in trace time.

        Waits (10 s at most) until the controller holds `expected` rows: it may see the last
        Jobs end a moment after the engine did."""
        status_url = self.run.status_url
        if status_url is None or settings.out_dir is None:
            return None
        prefixes = tuple(f"{namespace}/" for namespace in namespaces)
        rows: list[dict[str, Any]] = []
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(f"{status_url}/v1/history", timeout=30) as r:
                    body = json.load(r)
            except (OSError, urllib.error.URLError, ValueError) as exc:
                log(f"warning: cannot read muster's history: {exc}")
                return None
            rows = [g for g in body.get("gangs") or [] if str(g.get("gang")).startswith(prefixes)]
            if len(rows) >= expected or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        path = settings.out_dir / "history.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(to_csv(rows), encoding="utf-8")
        log(
            f"kwok engine: muster's history of {len(rows)} gangs in {path} (wall seconds; "
            f"replay it in-process with --jobs-csv {path} --csv-time-scale "
            f"{settings.time_scale:g})"
        )
        return path


def topology_flags(topology: Topology) -> tuple[str, ...]:
    """`muster run`'s flags for the trace's topology levels (none without levels)."""
    return ("--topology-levels", ",".join(topology.levels)) if topology.levels else ()
