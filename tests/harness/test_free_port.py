"""The harness's server ports: outside the kernel's ephemeral range, never handed out twice."""

from __future__ import annotations

import socket

from harness.cluster import EPHEMERAL_RANGE, LOOPBACK, free_port, listen_ports


def test_server_ports_are_picked_outside_the_ephemeral_range():
    assert listen_ports((32768, 60999)) == range(10000, 32768)  # Linux's default: below it
    assert listen_ports((11000, 60999)) == range(61000, 65536)  # too little room below: above it


def test_a_port_is_free_when_handed_out_and_never_handed_out_twice():
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    low, high = (int(v) for v in EPHEMERAL_RANGE.read_text().split())
    assert all(p in listen_ports((low, high)) for p in ports)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, ports[-1]))  # still free: nothing of ours bound it
