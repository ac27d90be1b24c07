"""Free loopback ports: tests never use fixed ports, so parallel runs never clash. The one
choice of the project (below the kernel's ephemeral range: local/controlplane.py)."""

from __future__ import annotations

from userland.local.controlplane import free_port

__all__ = ["free_port"]
