"""The local runner against the real control plane: it plays the kubelet for the Pods the real
deployment and replicaset controllers make.

The Deployments and Services are made with the operator's own builders (operator/rules/builders.py),
from a Userland object and a Template model, as the operator makes them. Real: the control
plane, the processes (Debian's python3 and sh as stand-ins for the apps), the runner's
unprivileged user when the tests run as root, /proc, the cgroups.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import signal
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support import eventually, free_port
from tests.support.objects import userland_body
from tests.support.pods import container_state
from tests.support.procs import alive
from userland.local import mountns
from userland.local.runner import LocalRunner
from userland.local.users import environment_user
from userland.operator.rules import builders
from userland.platform.clients.kube import (
    DEPLOYMENTS,
    EVENTS,
    PODS,
    SERVICES,
    USERLANDS,
    KubeClient,
    NotFound,
)
from userland.platform.model import naming
from userland.platform.model.models import Template, Userland

JSON = dict[str, Any]
PY = "/usr/bin/python3"  # Debian's: reachable by the environments' unprivileged user


DEMO: JSON = {"name": "ide", "image": "userland/demo-ide:1", "command": ["userland-demo-ide"],
              "args": ["--port", "8080", "--user", "${USER}", "--template", "demo"]}


async def add_environment(kube: KubeClient, namespace: str, user: str, template: str, *containers: JSON,
                          home: str | None = None, port: int = 8080) -> JSON:
    """What the operator makes for `user`'s Userland of a Template running `containers` (the
    demo environment by default), made with the operator's own builders; `home`: the student's
    volume's mount path (a PersistentVolumeClaim `<template>-<user>-data`). The Userland itself
    is created first, so the children's owner reference names a real one (else the garbage
    collector would remove them)."""
    name = f"{template}-{user}"
    try:
        owner = await kube.get(USERLANDS, namespace, name)
    except NotFound:
        owner = await kube.create(USERLANDS, namespace, userland_body(user, template))
    spec: JSON = {"routing": {"host": f"{template}.localhost"}, "port": port,
                  "podSpec": {"containers": [dict(c) for c in containers or (DEMO,)]}}
    if home is not None:
        spec["storage"] = {"size": "1Gi", "mountPath": home}
    model = Template.from_object({"metadata": {"name": template, "namespace": namespace, "uid": "t"},
                                  "spec": spec})
    userland = Userland.from_object(owner)
    service = builders.desired_service(userland, model)
    service["metadata"]["annotations"]["someone.else/note"] = "kept"
    await kube.create(SERVICES, namespace, service)
    deployment: JSON = await kube.create(DEPLOYMENTS, namespace, builders.desired_deployment(userland, model))
    return deployment


def http_server(name: str, port: int = 8080, bind: str = "0.0.0.0", probe: bool = True) -> JSON:
    """A container serving its working directory: Debian's python3 http.server."""
    container: JSON = {
        "name": name,
        "image": "python:3",
        "command": [PY],
        "args": ["-m", "http.server", "--bind", bind, str(port)],
        "ports": [{"name": "http", "containerPort": port}],
    }
    if probe:
        container["readinessProbe"] = {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1}
    return container


async def annotation(kube: KubeClient, namespace: str, name: str) -> str | None:
    service = await kube.get(SERVICES, namespace, name)
    value = ((service["metadata"].get("annotations")) or {}).get(naming.ANNOTATION_UPSTREAM)
    return str(value) if value else None


async def available(kube: KubeClient, namespace: str, name: str) -> bool:
    deployment = await kube.get(DEPLOYMENTS, namespace, name)
    return bool((deployment.get("status") or {}).get("availableReplicas") == 1)


async def the_pod(kube: KubeClient, namespace: str, deployment: str) -> JSON | None:
    pods = [
        p
        for p in (await kube.list(PODS, namespace))["items"]
        if p["metadata"]["name"].startswith(deployment + "-") and not p["metadata"].get("deletionTimestamp")
    ]
    return pods[0] if len(pods) == 1 else None


def proc_file(pid: int, name: str) -> bytes:
    return Path(f"/proc/{pid}/{name}").read_bytes()


def write_file(path: Path, text: str) -> None:
    path.write_text(text)


async def _has(found: Any, wanted: set[str]) -> bool:
    return wanted <= await found


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url, timeout=aiohttp.ClientTimeout(total=5)) as r:
        return r.status, await r.text()


async def test_demo_pod_lifecycle(kube: KubeClient, namespace: str, runner: LocalRunner) -> None:
    await add_environment(kube, namespace, "alice", "demo")

    # The Pod gets an address of its own; the Service points at it; it is alice's demo page.
    url = await eventually(lambda: annotation(kube, namespace, "demo-alice-svc"), timeout=30)
    address = url.split("//")[1].rsplit(":", 1)[0]
    assert ipaddress.ip_address(address) in runner.addresses.network and url.endswith(":8080")
    status, body = await get(url + "/")
    assert status == 200 and 'id="owner">alice<' in body
    service = await kube.get(SERVICES, namespace, "demo-alice-svc")
    assert service["metadata"]["annotations"]["someone.else/note"] == "kept"

    # Pods Ready -> the real controllers make the Deployment available; status as a kubelet's.
    await eventually(lambda: available(kube, namespace, "demo-alice"), timeout=30)
    pod = await eventually(lambda: the_pod(kube, namespace, "demo-alice"))
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["podIP"] == address
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]} == {
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
        "PodScheduled": "True",
    }
    assert container_state(pod, "ide")["ready"] is True

    # Scaled to 0: the replicaset controller deletes the Pod, the runner stops it.
    await kube.merge_patch(DEPLOYMENTS, namespace, "demo-alice", {"spec": {"replicas": 0}})

    async def stopped() -> bool:
        return not runner.workers and await annotation(kube, namespace, "demo-alice-svc") is None

    await eventually(stopped, timeout=30)
    with pytest.raises(OSError):
        await get(url + "/")


async def test_containers_of_a_pod_share_its_address_and_two_pods_never_clash(
    kube: KubeClient, namespace: str, runner: LocalRunner
) -> None:
    """Like MariaDB + phpMyAdmin: a backend on 127.0.0.1:9000 and a front that talks to it,
    in two students' Pods at once, both on the same ports."""
    backend = http_server("backend", 9000, bind="127.0.0.1", probe=False)
    backend["command"] = [
        "sh",
        "-c",
        f"echo backend-of-$(STUDENT) > index.html && exec {PY} -m http.server --bind 127.0.0.1 9000",
    ]
    backend.pop("args")
    backend["env"] = [{"name": "STUDENT", "value": "placeholder"}]
    front: JSON = {
        "name": "front",
        "image": "x",
        "command": [
            PY,
            "-c",
            (
                "import http.server, urllib.request, os\n"
                "class H(http.server.BaseHTTPRequestHandler):\n"
                "    def do_GET(self):\n"
                "        body = urllib.request.urlopen(os.environ['BACKEND']).read()\n"
                "        self.send_response(200); self.send_header('Content-Length', str(len(body)))\n"
                "        self.end_headers(); self.wfile.write(body)\n"
                "http.server.HTTPServer(('0.0.0.0', 8080), H).serve_forever()\n"
            ),
        ],
        "env": [{"name": "BACKEND", "value": "http://localhost:9000/index.html"}],
        "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
    }
    for student in ("alice", "bob"):
        own_backend = {**backend, "env": [{"name": "STUDENT", "value": student}]}
        await add_environment(kube, namespace, student, "db", front, own_backend)
    urls = {}
    for student in ("alice", "bob"):
        urls[student] = await eventually(
            lambda s=student: annotation(kube, namespace, f"db-{s}-svc"), timeout=30
        )
    assert urls["alice"] != urls["bob"]
    for student in ("alice", "bob"):
        assert await get(urls[student] + "/") == (200, f"backend-of-{student}\n")
        await eventually(lambda s=student: available(kube, namespace, f"db-{s}"), timeout=30)


async def test_a_students_volume_outlives_the_pod_and_home_is_theirs(
    kube: KubeClient, namespace: str, runner: LocalRunner
) -> None:
    writer: JSON = {
        "name": "ide",
        "image": "x",
        "command": ["sh", "-c"],
        "args": [
            'echo "$HOME" > /home/student/home.txt; '
            "echo $(($(cat /home/student/runs 2>/dev/null || echo 0)+1)) "
            f"> /home/student/runs; cd /home/student && exec {PY} -m http.server --bind 0.0.0.0 8080"
        ],
        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
    }
    await add_environment(kube, namespace, "carol", "ide", writer, home="/home/student")
    url = await eventually(lambda: annotation(kube, namespace, "ide-carol-svc"), timeout=30)
    assert await get(url + "/runs") == (200, "1\n")
    _, home = await get(url + "/home.txt")
    # HOME is the student's volume: at its own path when containers get their own mount table
    # (mountns.py: as root), else at its local folder.
    if mountns.available():
        assert home.strip() == "/home/student"
    else:
        assert home.strip().endswith(f"/volumes/{namespace}/ide-carol-data")
    first = await the_pod(kube, namespace, "ide-carol")
    assert first is not None

    # The Pod goes (a restart, a delete and re-add): the next one finds the same files.
    await kube.delete(PODS, namespace, first["metadata"]["name"])

    async def second_run() -> bool:
        value = await annotation(kube, namespace, "ide-carol-svc")
        try:
            return bool(value) and await get(f"{value}/runs") == (200, "2\n")
        except aiohttp.ClientError:
            return False  # the annotation still names the Pod that went

    await eventually(second_run, timeout=30)


async def test_the_runners_environment_and_root_never_reach_a_student(
    kube: KubeClient, namespace: str, runner: LocalRunner
) -> None:
    os.environ["USERLAND_TEST_SECRET"] = "must-not-leak"
    try:
        await add_environment(kube, namespace, "dave", "ide", http_server("ide"))
        await eventually(lambda: annotation(kube, namespace, "ide-dave-svc"), timeout=30)
        worker = runner.workers[
            (namespace, (await the_pod(kube, namespace, "ide-dave") or {})["metadata"]["name"])
        ]
        process = worker.containers[0].process
        assert process is not None
        environ = proc_file(process.pid, "environ").split(b"\0")
        assert not [v for v in environ if b"USERLAND_TEST_SECRET" in v]
        status_lines = proc_file(process.pid, "status").decode().splitlines()
        uid = next(line for line in status_lines if line.startswith("Uid:")).split()[1:]
        assert "0" not in uid, f"a student's process runs as root: {uid}"
        assert int(uid[0]) == runner.user.uid
    finally:
        del os.environ["USERLAND_TEST_SECRET"]


async def test_a_bind_beyond_loopback_is_stopped_and_said(
    kube: KubeClient, namespace: str, runner: LocalRunner
) -> None:
    """A program that binds every address by itself (no address in its args to rewrite), on a
    port nothing else on this machine uses (a wildcard bind fails where any address has it)."""
    port = free_port()
    sneaky: JSON = {
        "name": "ide",
        "image": "x",
        "command": [
            PY,
            "-c",
            (
                "import http.server as h\n"
                f"h.HTTPServer(('', {port}), h.SimpleHTTPRequestHandler).serve_forever()\n"
            ),
        ],
    }
    await add_environment(kube, namespace, "erin", "ide", sneaky)

    async def refused() -> JSON | None:
        pod = await the_pod(kube, namespace, "ide-erin")
        state = container_state(pod or {}, "ide")
        last = (state.get("lastState") or {}).get("terminated") or {}
        return pod if last.get("reason") == "ExposedBeyondLoopback" else None

    pod = await eventually(refused, timeout=30)
    message = container_state(pod, "ide")["lastState"]["terminated"]["message"]
    assert f"0.0.0.0:{port}" in message and "loopback" in message
    # A container without a readiness probe is Ready the moment it runs (as a kubelet has it),
    # so its Service may route to it and the Deployment count it available for a moment (each
    # restart runs it again until the check stops it, sooner on a loaded machine); once stopped
    # neither may stay so.

    async def not_routed() -> bool:
        return await annotation(kube, namespace, "ide-erin-svc") is None

    assert await eventually(not_routed, timeout=30)

    async def unavailable() -> bool:
        return not await available(kube, namespace, "ide-erin")

    assert await eventually(unavailable, timeout=30)


async def test_a_container_that_dies_is_restarted_and_counted(
    kube: KubeClient, namespace: str, runner: LocalRunner
) -> None:
    await add_environment(kube, namespace, "frank", "ide", http_server("ide"))
    url = await eventually(lambda: annotation(kube, namespace, "ide-frank-svc"), timeout=30)
    pod = await eventually(lambda: the_pod(kube, namespace, "ide-frank"))
    worker = runner.workers[(namespace, pod["metadata"]["name"])]
    process = worker.containers[0].process
    assert process is not None
    os.kill(process.pid, signal.SIGKILL)

    async def counted() -> JSON | None:
        current = await the_pod(kube, namespace, "ide-frank")
        state = container_state(current or {}, "ide")
        return current if state.get("restartCount") == 1 and state.get("ready") else None

    current = await eventually(counted, timeout=30)
    assert current["metadata"]["uid"] == pod["metadata"]["uid"]  # the same Pod, its container restarted
    assert container_state(current, "ide")["lastState"]["terminated"]["exitCode"] == 137
    assert (await get(url + "/"))[0] == 200  # the same address: nothing else had to change


async def test_readiness_probes_decide_ready(kube: KubeClient, namespace: str, runner: LocalRunner) -> None:
    """Ready only once /ready answers 200: the process answers 404 until the file exists."""
    late: JSON = {
        "name": "ide",
        "image": "x",
        "command": ["sh", "-c", f"cd $(HOME) && exec {PY} -m http.server --bind 127.0.0.1 8080"],
        "env": [{"name": "HOME", "value": "/home/student"}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 1},
    }
    await add_environment(kube, namespace, "gina", "ide", late, home="/home/student")
    pod = await eventually(lambda: the_pod(kube, namespace, "ide-gina"))

    async def running_not_ready() -> bool:
        current = await the_pod(kube, namespace, "ide-gina") or {}
        state = container_state(current, "ide")
        return bool(state.get("state", {}).get("running")) and state.get("ready") is False

    await eventually(running_not_ready, timeout=30)
    assert await annotation(kube, namespace, "ide-gina-svc") is None
    worker = runner.workers[(namespace, pod["metadata"]["name"])]
    # Its home on this machine (in the container it may be /home/student: mountns.py).
    write_file(Path(worker.containers[0].plan.host_workdir) / "ready", "yes")
    await eventually(lambda: annotation(kube, namespace, "ide-gina-svc"), timeout=30)
    await eventually(lambda: available(kube, namespace, "ide-gina"), timeout=30)


async def test_a_program_not_installed_is_said_in_the_pod_status_and_events(
    kube: KubeClient, namespace: str, runner: LocalRunner
) -> None:
    missing: JSON = {
        "name": "code",
        "image": "codercom/code-server:4",
        "command": ["code-server"],
        "args": ["--bind-addr", "0.0.0.0:8080"],
    }
    # No make local-apps here: the runner's PATH has no code-server (app_bins is empty).
    runner.app_bins = ()
    # Her Userland (no operator runs here: the object alone, as the Pod's label names it).
    await kube.create(USERLANDS, namespace, {"apiVersion": "userland.dev/v1alpha1", "kind": "Userland",
                                             "metadata": {"name": "vscode-hana"},
                                             "spec": {"user": "hana", "template": "vscode"}})
    await add_environment(kube, namespace, "hana", "vscode", missing)

    async def said() -> JSON | None:
        pod = await the_pod(kube, namespace, "vscode-hana")
        waiting = container_state(pod or {}, "code").get("state", {}).get("waiting") or {}
        return waiting if waiting.get("reason") == "ProgramNotInstalled" else None

    waiting = await eventually(said, timeout=30)
    assert waiting["message"].startswith("code-server is not installed here")
    assert "make local-apps" in waiting["message"]

    async def events() -> set[str]:
        found = (await kube.list(EVENTS, namespace))["items"]
        return {e["involvedObject"]["kind"] for e in found if e["reason"] == "ProgramNotInstalled"}

    # On the Pod (kubectl describe pod) and on her Userland (kubectl describe userland, the
    # class dashboard's failure explanation).
    await eventually(lambda: _has(events(), {"Pod", "Userland"}), timeout=30)


async def test_a_demo_that_cannot_bind_is_retried_until_it_can(
    kube: KubeClient, namespace: str, runner: LocalRunner
) -> None:
    """Its port is taken on every address (as by another program); once freed, it starts."""
    port = free_port()
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("0.0.0.0", port))
    blocker.listen()
    demo: JSON = {
        "name": "ide",
        "image": "userland/demo-ide:1",
        "command": ["userland-demo-ide"],
        "args": ["--port", str(port), "--user", "ivy"],
    }
    try:
        await add_environment(kube, namespace, "ivy", "demo", demo, port=port)

        async def backing_off() -> bool:
            state = container_state(await the_pod(kube, namespace, "demo-ivy") or {}, "ide")
            return (state.get("state", {}).get("waiting") or {}).get("reason") == "CrashLoopBackOff"

        await eventually(backing_off, timeout=30)
    finally:
        blocker.close()
    url = await eventually(lambda: annotation(kube, namespace, "demo-ivy-svc"), timeout=30)
    assert (await get(url + "/"))[0] == 200
    state = container_state(await the_pod(kube, namespace, "demo-ivy") or {}, "ide")
    assert state["ready"] and state["restartCount"] >= 1


# --- every process of a container stops with it ----------------------------------------------

FORKER = """
import http.server, subprocess, sys
marker = sys.argv[1]
sleep = [sys.executable, "-c", "import time; time.sleep(1000)", marker]
subprocess.Popen(sleep + ["worker"])  # in its group, as php -S forks its workers
subprocess.Popen(sleep + ["grouped"], process_group=0)  # its session, a group of its own
if sys.argv[2] == "escape":
    subprocess.Popen(sleep + ["escapee"], start_new_session=True)  # `setsid` in a terminal
http.server.HTTPServer(("0.0.0.0", 8080), http.server.SimpleHTTPRequestHandler).serve_forever()
"""


def forker(marker: str, escape: bool) -> JSON:
    argv = [PY, "-c", FORKER, marker, "escape" if escape else "stay"]
    return {"name": "ide", "image": "x", "command": argv,
            "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}


def marked(marker: str) -> dict[int, str]:
    """Live processes whose command line carries `marker`: pid -> their role."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not alive(int(entry.name)):
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            if marker in argv:
                role = argv[argv.index(marker) + 1]  # the program's is "escape" or "stay"
                found[int(entry.name)] = "program" if role in ("escape", "stay") else role
    return found


def roles(marker: str) -> set[str]:
    return set(marked(marker).values())


@pytest.mark.parametrize("cgroups", [True, False], ids=["cgroup", "session"])
async def test_every_process_of_a_container_stops_on_restart_deletion_and_stop(
        kube: KubeClient, namespace: str, tmp_path: Path, cgroups: bool) -> None:
    """A program that forks a worker, one that leaves its process group and (where the
    container has a cgroup) one that leaves its session: a restart, the Pod's deletion and the
    runner's end each stop all of them, not only the program."""
    os.chmod(tmp_path, 0o755)
    local = LocalRunner(kube, [namespace], state_dir=tmp_path, user=environment_user(), backoff=0.2,
                        max_backoff=1.0, use_cgroups=cgroups)
    task = asyncio.create_task(local.run())
    marker = f"marker-{uuid.uuid4().hex}"
    everyone = {"program", "worker", "grouped", "escapee"} if cgroups else {"program", "worker", "grouped"}
    try:
        await asyncio.wait_for(local.wait_synced(), 30)
        if cgroups:
            assert local.confinement is not None and local.confinement.cgroups is not None, \
                "this machine lets root make cgroups: the runner must use them"
        await add_environment(kube, namespace, "kim", "ide", forker(marker, escape=cgroups))
        await eventually(lambda: roles(marker) == everyone, timeout=30)

        # A restart (the program died): everything of that run goes, the next run starts afresh.
        first = marked(marker)
        [program] = [pid for pid, role in first.items() if role == "program"]
        os.kill(program, signal.SIGKILL)
        await eventually(lambda: not set(first) & set(marked(marker)), timeout=30)
        await eventually(lambda: roles(marker) == everyone, timeout=30)

        # The Pod is deleted (a Deployment scaled down, a student removed): all of it goes.
        second = marked(marker)
        pod = await eventually(lambda: the_pod(kube, namespace, "ide-kim"))
        await kube.delete(PODS, namespace, pod["metadata"]["name"])
        await eventually(lambda: not set(second) & set(marked(marker)), timeout=30)
        await eventually(lambda: roles(marker) == everyone, timeout=30)  # its replacement's
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    # The runner stopped (Ctrl-C): nothing of any run is left, and nothing is in the ledger.
    assert marked(marker) == {}
    assert list((tmp_path / "processes").glob("*.json")) == []


# The runner as `userland local` runs it, but bare: no handler of its own for SIGHUP, so a
# closed terminal ends it by the signal's default action. That default is set here, not
# inherited: a suite started under `nohup` (or anything else that ignores SIGHUP) passes the
# ignored disposition on through exec, and the runner would then never end.
RUNNER = """
import asyncio, signal, sys
from pathlib import Path
from userland.local.runner import LocalRunner
from userland.local.users import environment_user
from userland.platform.clients.kube import KubeClient

signal.signal(signal.SIGHUP, signal.SIG_DFL)

async def main():
    kube = await KubeClient.connect(sys.argv[1])
    runner = LocalRunner(kube, [sys.argv[2]], state_dir=Path(sys.argv[3]), user=environment_user())
    await runner.run()

asyncio.run(main())
"""


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGHUP], ids=["SIGKILL", "SIGHUP"])
async def test_a_runner_that_dies_leaves_nothing_running(
        kube: KubeClient, namespace: str, tmp_path: Path, control_plane: Any, signum: int) -> None:
    """The runner killed outright (or by a closed terminal) cannot stop its containers: its
    reaper does, at once."""
    os.chmod(tmp_path, 0o755)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", RUNNER, str(control_plane.kubeconfig), namespace, str(tmp_path),
        stdout=asyncio.subprocess.DEVNULL, stderr=open(tmp_path / "runner.log", "wb"),  # noqa: SIM115, ASYNC230
        start_new_session=True)
    marker = f"marker-{uuid.uuid4().hex}"
    try:
        await add_environment(kube, namespace, "lee", "ide", forker(marker, escape=True))
        await eventually(lambda: roles(marker) == {"program", "worker", "grouped", "escapee"}, timeout=60)
        process.send_signal(signum)
        try:
            await asyncio.wait_for(process.wait(), 30)
        except TimeoutError:
            raise AssertionError(f"the runner did not end on signal {signum}") from None
        await eventually(lambda: marked(marker) == {}, timeout=30)
        # The reaper forgets each container once all of it is gone.
        await eventually(lambda: list((tmp_path / "processes").glob("*.json")) == [], timeout=10)
        # Its summary line comes after the last ledger entry is gone: waited for, not read at once.
        reaper_log = tmp_path / "logs" / "reaper.log"
        assert await eventually(lambda: "stopped them" in reaper_log.read_text(), timeout=30), \
            reaper_log.read_text()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        for pid in marked(marker):  # never leave our own test's processes behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
