"""Network addresses as the services read them: loopback or not, the client behind trusted
reverse proxies, and `host:port` listen addresses. Pure."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable


def is_loopback_host(host: str) -> bool:
    """Whether a listen address or client address is loopback only (`localhost` counts)."""
    host = host.strip().strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip().strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def client_address(peer: str, forwarded_for: Iterable[str], trusted: Iterable[str]) -> str:
    """The client's address: the TCP peer, unless the peer is a trusted proxy (`trusted`, CIDRs):
    then the rightmost address in `X-Forwarded-For` that is not itself a trusted proxy (what
    the proxy nearest to us saw; anything left of it the client may have written itself)."""
    networks = [ipaddress.ip_network(t, strict=False) for t in trusted]

    def is_trusted(addr: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> bool:
        return addr is not None and any(addr in net for net in networks)

    if not networks or not is_trusted(_address(peer)):
        return peer
    hops = [h.strip() for value in forwarded_for for h in value.split(",") if h.strip()]
    for hop in reversed(hops):
        addr = _address(hop)
        if addr is None:
            return peer  # a malformed entry: stop trusting the list there
        if not is_trusted(addr):
            return str(addr)
    return peer


def split_listen(text: str) -> tuple[str, int]:
    """`host:port` (`[::]:8081` for IPv6) as (host, port); ValueError when it is not one."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r}: use host:port, such as 0.0.0.0:8081")
    return host.strip("[]") or "0.0.0.0", int(port)
