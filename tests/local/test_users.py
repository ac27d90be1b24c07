"""The account environments run as, made on first use (local/users.py), by several processes at
once: what the suite's parallel workers do on a new machine (each starts a local runner), and two
`make run`s started together. Real: Debian's useradd and /etc/passwd (root only); the account is
a throwaway one, removed afterwards."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import uuid

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="only root makes the account (as make run does)")

MAKE = """
import sys
from userland.local.users import environment_user
user = environment_user(sys.argv[1])
print(user.uid, user.gid)
"""


def test_processes_that_make_the_account_at_once_all_get_it() -> None:
    account = f"ul-t-{uuid.uuid4().hex[:10]}"
    try:
        makers = [subprocess.Popen([sys.executable, "-c", MAKE, account], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True) for _ in range(8)]
        results = [(p.wait(timeout=120), *p.communicate()) for p in makers]
        # Every one gets the one account /etc/passwd keeps. Before (useradd run by each at once):
        # some failed with "useradd: user ... already exists", or two uids were handed out of
        # which /etc/passwd kept one (4 of 5 rounds of 8 here).
        assert [code for code, _, _ in results] == [0] * 8, results
        assert len({out for _, out, _ in results}) == 1, results
        uid = int(results[0][1].split()[0])
        assert uid != 0 and pwd.getpwnam(account).pw_uid == uid
    finally:
        subprocess.run(["userdel", account], capture_output=True, check=False)
        subprocess.run(["groupdel", account], capture_output=True, check=False)
