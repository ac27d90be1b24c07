"""The kustomize base in deploy/ renders, and what it renders is what the components expect.

Real: kubectl's built-in kustomize (no cluster). The rendered YAML stream is parsed and checked
against the project's own code where the two must agree (settings names, the gateway's pod
labels, the packages the image must contain).
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from userland.cli import main
from userland.platform.model import models
from userland.platform.model.settings import Settings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
KUBECTL = "/usr/bin/kubectl"
NAMESPACE = "userland-system"


def kustomize(folder: Path) -> list[dict[str, Any]]:
    result = subprocess.run([KUBECTL, "kustomize", str(folder)], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return kustomize(DEPLOY)


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} found"
    return matches[0]


def deployments(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "Deployment"]


def containers(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    spec = deployment["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def test_base_renders_the_expected_kinds(rendered: list[dict[str, Any]]) -> None:
    kinds = Counter(d["kind"] for d in rendered)
    assert kinds == Counter({
        "Namespace": 1, "CustomResourceDefinition": 5, "ServiceAccount": 4, "ClusterRole": 4,
        "ClusterRoleBinding": 3, "Role": 3, "RoleBinding": 3, "ConfigMap": 1, "Deployment": 5,
        "Service": 6, "NetworkPolicy": 7, "PersistentVolumeClaim": 1, "PriorityClass": 1,
    })
    # No Secret with placeholder values that could be deployed by mistake.
    assert "Secret" not in kinds


def test_everything_namespaced_is_in_userland_system(rendered: list[dict[str, Any]]) -> None:
    cluster_scoped = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
                      "PriorityClass"}
    for doc in rendered:
        where = doc["metadata"].get("namespace")
        if doc["kind"] in cluster_scoped:
            assert where is None, doc["metadata"]["name"]
        else:
            assert where == NAMESPACE, f"{doc['kind']}/{doc['metadata']['name']}"
    namespace = find(rendered, "Namespace", NAMESPACE)
    # The operator's NetworkPolicies select the gateway namespace by this label (1.20 lacks it).
    assert namespace["metadata"]["labels"]["kubernetes.io/metadata.name"] == NAMESPACE


def test_the_crds_are_the_files_in_deploy_crds(rendered: list[dict[str, Any]]) -> None:
    # The control plane fixture applies every deploy/crds/*.yaml as a CRD: nothing else there.
    files = sorted((DEPLOY / "crds").iterdir())
    assert [f.name for f in files] == ["assignments.userland.dev.yaml", "courserequests.userland.dev.yaml",
                                       "ltiregistrations.userland.dev.yaml",
                                       "templates.userland.dev.yaml", "userlands.userland.dev.yaml"]
    for f in files:
        assert yaml.safe_load(f.read_text()) in [d for d in rendered
                                                 if d["kind"] == "CustomResourceDefinition"]


def test_gateway_pods_carry_the_label_the_operator_admits(rendered: list[dict[str, Any]]) -> None:
    gateway = find(rendered, "Deployment", "userland-gateway")
    labels = gateway["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "userland-gateway"
    # The operator's NetworkPolicies admit pods with exactly Settings.gateway_pod_labels.
    for key, value in Settings().gateway_pod_labels:
        assert labels.get(key) == value
    # ... and no other pod in the base has them (only the gateway reaches environments).
    for other in deployments(rendered):
        if other is not gateway:
            other_labels = other["spec"]["template"]["metadata"]["labels"]
            assert other_labels.get("app.kubernetes.io/name") != "userland-gateway"


@pytest.mark.parametrize("name", ["userland-operator", "userland-gateway", "userland-web",
                                  "userland-redis", "userland-store"])
def test_every_container_is_locked_down_and_sized(rendered: list[dict[str, Any]], name: str) -> None:
    deployment = find(rendered, "Deployment", name)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    for container in containers(deployment):
        ctx = container["securityContext"]
        assert ctx["runAsNonRoot"] is True
        assert ctx["readOnlyRootFilesystem"] is True
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["capabilities"]["drop"] == ["ALL"]
        assert "add" not in ctx["capabilities"]
        for bound in ("requests", "limits"):
            assert set(container["resources"][bound]) >= {"cpu", "memory"}, (container["name"], bound)


def named_port(container: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in container["ports"] if p["name"] == port]
    return int(number)


# name, replicas, subcommand, port, probe kind with /healthz on that port
COMPONENTS = [
    ("userland-operator", 2, "operator", 8081, "livenessProbe"),
    ("userland-gateway", 2, "gateway", 8081, "readinessProbe"),  # its internal listener
    ("userland-web", 2, "web", 8080, "readinessProbe"),
    ("userland-store", 1, "store", 8080, "readinessProbe"),
]


@pytest.mark.parametrize(("name", "replicas", "command", "port", "probe"), COMPONENTS,
                         ids=[c[0] for c in COMPONENTS])
def test_components(rendered: list[dict[str, Any]], name: str, replicas: int, command: str,
                    port: int, probe: str) -> None:
    deployment = find(rendered, "Deployment", name)
    assert deployment["spec"]["replicas"] == replicas
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == name
    (container,) = pod["containers"]
    assert container["args"][0] == command
    assert "command" not in container  # the image's ENTRYPOINT is `userland`
    assert port in [p["containerPort"] for p in container["ports"]]
    check = container[probe]["httpGet"]
    assert (check["path"], named_port(container, check["port"])) == ("/healthz", port)


@pytest.mark.parametrize(("name", "port"), [("userland-operator", 8081), ("userland-gateway", 8000),
                                           ("userland-web", 8080), ("userland-store", 8080)])
def test_args_parse_with_the_real_command_line(rendered: list[dict[str, Any]], name: str,
                                               port: int) -> None:
    (container,) = containers(find(rendered, "Deployment", name))
    args = main._parser().parse_args(container["args"])
    assert args.listen == f"0.0.0.0:{port}"  # what the container port and probes point at


def test_the_gateways_internal_endpoints_have_their_own_port_and_service(
        rendered: list[dict[str, Any]]) -> None:
    """/healthz, /metrics and /auth/verify answer only on USERLAND_INTERNAL_LISTEN: the probe,
    the Prometheus annotation and the internal Service point there; the public Service (what
    the Ingress routes to) does not carry that port."""
    deployment = find(rendered, "Deployment", "userland-gateway")
    (container,) = containers(deployment)
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    internal = int(Settings.from_env(env).internal_listen.rsplit(":", 1)[1])
    public = int(main._parser().parse_args(container["args"]).listen.rsplit(":", 1)[1])
    assert internal != public
    assert named_port(container, "internal") == internal
    assert named_port(container, container["readinessProbe"]["httpGet"]["port"]) == internal
    assert deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == str(internal)
    public_ports = find(rendered, "Service", "userland-gateway")["spec"]["ports"]
    assert [named_port(container, p["targetPort"]) for p in public_ports] == [public]
    internal_ports = find(rendered, "Service", "userland-gateway-internal")["spec"]["ports"]
    assert [named_port(container, p["targetPort"]) for p in internal_ports] == [internal]


def test_gateway_outlives_its_websocket_grace(rendered: list[dict[str, Any]]) -> None:
    deployment = find(rendered, "Deployment", "userland-gateway")
    (container,) = containers(deployment)
    grace = main._parser().parse_args(container["args"]).grace
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > grace


def test_one_image_for_every_component(rendered: list[dict[str, Any]]) -> None:
    images = {c["image"] for d in deployments(rendered) if d["metadata"]["name"] != "userland-redis"
              for c in containers(d)}
    assert len(images) == 1
    (redis,) = containers(find(rendered, "Deployment", "userland-redis"))
    assert redis["image"].startswith("redis:7")
    assert "--appendonly" in redis["args"]


def test_operator_leader_election_env(rendered: list[dict[str, Any]]) -> None:
    (container,) = containers(find(rendered, "Deployment", "userland-operator"))
    env = env_of(container)
    for name in ("POD_NAMESPACE", "USERLAND_LEASE_NAMESPACE", "USERLAND_GATEWAY_NAMESPACE"):
        assert env[name]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}, name
    # The Lease must be where the operator's Role lets it write: the operator's namespace.
    role = find(rendered, "Role", "userland-operator-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE


SETTINGS_ENV = {f"USERLAND_{f.name.upper()}" for f in dataclasses.fields(Settings)}


def test_config_names_only_real_settings(rendered: list[dict[str, Any]]) -> None:
    (config,) = [d for d in rendered if d["kind"] == "ConfigMap"]
    assert config["metadata"]["name"].startswith("userland-config-")  # hashed: changes roll pods
    assert set(config["data"]) <= SETTINGS_ENV, set(config["data"]) - SETTINGS_ENV
    # What the config sets parses as settings (one clear error line otherwise).
    Settings.from_env(config["data"])
    for deployment in deployments(rendered):
        for container in containers(deployment):
            for name in env_of(container):
                assert name in SETTINGS_ENV or not name.startswith("USERLAND_"), name
            for source in container.get("envFrom", []):
                assert source["configMapRef"]["name"] == config["metadata"]["name"]


SECRET_KEYS = {
    "USERLAND_GITHUB_CLIENT_ID": "github-client-id",
    "USERLAND_GITHUB_CLIENT_SECRET": "github-client-secret",
    "USERLAND_IDENTITY_SECRET": "identity-secret",
    "USERLAND_STORE_SECRET": "store-secret",
}


@pytest.mark.parametrize(("name", "secrets"), [
    ("userland-gateway", set(SECRET_KEYS) - {"USERLAND_STORE_SECRET"}),
    ("userland-web", {"USERLAND_IDENTITY_SECRET", "USERLAND_STORE_SECRET"}),
    ("userland-operator", {"USERLAND_STORE_SECRET"}),
    ("userland-redis", set()),
    ("userland-store", {"USERLAND_STORE_SECRET"}),
])
def test_secrets_come_from_userland_secrets(rendered: list[dict[str, Any]], name: str,
                                            secrets: set[str]) -> None:
    (container,) = containers(find(rendered, "Deployment", name))
    from_secrets = {n: e["valueFrom"]["secretKeyRef"] for n, e in env_of(container).items()
                    if "secretKeyRef" in e.get("valueFrom", {})}
    assert set(from_secrets) == secrets
    for env_name, ref in from_secrets.items():
        assert ref == {"name": "userland-secrets", "key": SECRET_KEYS[env_name]}
    # Secrets are never written into the config or the manifests.
    assert not [e for e in container.get("env", []) if e["name"] in SECRET_KEYS and "value" in e]


def test_services_select_their_pods(rendered: list[dict[str, Any]]) -> None:
    services = [d for d in rendered if d["kind"] == "Service"]
    for service in services:
        selector = service["spec"]["selector"]
        (target,) = [d for d in deployments(rendered)
                     if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()]
        assert target["spec"]["selector"]["matchLabels"].items() <= selector.items()
        (container,) = containers(target)
        for port in service["spec"]["ports"]:
            named_port(container, port["targetPort"])  # exists
    assert find(rendered, "Service", "userland-redis")["spec"]["ports"][0]["port"] == 6379
    # The gateway's default USERLAND_WEB_URL names this Service and port.
    assert find(rendered, "Service", "userland-web")["spec"]["ports"][0]["port"] == 8080


def test_network_policies(rendered: list[dict[str, Any]]) -> None:
    deny = find(rendered, "NetworkPolicy", "default-deny-ingress")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    gateway = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "userland-gateway"}}}
    web = find(rendered, "NetworkPolicy", "userland-web")["spec"]["ingress"]
    # Pages only from the gateway; health and metrics (its internal port) for a Prometheus
    # anywhere but a course namespace.
    assert web == [{"from": [gateway], "ports": [{"protocol": "TCP", "port": 8080}]},
                   {"from": [NOT_A_COURSE], "ports": [{"protocol": "TCP", "port": 8081}]}]
    redis = find(rendered, "NetworkPolicy", "userland-redis")["spec"]["ingress"]
    assert gateway in redis[0]["from"]
    assert len(redis[0]["from"]) == 2
    # Every Deployment's pods are covered by a policy that admits something.
    policies = [d for d in rendered if d["kind"] == "NetworkPolicy" and d["spec"].get("ingress")]
    for deployment in deployments(rendered):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert any(p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
                   for p in policies), deployment["metadata"]["name"]


NOT_A_COURSE = {"namespaceSelector": {"matchExpressions": [
    {"key": "userland.dev/course", "operator": "NotIn", "values": ["true"]}]}}


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels, matchExpressions) as Kubernetes evaluates it."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        holds = {"In": labels.get(key) in values, "NotIn": labels.get(key) not in values,
                 "Exists": key in labels, "DoesNotExist": key not in labels}[operator]
        if not holds:
            return False
    return True


def _admits(policy: dict[str, Any], namespace: dict[str, str], pod: dict[str, str], port: int) -> bool:
    """Whether one NetworkPolicy (in userland-system) lets a pod of another namespace in on `port`."""
    for rule in policy["spec"].get("ingress") or []:
        if rule.get("ports") and not any(p["port"] == port for p in rule["ports"]):
            continue
        peers = rule.get("from")
        if not peers:
            return True
        for peer in peers:
            if "ipBlock" in peer:
                return True  # an address range: a pod's address may be in it
            if "namespaceSelector" not in peer:
                continue  # a podSelector alone: pods of userland-system only
            if _selects(peer["namespaceSelector"], namespace) and _selects(peer.get("podSelector") or {},
                                                                           pod):
                return True
    return False


@pytest.mark.parametrize("pod", [
    {"app.kubernetes.io/managed-by": "userland-operator"},  # a student's environment
    {"app.kubernetes.io/managed-by": "userland-operator", "app.kubernetes.io/component": "assignment-worker"},
    {"app": "anything-a-student-starts"},
], ids=["environment", "worker", "other"])
def test_no_internal_port_is_open_to_a_course_namespace(rendered: list[dict[str, Any]],
                                                        pod: dict[str, str]) -> None:
    """Metrics, /auth/verify and health (every component's port 8081) are not for students' Pods,
    whichever labels their Pods carry; a monitoring namespace still reaches them."""
    course = {"kubernetes.io/metadata.name": "cs101", "userland.dev/course": "true"}
    monitoring = {"kubernetes.io/metadata.name": "monitoring"}
    policies = [d for d in rendered if d["kind"] == "NetworkPolicy"]
    for deployment in deployments(rendered):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        ports = {p["containerPort"] for c in containers(deployment) for p in c.get("ports", [])}
        if 8081 not in ports:
            continue
        mine = [p for p in policies if "Ingress" in p["spec"]["policyTypes"]
                and _selects(p["spec"]["podSelector"], labels)]
        name = deployment["metadata"]["name"]
        assert not any(_admits(p, course, pod, 8081) for p in mine), name
        assert any(_admits(p, monitoring, {"app": "prometheus"}, 8081) for p in mine), name


def test_the_store_may_reach_dns_and_git_hosts_only(rendered: list[dict[str, Any]]) -> None:
    """The store fetches what instructors name: never the cloud's metadata service, nor the
    cluster's own addresses (the API server, Redis, students' environments), nor other ports."""
    import ipaddress
    store = find(rendered, "Deployment", "userland-store")["spec"]["template"]["metadata"]["labels"]
    egress = [p for p in rendered if p["kind"] == "NetworkPolicy" and "Egress" in p["spec"]["policyTypes"]
              and _selects(p["spec"]["podSelector"], store)]
    assert [p["metadata"]["name"] for p in egress] == ["userland-store-egress"]
    rules = egress[0]["spec"]["egress"]

    def reachable(address: str, port: int) -> bool:
        for rule in rules:
            if not any(p["port"] == port for p in rule["ports"]):
                continue
            if "to" not in rule:
                return True
            for peer in rule["to"]:
                block = peer["ipBlock"]
                inside = ipaddress.ip_address(address) in ipaddress.ip_network(block["cidr"])
                if inside and not any(ipaddress.ip_address(address) in ipaddress.ip_network(e)
                                      for e in block.get("except", [])):
                    return True
        return False
    assert reachable("140.82.112.3", 443) and reachable("140.82.112.3", 80)  # github.com
    assert reachable("10.96.0.10", 53)  # the cluster's DNS
    for address in ("169.254.169.254", "10.96.0.1", "10.244.1.7", "172.20.0.5", "192.168.1.10",
                    "100.64.3.2", "127.0.0.1"):
        assert not reachable(address, 443), address
    assert not reachable("140.82.112.3", 6379) and not reachable("140.82.112.3", 22)


def test_rbac_renders_alone() -> None:
    kinds = Counter(d["kind"] for d in kustomize(DEPLOY / "rbac"))
    # Role 3: the operator's Lease, the gateway's LTI registrations and key Secret, and the web
    # UI's (the LMS roster sync and grade passback: registrations and the key Secret, read only).
    assert kinds == Counter({"ServiceAccount": 4, "ClusterRole": 4, "ClusterRoleBinding": 3,
                             "Role": 3, "RoleBinding": 3})


# --- examples ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def examples() -> dict[str, dict[str, Any]]:
    docs = kustomize(DEPLOY / "examples")
    # The example course: deploy/course/ (namespace, RoleBinding, NetworkPolicies, VS Code) + the others.
    assert {d["kind"] for d in docs} == {"Namespace", "Template", "RoleBinding", "NetworkPolicy"}
    templates = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Template"}
    for template in templates.values():
        assert template["metadata"]["namespace"] == "classroom"
    return templates


def test_the_examples_are_vscode_jupyterlab_and_mariadb(examples: dict[str, dict[str, Any]]) -> None:
    assert set(examples) == {"vscode", "jupyterlab", "mariadb"}


@pytest.mark.parametrize(("name", "port", "mount"), [
    ("vscode", 8080, "/home/coder"), ("jupyterlab", 8888, "/home/jovyan"),
    ("mariadb", 8080, "/var/lib/mysql"),
])
def test_every_example_can_run_anywhere(examples: dict[str, dict[str, Any]], name: str, port: int,
                                        mount: str) -> None:
    """What makes one Template object run in a cluster and in `make run` alike: an explicit
    command (locally there is no image entrypoint), a port no one needs root for, storage,
    non-root containers without extra privileges, a readiness probe, limits."""
    spec = models.Template.from_object(examples[name]).spec
    assert spec.port == port and spec.port >= 1024
    assert spec.storage is not None and spec.storage.mount_path == mount
    assert spec.pod_spec["securityContext"]["runAsNonRoot"] is True
    for container in spec.pod_spec["containers"]:
        assert container["command"], f"{name}/{container['name']} has no command"
        assert container["image"].startswith("localhost/userland-")  # built by deploy/images/
        assert container["securityContext"] == {"allowPrivilegeEscalation": False,
                                                "capabilities": {"drop": ["ALL"]}}
        assert container["readinessProbe"] and container["resources"]["limits"]
    served = [c for c in spec.pod_spec["containers"]
              if any(p["containerPort"] == port for p in c.get("ports", []))]
    assert len(served) == 1  # exactly one container answers on the Template's port


def test_vscode_example(examples: dict[str, dict[str, Any]]) -> None:
    (container,) = models.Template.from_object(examples["vscode"]).spec.pod_spec["containers"]
    assert container["command"] == ["code-server"]
    args = container["args"]
    assert args[args.index("--auth") + 1] == "none"
    assert args[args.index("--bind-addr") + 1] == "0.0.0.0:8080"
    assert any("${USER}" in e.get("value", "") for e in container["env"])


def test_jupyterlab_example(examples: dict[str, dict[str, Any]]) -> None:
    (container,) = models.Template.from_object(examples["jupyterlab"]).spec.pod_spec["containers"]
    assert container["command"] == ["jupyter-lab"]
    assert "--ServerApp.allow_remote_access=True" in container["args"]  # the gateway keeps the Host
    assert "--ServerApp.port=8888" in container["args"]


def test_mariadb_phpmyadmin_example(examples: dict[str, dict[str, Any]]) -> None:
    spec = models.Template.from_object(examples["mariadb"]).spec
    pma, mariadb = spec.pod_spec["containers"]
    assert pma["command"] == ["userland-phpmyadmin", "0.0.0.0:8080"]
    assert env_of(pma)["PMA_HOST"]["value"] == "127.0.0.1"
    # The password each student gets is made on their own volume, read by both containers.
    password = env_of(mariadb)["MARIADB_PASSWORD_FILE"]["value"]
    assert env_of(pma)["PMA_PASSWORD_FILE"]["value"] == password and password.startswith("/var/lib/mysql/")
    assert "--bind-address=127.0.0.1" in mariadb["command"]  # unreachable from outside the pod


# --- the image ---------------------------------------------------------------------------------


def test_dockerfile_installs_every_package_and_runs_unprivileged() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    # The base is a build argument (python:3.11-slim unless told otherwise), used by both stages.
    assert re.search(r"^ARG BASE=python:3\.11-slim$", dockerfile, re.M)
    assert re.findall(r"^FROM (\S+)", dockerfile, re.M) == ["${BASE}", "${BASE}"]
    assert 'ENTRYPOINT ["userland"]' in dockerfile
    (user,) = re.findall(r"^USER (\S+)", dockerfile, re.M)
    assert user.split(":")[0].isdigit() and user.split(":")[0] != "0"
    # Every folder pyproject maps to a userland.* package is copied into the build.
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    # ... and is part of the hash make test-cluster tags the image with (a change rebuilds it).
    (sources,) = re.findall(r"^sources=\(([^)]*)\)", (REPO / "scripts" / "node-images.sh").read_text(), re.M)
    for folder in pyproject["tool"]["setuptools"]["package-dir"].values():
        assert re.search(rf"^COPY {folder}/ {folder}/$", dockerfile, re.M), folder
        assert folder in sources.split(), folder
    # The assignment store fetches with git.
    assert re.search(r"apt-get install -y --no-install-recommends git\b", dockerfile)
