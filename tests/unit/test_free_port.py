"""The ports we choose for a process to bind a moment later come from below the kernel's
ephemeral range, where no outgoing connection's source port can take them first, and no two
choosers on the machine get the same one before it is bound (local/ports.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from userland.local.ports import RESERVED_SECONDS, free_port


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
        chosen = {free_port(machine, lowest=port - 999, reservations=tmp_path / "held") for _ in range(300)}
    assert port not in chosen
    assert all(port - 999 <= p < port for p in chosen), chosen


def test_a_machine_whose_ephemeral_range_starts_low_gets_the_kernels_choice(tmp_path: Path) -> None:
    machine = tmp_path / "ip_local_port_range"
    machine.write_text("1024 65535\n")
    port = free_port(machine)
    assert port >= 1024
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def _choose(machine: Path, lowest: int, held: Path, count: int) -> list[int]:
    return [free_port(machine, lowest=lowest, reservations=held) for _ in range(count)]


def test_no_two_choosers_get_one_port_before_it_is_bound(tmp_path: Path) -> None:
    # 1,000 ports, nothing bound between the choices (a child takes a second or two to bind):
    # 300 choices at random would meet many times over; reserved, never.
    machine = tmp_path / "ip_local_port_range"
    machine.write_text("31000 60999\n")
    held = tmp_path / "held"
    assert len(set(_choose(machine, 30000, held, 300))) == 300
    # Other processes (parallel test workers, `userland local`) choosing at the same moment.
    program = ("import sys; from pathlib import Path; from userland.local.ports import free_port\n"
               f"print(*(free_port(Path({str(machine)!r}), lowest=30000, reservations=Path({str(held)!r}))"
               " for _ in range(150)))")
    workers = [subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True)
               for _ in range(3)]
    outputs = [worker.communicate(timeout=60)[0] for worker in workers]
    assert all(worker.returncode == 0 for worker in workers), outputs
    theirs = [int(port) for output in outputs for port in output.split()]
    assert len(theirs) == 450
    assert len(set(theirs)) == 450, "two processes got one port"
    assert not set(theirs) & set(int(line.split()[0]) for line in held.read_text().splitlines()[:300])


def test_a_reservation_ends(tmp_path: Path) -> None:
    machine = tmp_path / "ip_local_port_range"
    machine.write_text("31000 60999\n")
    held = tmp_path / "held"
    # Every port of a 1,000-port range handed out long ago: all of them can be chosen again.
    long_ago = time.time() - RESERVED_SECONDS - 1
    held.write_text("".join(f"{port} {long_ago}\n" for port in range(30000, 31000)))
    port = free_port(machine, lowest=30000, reservations=held)
    assert 30000 <= port < 31000
    assert held.read_text().split() == [str(port), held.read_text().split()[1]]  # the old ones gone
    # Every port handed out just now: none is free for 5 minutes, so the kernel chooses.
    held.write_text("".join(f"{port} {time.time()}\n" for port in range(30000, 31000)))
    assert not 30000 <= free_port(machine, lowest=30000, reservations=held) < 31000
