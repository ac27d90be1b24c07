"""What an Assignment's worker Pods and their NetworkPolicy should be (pure builders).

A worker Pod does one kind of work (hand out, collect, return feedback) for a batch of students'
environments of one Template, with each student's volume mounted at `/students/s<i>`, as the
Template's user (its runAsUser, runAsGroup, fsGroup), with resource limits, no service account
token, no service links, nothing but the store to talk to (its NetworkPolicy), pinned to the node
where the batch's running environments have their volumes attached, and with the Template's
tolerations so it may go there. Its name is a hash of its work and students: making it twice is
a 409, not a second Pod. The job (platform/model/coursework.Job) and the token the store checks it by
are in its environment; the students' own Pods have neither.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from userland.operator.rules.assignment.plan import Env, Pending
from userland.operator.rules.sandbox import (
    container_security,
    job_env,
    sandboxed_pod,
    store_only_policy,
)
from userland.platform.model import naming
from userland.platform.model.assignments import Assignment
from userland.platform.model.coursework import Job, JobScope, Member, manifest_key
from userland.platform.model.objects import rfc3339

JSON = dict[str, Any]
MOUNT_ROOT = "/students"
SCRATCH = "/scratch"
# How long a worker Pod may run (the kubelet stops it after), past the moment it waits for.
WORK_SECONDS = 3600
MIB = 1024 * 1024


@dataclass(frozen=True)
class WorkerSettings:
    image: str
    store_url: str
    store_secret: str
    max_files: int
    max_bytes: int
    store_port: int = 8080


def digest_of(kind: str, key: str, envs: tuple[Env, ...]) -> str:
    text = json.dumps([kind, key, sorted(e.key for e in envs)])
    return hashlib.sha256(text.encode()).hexdigest()


def pod_name(assignment: Assignment, kind: str, key: str, envs: tuple[Env, ...]) -> str:
    return naming.worker_pod_name(assignment.name, kind, digest_of(kind, key, envs))


def worker_labels(assignment: Assignment, kind: str, template: str) -> dict[str, str]:
    return {naming.LABEL_MANAGED_BY: naming.MANAGED_BY, naming.LABEL_ASSIGNMENT: assignment.name,
            naming.LABEL_WORK: kind, naming.LABEL_TEMPLATE: template,
            naming.LABEL_COMPONENT: naming.WORKER_COMPONENT}


def place_beside(spec: JSON, env: Env) -> None:
    """A Pod that mounts `env`'s volume goes to the node it is attached to (ReadWriteOnce, when its
    environment runs), with the Template's tolerations so that it may."""
    if env.node:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [env.node]}]}]}}}
    if env.tolerations:
        spec["tolerations"] = [dict(t) for t in env.tolerations]


def worker_pod(assignment: Assignment, pending: Pending, envs: tuple[Env, ...], settings: WorkerSettings, *,
               now: datetime, source_key: str = "", source_bytes: int = 0) -> JSON:
    """The Pod doing `pending`'s work for `envs` (one Template, one node or none)."""
    first = envs[0]
    kind = pending.kind
    wait = max(0.0, (pending.at - now).total_seconds()) if pending.at is not None else 0.0
    deadline = int(wait) + WORK_SECONDS
    members = tuple(Member(e.login, e.template, f"{MOUNT_ROOT}/s{i}") for i, e in enumerate(envs))
    scope = JobScope(kind=kind, namespace=assignment.ref.namespace, assignment=assignment.name,
                     members=members, expires=int((now + timedelta(seconds=deadline + 600)).timestamp()),
                     source=source_key if kind == "handout" else "",
                     round=pending.key if kind == "collect" else "", uid=assignment.ref.uid)
    job = Job(scope=scope, path=assignment.spec.path,
              at=rfc3339(pending.at) if pending.at is not None else "",
              commit=pending.key if kind == "handout" else "",
              feedback={e.login: pending.feedback[e.login] for e in envs if e.login in pending.feedback},
              max_files=settings.max_files, max_bytes=settings.max_bytes,
              manifest_key=manifest_key(settings.store_secret, assignment.ref.namespace, assignment.name))
    volumes: list[JSON] = [{"name": f"s{i}", "persistentVolumeClaim": {"claimName": e.claim}}
                           for i, e in enumerate(envs)]
    # A hand-out keeps the source's tar there; a collection each student's copy until it is
    # uploaded (a cap, not a reservation: what is used is the sum of the folders' sizes).
    if kind == "handout":
        scratch_bytes = source_bytes + 256 * MIB
    elif kind == "collect":
        scratch_bytes = len(envs) * settings.max_bytes + 256 * MIB
    else:
        scratch_bytes = 1024 * MIB
    volumes.append({"name": "scratch", "emptyDir": {"sizeLimit": f"{scratch_bytes // MIB}Mi"}})
    mounts = [{"name": f"s{i}", "mountPath": m.mount} for i, m in enumerate(members)]
    mounts.append({"name": "scratch", "mountPath": SCRATCH})
    run_as = first.run_as
    security: JSON = {"runAsNonRoot": run_as.uid != 0}
    for key, value in (("runAsUser", run_as.uid), ("runAsGroup", run_as.gid), ("fsGroup", run_as.fs_group)):
        if value is not None:
            security[key] = value
    spec: JSON = {
        "containers": [{
            "name": "work",
            "image": settings.image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["userland"],
            "args": ["assignment-work"],
            "env": job_env(job, settings.store_secret, settings.store_url, SCRATCH),
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                          "limits": {"cpu": "1", "memory": "512Mi"}},
            "securityContext": container_security(),
            "volumeMounts": mounts,
        }],
        "volumes": volumes,
    }
    place_beside(spec, first)
    summary = {"kind": kind, "key": pending.key, "members": [e.key for e in envs]}
    return sandboxed_pod(assignment, name=pod_name(assignment, kind, pending.key, envs),
                         labels=worker_labels(assignment, kind, first.template), summary=summary,
                         deadline=deadline, restart="OnFailure", pod_security=security, spec=spec)


def worker_policy(assignment: Assignment, store_labels: dict[str, str], store_namespace: str,
                  store_port: int) -> JSON:
    """The worker Pods of this Assignment take no connections and may open only two kinds: to the
    store's Pods (on its port) and to DNS (to find it)."""
    return store_only_policy(assignment, name=naming.assignment_policy_name(assignment.name),
                             component=naming.WORKER_COMPONENT, store_labels=store_labels,
                             store_namespace=store_namespace, store_port=store_port, dns=True)


def job_summary(pod: JSON) -> JSON | None:
    """What a worker Pod does, from its annotation (None: not one of ours, or unreadable)."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(naming.ANNOTATION_JOB)
    try:
        found = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None
