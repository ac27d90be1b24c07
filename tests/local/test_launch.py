"""What the runner starts for a Deployment (pure planning; PATH lookups are injected)."""

from __future__ import annotations

from typing import Any

from userland.local.launch import LaunchSpec, plan_launch, wanted_replicas

PY = "/usr/bin/python3-test"


def deployment(container: dict[str, Any], replicas: int | None = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"spec": {"containers": [container]}}}
    if replicas is not None:
        spec["replicas"] = replicas
    return {"metadata": {"name": "demo-alice", "namespace": "ns",
                         "labels": {"userland.dev/user": "alice", "userland.dev/template": "demo"}},
            "spec": spec}


def on_path(*names: str) -> Any:
    return lambda name: f"/bin/{name}" if name in names else None


def test_missing_executable_runs_the_demo() -> None:
    spec = plan_launch(deployment({"command": ["userland-demo-ide"], "args": ["--port", "8080"]}),
                       python=PY, which=on_path())
    assert spec == LaunchSpec("demo", (PY, "-m", "userland.local.demo_env", "--port", "$(PORT)",
                                       "--user", "alice", "--template", "demo"))
    assert spec.command(4321)[4] == "4321"


def test_no_command_runs_the_demo_even_if_args_name_a_port() -> None:
    # The image's entrypoint is unknown here: never guess it.
    spec = plan_launch(deployment({"args": ["--bind-addr", "0.0.0.0:8080"]}), python=PY,
                       which=on_path("code-server"))
    assert spec.kind == "demo"


def test_command_that_cannot_be_told_a_port_runs_the_demo() -> None:
    spec = plan_launch(deployment({"command": ["sleep"], "args": ["3600"]}), python=PY,
                       which=on_path("sleep"))
    assert spec.kind == "demo"


def test_bind_addr_is_rewritten_to_loopback_and_env_passed() -> None:
    container = {"command": ["code-server"],
                 "args": ["--auth", "none", "--bind-addr", "0.0.0.0:8080", "/home/coder"],
                 "env": [{"name": "STUDENT", "value": "alice"},
                         {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "x", "key": "y"}}}]}
    spec = plan_launch(deployment(container), python=PY, which=on_path("code-server"))
    assert spec.kind == "template"
    assert spec.command(5000) == ["/bin/code-server", "--auth", "none", "--bind-addr", "127.0.0.1:5000",
                                  "/home/coder"]
    assert spec.environment(5000) == {"STUDENT": "alice", "PORT": "5000"}


def test_port_option_and_port_reference() -> None:
    spec = plan_launch(deployment({"command": ["srv", "--port=80"]}), python=PY, which=on_path("srv"))
    assert spec.command(7) == ["/bin/srv", "--port=7"]
    spec = plan_launch(deployment({"command": ["python3"], "args": ["-m", "http.server", "$(PORT)"]}),
                       python=PY, which=on_path("python3"))
    assert spec.command(9) == ["/bin/python3", "-m", "http.server", "9"]


def test_wanted_replicas() -> None:
    assert wanted_replicas(deployment({}, replicas=None)) == 1
    assert wanted_replicas(deployment({}, replicas=0)) == 0
    deleting = deployment({}, replicas=1)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert wanted_replicas(deleting) == 0
