"""Free loopback ports: tests never use fixed ports, so parallel runs never clash. The one
choice of the project (local/ports.py: below the kernel's ephemeral range, never
handed out twice at once)."""

from __future__ import annotations

from userland.local.ports import free_port

__all__ = ["free_port"]
