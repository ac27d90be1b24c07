"""The real apps that `make local-apps` installs, started with the command lines the shipped
Templates use, each on a free loopback port, as an unprivileged user (`nobody` when the suite
runs as root) with a fresh home folder, and spoken to as the gateway does: Host kept (a
student's own origin such as alice.vscode.localhost), WebSockets with that Origin.

Nothing is faked. These tests skip, saying so, only when the apps are not installed; `make test`
installs them. The full browser tests through the gateway are elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support import free_port

# The real apps, installed by `make local-apps`, run here as a student would run them.
pytestmark = pytest.mark.apps

REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / "scripts" / "install-local-apps.sh"
START_TIMEOUT = 90.0  # seconds; a deadline to fail with a message, not a measurement


def apps_bin() -> Path:
    prefix = subprocess.run(["bash", str(INSTALL), "--print-prefix"], check=True,
                            capture_output=True, text=True).stdout.strip()
    return Path(prefix) / "bin"


def need(program: str) -> Path:
    path = apps_bin() / program
    if not path.exists():
        pytest.skip(f"{program} is not installed here (looked in {path.parent}): run `make local-apps`")
    return path


@dataclass(frozen=True)
class Student:
    """Who runs the app: uid/gid and a fresh home folder of their own."""

    uid: int
    gid: int
    home: Path

    def argv(self, argv: list[str]) -> list[str]:
        if os.geteuid() != 0 or self.uid == 0:
            return argv
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", *argv]

    def env(self, **extra: str) -> dict[str, str]:
        # What a kubelet would give: a clean environment, not the test runner's.
        return {"HOME": str(self.home), "PATH": f"{apps_bin()}:/usr/local/bin:/usr/bin:/bin",
                "SHELL": "/bin/bash", "LANG": "C.UTF-8", **extra}


@pytest.fixture
def student() -> Iterator[Student]:
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        uid, gid = nobody.pw_uid, nobody.pw_gid
    else:
        uid, gid = os.getuid(), os.getgid()
    # Not under pytest's tmp_path: root's is mode 700, out of the unprivileged user's reach.
    home = Path(tempfile.mkdtemp(prefix="userland-apps-", dir="/tmp"))
    os.chown(home, uid, gid)
    who = Student(uid, gid, home)
    probe = subprocess.run(who.argv(["test", "-x", str(apps_bin())]), check=False)
    if probe.returncode != 0:
        pytest.fail(f"{apps_bin()} is out of reach for uid {uid}: install the apps where every user "
                    "can read them (USERLAND_APPS_PREFIX)")
    try:
        yield who
    finally:
        # A terminal's shell runs in a session of its own (a pty), outside the app's process
        # group; it ends on the hangup a moment later and would write its history into a
        # removed folder.
        for pid in processes_in(home):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(home, ignore_errors=True)


def processes_in(folder: Path) -> list[int]:
    """Processes whose working directory is in `folder`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if Path(os.readlink(entry / "cwd")).is_relative_to(folder):
                    found.append(int(entry.name))
    return found


def tail(log: Path, limit: int = 3000) -> str:
    return log.read_text(errors="replace")[-limit:]


Process = asyncio.subprocess.Process


@contextlib.asynccontextmanager
async def started(argv: list[str], env: Mapping[str, str], log: Path) -> AsyncIterator[Process]:
    """A process in its own session; on exit the whole group gets SIGTERM, then SIGKILL."""
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(*argv, env=dict(env), cwd=env["HOME"],
                                                       stdout=out, stderr=subprocess.STDOUT,
                                                       start_new_session=True)
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 20)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # children left behind by the group leader


async def until_ok(http: aiohttp.ClientSession, url: str, process: Process, log: Path,
                   **kwargs: Any) -> aiohttp.ClientResponse:
    """The first 200 from `url`. code-server listens before its routes exist (a 404 from
    Express for a moment), so an answer alone does not mean ready: its readiness probe is
    `httpGet /healthz`, which succeeds on 2xx only."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.returncode is not None:
            pytest.fail(f"exited with {process.returncode} before answering {url}:\n{tail(log)}")
        with contextlib.suppress(aiohttp.ClientConnectionError):
            response = await http.get(url, allow_redirects=False, **kwargs)
            await response.read()
            if response.status == 200:
                return response
        if time.monotonic() > deadline:
            pytest.fail(f"{url} did not answer 200 within {START_TIMEOUT:.0f} s:\n{tail(log)}")
        await asyncio.sleep(0.2)


async def until_listening(port: int, process: Process, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.returncode is not None:
            pytest.fail(f"exited with {process.returncode} before listening:\n{tail(log)}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"port {port} did not open within {START_TIMEOUT:.0f} s:\n{tail(log)}")
            await asyncio.sleep(0.2)
            continue
        writer.close()
        return


async def handshake(port: int, path: str, headers: Mapping[str, str]) -> int:
    """The status a WebSocket upgrade gets (the connection is dropped right after: VS Code's
    server does not answer a close frame before its own protocol handshake)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        lines = [f"GET {path} HTTP/1.1", "Connection: Upgrade", "Upgrade: websocket",
                 "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                 *(f"{name}: {value}" for name, value in headers.items())]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        status = await asyncio.wait_for(reader.readline(), START_TIMEOUT)
        return int(status.split()[1])
    finally:
        writer.close()


# --- code-server -------------------------------------------------------------------------------

def code_server_argv(port: int, home: Path) -> list[str]:
    # At the root of its own origin (no base path flag exists or is needed); the gateway has
    # authenticated the student; no update or telemetry calls; the student's home is theirs.
    return ["code-server", "--auth", "none", "--bind-addr", f"127.0.0.1:{port}",
            "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust", str(home)]


async def test_code_server_serves_a_student_origin_and_checks_websocket_origins(student: Student,
                                                                               tmp_path: Path) -> None:
    need("code-server")
    port = free_port()
    origin = f"http://alice.vscode.localhost:{port}"
    host = {"Host": f"alice.vscode.localhost:{port}"}
    log = tmp_path / "code-server.log"
    async with (started(student.argv(code_server_argv(port, student.home)), student.env(), log) as process,
                aiohttp.ClientSession() as http):
        health = await until_ok(http, f"http://127.0.0.1:{port}/healthz", process, log)
        assert health.status == 200 and (await health.json())["status"] in ("alive", "expired")
        # The root opens the student's folder, with a relative redirect (right behind any host).
        root = await http.get(f"http://127.0.0.1:{port}/", headers=host, allow_redirects=False)
        assert root.status == 302 and root.headers["Location"] == f"./?folder={student.home}"
        page = await http.get(f"http://127.0.0.1:{port}/?folder={student.home}", headers=host)
        html = await page.text()
        assert page.status == 200 and 'id="vscode-workbench-web-configuration"' in html
        commit = re.search(r"stable-([0-9a-f]{40})", html)
        assert commit, html[:2000]
        ws_path = (f"/stable-{commit.group(1)}?reconnectionToken={uuid.uuid4()}"
                   "&reconnection=false&skipWebSocketFrames=false")
        # The editor's WebSocket: accepted when Origin is the page's own host (Host kept by
        # the proxy, or X-Forwarded-Host with the port), refused otherwise.
        assert await handshake(port, ws_path, {**host, "Origin": origin}) == 101
        assert await handshake(port, ws_path, {**host, "Origin": "http://bob.vscode.localhost:1"}) == 403
        assert await handshake(port, ws_path, {**host, "X-Forwarded-Host": "alice.vscode.localhost",
                                               "Origin": origin}) == 403
        # Its files are the student's, in their own home.
        owned = {p.stat().st_uid for p in (student.home / ".config", student.home / ".local")}
        assert owned == {student.uid}


def test_code_server_terminal_backend_runs_for_the_student(student: Student) -> None:
    """The terminal's native module (node-pty), built by the install, under code-server's own
    node, for the unprivileged user: a shell runs and its output comes back."""
    wrapper = need("code-server").read_text()
    node = re.search(r'exec "([^"]+/node/bin/node)" "([^"]+)/out/node/entry.js"', wrapper)
    assert node, wrapper
    vscode = Path(node.group(2)) / "lib" / "vscode"
    script = ("const pty = require('node-pty');"
              "const p = pty.spawn('/bin/bash', ['-c', 'echo pty-$((6*7)) $(id -u)'],"
              " {cwd: process.env.HOME});"
              "let out = ''; p.onData(d => out += d); p.onExit(() => { console.log(out.trim()); });")
    result = subprocess.run(student.argv([node.group(1), "-e", script]), env=student.env(), cwd=vscode,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["pty-42", str(student.uid)]


# --- JupyterLab --------------------------------------------------------------------------------

def jupyterlab_argv(port: int, home: Path) -> list[str]:
    # Loopback only, so no token (the gateway authenticates); a Host other than localhost is
    # allowed (the student's own origin); the exact port or nothing (no silent port+1).
    return ["jupyter-lab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0", "--ServerApp.allow_remote_access=True",
            "--IdentityProvider.token=", "--ServerApp.trust_xheaders=True", f"--ServerApp.root_dir={home}"]


def kernel_message(code: str, session: str) -> str:
    header = {"msg_id": uuid.uuid4().hex, "username": "student", "session": session,
              "msg_type": "execute_request", "version": "5.3", "date": ""}
    return json.dumps({"header": header, "parent_header": {}, "metadata": {}, "channel": "shell",
                       "content": {"code": code, "silent": False, "store_history": False,
                                   "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
                       "buffers": []})


async def test_jupyterlab_kernel_and_terminal_over_websockets(student: Student, tmp_path: Path) -> None:
    need("jupyter-lab")
    port = free_port()
    origin = f"http://alice.jupyter.localhost:{port}"
    host = {"Host": f"alice.jupyter.localhost:{port}"}
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "jupyterlab.log"
    jar = aiohttp.CookieJar(unsafe=True)
    async with (started(student.argv(jupyterlab_argv(port, student.home)), student.env(), log) as process,
                aiohttp.ClientSession(cookie_jar=jar) as http):
        lab = await until_ok(http, f"{base}/lab", process, log, headers=host)
        assert lab.status == 200 and "JupyterLab" in await lab.text()
        xsrf = next(c.value for c in jar if c.key == "_xsrf")
        api = {**host, "X-XSRFToken": xsrf, "Origin": origin}
        kernel = await (await http.post(f"{base}/api/kernels", json={"name": "python3"}, headers=api)).json()
        session = uuid.uuid4().hex
        async with http.ws_connect(f"{base}/api/kernels/{kernel['id']}/channels?session_id={session}",
                                   headers={**host, "Origin": origin}) as ws:
            await ws.send_str(kernel_message("6*7", session))
            result = None
            async with asyncio.timeout(START_TIMEOUT):
                while result is None:
                    message = json.loads(await ws.receive_str())
                    if message["msg_type"] == "execute_result":
                        result = message["content"]["data"]["text/plain"]
        assert result == "42"
        terminal = await (await http.post(f"{base}/api/terminals", headers=api)).json()
        async with http.ws_connect(f"{base}/terminals/websocket/{terminal['name']}",
                                   headers={**host, "Origin": origin}) as ws:
            await ws.send_str(json.dumps(["stdin", "echo term-$((6*7)) > ~/proof.txt; echo done-$((1+1))\r"]))
            seen = ""
            async with asyncio.timeout(START_TIMEOUT):
                while "done-2" not in seen:
                    kind, *data = json.loads(await ws.receive_str())
                    if kind == "stdout":
                        seen += data[0]
        proof = student.home / "proof.txt"
        assert proof.read_text() == "term-42\n" and proof.stat().st_uid == student.uid
        # A WebSocket from another origin is refused.
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(f"{base}/api/kernels/{kernel['id']}/channels",
                                  headers={**host, "Origin": "http://bob.jupyter.localhost:1"})
        assert refused.value.status == 403


# --- MariaDB + phpMyAdmin ----------------------------------------------------------------------

@dataclass(frozen=True)
class Database:
    login: str
    db_port: int
    web_port: int
    folder: Path  # the pod's volume: data and password

    @property
    def password_file(self) -> Path:
        return self.folder / "password"

    def mariadb(self, who: Student) -> tuple[list[str], dict[str, str]]:
        argv = ["userland-mariadb", f"--datadir={self.folder / 'data'}", "--bind-address=127.0.0.1",
                f"--port={self.db_port}"]
        return who.argv(argv), who.env(MARIADB_USER=self.login, MARIADB_PASSWORD_FILE=str(self.password_file))

    def phpmyadmin(self, who: Student) -> tuple[list[str], dict[str, str]]:
        argv = ["userland-phpmyadmin", f"127.0.0.1:{self.web_port}"]
        return who.argv(argv), who.env(PMA_HOST="127.0.0.1", PMA_PORT=str(self.db_port), PMA_USER=self.login,
                                       PMA_PASSWORD_FILE=str(self.password_file))


def sql(db: Database, login: str, password: str, statement: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mariadb", "--no-defaults", "-h", "127.0.0.1", "-P", str(db.db_port), "-u", login,
                           "-N", "-B", "-e", statement], env={"MYSQL_PWD": password, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60, check=False)


async def test_mariadb_and_phpmyadmin_for_two_students_side_by_side(student: Student, tmp_path: Path) -> None:
    need("userland-mariadb")
    need("userland-phpmyadmin")
    if shutil.which("mariadb") is None:
        pytest.skip("the mariadb client is not installed here: run `make local-apps`")
    alice = Database("alice", free_port(), free_port(), student.home / "alice")
    bob = Database("bob", free_port(), free_port(), student.home / "bob")
    logs = {name: tmp_path / f"{name}.log"
            for name in ("alice-db", "alice-web", "bob-db", "bob-web", "alice-db2")}
    async with contextlib.AsyncExitStack() as stack:
        http = await stack.enter_async_context(aiohttp.ClientSession())
        processes = {}
        for db in (alice, bob):
            for part, (argv, env) in (("db", db.mariadb(student)), ("web", db.phpmyadmin(student))):
                name = f"{db.login}-{part}"
                processes[name] = await stack.enter_async_context(started(argv, env, logs[name]))
        for db in (alice, bob):
            await until_listening(db.db_port, processes[f"{db.login}-db"], logs[f"{db.login}-db"])

        passwords = {}
        for db in (alice, bob):
            mode = db.password_file.stat()
            assert stat.S_IMODE(mode.st_mode) == 0o600 and mode.st_uid == student.uid
            passwords[db.login] = db.password_file.read_text().strip()
            assert re.fullmatch(r"[A-Za-z0-9]{24}", passwords[db.login])
        assert passwords["alice"] != passwords["bob"]
        # Each account opens its own server only.
        assert sql(alice, "alice", passwords["alice"], "SELECT 6*7").stdout.strip() == "42"
        assert sql(alice, "bob", passwords["bob"], "SELECT 1").returncode != 0
        assert sql(alice, "alice", passwords["bob"], "SELECT 1").returncode != 0
        made = sql(alice, "alice", passwords["alice"],
                   "CREATE TABLE alice.kept (n INT); INSERT INTO alice.kept VALUES (7)")
        assert made.returncode == 0, made.stderr

        for db, other in ((alice, bob), (bob, alice)):
            host = {"Host": f"{db.login}.pma.localhost:{db.web_port}"}
            web = f"http://127.0.0.1:{db.web_port}/"
            name = f"{db.login}-web"
            home = await until_ok(http, web, processes[name], logs[name], headers=host)
            # PHP's server ends each body by closing the connection (no Content-Length).
            assert home.status == 200 and home.headers.get("Connection") == "close"
            page = await http.get(f"{web}index.php?route=/server/databases", headers=host)
            text = await page.text()
            assert page.status == 200, text[-2000:]
            assert f'data-filter-row="{db.login.upper()}"' in text  # logged in by itself, as them
            assert f'data-filter-row="{other.login.upper()}"' not in text
            assert "Access denied" not in text and "Cannot log in" not in text
            styles = await http.get(f"{web}themes/pmahomme/css/theme.css", headers=host)
            assert styles.status == 200 and len(await styles.read()) > 10_000
        for name in ("alice-web", "bob-web"):
            assert "Failed to load" not in tail(logs[name], limit=10**7)

        # A restart keeps the data and the password (a pod restart on its volume).
        process = processes["alice-db"]
        os.killpg(process.pid, signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 60) == 0
        argv, env = alice.mariadb(student)
        again = await stack.enter_async_context(started(argv, env, logs["alice-db2"]))
        await until_listening(alice.db_port, again, logs["alice-db2"])
        assert alice.password_file.read_text().strip() == passwords["alice"]
        assert sql(alice, "alice", passwords["alice"], "SELECT n FROM alice.kept").stdout.strip() == "7"


def test_mariadb_refuses_unsafe_names_with_a_clear_message(student: Student) -> None:
    need("userland-mariadb")
    argv, env = Database("x", free_port(), free_port(), student.home / "db").mariadb(student)
    env["MARIADB_USER"] = "alice'; DROP"
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "MARIADB_USER must be 1-80 letters, digits, _ or -" in result.stderr
    assert not (student.home / "db" / "data" / "mysql").exists()
