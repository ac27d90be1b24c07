"""The ports we choose for a process to bind a moment later come from below the kernel's
ephemeral range, where no outgoing connection's source port can take them first."""

from __future__ import annotations

import socket
from pathlib import Path

from userland.local.controlplane import free_port


def test_a_chosen_port_is_below_the_ephemeral_range_and_can_be_bound() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(50)}
    assert all(10000 <= port < low for port in ports), ports
    assert len(ports) > 40  # chosen at random: parallel choosers rarely meet
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports.pop()))


def test_a_port_in_use_is_never_chosen(tmp_path: Path) -> None:
    # 1,000 ports to choose from, the one just below the range taken.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        machine = tmp_path / "ip_local_port_range"
        machine.write_text(f"{port + 1} 60999\n")
        chosen = {free_port(machine, lowest=port - 999) for _ in range(300)}
    assert port not in chosen
    assert all(port - 999 <= p < port for p in chosen), chosen


def test_a_machine_whose_ephemeral_range_starts_low_gets_the_kernels_choice(tmp_path: Path) -> None:
    machine = tmp_path / "ip_local_port_range"
    machine.write_text("1024 65535\n")
    port = free_port(machine)
    assert port >= 1024
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
