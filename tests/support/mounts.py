"""A small file system of its own (a tmpfs, mounted as root): a volume that fills up."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def small_volume(where: Path, size: str = "96k") -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                             capture_output=True, text=True, check=False)
    assert mounted.returncode == 0, f"needs root to mount a small tmpfs: {mounted.stderr}"
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)
