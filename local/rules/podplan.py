"""What the local runner runs for one Pod: pure functions from the Pod object to a plan.

The local runner plays the kubelet for `userland local`. A real kubelet starts the Pod's
containers from their images, in a network namespace of the Pod's own, with its volumes
mounted. Here there are no images: each container's own `command` and `args` run as a local
program, found on this machine's PATH (plus the apps `make local-apps` installs). What the
kubelet would supply is supplied the nearest way a process on a shared machine can have it:

- **The Pod's own address.** Every Pod gets a loopback address of its own (127.x.y.z, see
  runner.py), shared by its containers, so two students' MariaDBs both listen on port 3306
  without clashing, and phpMyAdmin reaches the MariaDB of its own Pod only. The addresses
  a Pod would mean itself by (`0.0.0.0`, `127.0.0.1`, `localhost`) are rewritten to that
  address in command, args and env values: a wildcard bind therefore never reaches beyond
  loopback (what still does is caught at run time: sockets.py).
- **Volumes.** A `persistentVolumeClaim` volume is a folder per claim under the state dir
  (kept across restarts and re-adds, as the claim is); an `emptyDir` a folder per Pod. A
  container's `mountPath` is rewritten to that folder wherever it appears in command, args,
  env values and workingDir, except, when the runner can give containers a mount table of
  their own (`own_home_paths`, mountns.py), for mount paths under /home: those are mounted at
  their own path (`binds`), so the student sees `/home/coder` as in a cluster. Other volume
  kinds are refused with a clear reason.
- **Environment.** The container's `env` in order with `$(VAR)` expansion (expansion.py),
  `fieldRef`s the kubelet fills (Pod name, namespace, address); `HOME` is the student's volume
  when the Pod has one (the image's HOME is unknown here), `PATH` the machine's with the apps,
  and `GIT_CEILING_DIRECTORIES` the folder the Pod's volumes live in: in a container nothing is
  above the student's home, so git (and VS Code's git view) must not find the repository the
  state dir sits in (a checkout of Userland, under `make run`).
  Nothing of the runner's own environment leaks in (it may hold secrets).

Anything the runner cannot do faithfully is an `Unrunnable` with a reason and a sentence a
person can act on, which the runner reports in the Pod's status and as Events.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any, Literal

from userland.local.rules.expansion import expand, expand_env
from userland.platform.model import naming
from userland.platform.model.objects import meta

JSON = dict[str, Any]
Which = Callable[[str], str | None]

# Programs `make local-apps` installs: missing ones get that advice.
LOCAL_APPS = frozenset(
    {
        "code-server",
        "userland-mariadb",
        "userland-phpmyadmin",
        "jupyter",
        "jupyter-lab",
        "jupyterhub-singleuser",
        "mariadbd",
        "mysqld",
        "mariadb-install-db",
        "php",
        "phpmyadmin",
    }
)
# The demo Template's program: the runner's built-in demo environment.
DEMO_PROGRAM = "userland-demo-ide"
# The platform's own program (its image's entry point): the operator's worker Pods run it. The
# runner runs it from its own installation (runner.py, `own_program`).
PLATFORM_PROGRAM = "userland"
RestartPolicy = Literal["Always", "OnFailure", "Never"]
# Processes a grading Pod's container may have at once (a cluster's node has its podPidsLimit).
GRADING_PIDS_MAX = 256
# Volumes mounted under this folder keep their own path in a container's own mount table
# (mountns.py), which has a fresh, empty one of these.
OWN_PATH_ROOT = "/home"


class Unrunnable(Exception):
    """The Pod cannot run here: `reason` (CamelCase, as a kubelet's) and a sentence to act on."""

    def __init__(self, reason: str, message: str, container: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.container = container


@dataclass(frozen=True)
class Probe:
    kind: Literal["http", "tcp", "exec"]
    port: int = 0
    path: str = "/"
    headers: tuple[tuple[str, str], ...] = ()
    command: tuple[str, ...] = ()
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3

    def describe(self) -> str:
        """For messages: 'HTTP GET /healthz on port 8080' and the like."""
        if self.kind == "http":
            return f"HTTP GET {self.path} on port {self.port}"
        if self.kind == "tcp":
            return f"a TCP connection to port {self.port}"
        return f"the command {shlex.join(self.command)}"


@dataclass(frozen=True)
class ContainerPlan:
    name: str
    image: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    workdir: str
    readiness: Probe | None = None
    liveness: Probe | None = None
    ports: tuple[int, ...] = ()
    # (local folder, path in the container): mounted at their own path in a mount table of the
    # container's own (mountns.py); empty when every path was rewritten to its local folder.
    binds: tuple[tuple[str, str], ...] = ()
    # The working folder as this machine sees it (exec probes run outside the container).
    host_workdir: str = ""
    # The most processes its cgroup may hold (pids.max), where the runner has cgroups: a grading
    # Pod's (docs/grading.md: a fork bomb in a student's copy stops there).
    pids_max: int | None = None

    @property
    def program(self) -> str:
        return PurePosixPath(self.argv[0]).name if self.argv else ""


@dataclass(frozen=True)
class PodPlan:
    address: str
    home: str
    init_containers: tuple[ContainerPlan, ...] = ()
    containers: tuple[ContainerPlan, ...] = ()
    # Local folders the runner creates (and hands to the unprivileged user) before starting.
    folders: tuple[str, ...] = field(default_factory=tuple)
    # Always: containers restart for ever (a Deployment's Pods); OnFailure and Never: the Pod runs
    # to completion (Succeeded or Failed), as the operator's worker Pods do.
    restart_policy: RestartPolicy = "Always"
    # Seconds the Pod may run before it is stopped and Failed (DeadlineExceeded); None: no bound.
    active_deadline: float | None = None


# -- addresses

_SELF_ADDRESS = re.compile(r"(?<![\w.-])(?:0\.0\.0\.0|127\.0\.0\.1|localhost)(?![\w-]|\.\w)")
_WILDCARD_V6 = re.compile(r"(?<![\w:])\[::\](?=:\d)")


def localize_address(text: str, address: str) -> str:
    """`text` with the addresses a Pod means itself by replaced with its own loopback address."""
    return _WILDCARD_V6.sub(address, _SELF_ADDRESS.sub(address, text))


# -- volumes


def volume_folders(pod: JSON, claims_root: str, scratch_root: str) -> dict[str, str]:
    """Volume name -> local folder: a claim's folder outlives the Pod, an emptyDir's does not."""
    folders: dict[str, str] = {}
    namespace = str(meta(pod).get("namespace") or "default")
    for volume in _spec(pod).get("volumes") or []:
        if not isinstance(volume, dict) or not volume.get("name"):
            continue
        name = str(volume["name"])
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if claim:
            folders[name] = f"{claims_root}/{namespace}/{claim}"
        elif "emptyDir" in volume:
            folders[name] = f"{scratch_root}/volumes/{name}"
        else:
            kind = next((k for k in volume if k != "name"), "unknown")
            raise Unrunnable(
                "UnsupportedVolume",
                f"the volume '{name}' is a {kind} volume; the local runner "
                "supports persistentVolumeClaim and emptyDir volumes only",
            )
    return folders


def _mounts(container: JSON, folders: Mapping[str, str]) -> list[tuple[str, str]]:
    """(mountPath, local folder) pairs, longest mountPath first (the most specific wins)."""
    pairs = []
    for mount in container.get("volumeMounts") or []:
        if not isinstance(mount, dict):
            continue
        name, path = str(mount.get("name") or ""), str(mount.get("mountPath") or "")
        if name not in folders or not path.startswith("/"):
            raise Unrunnable(
                "UnsupportedVolume",
                f"the volume mount '{name}' at '{path}' names no volume of this Pod",
                str(container.get("name") or ""),
            )
        local = folders[name]
        sub = str(mount.get("subPath") or "")
        if sub:
            if sub.startswith("/") or ".." in PurePosixPath(sub).parts:
                raise Unrunnable(
                    "UnsupportedVolume",
                    f"the subPath '{sub}' must be a relative path inside the volume",
                    str(container.get("name") or ""),
                )
            local = f"{local}/{sub}"
        pairs.append((path.rstrip("/") or "/", local))
    return sorted(pairs, key=lambda p: len(p[0]), reverse=True)


def localize_paths(text: str, mounts: Sequence[tuple[str, str]]) -> str:
    """`text` with every mount path (a whole path or its prefix) replaced by its local folder, in
    one pass: a folder put in is never read again as a mount path (a grading Pod mounts /tmp, and
    its tests' folder may be a local folder under /tmp), and the longest mount path wins."""
    folders: dict[str, str] = {}
    for mount_path, local in mounts:
        if mount_path != "/":  # a volume over the whole root has no meaning here
            folders.setdefault(mount_path, local)
    if not folders:
        return text
    paths = "|".join(re.escape(path) for path in sorted(folders, key=len, reverse=True))
    pattern = re.compile(r"(?<![\w.\-/])(" + paths + r")(?=$|/|[^\w.\-])")
    return pattern.sub(lambda found: folders[found.group(1)], text)


# -- containers


def _spec(pod: JSON) -> JSON:
    return pod.get("spec") or {}


def _strings(value: Any, what: str, container: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Unrunnable("InvalidContainer", f"{what} must be a list of strings", container)
    return list(value)


def _field_value(path: str, pod: JSON, address: str) -> str | None:
    md = meta(pod)
    known = {
        "metadata.name": md.get("name"),
        "metadata.namespace": md.get("namespace"),
        "metadata.uid": md.get("uid"),
        "status.podIP": address,
        "status.hostIP": address,
        "spec.nodeName": "local",
        "spec.serviceAccountName": _spec(pod).get("serviceAccountName") or "default",
    }
    value = known.get(path)
    if value is None and path.startswith("metadata.labels['") and path.endswith("']"):
        value = (md.get("labels") or {}).get(path[len("metadata.labels['") : -2])
    return None if value is None else str(value)


def _env_pairs(container: JSON, pod: JSON, address: str) -> list[tuple[str, str]]:
    name = str(container.get("name") or "")
    pairs: list[tuple[str, str]] = []
    for item in container.get("env") or []:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            continue
        if "valueFrom" in item:
            source = item.get("valueFrom") or {}
            field_ref = (source.get("fieldRef") or {}).get("fieldPath")
            value = _field_value(str(field_ref), pod, address) if field_ref else None
            if value is None:
                kind = next(iter(source), "valueFrom")
                raise Unrunnable(
                    "UnsupportedEnv",
                    f"the variable {item['name']} comes from a {kind}; the local "
                    "runner supports literal values and the Pod's own fields only",
                    name,
                )
            pairs.append((item["name"], value))
        else:
            pairs.append((item["name"], str(item.get("value") or "")))
    if container.get("envFrom"):
        raise Unrunnable(
            "UnsupportedEnv", "envFrom (ConfigMaps, Secrets) is not supported by the local runner", name
        )
    return pairs


def _port_number(value: Any, container: JSON) -> int:
    if isinstance(value, int):
        return value
    for port in container.get("ports") or []:
        if (
            isinstance(port, dict)
            and port.get("name") == value
            and isinstance(port.get("containerPort"), int)
        ):
            return int(port["containerPort"])
    if isinstance(value, str) and value.isdigit():
        return int(value)
    raise Unrunnable(
        "InvalidProbe",
        f"the probe's port '{value}' is not a port of the container",
        str(container.get("name") or ""),
    )


def _probe(spec: Any, container: JSON, localize: Callable[[str], str]) -> Probe | None:
    if not isinstance(spec, dict):
        return None
    name = str(container.get("name") or "")
    if isinstance(spec.get("httpGet"), dict):
        get = spec["httpGet"]
        headers = tuple(
            (str(h.get("name")), str(h.get("value")))
            for h in get.get("httpHeaders") or []
            if isinstance(h, dict)
        )
        probe = Probe(
            "http",
            port=_port_number(get.get("port"), container),
            path=str(get.get("path") or "/"),
            headers=headers,
        )
    elif isinstance(spec.get("tcpSocket"), dict):
        probe = Probe("tcp", port=_port_number(spec["tcpSocket"].get("port"), container))
    elif isinstance(spec.get("exec"), dict):
        command = _strings(spec["exec"].get("command"), "exec probe command", name)
        probe = Probe("exec", command=tuple(localize(c) for c in command))
    else:
        raise Unrunnable("InvalidProbe", "a probe must use httpGet, tcpSocket or exec", name)
    # The kubelet's defaults for what the probe leaves out.
    return replace(
        probe,
        initial_delay=float(spec.get("initialDelaySeconds") or 0),
        period=float(spec.get("periodSeconds") or 10),
        timeout=float(spec.get("timeoutSeconds") or 1),
        success_threshold=int(spec.get("successThreshold") or 1),
        failure_threshold=int(spec.get("failureThreshold") or 3),
    )


def resolve_program(program: str, container: str, image: str, which: Which) -> str:
    """The executable for `program`, or Unrunnable saying it is not installed here."""
    if program == DEMO_PROGRAM:
        return program  # the runner's own demo environment (runner.py)
    found = which(program)
    if found is not None:
        return found
    name = PurePosixPath(program).name
    if name in LOCAL_APPS:
        advice = "run `make local-apps` to install it"
    elif name == PLATFORM_PROGRAM:
        advice = ("the local runner runs the platform's own program from this checkout's .venv, "
                  "which the account environments run as must be able to read (a checkout under "
                  "/root is not): move the checkout, or run make run as another user")
    else:
        advice = "install it on this machine, or run this Template in a cluster"
    raise Unrunnable(
        "ProgramNotInstalled", f"{name} is not installed here ({image or 'no image'}): {advice}", container
    )


def plan_container(
    container: JSON,
    pod: JSON,
    *,
    address: str,
    home: str,
    folders: Mapping[str, str],
    base_env: Mapping[str, str],
    which: Which,
    own_home_paths: bool = False,
) -> ContainerPlan:
    name = str(container.get("name") or "")
    image = str(container.get("image") or "")
    mounts = _mounts(container, folders)
    # Mounted at their own path (mountns.py) when the container gets a mount table of its own,
    # unless this machine keeps what the container needs under that folder (it would be hidden).
    own = [m for m in mounts if own_home_paths and m[0].startswith(OWN_PATH_ROOT + "/")]
    if any(p.startswith(OWN_PATH_ROOT + "/") for p in base_env.get("PATH", "").split(":")):
        own = []
    rewritten = [m for m in mounts if m not in own]
    # The platform's own program (an assignment's worker) is no student's app: it listens on
    # nothing, and the addresses it is given are this machine's (the store on 127.0.0.1).
    platform = PurePosixPath(str((container.get("command") or [""])[0])).name == PLATFORM_PROGRAM

    def localize(text: str) -> str:
        text = localize_paths(text, rewritten)
        return text if platform else localize_address(text, address)

    def localize_host(text: str) -> str:
        text = localize_paths(text, mounts)
        return text if platform else localize_address(text, address)

    def inside(folder: str) -> str:
        """A local folder as the container sees it (its mount path when mounted there)."""
        for path, local in own:
            if folder == local or folder.startswith(local + "/"):
                return path + folder[len(local):]
        return folder

    own_env = expand_env(_env_pairs(container, pod, address))
    command = _strings(container.get("command"), "command", name)
    args = _strings(container.get("args"), "args", name)
    if not command:
        raise Unrunnable(
            "NoCommand",
            f"the container '{name}' has no command: without its image the local runner "
            "cannot know what to run; give the Template's container a command",
            name,
        )
    # $(VAR) sees the container's own env only, as in a cluster (not the image's or ours).
    argv = [localize(expand(a, own_env)) for a in (*command, *args)]
    # Found on this machine, where a program in a volume is at its local folder.
    argv[0] = resolve_program(localize_host(expand(command[0], own_env)), name, image, which)
    if own and (argv[0].startswith(OWN_PATH_ROOT + "/") or inside(argv[0]) != argv[0]):
        # Its program lives where the container's own /home would hide it: rewrite instead.
        return plan_container(container, pod, address=address, home=home, folders=folders,
                              base_env=base_env, which=which)
    ceiling = ":".join(sorted({str(PurePosixPath(inside(folder)).parent)
                               for folder in (home, *folders.values())}))
    env = {**base_env, "HOME": inside(home), "GIT_CEILING_DIRECTORIES": ceiling,
           **{k: localize(v) for k, v in own_env.items()}}
    workdir = localize(str(container.get("workingDir") or "")) or env["HOME"]
    host_workdir = localize_host(str(container.get("workingDir") or "")) or home
    # Probes run on this machine, outside the container's mount table: its paths.
    readiness = _probe(container.get("readinessProbe"), container, localize_host)
    liveness = _probe(container.get("livenessProbe"), container, localize_host)
    ports = tuple(
        int(p["containerPort"])
        for p in container.get("ports") or []
        if isinstance(p, dict) and isinstance(p.get("containerPort"), int)
    )
    return ContainerPlan(
        name=name,
        image=image,
        argv=tuple(argv),
        env=tuple(sorted(env.items())),
        workdir=workdir,
        readiness=readiness,
        liveness=liveness,
        ports=ports,
        binds=tuple((local, path) for path, local in sorted(own)),
        host_workdir=host_workdir,
    )


def plan_pod(
    pod: JSON, *, address: str, claims_root: str, scratch_root: str, base_env: Mapping[str, str],
    which: Which, own_home_paths: bool = False,
) -> PodPlan:
    """The plan for `pod` at `address`; raises Unrunnable. `own_home_paths`: its containers get
    mount tables of their own (mountns.py), so volumes under /home keep their paths."""
    folders = volume_folders(pod, claims_root, scratch_root)
    claim_folders = [f for f in folders.values() if f.startswith(claims_root + "/")]
    # The student's volume is their HOME (the image's HOME is unknown here), else the Pod's own.
    home = claim_folders[0] if claim_folders else f"{scratch_root}/home"
    spec = _spec(pod)

    def plans(key: str) -> tuple[ContainerPlan, ...]:
        return tuple(
            plan_container(
                c, pod, address=address, home=home, folders=folders, base_env=base_env, which=which,
                own_home_paths=own_home_paths,
            )
            for c in spec.get(key) or []
            if isinstance(c, dict)
        )

    containers = plans("containers")
    if (meta(pod).get("labels") or {}).get(naming.LABEL_COMPONENT) == naming.GRADER_COMPONENT:
        containers = tuple(replace(c, pids_max=GRADING_PIDS_MAX) for c in containers)
        init = tuple(replace(c, pids_max=GRADING_PIDS_MAX) for c in plans("initContainers"))
    else:
        init = plans("initContainers")
    if not containers:
        raise Unrunnable("InvalidPod", "the Pod has no containers")
    policy: RestartPolicy = spec.get("restartPolicy") or "Always"
    if policy not in ("Always", "OnFailure", "Never"):
        raise Unrunnable("InvalidPod", f"restartPolicy {policy!r} must be Always, OnFailure or Never")
    deadline = spec.get("activeDeadlineSeconds")
    return PodPlan(
        address=address,
        home=home,
        init_containers=init,
        containers=containers,
        folders=tuple(dict.fromkeys([home, *folders.values()])),
        restart_policy=policy,
        active_deadline=float(deadline) if isinstance(deadline, int) and deadline > 0 else None,
    )
