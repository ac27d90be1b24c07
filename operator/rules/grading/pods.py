"""A grading Pod and the NetworkPolicy of an Assignment's grading Pods (pure builders; docs/grading.md).

One Pod grades one student's collected copy, in Gradescope's layout, in three steps that run one
after the other (two init containers and a container), so the teacher's code and the student's
never run beside anything that holds a credential:

1. `fetch` (the platform's image, `userland assignment-work`): downloads the copy into
   `/autograder/submission` and the tests into `/autograder/source`, with the job's token, and
   makes `/autograder/results`. It runs as the container's root with no capability at all: the
   owner of the volumes' folders (which Kubernetes makes writable by everyone), so it can close
   them: the tests 0700, the results 0755, the submission read-only to all.
2. `grade` (the teacher's image): `/autograder/run_autograder` (the image's, else the one in the
   tests) or the teacher's command, through `/bin/sh` so that its exit status is noted and never
   fails the Pod (Gradescope reads results.json, not the status). The submission is mounted
   read-only. It runs as the container's root with every capability dropped but SETUID and
   SETGID, so the harness can run the student's code as another user (the documented pattern:
   the student's code then cannot write the results nor read the tests). Its environment holds
   the teacher's literal values, nothing else of ours.
3. `report` (the platform's image, non-root): reads results.json (at most 1 MB, read-only
   mount) and the exit status, and sends them to the store with the job's token.

Limits: the teacher's CPU, memory and ephemeral-storage (disk) on the grader, each volume a
`sizeLimit`, `activeDeadlineSeconds` over the three steps; the operator also ends a grader that
runs past its time limit from outside (operator/rules/grading/plan.py). No service account token,
no service links, seccomp RuntimeDefault. The NetworkPolicy takes no connection in and lets out
only TCP to the store's Pods on its port: no DNS (the store's address is given as an IP address),
no internet, no other Pod. Kubernetes has no per-Pod process limit in the Pod spec: the node's
`podPidsLimit` (kubelet) bounds a fork bomb; docs/grading.md says so.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from userland.operator.rules.assignment.plan import Env
from userland.operator.rules.assignment.pods import place_beside
from userland.operator.rules.sandbox import container_security, job_env, sandboxed_pod, store_only_policy
from userland.platform.model import naming
from userland.platform.model.assignments import Assignment
from userland.platform.model.coursework import Job, JobScope, Member, WorkKind
from userland.platform.model.grading import DEFAULT_COMMAND, Grader, grade_version, quantity

JSON = dict[str, Any]
ROOT = "/autograder"
# What the platform's two steps may take besides the grader's own time limit: fetching and reporting.
FETCH_SECONDS = 120
REPORT_SECONDS = 60
MIB = 1024 * 1024
PLATFORM_UID = 65532
EXIT_FILE = f"{ROOT}/results/.exit-status"
OOM_FILE = f"{ROOT}/results/.oom-killed"
# A check's snapshot step: where the student's volume is mounted, and the tar it leaves for fetch.
STUDENT_MOUNT = "/student"
CHECK_COPY = "check-copy.tar"
# The grader's command runs through the image's /bin/sh: its status is noted for the report, and
# the step always succeeds (a failing run_autograder with a results.json is still graded, as on
# Gradescope). With no command of the teacher's, the image's /autograder/run_autograder runs, else
# the one in the tests. The kernel's count of processes killed at the container's memory limit
# (its own memory cgroup: cgroup v2's memory.events, v1's memory.oom_control) is read before and
# after: when it grew, the report says "out of memory" instead of "no results" (the grader's
# own process was killed by the node, not by anything in the Pod). Only /bin/sh's builtins.
OOM_COUNT = (
    'oom() { for f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do '
    'if [ -r "$f" ]; then while read -r k v; do '
    'if [ "$k" = oom_kill ]; then echo "$v"; return; fi; done < "$f"; fi; done; echo 0; }; '
)
WRAPPER = (
    OOM_COUNT
    + 'if [ "$#" -eq 0 ]; then '
    f'if [ -x {ROOT}/run_autograder ]; then set -- {ROOT}/run_autograder; '
    f'else set -- {ROOT}/source/run_autograder; fi; fi; '
    f'before=$(oom); cd {ROOT} 2>/dev/null; "$@"; status=$?; '
    f'echo "$status" > {EXIT_FILE} 2>/dev/null; '
    f'if [ "$(oom)" != "$before" ]; then echo killed > {OOM_FILE} 2>/dev/null; fi; exit 0'
)


@dataclass(frozen=True)
class GradingSettings:
    image: str  # the platform's (fetch, report)
    store_url: str  # with an IP address: the grading Pod has no DNS
    store_secret: str
    copy_bytes: int  # a copy's largest size (the submission volume's bound)
    store_port: int = 8080


@dataclass(frozen=True)
class GradeWork:
    """One copy to grade: whose, which round, its receipt's digest, and which tests."""

    login: str
    template: str
    round: str
    copy_sha256: str
    tests_key: str  # the tests' source at the store
    tests_bytes: int = 0

    @property
    def env(self) -> str:
        return f"{self.template}/{self.login}"

    @property
    def version(self) -> str:
        return grade_version(self.copy_sha256, self.tests_key)


def grading_pod_name(assignment: Assignment, work: GradeWork, attempt: int = 0, *,
                     kind: str = "grade") -> str:
    what = [work.env, work.round, work.version, attempt] + ([kind] if kind != "grade" else [])
    digest = hashlib.sha256(json.dumps(what).encode()).hexdigest()
    return naming.worker_pod_name(assignment.name, kind, digest)


def grading_labels(assignment: Assignment, template: str) -> dict[str, str]:
    # Never userland.dev/user: a Pod with it would be taken for the student's environment.
    return {naming.LABEL_MANAGED_BY: naming.MANAGED_BY, naming.LABEL_ASSIGNMENT: assignment.name,
            naming.LABEL_WORK: "grade", naming.LABEL_TEMPLATE: template,
            naming.LABEL_COMPONENT: naming.GRADER_COMPONENT}


def _mib(amount: str) -> int:
    return max(1, int((quantity(amount) or 0.0) // MIB))


def active_deadline(grader: Grader) -> int:
    return FETCH_SECONDS + grader.time_limit + REPORT_SECONDS


def grading_pod(assignment: Assignment, grader: Grader, work: GradeWork, settings: GradingSettings, *,
                now: datetime, attempt: int = 0, check: Env | None = None) -> JSON:
    """The Pod grading `work`; with `check` (the student's environment), a check of their folder as
    it is now (Check my work): a first step takes the snapshot, and the report is never a grade."""
    deadline = active_deadline(grader)
    kind: WorkKind = "check" if check is not None else "grade"
    scope = JobScope(kind=kind, namespace=assignment.ref.namespace, assignment=assignment.name,
                     members=(Member(work.login, work.template, f"{ROOT}/submission"),),
                     expires=int((now + timedelta(seconds=deadline + 600)).timestamp()),
                     source=work.tests_key, round=work.round, uid=assignment.ref.uid)
    job = Job(scope=scope, path=ROOT, commit=work.copy_sha256)
    platform_env = job_env(job, settings.store_secret, settings.store_url, "/tmp")
    disk = dict(grader.limits)["ephemeral-storage"]
    limits_small = {"cpu": "500m", "memory": "256Mi", "ephemeral-storage": "64Mi"}
    requests_small = {"cpu": "50m", "memory": "64Mi", "ephemeral-storage": "16Mi"}
    volumes = [
        {"name": "submission", "emptyDir": {"sizeLimit": f"{settings.copy_bytes // MIB + 16}Mi"}},
        {"name": "source", "emptyDir": {"sizeLimit": f"{max(work.tests_bytes, 0) // MIB + 64}Mi"}},
        {"name": "results", "emptyDir": {"sizeLimit": "16Mi"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": f"{_mib(disk)}Mi"}},
        {"name": "platform-tmp", "emptyDir": {"sizeLimit": f"{settings.copy_bytes // MIB + 64}Mi"}},
    ]
    fetch = {
        "name": "fetch", "image": settings.image, "imagePullPolicy": "IfNotPresent",
        "command": ["userland"], "args": ["assignment-work", "fetch"], "env": platform_env,
        "resources": {"limits": limits_small, "requests": requests_small},
        "securityContext": container_security(runAsUser=0, runAsGroup=0, runAsNonRoot=False),
        "volumeMounts": [{"name": "submission", "mountPath": f"{ROOT}/submission"},
                         {"name": "source", "mountPath": f"{ROOT}/source"},
                         {"name": "results", "mountPath": f"{ROOT}/results"},
                         {"name": "platform-tmp", "mountPath": "/tmp"}],
    }
    grade = {
        "name": "grade", "image": grader.image, "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", WRAPPER, "grader"],
        "args": [*(grader.command if grader.command != DEFAULT_COMMAND else ()), *grader.args],
        "env": [{"name": k, "value": v} for k, v in grader.env],
        "resources": grader.resources(),
        "securityContext": container_security(read_only_root=False, add=("SETUID", "SETGID"), runAsUser=0,
                                              runAsNonRoot=False),
        "volumeMounts": [{"name": "submission", "mountPath": f"{ROOT}/submission", "readOnly": True},
                         {"name": "source", "mountPath": f"{ROOT}/source"},
                         {"name": "results", "mountPath": f"{ROOT}/results"},
                         {"name": "tmp", "mountPath": "/tmp"}],
    }
    report = {
        "name": "report", "image": settings.image, "imagePullPolicy": "IfNotPresent",
        "command": ["userland"], "args": ["assignment-work", "report"], "env": platform_env,
        "resources": {"limits": limits_small, "requests": requests_small},
        "securityContext": container_security(runAsUser=PLATFORM_UID, runAsGroup=PLATFORM_UID,
                                              runAsNonRoot=True),
        # The submission too (read-only), so that its job's paths are the fetch step's.
        "volumeMounts": [{"name": "results", "mountPath": f"{ROOT}/results", "readOnly": True},
                         {"name": "submission", "mountPath": f"{ROOT}/submission", "readOnly": True},
                         {"name": "platform-tmp", "mountPath": "/tmp"}],
    }
    summary = {"kind": kind, "key": work.version if check is None else work.round, "members": [work.env],
               "round": work.round, "timeLimit": grader.time_limit, "attempt": attempt}
    spec: JSON = {"initContainers": [fetch, grade], "containers": [report], "volumes": volumes}
    if check is not None:
        _add_snapshot(spec, assignment, check, settings)
    labels = grading_labels(assignment, work.template)
    if check is not None:
        labels[naming.LABEL_WORK] = "check"
    return sandboxed_pod(assignment, name=grading_pod_name(assignment, work, attempt, kind=kind),
                         labels=labels, summary=summary, deadline=deadline, restart="Never", spec=spec)


def _add_snapshot(spec: JSON, assignment: Assignment, env: Env, settings: GradingSettings) -> None:
    """A check's first step: the student's folder as it is now, read as their own user from their
    volume (mounted read-only, in this step only), into the scratch space the fetch step reads.
    The Pod goes where a running environment's volume is attached, with its tolerations."""
    run_as = env.run_as
    user: JSON = {"runAsNonRoot": run_as.uid != 0}
    if run_as.uid is not None:
        user["runAsUser"] = run_as.uid
    if run_as.gid is not None:
        user["runAsGroup"] = run_as.gid
    snapshot = {
        "name": "snapshot", "image": settings.image, "imagePullPolicy": "IfNotPresent",
        "command": ["userland"],
        "args": ["assignment-work", "snapshot", "--volume", STUDENT_MOUNT, "--path", assignment.spec.path,
                 "--out", f"/tmp/{CHECK_COPY}", "--max-bytes", str(settings.copy_bytes)],
        "env": [{"name": "HOME", "value": "/tmp"}, {"name": "TMPDIR", "value": "/tmp"}],
        "resources": {"limits": {"cpu": "500m", "memory": "256Mi", "ephemeral-storage": "64Mi"},
                      "requests": {"cpu": "50m", "memory": "64Mi", "ephemeral-storage": "16Mi"}},
        "securityContext": container_security(**user),
        "volumeMounts": [{"name": "student", "mountPath": STUDENT_MOUNT, "readOnly": True},
                         {"name": "platform-tmp", "mountPath": "/tmp"}],
    }
    spec["initContainers"].insert(0, snapshot)
    spec["volumes"].append({"name": "student", "persistentVolumeClaim": {"claimName": env.claim,
                                                                          "readOnly": True}})
    place_beside(spec, env)


def grading_policy(assignment: Assignment, store_labels: dict[str, str], store_namespace: str,
                   store_port: int) -> JSON:
    """Nothing connects to an Assignment's grading Pods; they connect only to the store's Pods, on
    its port (no DNS: the store's address is an IP address in their job)."""
    return store_only_policy(assignment, name=naming.grading_policy_name(assignment.name),
                             component=naming.GRADER_COMPONENT, store_labels=store_labels,
                             store_namespace=store_namespace, store_port=store_port, dns=False)
