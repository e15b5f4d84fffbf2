"""Ports for muster's servers come from below the kernel's ephemeral range (kubeport.listenports):
an outgoing connection can then never hold the port of a server restarted in place."""

from __future__ import annotations

import socket
from pathlib import Path

from kubeport.listenports import LOWEST, ephemeral_range, listen_ports


def test_ports_are_distinct_free_and_below_the_ephemeral_range() -> None:
    low, _ = ephemeral_range()
    ports = listen_ports(6)
    assert len(set(ports)) == 6
    if low > LOWEST + 6:
        assert all(LOWEST <= p < low for p in ports), ports
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free for its server


def free_pair() -> int:
    """A port q at or above LOWEST with q and q + 1 both free now."""
    for q in range(LOWEST, LOWEST + 2000):
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", q))
                b.bind(("127.0.0.1", q + 1))
        except OSError:
            continue
        return q
    raise AssertionError("no two free ports in a row above LOWEST")


def test_a_port_in_use_is_not_picked() -> None:
    q = free_pair()
    with socket.socket() as held:
        held.bind(("127.0.0.1", q))
        held.listen()
        # The only candidates are q (held) and q + 1.
        assert listen_ports(1, ephemeral=(q + 2, 60999), lowest=q) == [q + 1]
        # Asked for more than the room below the range: the rest are the kernel's picks.
        more = listen_ports(2, ephemeral=(q + 2, 60999), lowest=q)
        assert more[0] == q + 1 and more[1] not in (q, q + 1)


def test_without_room_below_the_range_the_kernel_picks() -> None:
    assert listen_ports(2, ephemeral=(LOWEST, 60999))[0] > 0
    assert len(set(listen_ports(3, ephemeral=(LOWEST, 60999)))) == 3


def test_the_range_is_read_from_the_kernel_file_or_defaults(tmp_path: Path) -> None:
    good = tmp_path / "range"
    good.write_text("20000\t40000\n")
    assert ephemeral_range(good) == (20000, 40000)
    assert ephemeral_range(tmp_path / "missing") == (32768, 60999)
    bad = tmp_path / "bad"
    bad.write_text("nonsense")
    assert ephemeral_range(bad) == (32768, 60999)
