"""Ports for the servers muster starts on loopback (the local control plane's components, the
operators, `muster run`'s services), picked OUTSIDE the kernel's ephemeral range.

A port the kernel picks for `bind(0)` comes from the same range it gives every outgoing
connection its local port from. A server restarted on its old port (a control-plane component
or an operator killed -9 and started again with the same command line, as the fault tests and a
supervisor do) then races every client on the machine for it: CI saw jobset-controller's health
port taken by an outgoing connection in the moment it was down ("bind: address already in
use"). Below the ephemeral range no connection is ever given a port, so a port free when picked
stays free for its server unless another server takes it on purpose."""

from __future__ import annotations

import random
import socket
from pathlib import Path
from typing import Final

LOOPBACK: Final = "127.0.0.1"
LOWEST: Final = 10000
"""Below it, ports of well-known services (and of other tools' defaults) are left alone."""
EPHEMERAL_FILE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
FALLBACK_EPHEMERAL: Final = (32768, 60999)
"""Linux's default range, when the file cannot be read."""


def ephemeral_range(path: Path = EPHEMERAL_FILE) -> tuple[int, int]:
    """The kernel's range of local ports for outgoing connections (and for `bind(0)`)."""
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return FALLBACK_EPHEMERAL
    return low, high


def listen_ports(
    count: int,
    addr: str = LOOPBACK,
    ephemeral: tuple[int, int] | None = None,
    lowest: int = LOWEST,
) -> list[int]:
    """``count`` distinct ports on ``addr`` that nothing is bound to now, below the ephemeral
    range when it leaves room (in random order, so that two pickers seldom meet); held open
    together while picked. Where the range leaves no room below it, the kernel's pick."""
    low, _ = ephemeral if ephemeral is not None else ephemeral_range()
    candidates = list(range(lowest, low))
    random.shuffle(candidates)
    socks: list[socket.socket] = []
    try:
        for port in candidates:
            if len(socks) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((addr, port))
            except OSError:
                sock.close()
                continue
            socks.append(sock)
        while len(socks) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((addr, 0))
            socks.append(sock)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()


def listen_port(addr: str = LOOPBACK) -> int:
    """One port for a server on ``addr`` (see `listen_ports`)."""
    return listen_ports(1, addr)[0]
