"""The local runner's pure parts: Kubernetes' $(VAR) expansion, the Pod plan (addresses,
volumes, env, probes, refusals), /proc/net parsing and the Pod status a kubelet would report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from userland.local.rules.expansion import expand, expand_env
from userland.local.rules.podplan import Probe, Unrunnable, localize_address, localize_paths, plan_pod
from userland.local.rules.podstatus import ContainerState, keep_transition_times, pod_status, same_status
from userland.local.sockets import listening_sockets

JSON = dict[str, Any]
ADDRESS = "127.77.0.9"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)", "a"),
        ("x$(A)y$(B)z", "xaybz"),
        ("$(MISSING)", "$(MISSING)"),  # undefined: kept as written
        ("$$(A)", "$(A)"),  # escaped
        ("$$$(A)", "$a"),
        ("$A $", "$A $"),  # not a reference
        ("$(A", "$(A"),  # unterminated
        ("$(A $$", "$(A $"),  # ... and what follows is still read
        ("$()", "$()"),
        ("no refs", "no refs"),
    ],
)
def test_expansion_follows_the_kubelet(text: str, expected: str) -> None:
    assert expand(text, {"A": "a", "B": "b"}) == expected


def test_env_values_see_only_earlier_variables() -> None:
    env = expand_env([("B", "$(A)-b"), ("A", "a"), ("C", "$(A)-c"), ("A", "again")])
    assert env == {"B": "$(A)-b", "A": "again", "C": "a-c"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("--bind-addr=0.0.0.0:8080", f"--bind-addr={ADDRESS}:8080"),
        ("127.0.0.1", ADDRESS),
        ("http://localhost:9000/x", f"http://{ADDRESS}:9000/x"),
        ("h.HTTPServer(('0.0.0.0', 8080))", f"h.HTTPServer(('{ADDRESS}', 8080))"),
        ("[::]:8080", f"{ADDRESS}:8080"),
        (
            "127.0.0.10 10.0.0.0 localhost.example.org 0.0.0.0.5",
            "127.0.0.10 10.0.0.0 localhost.example.org 0.0.0.0.5",
        ),
    ],
)
def test_the_addresses_a_pod_means_itself_by_become_its_own(text: str, expected: str) -> None:
    assert localize_address(text, ADDRESS) == expected


def test_mount_paths_become_local_folders_on_path_boundaries_only() -> None:
    mounts = [("/home/coder/work", "/L/work"), ("/home/coder", "/L/home")]
    assert localize_paths("/home/coder", mounts) == "/L/home"
    assert localize_paths("--dir=/home/coder/x /home/coder/work/y", mounts) == "--dir=/L/home/x /L/work/y"
    assert localize_paths("/home/coderx /srv/home/coder", mounts) == "/home/coderx /srv/home/coder"


def test_a_local_folder_put_in_is_never_read_again_as_a_mount_path() -> None:
    """A grading Pod mounts /tmp and its tests at /autograder/source; under `make run` with its
    state under /tmp, the tests' local folder is itself under /tmp and must stay as it is."""
    mounts = [("/autograder/source", "/tmp/state/v/source"), ("/tmp", "/tmp/state/v/tmp")]
    assert localize_paths("/autograder/source/run_autograder", mounts) == "/tmp/state/v/source/run_autograder"
    assert localize_paths("/tmp/x /autograder/source", mounts) == "/tmp/state/v/tmp/x /tmp/state/v/source"


def pod(*containers: JSON, volumes: list[JSON] | None = None, init: list[JSON] | None = None) -> JSON:
    spec: JSON = {"containers": list(containers)}
    if volumes is not None:
        spec["volumes"] = volumes
    if init:
        spec["initContainers"] = init
    return {
        "metadata": {
            "name": "vscode-alice-5d9f-abcde",
            "namespace": "classroom",
            "uid": "u-1",
            "labels": {"app": "x"},
        },
        "spec": spec,
    }


def which(program: str) -> str | None:
    return {"code-server": "/apps/bin/code-server", "sh": "/bin/sh"}.get(program)


def plan(p: JSON):  # type: ignore[no-untyped-def]
    return plan_pod(
        p,
        address=ADDRESS,
        claims_root="/S/volumes",
        scratch_root="/S/pods/classroom/p",
        base_env={"PATH": "/apps/bin:/usr/bin", "SECRET_OF_THE_RUNNER": "no"} | {},
        which=which,
    )


CODE = {
    "name": "code",
    "image": "codercom/code-server:4",
    "command": ["code-server"],
    "args": ["--bind-addr", "0.0.0.0:8080", "/home/coder/$(PROJECT)", "$$(LITERAL)"],
    "env": [
        {"name": "PROJECT", "value": "work"},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "WHERE", "value": "$(POD) at 127.0.0.1"},
    ],
    "volumeMounts": [{"name": "data", "mountPath": "/home/coder"}],
    "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 5},
    "ports": [{"name": "http", "containerPort": 8080}],
}
DATA = [{"name": "data", "persistentVolumeClaim": {"claimName": "vscode-alice-data"}}]


def test_a_pod_plan_is_the_container_as_a_kubelet_would_run_it_here() -> None:
    result = plan(pod(CODE, volumes=DATA))
    home = "/S/volumes/classroom/vscode-alice-data"
    assert result.address == ADDRESS and result.home == home
    code = result.containers[0]
    assert code.argv == (
        "/apps/bin/code-server",
        "--bind-addr",
        f"{ADDRESS}:8080",
        f"{home}/work",
        "$(LITERAL)",
    )
    env = dict(code.env)
    assert env["HOME"] == home and env["PROJECT"] == "work"
    # git stops at the volume: nothing above a container's home (the state dir's checkout).
    assert env["GIT_CEILING_DIRECTORIES"] == "/S/volumes/classroom"
    assert env["WHERE"] == f"vscode-alice-5d9f-abcde at {ADDRESS}"
    assert code.workdir == home
    assert code.readiness == Probe("http", port=8080, path="/healthz", period=5.0)
    assert code.ports == (8080,)
    assert home in result.folders


def test_without_storage_home_is_the_pods_own_folder_and_empty_dirs_are_per_pod() -> None:
    shell = {
        "name": "sh",
        "image": "x",
        "command": ["sh", "-c", "cd /cache && exec sleep 1"],
        "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
        "readinessProbe": {"exec": {"command": ["test", "-f", "/cache/ok"]}},
    }
    result = plan(pod(shell, volumes=[{"name": "cache", "emptyDir": {}}]))
    assert result.home == "/S/pods/classroom/p/home"
    assert result.containers[0].argv[2] == "cd /S/pods/classroom/p/volumes/cache && exec sleep 1"
    assert result.containers[0].readiness == Probe(
        "exec", command=("test", "-f", "/S/pods/classroom/p/volumes/cache/ok")
    )


@pytest.mark.parametrize(
    ("change", "reason", "words"),
    [
        (
            {"command": ["jupyter-lab"]},
            "ProgramNotInstalled",
            "jupyter-lab is not installed here (codercom/code-server:4): run `make local-apps`",
        ),
        ({"command": ["my-ide"]}, "ProgramNotInstalled", "install it on this machine"),
        ({"command": None}, "NoCommand", "give the Template's container a command"),
        (
            {"env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
            "UnsupportedEnv",
            "comes from a secretKeyRef",
        ),
        ({"envFrom": [{"configMapRef": {"name": "c"}}]}, "UnsupportedEnv", "envFrom"),
        ({"readinessProbe": {"grpc": {"port": 1}}}, "InvalidProbe", "httpGet, tcpSocket or exec"),
        ({"readinessProbe": {"tcpSocket": {"port": "nope"}}}, "InvalidProbe", "'nope' is not a port"),
    ],
)
def test_what_cannot_run_here_says_why_in_words(change: JSON, reason: str, words: str) -> None:
    container = {**CODE, **change}
    container = {k: v for k, v in container.items() if v is not None}
    with pytest.raises(Unrunnable) as caught:
        plan(pod(container, volumes=DATA))
    assert caught.value.reason == reason and words in caught.value.message
    assert caught.value.container in ("", "code")


def test_unsupported_volumes_and_escaping_sub_paths_are_refused() -> None:
    with pytest.raises(Unrunnable, match="is a configMap volume"):
        plan(pod(CODE, volumes=[{"name": "data", "configMap": {"name": "x"}}]))
    sneaky = {**CODE, "volumeMounts": [{"name": "data", "mountPath": "/home/coder", "subPath": "../../etc"}]}
    with pytest.raises(Unrunnable, match="relative path inside the volume"):
        plan(pod(sneaky, volumes=DATA))


def test_the_runners_own_environment_is_not_inherited_but_the_base_is() -> None:
    env = dict(plan(pod(CODE, volumes=DATA)).containers[0].env)
    assert env["PATH"] == "/apps/bin:/usr/bin"
    assert "USERLAND_IDENTITY_SECRET" not in env  # only what the base and the container say


GOLDEN = Path(__file__).parent / "golden"


def test_listening_sockets_from_proc_net() -> None:
    found = {
        (s.address, s.port, s.inode, s.loopback_only)
        for s in listening_sockets((GOLDEN / "proc_net_tcp.txt").read_text())
        + listening_sockets((GOLDEN / "proc_net_tcp6.txt").read_text())
    }
    assert found == {
        ("127.0.0.1", 4222, 6671, True),
        ("0.0.0.0", 8080, 5960, False),
        ("127.77.0.9", 8080, 5961, True),
        ("::1", 4369, 7001, True),
        ("::", 8080, 7002, False),
        ("127.77.0.9", 80, 7003, True),
    }  # the established connection (state 01) is not a listener


def test_the_pod_status_a_kubelet_would_report() -> None:
    ide = ContainerState(
        "ide",
        "img",
        state="running",
        started_at="T1",
        ready=True,
        restarts=2,
        last_exit={"exitCode": 137, "reason": "Error"},
    )
    db = ContainerState("db", "img2", state="running", started_at="T1", ready=False)
    status = pod_status(
        address=ADDRESS,
        start_time="T0",
        since="T2",
        unrunnable=None,
        init_states=[],
        states=[ide, db],
        initialized=True,
    )
    assert status["phase"] == "Running" and status["podIP"] == ADDRESS
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready == {
        "type": "Ready",
        "status": "False",
        "lastTransitionTime": "T2",
        "reason": "ContainersNotReady",
        "message": "containers with unready status: [db]",
    }
    first = status["containerStatuses"][0]
    assert first["restartCount"] == 2 and first["lastState"] == {
        "terminated": {"exitCode": 137, "reason": "Error"}
    }
    assert first["state"] == {"running": {"startedAt": "T1"}}

    problem = Unrunnable("ProgramNotInstalled", "code-server is not installed here", "ide")
    blocked = pod_status(
        address=ADDRESS,
        start_time="T0",
        since="T2",
        unrunnable=problem,
        init_states=[],
        states=[ContainerState("ide", "img"), ContainerState("db", "img2")],
        initialized=True,
    )
    assert blocked["phase"] == "Pending"
    assert blocked["containerStatuses"][0]["state"] == {
        "waiting": {"reason": "ProgramNotInstalled", "message": "code-server is not installed here"}
    }
    assert blocked["containerStatuses"][1]["state"] == {"waiting": {"reason": "ContainerCreating"}}


def test_times_move_only_when_something_happened() -> None:
    ide = ContainerState("ide", "img", state="running", started_at="T1", ready=True)
    old = pod_status(
        address=ADDRESS,
        start_time="T0",
        since="T1",
        unrunnable=None,
        init_states=[],
        states=[ide],
        initialized=True,
    )
    # What the API server adds (qosClass, lastProbeTime: null) does not count as a difference.
    stored = {
        **old,
        "qosClass": "Burstable",
        "conditions": [{**c, "lastProbeTime": None} for c in old["conditions"]],
    }
    later = pod_status(
        address=ADDRESS,
        start_time="T9",
        since="T9",
        unrunnable=None,
        init_states=[],
        states=[ide],
        initialized=True,
    )
    assert same_status(later, stored)
    kept = keep_transition_times(later, stored)
    assert {c["lastTransitionTime"] for c in kept["conditions"]} == {"T1"} and kept["startTime"] == "T0"
    ide.ready = False
    changed = keep_transition_times(
        pod_status(
            address=ADDRESS,
            start_time="T9",
            since="T9",
            unrunnable=None,
            init_states=[],
            states=[ide],
            initialized=True,
        ),
        stored,
    )
    assert not same_status(changed, stored)
    assert next(c for c in changed["conditions"] if c["type"] == "Ready")["lastTransitionTime"] == "T9"


def test_each_runner_takes_a_block_of_addresses_nobody_listens_in() -> None:
    import ipaddress
    import random

    from userland.local.pod_addresses import ADDRESS_BLOCKS, free_block

    taken = {f"127.{n}.0.7" for n in range(64, 128) if n != 100} | {"0.0.0.0", "::1", "127.0.0.1"}
    assert free_block(taken, random.Random(1)) == ipaddress.IPv4Network("127.100.0.0/16")
    blocks = {free_block(set(), random.Random(seed)) for seed in range(20)}
    assert len(blocks) > 1 and all(b.subnet_of(ADDRESS_BLOCKS) and b.prefixlen == 16 for b in blocks)
    with pytest.raises(RuntimeError, match="too many local runners"):
        free_block(taken | {"127.100.3.3"})


def test_with_a_mount_table_of_its_own_a_home_volume_keeps_its_path() -> None:
    """Under `make run` VS Code opened `?folder=/…/.run/environments/volumes/…`: the host's path.
    With its own mount table (local/mountns.py) a volume under /home is mounted at its path, so
    the program, its arguments, HOME and working folder say /home/coder as in a cluster; probes
    (run on this machine) and other mount paths keep the local folder."""
    shell = {**CODE, "volumeMounts": [{"name": "data", "mountPath": "/home/coder"},
                                      {"name": "db", "mountPath": "/var/lib/mysql"}],
             "args": ["/home/coder/$(PROJECT)", "--db=/var/lib/mysql"],
             "readinessProbe": {"exec": {"command": ["test", "-d", "/home/coder"]}},
             "workingDir": "/home/coder"}
    volumes = [*DATA, {"name": "db", "emptyDir": {}}]
    result = plan_pod(pod(shell, volumes=volumes), address=ADDRESS, claims_root="/S/volumes",
                      scratch_root="/S/pods/classroom/p", base_env={"PATH": "/apps/bin:/usr/bin"},
                      which=which, own_home_paths=True)
    home = "/S/volumes/classroom/vscode-alice-data"
    code = result.containers[0]
    assert code.argv == ("/apps/bin/code-server", "/home/coder/work", "--db=/S/pods/classroom/p/volumes/db")
    assert code.binds == ((home, "/home/coder"),)
    env = dict(code.env)
    assert env["HOME"] == "/home/coder"
    assert env["GIT_CEILING_DIRECTORIES"] == "/S/pods/classroom/p/volumes:/home"
    assert (code.workdir, code.host_workdir) == ("/home/coder", home)
    assert code.readiness == Probe("exec", command=("test", "-d", home))
    assert home in result.folders  # made (and handed to the environments' user) on this machine
    # Without a mount table of its own, or with programs under /home, everything is rewritten.
    for kwargs in ({"own_home_paths": False},
                   {"own_home_paths": True, "base_env": {"PATH": "/home/dev/apps/bin:/usr/bin"}}):
        args = {"address": ADDRESS, "claims_root": "/S/volumes", "scratch_root": "/S/pods/classroom/p",
                "base_env": {"PATH": "/apps/bin:/usr/bin"}, "which": which, **kwargs}
        other = plan_pod(pod(shell, volumes=volumes), **args).containers[0]  # type: ignore[arg-type]
        assert other.binds == () and other.argv[1] == f"{home}/work" and other.workdir == home


def test_a_pod_that_ran_to_completion_reports_its_phase() -> None:
    done = ContainerState("work", "img", state="terminated", reason="Completed", exit_code=0)
    failed = ContainerState("work", "img", state="terminated", reason="Error", exit_code=3)
    for state, finished, deadline in ((done, "Succeeded", False), (failed, "Failed", False),
                                      (failed, "Failed", True)):
        status = pod_status(address=ADDRESS, start_time="T0", since="T1", unrunnable=None, init_states=[],
                            states=[state], initialized=True, finished=finished, deadline_exceeded=deadline)
        assert status["phase"] == finished
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "PodCompleted") and "message" not in ready
        assert status.get("reason") == ("DeadlineExceeded" if deadline else None)
