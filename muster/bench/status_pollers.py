"""The client side of `muster bench status`, run in a process of its own: many long-polling
clients of the status service, each following the stdlib snippet of docs/metrics.md.

Each poller waits for one gang: `GET /v1/gangs/NS/NAME?wait=W&since=V`, then again with V = the
answer's `version`, until its gang is Running, Finished or Failed (as the snippet stops) or gone
(404: the bench deleted it; the snippet would retry, this poller's job is done). One request per
connection, as the server answers (`Connection: close`), on asyncio streams: a thousand pollers
are a thousand coroutines here, not a thousand threads on a 2-core machine.

The protocol with the bench, one JSON object a line. stdin: first the configuration
`{"url", "gangs", "wait", "ramp", "probe_gangs", "tokens"}` (`tokens`: bearer tokens, poller i
sends the i-th, round robin; none: no Authorization header), then commands `{"cmd": "probe",
"count": K, "over": SECONDS}` (K GETs without `wait` of random gangs of `probe_gangs`, one after
another, spread over SECONDS: the answer latency while the pollers hold) and `{"cmd": "stop"}`.
stdout: `{"event": "holding", "pollers": N}` once every poller has sent its first held request;
`{"event": "wake", ...}` for each held request answered with a new version (or 404), with the
answer's `time.monotonic()` (one clock for every process on Linux, so the bench can subtract
the time it changed the gang); `{"event": "probed", "latencies": [...]}`; and at the stop
`{"event": "done", "first_answers": [...], ...}`. Latencies are in seconds, end to end: connect,
request, the whole answer read.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

DONE_STATES = ("Running", "Finished", "Failed")


@dataclass
class Answer:
    status: int
    body: dict[str, Any]


@dataclass
class Tally:
    """What the pollers saw, for the `done` line."""

    first_answers: list[float] = field(default_factory=list)
    timeouts: int = 0
    """Held requests answered after the whole `wait` with the version they were sent with."""
    errors: dict[str, int] = field(default_factory=dict)
    sent_held: int = 0
    finished: int = 0

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


async def get(host: str, port: int, target: str, timeout: float, token: str | None) -> Answer:
    """One GET on a fresh connection (with `Authorization: Bearer token`, if any), read to the
    server's close."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    authorization = f"Authorization: Bearer {token}\r\n" if token else ""
    try:
        writer.write(
            f"GET {target} HTTP/1.1\r\nHost: {host}\r\n{authorization}"
            "Connection: close\r\n\r\n".encode()
        )
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head else 0
    try:
        body = json.loads(payload) if payload else {}
    except ValueError:
        body = {}
    return Answer(status, body if isinstance(body, dict) else {})


def emit(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


class Pollers:
    def __init__(self, config: dict[str, Any]) -> None:
        url = urlsplit(str(config["url"]))
        self.host = url.hostname or "127.0.0.1"
        self.port = int(url.port or 80)
        self.gangs: list[str] = list(config["gangs"])
        self.wait = float(config["wait"])
        self.ramp = float(config["ramp"])
        self.probe_gangs: list[str] = list(config.get("probe_gangs") or self.gangs)
        self.tokens: list[str] = list(config.get("tokens") or [])
        self.tally = Tally()
        self.holding = 0
        self._announced = False

    @staticmethod
    def path(gang: str) -> str:
        namespace, name = gang.split("/", 1)
        return f"/v1/gangs/{quote(namespace)}/{quote(name)}"

    def _held(self) -> None:
        self.holding += 1
        self.tally.sent_held += 1
        if not self._announced and self.holding >= len(self.gangs):
            self._announced = True
            emit({"event": "holding", "pollers": self.holding})

    def token(self, i: int) -> str | None:
        """The bearer token of client `i` (each pod has its own), or None: no auth."""
        return self.tokens[i % len(self.tokens)] if self.tokens else None

    async def poll(self, i: int, gang: str, delay: float) -> None:
        """The snippet's loop for one gang, as client `i`."""
        await asyncio.sleep(delay)
        token = self.token(i)
        version = 0
        first = True
        timeout = self.wait + 30
        while True:
            held = not first
            if held:
                self._held()
            began = time.monotonic()
            try:
                answer = await get(
                    self.host, self.port, f"{self.path(gang)}?wait={self.wait:g}&since={version}",
                    timeout, token,
                )  # fmt: skip
            except (OSError, TimeoutError) as exc:
                if held:
                    self.holding -= 1
                self.tally.error(type(exc).__name__)
                await asyncio.sleep(1)
                continue
            answered = time.monotonic()
            if held:
                self.holding -= 1
            if first:
                self.tally.first_answers.append(answered - began)
                first = False
            new = answer.body.get("version")
            if answer.status == 503:
                self.tally.error("503")
                await asyncio.sleep(1)
                continue
            if answer.status not in (200, 404):
                self.tally.error(str(answer.status))
                await asyncio.sleep(1)
                continue
            if held and answer.status == 200 and new == version:
                self.tally.timeouts += 1
                continue
            if held:
                emit(
                    {
                        "event": "wake",
                        "gang": gang,
                        "t": answered,
                        "held_s": answered - began,
                        "status": answer.status,
                        "state": answer.body.get("state"),
                        "version": new,
                    }
                )
            if answer.status == 404 or answer.body.get("state") in DONE_STATES:
                self.tally.finished += 1
                return
            version = int(new or 0)

    async def probe(self, count: int, over: float) -> list[float]:
        """`count` GETs without `wait` of random gangs, one after another, spread over `over`
        seconds."""
        rng = random.Random(count)
        latencies: list[float] = []
        start = time.monotonic()
        for i in range(count):
            slot = start + over * i / max(count, 1)
            pause = slot - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            began = time.monotonic()
            try:
                answer = await get(
                    self.host,
                    self.port,
                    self.path(rng.choice(self.probe_gangs)),
                    30,
                    self.token(rng.randrange(len(self.tokens) or 1)),
                )
            except (OSError, TimeoutError) as exc:
                self.tally.error(f"probe {type(exc).__name__}")
                continue
            if answer.status != 200:
                self.tally.error(f"probe {answer.status}")
                continue
            latencies.append(time.monotonic() - began)
        return latencies


async def main_async() -> int:
    loop = asyncio.get_running_loop()
    commands = asyncio.StreamReader(limit=1 << 26)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
    config = json.loads(await commands.readline())
    pollers = Pollers(config)
    count = len(pollers.gangs)
    tasks = [
        asyncio.create_task(pollers.poll(i, gang, pollers.ramp * i / max(count, 1)))
        for i, gang in enumerate(pollers.gangs)
    ]
    while line := await commands.readline():
        command = json.loads(line)
        if command["cmd"] == "probe":
            latencies = await pollers.probe(int(command["count"]), float(command["over"]))
            emit({"event": "probed", "latencies": latencies})
        elif command["cmd"] == "stop":
            break
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    tally = pollers.tally
    emit(
        {
            "event": "done",
            "first_answers": tally.first_answers,
            "timeouts": tally.timeouts,
            "errors": tally.errors,
            "sent_held": tally.sent_held,
            "finished": tally.finished,
            "cpu_s": time.process_time(),
        }
    )
    return 0


def main() -> int:
    return asyncio.run(main_async())


if __name__ == "__main__":
    sys.exit(main())
