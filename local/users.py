"""Who students' local processes run as: never root.

`userland local` is often started as root (developers' containers, CI). A student's terminal in
VS Code must then not be a root shell on the host, so when the runner runs as root it runs
every environment as an unprivileged system account (`userland-env` by default), created on
first use (`useradd --system`, no home, no password: it cannot log in). Run as anyone else,
environments run as that same user, which is no more than they already are.

Locally every student's environment runs as this one account (a cluster gives each Pod its
own container); docs/decisions.md says what that means.
"""

from __future__ import annotations

import fcntl
import logging
import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_ACCOUNT = "userland-env"


class UserError(Exception):
    """The unprivileged account could not be made; str() says what to do."""


@dataclass(frozen=True)
class LocalUser:
    name: str
    uid: int
    gid: int

    @property
    def switches(self) -> bool:
        """Whether processes must change to this user (the runner is someone else: root)."""
        return self.uid != os.geteuid()

    def popen_kwargs(self) -> dict[str, Any]:
        """What subprocess needs to run a program as this user."""
        if not self.switches:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def become(self) -> None:
        """Turn this process into this user, for good (a child's preexec, after anything that
        still needs root): no supplementary groups, then the group, then the user."""
        os.setgroups([])
        os.setgid(self.gid)
        os.setuid(self.uid)

    def own(self, folder: Path) -> None:
        """`folder` (made if missing) belongs to this user, private to it."""
        folder.mkdir(parents=True, exist_ok=True)
        if self.switches:
            os.chown(folder, self.uid, self.gid)
        folder.chmod(0o700)


def current_user() -> LocalUser:
    entry = pwd.getpwuid(os.geteuid())
    return LocalUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


# Where root's processes take turns making the account: a folder only root writes (the local
# runner's, for Pods' folders out of the reach of a private state dir).
ACCOUNT_LOCK = Path("/var/lib/userland-local/account.lock")


def _entry(account: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(account)
    except KeyError:
        return None


def environment_user(account: str = DEFAULT_ACCOUNT) -> LocalUser:
    """The account environments run as: `account` (made if missing) when we are root, else us."""
    if os.geteuid() != 0:
        return current_user()
    entry = _entry(account)
    if entry is None:
        # One process at a time (the suite's parallel workers, two `make run`s): useradd run by
        # several at once fails with "already exists", or worse, each succeeds with its own uid
        # and the last write to /etc/passwd wins (seen here: 8 at once, two uids handed out).
        ACCOUNT_LOCK.parent.mkdir(parents=True, exist_ok=True)
        with open(ACCOUNT_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            entry = _entry(account) or _create(account)
    if entry.pw_uid == 0:
        raise UserError(f"the account '{account}' is root; environments must not run as root")
    return LocalUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def _create(account: str) -> pwd.struct_passwd:
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    result = subprocess.run(
        [
            useradd,
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/bin/bash",
            "--comment",
            "Userland local environments",
            account,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise UserError(
            f"could not create the unprivileged account '{account}' that students' "
            f"environments run as: {result.stderr.strip() or result.returncode}"
        ) from None
    log.info("created the unprivileged account for environments", extra={"account": account})
    return pwd.getpwnam(account)
