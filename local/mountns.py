"""A Pod's own view of its home folders: its volumes mounted at the paths its Template names.

In a cluster a student's VS Code opens `/home/coder` (its volume's mount path), and that is what
the student sees in the address bar (`?folder=/home/coder`), the explorer and the terminal. The
local runner has no containers: it used to rewrite every mount path to the volume's folder on
this machine, so VS Code opened `?folder=/…/.run/environments/volumes/…`, the host's path.

When the runner runs as root (as `make run` does on a developer's container or CI) and the
kernel lets it make a mount namespace, each container's process gets one of its own (`unshare`
of the mount table only: network, users and processes are shared as before): a private tmpfs
over /home (nothing of this machine's /home is visible in it, as in a container), each volume
mounted under /home bind-mounted at its mount path, then the process drops to the environments'
unprivileged account and runs the program. Mounts elsewhere (MariaDB's /var/lib/mysql) keep the
rewriting: binding over system folders could hide what the machine's own programs need.

This module is both the runner's helper (`available`, `command`) and the small launcher it
runs as root (`python -m userland.local.mountns`), which does the mounts and drops privileges
before it executes the program: the program never runs as root.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from userland.local.rules.podplan import OWN_PATH_ROOT, ContainerPlan
from userland.local.users import LocalUser

CLONE_NEWNS = 0x00020000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
FAILED = 126  # the exit code a container that could not be set up ends with


@functools.cache
def available() -> bool:
    """Whether containers can get their own mount table here: root, and the kernel allows it
    (checked once, in a throwaway child)."""
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        return False
    try:
        result = subprocess.run([sys.executable, "-E", "-s", "-m", "userland.local.mountns", "--check"],
                                capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return result.returncode == 0


def command(plan: ContainerPlan, user: LocalUser) -> tuple[list[str], str, bool]:
    """The argv and working folder that run `plan`'s program, and whether that argv becomes
    `user` by itself: the launcher does (after its mounts) when there are folders to mount;
    otherwise the caller's child must."""
    if not plan.binds:
        return list(plan.argv), plan.workdir, False
    argv = [sys.executable, "-E", "-s", "-m", "userland.local.mountns",
            "--uid", str(user.uid), "--gid", str(user.gid), "--cwd", plan.workdir]
    for local, path in plan.binds:
        argv += ["--bind", local, path]
    return [*argv, "--", *plan.argv], "/", True


def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    return libc


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(libc: Any, source: str | None, target: str, kind: str | None, flags: int,
           data: str | None = None) -> None:
    _check(libc.mount(None if source is None else source.encode(), target.encode(),
                      None if kind is None else kind.encode(), flags,
                      None if data is None else data.encode()), f"mount {target}")


def enter(binds: Sequence[tuple[str, str]]) -> None:
    """Give this process a mount table of its own with `binds` (local folder, path) in it."""
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS), "unshare")
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)  # nothing leaks back to the machine
    _mount(libc, "userland", OWN_PATH_ROOT, "tmpfs", 0, "mode=755")
    for local, path in sorted(binds, key=lambda b: len(b[1])):
        os.makedirs(path, exist_ok=True)
        _mount(libc, local, path, None, MS_BIND | MS_REC)


def _run(args: argparse.Namespace) -> int:
    try:
        enter([tuple(b) for b in args.bind or []])
        os.chdir(args.cwd)
        os.setgroups([])
        os.setgid(args.gid)
        os.setuid(args.uid)
        # Changing user cleared the runner's "end me when you end" signal: set it again.
        _check(_libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
        os.execve(args.argv[0], args.argv, os.environ)
    except OSError as err:
        print(f"userland: could not set up the container's folders: {err}", file=sys.stderr)
        return FAILED
    return FAILED  # not reached: execve replaced this process


def _self_check() -> int:
    """In a throwaway child: can this process make a mount table of its own, with a fresh
    /home in it? (The mounts go with the process.)"""
    try:
        enter(())
    except OSError:
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="userland.local.mountns")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--uid", type=int)
    parser.add_argument("--gid", type=int)
    parser.add_argument("--cwd", default="/")
    parser.add_argument("--bind", nargs=2, action="append", metavar=("LOCAL", "PATH"))
    parser.add_argument("argv", nargs="*")
    args = parser.parse_args(argv)
    if args.check:
        return _self_check()
    if args.uid is None or args.gid is None or not args.argv:
        parser.error("--uid, --gid and a program are needed")
    return _run(args)


if __name__ == "__main__":
    sys.exit(main())
