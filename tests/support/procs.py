"""Processes seen from a test, read from /proc: a process may end between any two reads, so every
read here treats "gone" (no file, or ESRCH while reading it) as an answer, never as an error."""

from __future__ import annotations


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/`pid`/stat after the command name (state first), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(") ", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        # ProcessLookupError: the file opened, then the process was reaped before read().
        return None


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie has ended: only its parent has not yet read its status)."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"
