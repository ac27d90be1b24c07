"""Which addresses a local environment listens on, from /proc, so the runner can refuse one
that would be reachable beyond loopback (a student's IDE on the campus network, around the
gateway). Address rewriting (podplan.py) covers what a Template says; this covers what a
program does by itself (a default of 0.0.0.0, a bind in a script the runner cannot read).

`listening_sockets` parses /proc/net/tcp and tcp6 (pure, tested with captured text);
`session_listeners` finds the listening sockets of every process in a session (each
container's process starts a session of its own, so its children and daemons are included).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

_LISTEN = "0A"


@dataclass(frozen=True)
class Listener:
    address: str
    port: int
    inode: int

    @property
    def loopback_only(self) -> bool:
        return ipaddress.ip_address(self.address).is_loopback

    def __str__(self) -> str:
        return f"[{self.address}]:{self.port}" if ":" in self.address else f"{self.address}:{self.port}"


def _address(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    # tcp6: four 32-bit words, each in host (little-endian) order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    v6 = ipaddress.IPv6Address(words)
    return str(v6.ipv4_mapped) if v6.ipv4_mapped is not None else str(v6)


def listening_sockets(proc_net_text: str) -> list[Listener]:
    """The LISTEN sockets in the text of /proc/net/tcp or /proc/net/tcp6."""
    found = []
    for line in proc_net_text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != _LISTEN:
            continue
        host, _, port = fields[1].partition(":")
        found.append(Listener(_address(host), int(port, 16), int(fields[9])))
    return found


def _session_of(stat: str) -> int | None:
    # /proc/PID/stat: "pid (comm) state ppid pgrp session ..."; comm may hold spaces and ')'.
    try:
        return int(stat[stat.rindex(")") + 2 :].split()[3])
    except (ValueError, IndexError):
        return None


def session_pids(session: int, proc: Path = Path("/proc")) -> list[int]:
    pids = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        if _session_of(stat) == session:
            pids.append(int(entry.name))
    return pids


def socket_inodes(pid: int, proc: Path = Path("/proc")) -> set[int]:
    inodes: set[int] = set()
    try:
        entries = list((proc / str(pid) / "fd").iterdir())
    except OSError:
        return inodes
    for fd in entries:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def session_listeners(session: int, proc: Path = Path("/proc")) -> list[Listener]:
    """The listening TCP sockets held by any process of `session`."""
    inodes: set[int] = set()
    for pid in session_pids(session, proc):
        inodes |= socket_inodes(pid, proc)
    if not inodes:
        return []
    listeners = []
    for table in ("tcp", "tcp6"):
        try:
            text = (proc / "net" / table).read_text()
        except OSError:
            continue
        listeners += [s for s in listening_sockets(text) if s.inode in inodes]
    return listeners
