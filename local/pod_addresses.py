"""Loopback addresses for the local runner's Pods: one each (Linux routes all of 127.0.0.0/8 to
lo), from a /16 block of 127.64.0.0/10 that each runner picks for itself where nothing listens."""

from __future__ import annotations

import contextlib
import ipaddress
import random
from collections.abc import Iterable
from pathlib import Path

from userland.local.sockets import listening_sockets
from userland.platform.clients.informer import Key

# The range the blocks come from (free_block).
ADDRESS_BLOCKS = ipaddress.IPv4Network("127.64.0.0/10")


class AddressPool:
    """Loopback addresses for Pods from one block; an address is given back when its Pod is gone."""

    def __init__(self, network: ipaddress.IPv4Network) -> None:
        self.network = network
        self._free = (str(a) for a in network.hosts())
        self._returned: list[str] = []
        self.taken: dict[Key, str] = {}

    def take(self, key: Key) -> str:
        if key not in self.taken:
            self.taken[key] = self._returned.pop(0) if self._returned else next(self._free)
        return self.taken[key]

    def give_back(self, key: Key) -> None:
        address = self.taken.pop(key, None)
        if address is not None:
            self._returned.append(address)


def free_block(listening: Iterable[str], rng: random.Random | None = None) -> ipaddress.IPv4Network:
    """A /16 of ADDRESS_BLOCKS (127.64.0.0/10) in which nothing on this machine listens, chosen
    at random: two `userland local`s (or one and the tests) never hand out the same addresses."""
    used = {ipaddress.IPv4Address(a) for a in listening if "." in a}
    blocks = [b for b in ADDRESS_BLOCKS.subnets(new_prefix=16) if not any(a in b for a in used)]
    if not blocks:
        raise RuntimeError("every 127.64.0.0/10 block has listeners: too many local runners on this machine")
    return (rng or random.Random()).choice(blocks)


def listening_addresses(proc: Path = Path("/proc")) -> set[str]:
    found: set[str] = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            found |= {s.address for s in listening_sockets((proc / "net" / table).read_text())}
    return found
