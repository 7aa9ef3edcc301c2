"""Ports for servers the tests and benches stop and start again (ops.processes.free_server_port)."""
from __future__ import annotations

import socket

import pytest

from ops import processes


def test_a_server_port_lies_below_the_ephemeral_range_and_its_neighbours_are_free():
    low, high = processes.ephemeral_ports()
    assert 1024 <= low < high
    for _ in range(20):
        first = processes.free_server_port(8)
        assert 10000 <= first and first + 8 <= low  # never an outgoing connection's local port
        for port in range(first, first + 8):
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))  # free: binds without SO_REUSEADDR


def test_a_taken_port_is_never_offered(monkeypatch):
    # the held port and its neighbour come from below the ephemeral range: a port the OS picks
    # (bind to 0) may have a neighbour that a busy machine's outgoing connection holds
    taken = processes.free_server_port(2)
    with socket.socket() as held:
        held.bind(("127.0.0.1", taken))
        held.listen()
        monkeypatch.setattr(processes, "ephemeral_ports", lambda: (taken + 1, taken + 100))
        # the only range left holds the taken port: every try fails, and it says so
        with pytest.raises(OSError, match="no 1 consecutive free port"):
            processes.free_server_port(1, lowest=taken)
        monkeypatch.setattr(processes, "ephemeral_ports", lambda: (taken + 2, taken + 100))
        assert processes.free_server_port(1, lowest=taken) == taken + 1
