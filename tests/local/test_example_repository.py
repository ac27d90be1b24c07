"""`make run`'s example repository keeps its address (issue 24): its git server serves on the port
of the previous run, so an assignment a user made from the URL the banner printed still reads it
after a restart; when that port is taken, every Assignment on the old address is pointed at the
new one. Real: the git server (git-http-backend), git clients, the control plane."""

from __future__ import annotations

import asyncio
import socket
import subprocess
from pathlib import Path

from userland.local.assignment_example import GitServer, git_banner, repoint
from userland.local.gitserver import GIT
from userland.platform.clients.kube import ASSIGNMENTS, KubeClient
from userland.platform.model import naming

FILES: dict[str, bytes | str | None] = {"hello.py": "print('hello')\n"}


async def clone_head(url: str) -> str:
    done = await asyncio.to_thread(subprocess.run, [GIT, "ls-remote", url, "HEAD"], capture_output=True,
                                   text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\t", 1)[0]


async def test_the_address_stays_from_run_to_run(tmp_path: Path) -> None:
    first = GitServer(tmp_path / "git")
    commit = await first.start(FILES)
    url = first.url
    await first.stop()
    second = GitServer(tmp_path / "git")
    assert await second.start(FILES) == commit  # the same files: the same commit
    try:
        assert second.url == url and not second.moved
        assert await clone_head(url) == commit
        assert git_banner(url).strip().startswith(f"Git         {url}")
    finally:
        await second.stop()


async def test_a_taken_port_moves_every_assignment_on_it(tmp_path: Path, kube: KubeClient,
                                                         namespace: str) -> None:
    first = GitServer(tmp_path / "git")
    await first.start(FILES)
    old_url, old_port = first.url, first.port
    await first.stop()
    body = {"apiVersion": naming.API_VERSION, "kind": "Assignment",
            "spec": {"title": "Mine", "templates": ["jupyterlab"], "path": "mine",
                     "source": {"url": old_url, "ref": "main"}}}
    await kube.create(ASSIGNMENTS, namespace, {**body, "metadata": {"name": "mine"}})
    elsewhere = {**body["spec"], "source": {"url": "https://github.com/course/w.git"}}
    await kube.create(ASSIGNMENTS, namespace, {**body, "metadata": {"name": "other"}, "spec": elsewhere})
    # Attack review (SECURITY.md): the port was taken by another server, whose own repository an
    # assignment names; it is not the example's to move.
    squatters = {**body["spec"], "source": {"url": f"http://127.0.0.1:{old_port}/theirs.git"}}
    await kube.create(ASSIGNMENTS, namespace, {**body, "metadata": {"name": "theirs"}, "spec": squatters})
    with socket.socket() as squatter:  # something else took the port meanwhile
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", old_port))
        squatter.listen()
        second = GitServer(tmp_path / "git")
        await second.start(FILES)
    try:
        assert second.moved and second.port != old_port and second.previous == old_port
        moved = await repoint(kube, second.previous, second.port)
        assert moved == [f"{namespace}/mine"]
        mine = await kube.get(ASSIGNMENTS, namespace, "mine")
        assert mine["spec"]["source"] == {"url": second.url, "ref": "main"}
        other = await kube.get(ASSIGNMENTS, namespace, "other")
        assert other["spec"]["source"]["url"] == "https://github.com/course/w.git"
        theirs = await kube.get(ASSIGNMENTS, namespace, "theirs")
        assert theirs["spec"]["source"]["url"] == f"http://127.0.0.1:{old_port}/theirs.git"
        assert await clone_head(second.url)
        # The next run keeps the new address.
        assert (tmp_path / "git" / "port").read_text().strip() == str(second.port)
    finally:
        await second.stop()
