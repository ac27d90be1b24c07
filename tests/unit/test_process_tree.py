"""Finding a container's processes from /proc (a fake /proc here: the same files, written by
hand) and the ledger entry's round trip. The real thing runs in tests/local/test_runner.py."""

from __future__ import annotations

from pathlib import Path

from userland.local.process_tree import Tree, proc_info, session_members


def _process(proc: Path, pid: int, *, pgid: int, sid: int, start: int, state: str = "S",
             name: str = "php (worker) x") -> None:
    folder = proc / str(pid)
    folder.mkdir()
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    # cutime cstime priority nice threads itrealvalue starttime ...
    fields = [state, "1", str(pgid), str(sid), "0", "-1", "0"] + ["0"] * 12 + [str(start), "0"]
    (folder / "stat").write_text(f"{pid} ({name}) " + " ".join(fields) + "\n")


def test_a_session_is_its_members_started_since_its_first_process(tmp_path: Path) -> None:
    _process(tmp_path, 100, pgid=100, sid=100, start=5000)  # the program
    _process(tmp_path, 101, pgid=100, sid=100, start=5001)  # a worker it forked
    _process(tmp_path, 102, pgid=102, sid=100, start=5002)  # one that left the group
    _process(tmp_path, 103, pgid=103, sid=103, start=5003)  # one that left the session
    _process(tmp_path, 104, pgid=100, sid=100, start=4000)  # older than the program: not its own
    _process(tmp_path, 105, pgid=100, sid=100, start=5004, state="Z")  # dead, waiting to be reaped
    _process(tmp_path, 106, pgid=9, sid=9, start=5005)  # someone else's
    assert session_members(100, 5000, tmp_path) == [100, 101, 102]
    info = proc_info(101, tmp_path)
    assert info is not None and (info.pgid, info.sid, info.start, info.zombie) == (100, 100, 5001, False)
    assert proc_info(999, tmp_path) is None


def test_a_ledger_entry_round_trips(tmp_path: Path) -> None:
    tree = Tree(100, 5000, tmp_path / "cgroup", "classroom/mariadb-alice-1/phpmyadmin")
    assert Tree.from_json(tree.to_json()) == tree
    assert Tree.from_json(Tree(7, 8).to_json()) == Tree(7, 8)
